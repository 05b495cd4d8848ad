/* A ps job's shared memory with the ranks on ddpd's host. ddpd listens on an abstract Unix
 * socket under a random name, which only the Welcome tells; each rank connects and hands
 * over its push segment (every bucket, in the layout's order). ddpd asks the kernel who
 * connected (SO_PEERCRED: the pid that rank joined with, else refused), checks the segment
 * (sealed, of the layout's size: common/shm_segment.h), maps it, and hands back the job's
 * average segment, where it writes the averages. A rank that does not (another host, or
 * DDP_TRANSPORT=zmq) pushes payloads as before. Every descriptor is closed once mapped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/fd_socket.h"

typedef struct {
    int listener; /* -1: none, or every rank has handed over */
    char name[FD_SOCKET_NAME_BYTES];
    size_t bytes;   /* of each segment: the layout's floats */
    int average_fd; /* handed to each rank, then closed */
    char *average;  /* mapped */
    char **pushed;  /* (world) each rank's push segment once handed over, else NULL */
    uint32_t world, n_handed;
} ps_shm;

/* Makes the average segment and the listener; on failure (logged by the caller) the job
 * goes without. */
int ps_shm_open(ps_shm *p, uint32_t world, size_t bytes);
void ps_shm_close(ps_shm *p);
/* A rank is connecting: takes its push segment and hands back the average segment, or
 * refuses it with err saying why. pids: the members' by rank. Waits at most
 * PS_SHM_WAIT_MS for the rank's message (it sends it as it connects). */
int ps_shm_accept(ps_shm *p, const uint32_t *pids, char *err, size_t err_size);
#define PS_SHM_WAIT_MS 200
