/* A ps job's shared memory with the ranks on ddpd's host. ddpd listens on an abstract Unix
 * socket under a random name, which only the Welcome tells; each rank connects and hands
 * over its push segment (every bucket, in the layout's order). ddpd asks the kernel who
 * connected (SO_PEERCRED: the pid that rank joined with, else refused), checks the segment
 * (sealed, of the layout's size: common/shm_segment.h), maps it, and hands back the job's
 * average segment, where it writes the averages, and the job's doorbell (an eventfd in
 * ddpd's poll set). A rank pushes by raising its bucket's counter in its push segment and
 * ringing the doorbell, and waits on the bucket's counter in the average segment
 * (common/ps_segment.h): no message and no thread between them and ddpd. A rank that does
 * not share memory (another host, or DDP_TRANSPORT=zmq) pushes payloads as before. Every
 * descriptor but the doorbell is closed once mapped. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/fd_socket.h"

typedef struct {
    int listener; /* -1: none, or every rank has handed over */
    char name[FD_SOCKET_NAME_BYTES];
    size_t bytes;       /* of each segment: ps_segment_bytes(float_bytes, n_buckets) */
    size_t float_bytes; /* the layout's floats */
    size_t n_buckets;
    int average_fd;   /* handed to each rank, then closed */
    int doorbell;     /* an eventfd, handed to each rank; rung after a push */
    char *average;    /* mapped */
    char **pushed;    /* (world) each rank's push segment once handed over, else NULL */
    bool *by_message; /* (world) the rank pushed by message since (it rejoined): it hears of averages so too */
    bool *by_frame;   /* (world) ... with its gradients in the message (it could not map the average
                         segment after all): the averages go to it as frames */
    uint32_t world, n_handed;
    int pending; /* a member's connection whose message has not come yet (in ddpd's poll set), else -1 */
    uint32_t pending_pid;
    uint64_t pending_since_ms;
} ps_shm;

/* A job's before ps_shm_open, or without shared memory: no descriptors. */
#define PS_SHM_NONE ((ps_shm){.listener = -1, .pending = -1, .average_fd = -1, .doorbell = -1})

/* Makes the average segment and the listener; on failure (logged by the caller) the job
 * goes without. */
int ps_shm_open(ps_shm *p, uint32_t world, size_t float_bytes, size_t n_buckets);
void ps_shm_close(ps_shm *p);
/* A rank is connecting (the listener is readable): a process that is no member (pids:
 * the members' by rank, as the kernel gave them where it could, 0 where not), or not of
 * the job's user (owner; -1: unknown), is refused at once with err saying why; a member's
 * connection becomes the pending one, read once it is readable (ps_shm_take), so that
 * ddpd's loop never waits on it. The listener is polled only while none is pending. */
int ps_shm_accept(ps_shm *p, const uint32_t *pids, int64_t owner, char *err, size_t err_size);
/* The listener to poll, or -1: none, a connection pending, or PS_SHM_MAX_CLOSING
 * descriptors handed to ddpd before still being closed (their filesystem holds the close:
 * common/fd_passed.h). Then connections wait in the backlog, and a pending one is refused
 * unread: what ranks can make ddpd hold open stays bounded. Ranks push by message. */
int ps_shm_listening(const ps_shm *p);
#define PS_SHM_MAX_CLOSING 64
/* Takes no more push segments: connections from now on are refused, and those waiting
 * (in the backlog, or pending) are told at once; the ranks that have not handed one over
 * push by message. When every rank has, and when ddpd stops taking any. */
void ps_shm_stop_listening(ps_shm *p);
/* The pending connection is readable: takes its push segment and hands back the average
 * segment and the doorbell, or refuses it with err saying why; closes it either way. */
int ps_shm_take(ps_shm *p, const uint32_t *pids, char *err, size_t err_size);
/* A pending connection silent for PS_SHM_WAIT_MS is closed (-ETIMEDOUT, err saying so):
 * a rank sends its message as it connects. */
int ps_shm_expire(ps_shm *p, uint64_t now_ms, char *err, size_t err_size);
#define PS_SHM_WAIT_MS 200
/* After the doorbell rang: empties it. */
void ps_shm_doorbell_clear(ps_shm *p);
/* How many pushes of bucket rank has made, as its segment says (0 if it has not handed one
 * over): the rank writes it, so ddpd checks it against the job's step before using it. */
uint64_t ps_shm_pushed(const ps_shm *p, uint32_t rank, size_t bucket);
/* Every rank now reads bucket's average of step (the step-th, from 0) in the average segment. */
void ps_shm_averaged(ps_shm *p, size_t bucket, uint64_t step);
