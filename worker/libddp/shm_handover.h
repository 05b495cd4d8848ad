/* How the ranks of one host come to share memory: the host's first rank makes one memfd
 * segment with a slot for each rank of the host and hands it to each of them over a Unix
 * socket (SCM_RIGHTS), after the kernel has said who is at the other end (SO_PEERCRED:
 * the same user, and the pid ddpd's Welcome gave for that rank); each maps it after
 * checking it (shm_segment.h). The socket's random name goes to the peers over the data
 * plane. One segment and one handover per rank of the host, not one per pair: a job of
 * hundreds of ranks forms in time linear in its size. No process reads another by pid, the
 * segment has no name anywhere, and its descriptors are closed once mapped: it goes with
 * the job. */
#pragma once
#include <stddef.h>

#include "worker/libddp/comm.h"

/* A collective of the ranks of this host: a slot of bytes for each (in a memfd named name,
 * as /proc shows it), maps[r] rank r's, this rank's own included; each slot starts on a
 * page. Every rank asks for the same size: another size is refused. On failure nothing
 * stays mapped. */
int shm_handover(comm *c, const char *name, size_t bytes, char **maps);
/* Unmaps the world mappings of bytes each that are set, and clears them. */
void shm_unmap_all(char **maps, int world, size_t bytes);
