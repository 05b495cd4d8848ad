/* How the ranks of one host come to share memory: each makes a memfd segment and hands it
 * to every peer over a Unix socket (SCM_RIGHTS), after the kernel has said who is at the
 * other end (SO_PEERCRED: the same user, and the pid ddpd's Welcome gave for that rank);
 * each maps every peer's after checking it (shm_segment.h). The socket's random name goes
 * to the peers over the data plane. No process reads another by pid, the segments have no
 * name anywhere, and their descriptors are closed once mapped: they go with the job. */
#pragma once
#include <stddef.h>

#include "worker/libddp/comm.h"

/* A collective of the ranks of this host: a segment of bytes from each (its memfd named
 * name, as /proc shows it), maps[r] rank r's mapping, this rank's own included. Every rank asks for
 * the same size: a peer's of another size is refused. On failure nothing stays mapped. */
int shm_handover(comm *c, const char *name, size_t bytes, char **maps);
/* Unmaps the world mappings of bytes each that are set, and clears them. */
void shm_unmap_all(char **maps, int world, size_t bytes);
