/* The public collectives: checking the call, numbering it, choosing the algorithm, and the
 * communication thread that runs async requests. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/coll.h"
#include "worker/libddp/group.h"

_Static_assert(DDP_F32 == (int)DTYPE_F32 && DDP_BF16 == (int)DTYPE_BF16 && DDP_U8 == (int)DTYPE_U8,
               "ddp_dtype and the wire's dtype agree");
_Static_assert(DDP_SUM == (int)REDUCE_SUM && DDP_AVG == (int)REDUCE_AVG, "ddp_op and the kernels' ops agree");

struct ddp_request {
    ddp_group *g;
    coll_args args;
    int result;
    bool done;
    struct ddp_request *next;     /* in the queue */
    struct ddp_request *unwaited; /* in the group's list of those not waited for yet */
};

/* ---- running one call ------------------------------------------------------------- */

static int coll_dispatch(comm *c, const coll_args *a) {
    size_t bytes = a->call.count * dtype_size(a->call.t);
    bool small = bytes <= COLL_DIRECT_MAX_BYTES || c->peers.world == 2;
    switch (a->call.kind) {
    case COLL_ALL_REDUCE:
        return bytes <= COLL_DIRECT_MAX_BYTES ? coll_all_reduce_direct(c, a) : coll_all_reduce_ring(c, a);
    case COLL_BROADCAST:
        return small ? coll_broadcast_direct(c, a) : coll_broadcast_chain(c, a);
    case COLL_REDUCE:
        return bytes <= COLL_DIRECT_MAX_BYTES ? coll_reduce_direct(c, a) : coll_reduce_chain(c, a);
    case COLL_GATHER:
        return coll_gather(c, a);
    case COLL_SCATTER:
        return coll_scatter(c, a);
    case COLL_ALL_GATHER:
        return coll_all_gather_ring(c, a);
    case COLL_REDUCE_SCATTER:
        return coll_reduce_scatter_ring(c, a);
    case COLL_SEND:
        return a->receiving ? coll_recv(c, a) : coll_send(c, a);
    case COLL_BARRIER: /* ddpd's (ddp_barrier) */
        break;
    }
    return -EINVAL;
}

/* Runs a numbered call on this thread. A failure leaves the ranks out of step: the group
 * is unusable after it, as a communicator is after an NCCL error. So is an ended job,
 * even where the call would need no wait: a peer that gave up on this very call (a
 * timeout) may have left its input posted in shared memory, and must not be met. */
static int coll_execute(ddp_group *g, coll_args *a) {
    if (g->failed)
        return g->failed;
    comm *c = &g->comm;
    int r = comm_check_end(c);
    if (r < 0) {
        g->failed = r;
        return r;
    }
    a->call.deadline_ms = clock_now_ms() + (uint64_t)g->timeout_ms;
    r = c->collectives ? c->collectives->run(c, a) : coll_dispatch(c, a);
    if (r < 0) /* a mismatched recv too: the rest of that message is still queued, out of step */
        g->failed = r;
    return r;
}

/* ---- the communication thread ----------------------------------------------------- */

static void *comm_thread_main(void *arg) {
    ddp_group *g = arg;
    pthread_mutex_lock(&g->queue_lock);
    for (;;) {
        while (!g->queue_head && !g->stopping)
            pthread_cond_wait(&g->queue_changed, &g->queue_lock);
        if (!g->queue_head)
            break;
        ddp_request *req = g->queue_head;
        g->queue_head = req->next;
        if (!g->queue_head)
            g->queue_tail = NULL;
        g->comm_busy = true;
        pthread_mutex_unlock(&g->queue_lock);

        int r = coll_execute(g, &req->args);

        pthread_mutex_lock(&g->queue_lock);
        req->result = r;
        req->done = true;
        g->comm_busy = false;
        pthread_cond_broadcast(&g->queue_changed);
    }
    pthread_mutex_unlock(&g->queue_lock);
    return NULL;
}

void coll_drain(ddp_group *g) {
    if (!g->comm_thread_started)
        return;
    pthread_mutex_lock(&g->queue_lock);
    while (g->queue_head || g->comm_busy)
        pthread_cond_wait(&g->queue_changed, &g->queue_lock);
    pthread_mutex_unlock(&g->queue_lock);
}

void coll_shutdown(ddp_group *g) {
    if (g->comm_thread_started) {
        pthread_mutex_lock(&g->queue_lock);
        g->stopping = true;
        pthread_cond_broadcast(&g->queue_changed);
        pthread_mutex_unlock(&g->queue_lock);
        pthread_join(g->comm_thread, NULL);
        g->comm_thread_started = false;
    }
    while (g->unwaited) { /* run (or refused) already: a ddp_wait after ddp_finalize is as void as its group */
        ddp_request *req = g->unwaited;
        g->unwaited = req->unwaited;
        free(req);
    }
}

/* ---- checking and numbering ------------------------------------------------------- */

/* A rank's send and recv may share memory only in the in-place form of MPI_IN_PLACE: for
 * gather (at the root) and all_gather, send is this rank's part of recv; for scatter (at the
 * root) and reduce_scatter, recv is this rank's part of send. Any other overlap would send
 * what the call had already written over. */
static int coll_check_overlap(ddp_group *g, const char *name, coll_kind kind, const void *send, const void *recv,
                              size_t bytes, int root) {
    uintptr_t all = (uintptr_t)g->world_size * bytes, own = (uintptr_t)g->rank * bytes;
    uintptr_t s = (uintptr_t)send, r = (uintptr_t)recv; /* compared as numbers: they may be two objects */
    uintptr_t send_bytes, recv_bytes;
    bool in_place;
    switch (kind) {
    case COLL_GATHER:
    case COLL_ALL_GATHER:
        if (kind == COLL_GATHER && g->rank != root)
            return 0; /* no recv: coll_prepare was given send for it */
        send_bytes = bytes, recv_bytes = all, in_place = s == r + own;
        break;
    case COLL_SCATTER:
    case COLL_REDUCE_SCATTER:
        if (kind == COLL_SCATTER && g->rank != root)
            return 0; /* no send: coll_prepare was given recv for it */
        send_bytes = all, recv_bytes = bytes, in_place = r == s + own;
        break;
    default:
        return 0;
    }
    if (in_place || !bytes || s + send_bytes <= r || r + recv_bytes <= s)
        return 0;
    bool send_is_part = send_bytes < recv_bytes;
    return group_fail(g, -EINVAL,
                      "%s: send (%zu bytes) and recv (%zu bytes) overlap; they may share memory only in place, "
                      "%s being rank %d's part of %s (from byte %zu)",
                      name, (size_t)send_bytes, (size_t)recv_bytes, send_is_part ? "send" : "recv", g->rank,
                      send_is_part ? "recv" : "send", (size_t)own);
}

/* send and recv are the buffers this rank must have (the same one for in-place calls). */
static int coll_prepare(ddp_group *g, coll_args *a, coll_kind kind, const void *send, void *recv, size_t count,
                        ddp_dtype t, int op, int root) {
    if (!g)
        return -EINVAL;
    job_end_told(&g->agent.end);
    if (g->failed)
        return g->failed;
    int end = job_end_code(&g->agent.end); /* every call fails once the job has ended, async ones too */
    if (end) {
        g->failed = group_fail(g, end, "%s", g->agent.end.text);
        return end;
    }
    const char *name = coll_kind_name(kind);
    if (!dtype_valid((int)t))
        return group_fail(g, -EINVAL, "%s: unknown dtype %d", name, (int)t);
    if (!reduce_op_valid(op))
        return group_fail(g, -EINVAL, "%s: unknown op %d", name, op);
    if (!reduce_supported((dtype)t, (reduce_op)op))
        return group_fail(g, -EINVAL, "%s: %s needs a floating-point dtype, not %s", name,
                          reduce_op_name((reduce_op)op), dtype_name((dtype)t));
    if (root < 0 || root >= g->world_size)
        return group_fail(g, -EINVAL, "%s: rank %d is not in the group of %d", name, root, g->world_size);
    size_t world = kind == COLL_GATHER || kind == COLL_SCATTER || kind == COLL_ALL_GATHER || kind == COLL_REDUCE_SCATTER
                       ? (size_t)g->world_size
                       : 1;
    if (count > SIZE_MAX / dtype_size((dtype)t) / world)
        return group_fail(g, -EINVAL, "%s: count %zu is too large", name, count);
    if (count && (!send || !recv))
        return group_fail(g, -EINVAL, "%s: NULL buffer", name);
    TRY(coll_check_overlap(g, name, kind, send, recv, count * dtype_size((dtype)t), root));
    *a = (coll_args){
        .call = {.kind = kind, .t = (dtype)t, .op = (reduce_op)op, .root = root, .count = count},
        .send = send,
        .recv = recv,
    };
    return 0;
}

/* Numbers the call (every rank, even for count 0, so that the numbers stay in step) and
 * runs it on this thread after any async request before it. */
static int coll_run_now(ddp_group *g, coll_args *a, bool trivial) {
    a->call.seq = ++g->coll_seq;
    coll_drain(g);
    if (trivial)
        return 0; /* nothing to move (an ended job was refused by coll_prepare) */
    int r = coll_execute(g, a);
    job_end_told(&g->agent.end); /* an end that came during the call: this return says it */
    return r;
}

/* ---- the API ---------------------------------------------------------------------- */

DDP_EXPORT int ddp_send(ddp_group *g, const void *buf, size_t count, ddp_dtype t, int dst, int tag) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_SEND, buf, (void *)buf, count, t, DDP_SUM, dst));
    if (dst == g->rank)
        return group_fail(g, -EINVAL, "send: rank %d cannot send to itself", dst);
    if (tag < 0)
        return group_fail(g, -EINVAL, "send: tag %d is negative (negative tags are reserved)", tag);
    a.tag = tag;
    coll_drain(g);
    int r = coll_execute(g, &a); /* point-to-point is not numbered: seq 0 */
    job_end_told(&g->agent.end);
    return r;
}

DDP_EXPORT int ddp_probe(ddp_group *g, int src, int tag) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_SEND, NULL, NULL, 0, DDP_U8, DDP_SUM, src));
    if (src == g->rank)
        return group_fail(g, -EINVAL, "probe: rank %d cannot receive from itself", src);
    if (tag < 0)
        return group_fail(g, -EINVAL, "probe: tag %d is negative (negative tags are reserved)", tag);
    coll_drain(g);
    comm *c = &g->comm;
    int r = c->collectives && c->collectives->probe ? c->collectives->probe(c, src, tag) : comm_probe(c, src, tag);
    if (r < 0) /* what came was not a message (a frame cut short, a record that is not one) */
        g->failed = r;
    job_end_told(&g->agent.end);
    return r;
}

DDP_EXPORT int ddp_recv(ddp_group *g, void *buf, size_t count, ddp_dtype t, int src, int tag) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_SEND, buf, buf, count, t, DDP_SUM, src));
    if (src == g->rank)
        return group_fail(g, -EINVAL, "recv: rank %d cannot receive from itself", src);
    if (tag < 0)
        return group_fail(g, -EINVAL, "recv: tag %d is negative (negative tags are reserved)", tag);
    a.receiving = true;
    a.tag = tag;
    coll_drain(g);
    int r = coll_execute(g, &a);
    job_end_told(&g->agent.end);
    return r;
}

DDP_EXPORT int ddp_broadcast(ddp_group *g, void *buf, size_t count, ddp_dtype t, int root) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_BROADCAST, buf, buf, count, t, DDP_SUM, root));
    return coll_run_now(g, &a, count == 0 || g->world_size == 1);
}

DDP_EXPORT int ddp_reduce(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op, int root) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_REDUCE, buf, buf, count, t, (int)op, root));
    return coll_run_now(g, &a, count == 0 || g->world_size == 1);
}

int coll_barrier(ddp_group *g) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_BARRIER, NULL, NULL, 0, DDP_U8, DDP_SUM, 0));
    return coll_run_now(g, &a, g->world_size == 1);
}

DDP_EXPORT int ddp_all_reduce(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_ALL_REDUCE, buf, buf, count, t, (int)op, 0));
    return coll_run_now(g, &a, count == 0 || g->world_size == 1);
}

static void coll_copy_own(const void *send, void *recv, size_t bytes) {
    if (bytes && send != recv)
        memmove(recv, send, bytes);
}

DDP_EXPORT int ddp_gather(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, int root) {
    coll_args a;
    /* Only the root needs a recv buffer. */
    TRY(coll_prepare(g, &a, COLL_GATHER, send, g && g->rank == root ? recv : (void *)send, count, t, DDP_SUM, root));
    a.recv = recv;
    bool trivial = count == 0 || g->world_size == 1;
    if (trivial && count)
        coll_copy_own(send, recv, count * dtype_size((dtype)t));
    return coll_run_now(g, &a, trivial);
}

DDP_EXPORT int ddp_scatter(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, int root) {
    coll_args a;
    /* Only the root needs a send buffer. */
    TRY(coll_prepare(g, &a, COLL_SCATTER, g && g->rank == root ? send : recv, recv, count, t, DDP_SUM, root));
    a.send = send;
    bool trivial = count == 0 || g->world_size == 1;
    if (trivial && count)
        coll_copy_own(send, recv, count * dtype_size((dtype)t));
    return coll_run_now(g, &a, trivial);
}

DDP_EXPORT int ddp_all_gather(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_ALL_GATHER, send, recv, count, t, DDP_SUM, 0));
    bool trivial = count == 0 || g->world_size == 1;
    if (trivial && count)
        coll_copy_own(send, recv, count * dtype_size((dtype)t));
    return coll_run_now(g, &a, trivial);
}

DDP_EXPORT int ddp_reduce_scatter(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, ddp_op op) {
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_REDUCE_SCATTER, send, recv, count, t, (int)op, 0));
    bool trivial = count == 0 || g->world_size == 1;
    if (trivial && count) {
        coll_copy_own(send, recv, count * dtype_size((dtype)t));
        reduce_finish(recv, count, (dtype)t, (reduce_op)op, 1);
    }
    return coll_run_now(g, &a, trivial);
}

DDP_EXPORT int ddp_all_reduce_async(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op,
                                    ddp_request **ret_req) {
    if (!ret_req)
        return g ? group_fail(g, -EINVAL, "all_reduce_async: ret_req is NULL") : -EINVAL;
    coll_args a;
    TRY(coll_prepare(g, &a, COLL_ALL_REDUCE, buf, buf, count, t, (int)op, 0));
    ddp_request *req = calloc(1, sizeof(*req));
    if (!req)
        return group_fail(g, -ENOMEM, "all_reduce_async: out of memory");
    a.call.seq = ++g->coll_seq;
    *req = (ddp_request){.g = g, .args = a};
    pthread_mutex_lock(&g->queue_lock);
    req->unwaited = g->unwaited;
    g->unwaited = req;
    pthread_mutex_unlock(&g->queue_lock);
    if (count == 0 || g->world_size == 1) {
        req->done = true;
        *ret_req = req;
        return 0;
    }
    if (!g->comm_thread_started) {
        int r = -pthread_create(&g->comm_thread, NULL, comm_thread_main, g);
        if (r < 0) {
            req->done = true; /* freed with the group's other unwaited requests */
            return group_fail(g, r, "cannot start the communication thread: %s", error_string(r));
        }
        g->comm_thread_started = true;
    }
    pthread_mutex_lock(&g->queue_lock);
    if (g->queue_tail)
        g->queue_tail->next = req;
    else
        g->queue_head = req;
    g->queue_tail = req;
    pthread_cond_broadcast(&g->queue_changed);
    pthread_mutex_unlock(&g->queue_lock);
    *ret_req = req;
    return 0;
}

DDP_EXPORT int ddp_get_stats(const ddp_group *g, ddp_stats *ret_stats) {
    if (!g || !ret_stats)
        return -EINVAL;
    /* Counted by whichever thread runs the data plane; read between calls. */
    ddp_group *mut = (ddp_group *)g;
    coll_drain(mut);
    const comm_stats *c = &g->comm.stats;
    *ret_stats = (ddp_stats){c->bytes_sent, c->bytes_received, c->messages_sent, c->messages_received};
    return 0;
}

DDP_EXPORT int ddp_get_refusals(const ddp_group *g, ddp_refusals *ret_refusals) {
    if (!g || !ret_refusals)
        return -EINVAL;
    coll_drain((ddp_group *)g);
    const comm *c = &g->comm;
    *ret_refusals = (ddp_refusals){.frames = c->stats.frames_dropped};
    if (c->transport && c->transport->refused)
        ret_refusals->connections =
            c->transport->refused(c, ret_refusals->last_connection, sizeof(ret_refusals->last_connection));
    return 0;
}

DDP_EXPORT int ddp_get_arrival_wait(const ddp_group *g, double *ret_seconds) {
    if (!g || !ret_seconds)
        return -EINVAL;
    coll_drain((ddp_group *)g);
    *ret_seconds = (double)g->comm.stats.arrival_wait_us / 1e6;
    return 0;
}

DDP_EXPORT int ddp_get_peer_stats(const ddp_group *g, int peer, unsigned long long *ret_sent,
                                  unsigned long long *ret_received) {
    if (!g || peer < 0 || peer > g->world_size || !ret_sent || !ret_received)
        return -EINVAL;
    coll_drain((ddp_group *)g);
    *ret_sent = g->comm.stats.sent_to[peer];
    *ret_received = g->comm.stats.received_from[peer];
    return 0;
}

DDP_EXPORT int ddp_wait(ddp_request *req) {
    if (!req)
        return -EINVAL;
    ddp_group *g = req->g;
    /* Queued or running, it ends by its own deadline at the latest. */
    pthread_mutex_lock(&g->queue_lock);
    while (!req->done)
        pthread_cond_wait(&g->queue_changed, &g->queue_lock);
    for (ddp_request **q = &g->unwaited; *q; q = &(*q)->unwaited)
        if (*q == req) {
            *q = req->unwaited;
            break;
        }
    pthread_mutex_unlock(&g->queue_lock);
    int r = req->result;
    free(req);
    job_end_told(&g->agent.end);
    return r;
}
