/* Point-to-point: messages between two ranks, matched by source and tag in the order they
 * were sent. A send returns once its buffer may be reused. */
#include "common/error.h"
#include "worker/libddp/coll.h"

int coll_send(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    int r = coll_send_range(c, call->root, call, a->tag, a->send, 0, call->count, true);
    return comm_finish(c, r, call->deadline_ms);
}

int coll_recv(comm *c, const coll_args *a) {
    const comm_call *call = &a->call;
    return coll_recv_range(c, call->root, call, a->tag, a->recv, 0, call->count);
}
