/* The collective algorithms, one family per file, over the data plane of comm.h:
 *   coll_direct.c  small messages: every rank sends straight to every rank that needs it,
 *                  one hop, and reduces in rank order;
 *   coll_ring.c    large messages: ring reduce-scatter and all-gather, chunked and
 *                  pipelined so reduction overlaps transfer (all_reduce, all_gather,
 *                  reduce_scatter);
 *   coll_chain.c   large broadcast and reduce: a pipelined chain from (or to) the root;
 *   coll_rooted.c  gather and scatter;
 *   p2p.c          send and recv;
 *   coll_chunks.c  the chunked sends and receives all of them are made of;
 *   coll_shm.c     all of them but send and recv, through shared memory, when every rank
 *                  is on this host (then they replace the others).
 * Each runs on the calling thread with the arguments already checked, and returns 0 or a
 * negative error recorded in the data plane's error (the group's last error). */
#pragma once
#include <stddef.h>

#include "worker/libddp/comm.h"

typedef struct coll_args {
    comm_call call;   /* kind, dtype, op, root, seq, count, deadline */
    const void *send; /* the caller's input; for in-place calls the same as recv */
    void *recv;
    int32_t tag;    /* send and recv: the user's tag; root is the peer */
    bool receiving; /* recv rather than send */
} coll_args;

/* Messages up to this many bytes (per rank) take the one-hop algorithms. */
#define COLL_DIRECT_MAX_BYTES (64u << 10)

int coll_all_reduce_direct(comm *c, const coll_args *a);
int coll_reduce_direct(comm *c, const coll_args *a);
int coll_broadcast_direct(comm *c, const coll_args *a);

int coll_all_reduce_ring(comm *c, const coll_args *a);
int coll_all_gather_ring(comm *c, const coll_args *a);
int coll_reduce_scatter_ring(comm *c, const coll_args *a);

int coll_broadcast_chain(comm *c, const coll_args *a);
int coll_reduce_chain(comm *c, const coll_args *a);

int coll_gather(comm *c, const coll_args *a);
int coll_scatter(comm *c, const coll_args *a);

int coll_send(comm *c, const coll_args *a);
int coll_recv(comm *c, const coll_args *a);

/* coll_shm.c: the shared-memory collectives, set up with every peer (a collective of the
 * job); c->collectives then runs them. */
int coll_shm_open(comm *c);

/* coll_chunks.c. Sends elements [offset, offset + n) of buf (already offset) to dst in chunks. */
int coll_send_range(comm *c, int dst, const comm_call *call, int32_t tag, const char *buf, uint64_t offset, uint64_t n,
                    bool zero_copy);
/* Receives the frame that must carry elements [offset, offset + n) from src. */
int coll_recv_chunk(comm *c, int src, const comm_call *call, int32_t tag, uint64_t offset, uint64_t n,
                    comm_frame **ret_frame);
/* Receives elements [offset, offset + n) from src into buf (already offset), chunk by chunk. */
int coll_recv_range(comm *c, int src, const comm_call *call, int32_t tag, char *buf, uint64_t offset, uint64_t n);
