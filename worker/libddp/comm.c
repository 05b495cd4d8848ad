/* The data plane's own part, whatever the transport: its set-up, its errors and checks. */
#include "worker/libddp/comm.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"

_Static_assert(sizeof(comm_header) == 72, "the header is 72 bytes on the wire");

static const char *const kind_names[] = {
    [COLL_SEND] = "send",
    [COLL_BROADCAST] = "broadcast",
    [COLL_REDUCE] = "reduce",
    [COLL_ALL_REDUCE] = "all_reduce",
    [COLL_GATHER] = "gather",
    [COLL_SCATTER] = "scatter",
    [COLL_ALL_GATHER] = "all_gather",
    [COLL_REDUCE_SCATTER] = "reduce_scatter",
    [COLL_BARRIER] = "barrier",
};

const char *coll_kind_name(coll_kind kind) {
    return kind >= COLL_SEND && kind <= COLL_BARRIER ? kind_names[kind] : "unknown";
}

int comm_start(comm *c, const comm_peers *peers) {
    c->peers = *peers;
    size_t slots = (size_t)peers->world + 1;
    c->stats.sent_to = calloc(slots, sizeof(unsigned long long));
    c->stats.received_from = calloc(slots, sizeof(unsigned long long));
    if (!c->stats.sent_to || !c->stats.received_from)
        return comm_fail(c, -ENOMEM, "out of memory");
    return c->transport->start(c);
}

void comm_close(comm *c, bool job_failed) {
    if (c->collectives)
        c->collectives->close(c);
    if (c->local)
        c->local->close(c, job_failed);
    c->local = NULL;
    if (c->transport)
        c->transport->close(c, job_failed);
    free(c->stats.sent_to);
    free(c->stats.received_from);
    c->stats.sent_to = c->stats.received_from = NULL;
    c->transport = NULL;
}

#define TAG_AGREE_UP (-2) /* negative tags are the data plane's own */
#define TAG_AGREE_DOWN (-3)

static int agree_recv(comm *c, comm_call *call, int src, int32_t tag, int32_t *ret) {
    comm_frame *f;
    call->root = src;
    TRY(comm_recv(c, src, call, tag, &f));
    int r = comm_expect_range(c, f, call, 0, 1); /* one value, whole: no read past what came */
    if (r == 0)
        memcpy(ret, f->data, sizeof(*ret));
    comm_frame_free(c, f);
    return r;
}

int comm_agree_min(comm *c, int32_t *value) {
    int n = c->peers.world, rank = c->peers.rank, left = (rank + n - 1) % n, right = (rank + 1) % n;
    if (n == 1)
        return 0;
    comm_call call = {
        .kind = COLL_SEND, .t = DTYPE_I32, .count = 1, .deadline_ms = clock_now_ms() + (uint64_t)c->timeout_ms};
    int32_t v = *value, theirs;
    if (rank > 0) { /* up: 0 -> n-1, each adding its own */
        TRY(agree_recv(c, &call, left, TAG_AGREE_UP, &theirs));
        v = theirs < v ? theirs : v;
    }
    call.root = right;
    if (rank < n - 1) {
        TRY(comm_send(c, right, &call, TAG_AGREE_UP, 0, &v, 1, false));
        TRY(agree_recv(c, &call, left, TAG_AGREE_DOWN, &v)); /* down: from n-1 round to n-2 */
        call.root = right;
    }
    if (rank != n - 2) /* everyone but the last to hear it passes it on */
        TRY(comm_send(c, right, &call, TAG_AGREE_DOWN, 0, &v, 1, false));
    *value = v;
    return 0;
}

comm_header comm_header_of(const comm *c, const comm_call *call, int32_t tag, uint64_t offset, uint64_t n) {
    return (comm_header){
        .magic = COMM_MAGIC,
        .version = COMM_VERSION,
        .kind = (uint8_t)call->kind,
        .dtype = (uint8_t)call->t,
        .op = (uint8_t)call->op,
        .src = c->peers.rank,
        .tag = tag,
        .root = call->root,
        .generation = c->peers.generation,
        .seq = call->seq,
        .count = call->count,
        .offset = offset,
        .n = n,
    };
}

const char *comm_header_invalid(const comm *c, const comm_header *h) {
    if (h->magic != COMM_MAGIC || h->version != COMM_VERSION)
        return "a bad magic or version";
    if (h->src < 0 || h->src >= c->peers.world || h->src == c->peers.rank)
        return "an impossible source rank";
    if (h->generation != c->peers.generation)
        return "a message from another generation of the job";
    if (!dtype_valid(h->dtype) || !reduce_op_valid(h->op) || h->kind < COLL_SEND || h->kind > COLL_REDUCE_SCATTER)
        return "an unknown kind, dtype or op";
    if (h->flags || h->n > DDP_MAX_DATA_MSG_BYTES)
        return "unknown flags or too many elements";
    return NULL;
}

int comm_data_copy_to(comm *c, comm_frame *f, void *dst) {
    (void)c;
    memcpy(dst, f->data, f->h.n * dtype_size(f->h.dtype));
    return 0;
}

int comm_data_of(comm *c, comm_frame *f, const void **ret_data) {
    (void)c;
    *ret_data = f->data;
    return 0;
}

int comm_data_reduce_pair(comm *c, comm_frame *f, void *dst, const void *own, reduce_op op) {
    (void)c;
    reduce_pair(dst, f->data, own, f->h.n, f->h.dtype, op);
    return 0;
}

int comm_fail(comm *c, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, c->error_size, fmt, ap);
    va_end(ap);
    return err;
}

int comm_check_end(comm *c) {
    int code = job_end_code(c->end);
    return code ? comm_fail(c, code, "%s", c->end->text) : 0;
}

int comm_check_peer(comm *c, int r, const comm_call *call) {
    TRY(comm_check_end(c));
    if (r >= 0 && r < DDP_MAX_WORLD_SIZE && atomic_load(&((job_end *)c->end)->left[r]))
        return comm_fail(c, -EPIPE, "%s #%llu: rank %d (pid %u) left the job while this rank waited for it",
                         coll_kind_name(call->kind), (unsigned long long)call->seq, r, c->peers.pids[r]);
    return 0;
}

int comm_mismatch(comm *c, const comm_frame *f, const comm_call *call) {
    const comm_header *h = &f->h;
    if (call->kind == COLL_SEND)
        return comm_fail(c, -EINVAL,
                         "rank %d sent %llu elements of %s with tag %d; this rank expected %llu elements of %s", h->src,
                         (unsigned long long)h->count, dtype_name(h->dtype), h->tag, (unsigned long long)call->count,
                         dtype_name(call->t));
    return comm_fail(c, -EINVAL,
                     "collective #%llu: rank %d called %s(count %llu, %s, %s, root %d) where this rank called "
                     "%s(count %llu, %s, %s, root %d)",
                     (unsigned long long)call->seq, h->src, coll_kind_name(h->kind), (unsigned long long)h->count,
                     dtype_name(h->dtype), reduce_op_name(h->op), h->root, coll_kind_name(call->kind),
                     (unsigned long long)call->count, dtype_name(call->t), reduce_op_name(call->op), call->root);
}

int comm_check_frame(comm *c, const comm_frame *f, const comm_call *call) {
    const comm_header *h = &f->h;
    bool same = h->kind == call->kind && h->dtype == call->t && h->count == call->count &&
                (call->kind == COLL_SEND || (h->op == call->op && h->root == call->root));
    return same ? 0 : comm_mismatch(c, f, call);
}

int comm_check_stale(comm *c, const comm_header *h, const comm_call *call) {
    if (!call->seq || !h->seq || h->seq >= call->seq)
        return 0;
    return comm_fail(c, -EINVAL,
                     "collective #%llu: rank %d called %s(count %llu, %s, %s, root %d) and sent this rank data that "
                     "this rank's call there did not take: the ranks called different collectives",
                     (unsigned long long)h->seq, h->src, coll_kind_name(h->kind), (unsigned long long)h->count,
                     dtype_name(h->dtype), reduce_op_name(h->op), h->root);
}

int comm_expect_range(comm *c, const comm_frame *f, const comm_call *call, uint64_t offset, uint64_t n) {
    if (f->h.offset == offset && f->h.n == n)
        return 0;
    return comm_fail(c, -EPROTO, "%s #%llu: rank %d sent elements [%llu, %llu) where [%llu, %llu) was due",
                     coll_kind_name(call->kind), (unsigned long long)call->seq, f->h.src,
                     (unsigned long long)f->h.offset, (unsigned long long)(f->h.offset + f->h.n),
                     (unsigned long long)offset, (unsigned long long)(offset + n));
}

void comm_report_waiting(comm *c, int src, const comm_call *call, int32_t tag) {
    comm_report_waiting_as(c, src, call, tag, false);
}

void comm_report_waiting_as(comm *c, int src, const comm_call *call, int32_t tag, bool sending) {
    if (!c->waiting)
        return;
    if (src < 0) {
        c->waiting(c->waiting_ctx, -1, NULL);
        return;
    }
    char what[64];
    if (call->kind == COLL_SEND)
        snprintf(what, sizeof(what), "%s (tag %d)", sending ? "send" : "recv", tag);
    else
        snprintf(what, sizeof(what), "%s #%llu", coll_kind_name(call->kind), (unsigned long long)call->seq);
    c->waiting(c->waiting_ctx, src, what);
}

int comm_timed_out(comm *c, int src, const comm_call *call, int32_t tag, const char *extra) {
    if (call->kind == COLL_SEND)
        return comm_fail(c, -ETIMEDOUT, "recv timed out after %d ms waiting for rank %d (tag %d)%s", c->timeout_ms, src,
                         tag, extra);
    return comm_fail(c, -ETIMEDOUT, "%s #%llu timed out after %d ms waiting for rank %d%s", coll_kind_name(call->kind),
                     (unsigned long long)call->seq, c->timeout_ms, src, extra);
}

void comm_count_sent(comm *c, int peer, uint64_t bytes) {
    c->stats.bytes_sent += bytes;
    c->stats.sent_to[peer] += bytes;
    c->stats.messages_sent++;
}

void comm_count_ddpd(comm *c, uint64_t sent, uint64_t received) {
    c->stats.bytes_sent += sent;
    c->stats.sent_to[c->peers.world] += sent;
    c->stats.bytes_received += received;
    c->stats.received_from[c->peers.world] += received;
}

void comm_count_received(comm *c, int peer, uint64_t bytes) {
    c->stats.bytes_received += bytes;
    c->stats.received_from[peer] += bytes;
    c->stats.messages_received++;
}
