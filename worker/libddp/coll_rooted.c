/* Gather and scatter: every rank talks to the root directly. */
#include <string.h>

#include "common/error.h"
#include "worker/libddp/coll.h"

int coll_gather(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    size_t bytes = call->count * dtype_size(call->t);
    if (c->peers.rank != call->root)
        return comm_finish(c, coll_send_range(c, call->root, call, 0, a->send, 0, call->count, true),
                           call->deadline_ms);
    char *recv = a->recv;
    memmove(recv + (size_t)c->peers.rank * bytes, a->send, bytes);
    for (int k = 0; k < c->peers.world; k++)
        if (k != c->peers.rank)
            TRY(coll_recv_range(c, k, call, 0, recv + (size_t)k * bytes, 0, call->count));
    return 0;
}

int coll_scatter(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    size_t bytes = call->count * dtype_size(call->t);
    if (c->peers.rank != call->root)
        return coll_recv_range(c, call->root, call, 0, a->recv, 0, call->count);
    const char *send = a->send;
    int r = 0;
    for (int k = 0; k < c->peers.world && r == 0; k++)
        if (k != c->peers.rank)
            r = coll_send_range(c, k, call, 0, send + (size_t)k * bytes, 0, call->count, true);
    /* The root's own slice last: recv may overlap a slice still on its way to a peer. */
    r = comm_finish(c, r, call->deadline_ms);
    if (r == 0)
        memmove(a->recv, send + (size_t)c->peers.rank * bytes, bytes);
    return r;
}
