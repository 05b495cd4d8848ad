/* Point-to-point: messages between two ranks, matched by source and tag in the order they
 * were sent. A send returns once its buffer may be reused. An empty message is one frame
 * with no elements: a message like any other, which a recv of another count refuses. */
#include "common/error.h"
#include "worker/libddp/coll.h"

int coll_send(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    int r = call->count ? coll_send_range(c, call->root, call, a->tag, a->send, 0, call->count, true)
                        : comm_send(c, call->root, call, a->tag, 0, a->send, 0, false);
    return comm_finish(c, r, call->deadline_ms);
}

int coll_recv(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    if (call->count)
        return coll_recv_range(c, call->root, call, a->tag, a->recv, 0, call->count);
    comm_frame *f;
    TRY(coll_recv_chunk(c, call->root, call, a->tag, 0, 0, &f));
    comm_frame_free(c, f);
    return 0;
}
