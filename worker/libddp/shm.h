/* Shared memory among the ranks of one host: each rank owns one segment (a sealed memfd)
 * and maps every other rank's, read-only in spirit. A segment is a header, where its
 * owner posts how far it has got (a phase number, on a futex word), and a staging buffer
 * that the owner writes and the others read. The collectives over it are in coll_shm.c.
 *
 * The segments never have a name: each rank hands its memfd to each peer over a Unix
 * socket (shm_handover.h). No process reads another by pid, and nothing outlives the
 * processes that map it. */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/shm_flag.h"
#include "worker/libddp/comm.h"

#define SHM_BUFFER_BYTES (4u << 20) /* a rank's staging buffer: a large collective goes in chunks of it */

typedef struct shm_plane shm_plane;

/* Makes this rank's segment and maps that of every peer on this host (c->peers.here); a
 * collective of those ranks (they exchange where to fetch the segments over c's transport). */
int shm_open_plane(comm *c, shm_plane **ret);
void shm_close_plane(shm_plane *s);

/* The staging buffer of rank r (this rank's is written, the others' only read). */
char *shm_buffer(const shm_plane *s, int r);

/* The mailbox for messages from rank from to rank to, in from's segment (shm_layout.h):
 * its counters and the ring after them. written is the sender's flag, consumed the
 * receiver's. */
typedef struct {
    struct shm_mailbox_head *h;
    char *ring;
    uint64_t size;
} shm_ring;
shm_ring shm_mailbox_ring(const shm_plane *s, int from, int to);
shm_flag shm_ring_written(shm_ring b);
shm_flag shm_ring_consumed(shm_ring b);
/* Waits until f reaches target, as rank r sets it for call (with tag, for point-to-point):
 * spins a little, then sleeps on its futex in slices; ends with an error naming r at the
 * job's end, r's leaving or the call's deadline. */
int shm_flag_wait(comm *c, const shm_plane *s, int r, shm_flag f, uint64_t target, const comm_call *call, int32_t tag);
/* A sender's wait for room in its mailbox to dst: until dst has consumed up to target
 * (room), calling drain(c, ctx) between looks, which reads out what comes to this rank
 * meanwhile, so that two ranks that send to each other before they receive never wait on
 * each other. Spins a little, then sleeps in short slices; names dst at the job's end,
 * dst's leaving or the call's deadline. */
int shm_wait_room(comm *c, const shm_plane *s, int dst, shm_flag room, uint64_t target, const comm_call *call,
                  int32_t tag, int (*drain)(comm *c, void *ctx), void *ctx);
/* Whether this host has fewer CPUs for the job than ranks on it: a spinning waiter yields. */
bool shm_crowded(const shm_plane *s);

/* This rank has finished the next phase of the current collective: its buffer holds what
 * it promised. Returns that phase's number; every rank posts the same phases in the same
 * order, so a peer that has finished it has posted the same number. */
uint64_t shm_post(shm_plane *s);
/* The last phase this rank posted: a collective's phases are numbered on from it. */
uint64_t shm_phase(const shm_plane *s);
/* Starts a collective: every peer is done with this rank's buffer (shm_wait_free), and
 * this rank's call is written where its peers check theirs against it, with where input
 * lies when it is in one of this rank's regions (the peers may read it there; NULL: they
 * do not read it). */
int shm_begin(comm *c, shm_plane *s, const comm_call *call, const void *input, bool in_place);
/* Whether the current call's input is in one of this rank's regions: the peers read it
 * there, so it need not be copied in. */
bool shm_input_shared(const shm_plane *s);
/* Once every peer has posted the call's first phase: where each peer's input lies in its
 * region (NULL for this rank, and for a peer that copied it into its staging buffer), each
 * checked against what the peer shared: a region it never shared, or bytes beyond its
 * end, are refused (-EPROTO), never read. */
int shm_peer_inputs(comm *c, shm_plane *s, const comm_call *call, const char ***ret);
/* The same for peer r alone, once r has posted the call's first phase (a broadcast's root). */
int shm_peer_input(comm *c, shm_plane *s, const comm_call *call, int r, const char **ret);
/* After shm_peer_inputs: whether every rank's input is in its regions and is its output
 * too (in place), so that each can leave its part of the result there for the others. */
bool shm_all_in_place(const shm_plane *s);

/* ddp_alloc and ddp_free over shared memory: collectives of the job, every rank with the
 * same bytes, in the same order. A region is a segment from every rank (shm_handover.h);
 * *ret is this rank's. */
int shm_region_open(comm *c, shm_plane *s, size_t bytes, void **ret);
/* -EINVAL when base is not a region's. */
int shm_region_close(comm *c, shm_plane *s, void *base);
/* Waits until rank r has posted phase target of the current collective: spins a little,
 * then sleeps on r's futex; ends with an error at the job's end or the call's deadline,
 * naming r, or when r called another collective (-EINVAL, saying which). */
int shm_wait(comm *c, shm_plane *s, int r, uint64_t target, const comm_call *call);
/* Waits until every other rank has posted target. */
int shm_wait_all(comm *c, shm_plane *s, uint64_t target, const comm_call *call);
/* The same for a collective's first phase, counting the time it blocks as waiting for the
 * others to arrive (c->stats.arrival_wait_us): time lost to a slower rank, not to moving
 * data, as Horovod's timeline shows negotiation apart. */
int shm_wait_arrivals(comm *c, shm_plane *s, uint64_t target, const comm_call *call);
/* Before this rank writes its buffer: every peer is done reading it (it has posted the
 * phase that ended the last use). */
int shm_wait_free(comm *c, shm_plane *s, const comm_call *call);
/* Marks the phase just posted as the end of this use of the buffer. */
void shm_release(shm_plane *s);
/* This rank's collective seq failed here (a timeout, the job's end): a peer that comes to
 * it later fails too, naming this rank, rather than completing it with what this rank
 * posted. One that came first may still complete it: the job's end tells it. */
void shm_give_up(shm_plane *s, uint64_t seq);
