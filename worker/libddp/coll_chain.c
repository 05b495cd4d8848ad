/* Large broadcast and reduce along a chain: root, root+1, ..., root+n-1 for broadcast, and
 * the reverse for reduce (root+1 starts, the root ends it). Chunks move on as soon as they
 * arrive, so the chain is a pipeline: its time is one message plus n-1 chunks, not n-1
 * messages. The reduce runs in chain order, the same every run. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/coll.h"

static int chain_mod(int a, int n) {
    return ((a % n) + n) % n;
}

int coll_broadcast_chain(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    int n = c->peers.world, pos = chain_mod(c->peers.rank - call->root, n);
    int prev = chain_mod(c->peers.rank - 1, n), next = chain_mod(c->peers.rank + 1, n);
    char *buf = a->recv;
    size_t es = dtype_size(call->t);
    uint64_t chunk = comm_chunk_elems(c, call->t);
    int r = 0;
    if (pos == 0)
        r = coll_send_range(c, next, call, 0, buf, 0, call->count, true);
    for (uint64_t off = 0; pos > 0 && r == 0 && off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk;
        comm_frame *f;
        if ((r = coll_recv_chunk(c, prev, call, 0, off, len, &f)) < 0)
            break;
        r = comm_frame_copy_to(c, f, buf + off * es);
        comm_frame_free(c, f);
        if (r == 0 && pos < n - 1)
            r = comm_send(c, next, call, 0, off, buf + off * es, len, true);
    }
    return comm_finish(c, r, call->deadline_ms);
}

int coll_reduce_chain(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    int n = c->peers.world, pos = chain_mod(c->peers.rank - call->root - 1, n); /* the root is last */
    int prev = chain_mod(c->peers.rank - 1, n), next = chain_mod(c->peers.rank + 1, n);
    char *buf = a->recv;
    size_t es = dtype_size(call->t);
    uint64_t chunk = comm_chunk_elems(c, call->t);
    if (pos == 0) /* the first link sends its own data as it is */
        return comm_finish(c, coll_send_range(c, next, call, 0, buf, 0, call->count, true), call->deadline_ms);

    /* Middle links must leave their buffer as it was: partial sums go to a buffer of their own. */
    bool root = pos == n - 1;
    char *partial = root ? buf : malloc(call->count * es);
    if (!partial)
        return comm_fail(c, -ENOMEM, "out of memory for a reduce of %zu bytes", (size_t)(call->count * es));
    int r = 0;
    for (uint64_t off = 0; r == 0 && off < call->count; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk;
        comm_frame *f;
        if ((r = coll_recv_chunk(c, prev, call, 0, off, len, &f)) < 0)
            break;
        r = comm_frame_reduce_pair(c, f, partial + off * es, buf + off * es, call->op);
        comm_frame_free(c, f);
        if (r == 0 && root)
            reduce_finish(partial + off * es, len, call->t, call->op, n);
        else if (r == 0)
            r = comm_send(c, next, call, 0, off, partial + off * es, len, true);
    }
    r = comm_finish(c, r, call->deadline_ms);
    if (!root && !comm_buffers_exposed(c)) /* else a peer may still read it: better leaked than reused */
        free(partial);
    return r;
}
