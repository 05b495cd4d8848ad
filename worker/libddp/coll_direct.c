/* Small messages in one hop: each rank sends its data straight to every rank that needs
 * it, and the reduction runs in rank order 0, 1, ..., n-1, so every rank computes the same
 * bits. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/libddp/coll.h"

/* buf = x_0 op x_1 op ... op x_{n-1}, where x_k comes from rank k and this rank's is in buf. */
static int reduce_in_rank_order(comm *c, const comm_call *call, char *buf) {
    size_t es = dtype_size(call->t);
    char *own = malloc(call->count * es); /* buf fills in rank order, so this rank's x waits aside */
    if (!own)
        return comm_fail(c, -ENOMEM, "out of memory for a %s of %zu bytes", coll_kind_name(call->kind),
                         (size_t)(call->count * es));
    memcpy(own, buf, call->count * es);
    int r = 0;
    uint64_t chunk = comm_chunk_elems(c, call->t);
    for (uint64_t off = 0; off < call->count && r == 0; off += chunk) {
        uint64_t len = call->count - off < chunk ? call->count - off : chunk;
        for (int k = 0; k < c->peers.world && r == 0; k++) {
            comm_frame *f = NULL;
            const void *x = own + off * es;
            if (k != c->peers.rank && (r = coll_recv_chunk(c, k, call, 0, off, len, &f)) == 0)
                r = comm_frame_data(c, f, &x);
            if (r == 0 && k == 0)
                memcpy(buf + off * es, x, len * es);
            else if (r == 0)
                reduce_into(buf + off * es, x, len, call->t, call->op);
            comm_frame_free(c, f);
        }
    }
    free(own);
    if (r == 0)
        reduce_finish(buf, call->count, call->t, call->op, c->peers.world);
    return r;
}

int coll_all_reduce_direct(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    char *buf = a->recv;
    for (int k = 0; k < c->peers.world; k++)
        if (k != c->peers.rank)
            TRY(coll_send_range(c, k, call, 0, buf, 0, call->count, false));
    return reduce_in_rank_order(c, call, buf);
}

int coll_reduce_direct(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    char *buf = a->recv;
    if (c->peers.rank != call->root)
        return coll_send_range(c, call->root, call, 0, buf, 0, call->count, false);
    return reduce_in_rank_order(c, call, buf);
}

int coll_broadcast_direct(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    char *buf = a->recv;
    if (c->peers.rank != call->root)
        return coll_recv_range(c, call->root, call, 0, buf, 0, call->count);
    for (int k = 0; k < c->peers.world; k++)
        if (k != c->peers.rank)
            TRY(coll_send_range(c, k, call, 0, buf, 0, call->count, false));
    return 0;
}
