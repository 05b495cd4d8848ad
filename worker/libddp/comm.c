#define _GNU_SOURCE /* process_vm_readv */
#include "worker/libddp/comm.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/group.h"

#define COMM_CHUNK_BYTES (1u << 20)        /* frames of a large transfer */
#define COMM_SOCKET_BUFFER (4 << 20)       /* kernel buffers: fewer wake-ups per megabyte (capped by wmem_max) */
#define COMM_ZERO_COPY_MIN (64u << 10)     /* below this a copy is cheaper than the bookkeeping */
#define COMM_MAX_QUEUED_BYTES (1ull << 30) /* early arrivals held at once */

#define COMM_REMOTE_MIN (64u << 10)          /* smaller chunks are cheaper through the socket */
#define COMM_REMOTE_CHUNK_BYTES (4u << 20)   /* frames read from a peer's memory */
#define COMM_REDUCE_PIECE_BYTES (128u << 10) /* read from a peer, then reduced while in cache */
#define COMM_ABORT_GRACE_MS 3000             /* how long a vanished peer's abort notice may take */

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
};

const char *coll_kind_name(coll_kind kind) {
    return kind >= COLL_SEND && kind <= COLL_REDUCE_SCATTER ? kind_names[kind] : "unknown";
}

int comm_socket_setup(void *socket) {
    int unlimited = 0, buffer = COMM_SOCKET_BUFFER;
    TRY(wire_socket_setup(socket, DDP_MAX_DATA_MSG_BYTES));
    /* No high-water mark: a collective bounds what is in flight, and a dropped or stalled
     * chunk would only turn into a timeout. */
    if (zmq_setsockopt(socket, ZMQ_SNDHWM, &unlimited, sizeof(unlimited)) < 0 ||
        zmq_setsockopt(socket, ZMQ_RCVHWM, &unlimited, sizeof(unlimited)) < 0 ||
        zmq_setsockopt(socket, ZMQ_SNDBUF, &buffer, sizeof(buffer)) < 0 ||
        zmq_setsockopt(socket, ZMQ_RCVBUF, &buffer, sizeof(buffer)) < 0)
        return -errno;
    return 0;
}

uint64_t comm_chunk_elems(const ddp_group *g, dtype t) {
    return (g->comm.remote_reads ? COMM_REMOTE_CHUNK_BYTES : COMM_CHUNK_BYTES) / dtype_size(t);
}

int comm_init(ddp_group *g) {
    comm *c = &g->comm;
    c->pull = g->data;
    c->push = calloc((size_t)g->world_size, sizeof(void *));
    c->queue = calloc((size_t)g->world_size, sizeof(comm_frame *));
    c->sent_to = calloc((size_t)g->world_size + 1, sizeof(unsigned long long));
    c->received_from = calloc((size_t)g->world_size + 1, sizeof(unsigned long long));
    if (!c->push || !c->queue || !c->sent_to || !c->received_from)
        return -ENOMEM;
    atomic_init(&c->inflight, 0);
    pthread_mutex_init(&c->inflight_lock, NULL);
    pthread_condattr_t attr; /* waits measured on the monotonic clock, like every deadline here */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&c->inflight_done, &attr);
    pthread_condattr_destroy(&attr);
    c->locks_ready = true;
    return 0;
}

void comm_frame_free(comm_frame *f) {
    if (!f)
        return;
    zmq_msg_close(&f->payload);
    free(f->aligned_copy);
    free(f);
}

/* ZeroMQ packs small messages into one receive buffer at any offset; the kernels read
 * elements of their type, so such a payload is copied to memory that malloc aligned. */
static int comm_frame_align(comm_frame *f) {
    size_t size = zmq_msg_size(&f->payload);
    f->data = zmq_msg_data(&f->payload);
    if ((uintptr_t)f->data % dtype_size(f->h.dtype) == 0)
        return 0;
    if (!(f->aligned_copy = malloc(size)))
        return -ENOMEM;
    memcpy(f->aligned_copy, f->data, size);
    f->data = f->aligned_copy;
    return 0;
}

void comm_close(ddp_group *g) {
    comm *c = &g->comm;
    if (c->push) {
        /* Let what is queued reach its peer, unless the job is over anyway. */
        int linger = g->failed ? 0 : g->timeout_ms;
        for (int i = 0; i < g->world_size; i++)
            if (c->push[i]) {
                zmq_setsockopt(c->push[i], ZMQ_LINGER, &linger, sizeof(linger));
                zmq_close(c->push[i]);
            }
        free(c->push);
    }
    if (c->queue) {
        for (int i = 0; i < g->world_size; i++)
            while (c->queue[i]) {
                comm_frame *f = c->queue[i];
                c->queue[i] = f->next;
                comm_frame_free(f);
            }
        free(c->queue);
    }
    free(c->scratch);
    free(c->sent_to);
    free(c->received_from);
    c->scratch = NULL;
    c->sent_to = c->received_from = NULL;
    c->push = NULL;
    c->queue = NULL;
}

/* ZeroMQ calls this, from its I/O thread, once it no longer needs a zero-copy buffer. */
static void comm_release(void *data, void *hint) {
    (void)data;
    comm *c = hint;
    if (atomic_fetch_sub(&c->inflight, 1) == 1) {
        pthread_mutex_lock(&c->inflight_lock);
        pthread_cond_broadcast(&c->inflight_done);
        pthread_mutex_unlock(&c->inflight_lock);
    }
}

static int comm_peer_socket(ddp_group *g, int dst, void **ret) {
    comm *c = &g->comm;
    if (!c->push[dst]) {
        void *s = zmq_socket(g->zmq_ctx, ZMQ_PUSH);
        if (!s)
            return group_fail(g, -errno, "cannot create a socket to rank %d: %s", dst, zmq_strerror(errno));
        int ipv6 = strchr(g->endpoints[dst], '[') != NULL;
        int r = comm_socket_setup(s);
        if (r == 0 && (zmq_setsockopt(s, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0 || zmq_connect(s, g->endpoints[dst]) < 0))
            r = -errno;
        if (r < 0) {
            zmq_close(s);
            return group_fail(g, r, "cannot connect to rank %d at '%s': %s", dst, g->endpoints[dst], zmq_strerror(-r));
        }
        c->push[dst] = s;
    }
    *ret = c->push[dst];
    return 0;
}

int comm_send(ddp_group *g, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data, uint64_t n,
              bool zero_copy) {
    comm *c = &g->comm;
    void *s = NULL;
    TRY(comm_peer_socket(g, dst, &s));
    comm_header h = {
        .magic = COMM_MAGIC,
        .version = COMM_VERSION,
        .kind = (uint8_t)call->kind,
        .dtype = (uint8_t)call->t,
        .op = (uint8_t)call->op,
        .src = g->rank,
        .tag = tag,
        .root = call->root,
        .generation = g->generation,
        .seq = call->seq,
        .count = call->count,
        .offset = offset,
        .n = n,
    };
    size_t bytes = (size_t)n * dtype_size(call->t);
    zmq_msg_t m;
    /* Point-to-point keeps socket semantics: a send must not wait for the receiver to call. */
    if (zero_copy && c->remote_reads && call->kind != COLL_SEND && bytes >= COMM_REMOTE_MIN) {
        h.flags = COMM_FLAG_REMOTE;
        h.addr = (uint64_t)(uintptr_t)data;
        c->remote_pending++;
        zmq_msg_init(&m);
    } else if (zero_copy && bytes >= COMM_ZERO_COPY_MIN) {
        atomic_fetch_add(&c->inflight, 1);
        if (zmq_msg_init_data(&m, (void *)data, bytes, comm_release, c) < 0) {
            atomic_fetch_sub(&c->inflight, 1);
            return group_fail(g, -ENOMEM, "out of memory sending to rank %d", dst);
        }
    } else {
        if (zmq_msg_init_size(&m, bytes) < 0)
            return group_fail(g, -ENOMEM, "out of memory sending to rank %d", dst);
        if (bytes)
            memcpy(zmq_msg_data(&m), data, bytes);
    }
    /* With no high-water mark these never block; a full queue is memory, bounded by the call. */
    if (zmq_send(s, &h, sizeof(h), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || zmq_msg_send(&m, s, ZMQ_DONTWAIT) < 0) {
        int r = -errno;
        zmq_msg_close(&m);
        return group_fail(g, r, "cannot send to rank %d: %s", dst, zmq_strerror(-r));
    }
    c->bytes_sent += bytes;
    c->sent_to[dst] += bytes;
    c->messages_sent++;
    return 0;
}

/* The abort, if the job has ended; records it as the group's failure. */
static int comm_check_abort(ddp_group *g) {
    int code = atomic_load(&g->agent.abort_code);
    if (!code)
        return 0;
    g->failed = code;
    return group_fail(g, code, "%s", g->agent.abort_text);
}

/* Tells the sender of a COMM_FLAG_REMOTE frame that its buffer has been read. */
static void comm_send_ack(ddp_group *g, const comm_header *read) {
    void *s = NULL;
    if (comm_peer_socket(g, read->src, &s) < 0)
        return;
    comm_header h = *read;
    h.src = g->rank;
    h.flags = COMM_FLAG_ACK;
    h.n = 0;
    zmq_send(s, &h, sizeof(h), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s, "", 0, ZMQ_DONTWAIT);
}

/* Copies bytes at offset within a COMM_FLAG_REMOTE frame out of the sender's memory. */
static int comm_read_remote_part(ddp_group *g, const comm_frame *f, size_t offset, void *dst, size_t bytes) {
    struct iovec local = {dst, bytes}, remote = {(char *)(uintptr_t)f->h.addr + offset, bytes};
    ssize_t got = bytes ? process_vm_readv((pid_t)g->pids[f->h.src], &local, 1, &remote, 1, 0) : 0;
    if (got != (ssize_t)bytes) {
        int r = got < 0 ? -errno : -EIO, err = errno;
        /* A peer's memory goes away only when the job is ending: it left its call because
         * another rank died, or it died itself. ddpd's word on that is the better error, and
         * it is due within the liveness window: wait for it that long. */
        struct pollfd pfd = {.fd = g->agent.abort_fd, .events = POLLIN};
        poll(&pfd, 1, COMM_ABORT_GRACE_MS);
        TRY(comm_check_abort(g));
        return group_fail(g, r, "could not read %zu bytes from rank %d (pid %u): %s", bytes, f->h.src,
                          g->pids[f->h.src], got < 0 ? strerror(err) : "short read");
    }
    return 0;
}

/* Tells the sender that a remote frame has been read: its buffer is free. */
static void comm_remote_done(ddp_group *g, comm_frame *f) {
    comm_send_ack(g, &f->h);
    f->h.flags = 0; /* read: acknowledged once */
}

/* Copies a COMM_FLAG_REMOTE frame's elements out of the sender's memory into dst. */
static int comm_read_remote(ddp_group *g, comm_frame *f, void *dst) {
    TRY(comm_read_remote_part(g, f, 0, dst, f->h.n * dtype_size(f->h.dtype)));
    comm_remote_done(g, f);
    return 0;
}

/* The scratch buffer, at least bytes long. */
static int comm_scratch(ddp_group *g, size_t bytes, void **ret) {
    comm *c = &g->comm;
    /* One buffer, reused: its pages stay mapped and, at the sizes used, in cache. */
    if (bytes > c->scratch_size) {
        void *grown = realloc(c->scratch, bytes);
        if (!grown)
            return group_fail(g, -ENOMEM, "out of memory for a %zu-byte chunk", bytes);
        c->scratch = grown;
        c->scratch_size = bytes;
    }
    *ret = c->scratch;
    return 0;
}

int comm_frame_copy_to(ddp_group *g, comm_frame *f, void *dst) {
    if (f->h.flags & COMM_FLAG_REMOTE)
        return comm_read_remote(g, f, dst);
    memcpy(dst, f->data, f->h.n * dtype_size(f->h.dtype));
    return 0;
}

int comm_frame_data(ddp_group *g, comm_frame *f, const void **ret_data) {
    if (f->h.flags & COMM_FLAG_REMOTE) {
        void *scratch = NULL;
        TRY(comm_scratch(g, f->h.n * dtype_size(f->h.dtype), &scratch));
        TRY(comm_read_remote(g, f, scratch));
        f->data = scratch;
    }
    *ret_data = f->data;
    return 0;
}

int comm_frame_reduce_pair(ddp_group *g, comm_frame *f, void *dst, const void *own, reduce_op op) {
    dtype t = f->h.dtype;
    size_t es = dtype_size(t);
    if (!(f->h.flags & COMM_FLAG_REMOTE)) {
        reduce_pair(dst, f->data, own, f->h.n, t, op);
        return 0;
    }
    /* Read and reduce a piece at a time: each piece is still in cache when it is added. */
    size_t piece = COMM_REDUCE_PIECE_BYTES / es, n = f->h.n;
    void *scratch = NULL;
    TRY(comm_scratch(g, (n < piece ? n : piece) * es, &scratch));
    for (size_t done = 0; done < n; done += piece) {
        size_t len = n - done < piece ? n - done : piece;
        TRY(comm_read_remote_part(g, f, done * es, scratch, len * es));
        reduce_pair((char *)dst + done * es, scratch, (const char *)own + done * es, len, t, op);
    }
    comm_remote_done(g, f);
    return 0;
}

/* Reads one message from the data socket into the matching queue, or drops it. */
static void comm_read_one(ddp_group *g) {
    comm *c = &g->comm;
    comm_frame *f = calloc(1, sizeof(*f));
    zmq_msg_t head;
    zmq_msg_init(&head);
    int more = 0;
    size_t more_size = sizeof(more);
    const char *why = NULL;
    if (!f || zmq_msg_recv(&head, c->pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&head);
        free(f);
        return;
    }
    zmq_msg_init(&f->payload);
    zmq_getsockopt(c->pull, ZMQ_RCVMORE, &more, &more_size);
    if (zmq_msg_size(&head) != sizeof(comm_header) || !more)
        why = "a frame that is not a data header";
    else {
        memcpy(&f->h, zmq_msg_data(&head), sizeof(comm_header));
        zmq_msg_recv(&f->payload, c->pull, 0);
        zmq_getsockopt(c->pull, ZMQ_RCVMORE, &more, &more_size);
    }
    zmq_msg_close(&head);
    /* Drain any extra parts so the next read starts at a message boundary. */
    while (more) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        zmq_msg_recv(&extra, c->pull, 0);
        zmq_msg_close(&extra);
        zmq_getsockopt(c->pull, ZMQ_RCVMORE, &more, &more_size);
        why = why ? why : "more than two frames";
    }
    const comm_header *h = &f->h;
    if (!why) {
        if (h->magic != COMM_MAGIC || h->version != COMM_VERSION)
            why = "a bad magic or version";
        else if (h->src < 0 || h->src >= g->world_size || h->src == g->rank)
            why = "an impossible source rank";
        else if (h->generation != g->generation)
            why = "a message from another generation of the job";
        else if (!dtype_valid(h->dtype) || !reduce_op_valid(h->op) || h->kind < COLL_SEND ||
                 h->kind > COLL_REDUCE_SCATTER)
            why = "an unknown kind, dtype or op";
        else if (h->flags & ~(COMM_FLAG_REMOTE | COMM_FLAG_ACK) || h->n > DDP_MAX_DATA_MSG_BYTES)
            why = "unknown flags or too many elements";
        else if (zmq_msg_size(&f->payload) != (h->flags ? 0 : h->n * dtype_size(h->dtype)))
            why = "a payload whose size does not match its header";
        else if (h->flags == COMM_FLAG_ACK) {
            if (c->remote_pending > 0)
                c->remote_pending--;
            comm_frame_free(f);
            return;
        } else if (c->queued_bytes + zmq_msg_size(&f->payload) > COMM_MAX_QUEUED_BYTES)
            why = "more early data than the matching queue holds";
        /* A remote frame is read when it is used; a neighbour that finished the probe
         * may send one before this rank has, so it is taken whatever remote_reads says. */
        else if (h->flags != COMM_FLAG_REMOTE && comm_frame_align(f) < 0)
            why = "no memory to align its payload";
    }
    if (why) {
        c->dropped++;
        snprintf(c->dropped_why, sizeof(c->dropped_why), "%s", why);
        comm_frame_free(f);
        return;
    }
    c->queued_bytes += zmq_msg_size(&f->payload); /* a remote frame holds nothing */
    c->bytes_received += h->n * dtype_size(h->dtype);
    c->received_from[h->src] += h->n * dtype_size(h->dtype);
    c->messages_received++;
    comm_frame **tail = &c->queue[h->src];
    while (*tail)
        tail = &(*tail)->next;
    *tail = f;
}

static comm_frame *comm_take(comm *c, int src, uint64_t seq, int32_t tag) {
    for (comm_frame **p = &c->queue[src]; *p; p = &(*p)->next)
        if ((*p)->h.seq == seq && (*p)->h.tag == tag) {
            comm_frame *f = *p;
            *p = f->next;
            f->next = NULL;
            c->queued_bytes -= zmq_msg_size(&f->payload);
            return f;
        }
    return NULL;
}

static int comm_mismatch(ddp_group *g, const comm_frame *f, const comm_call *call) {
    const comm_header *h = &f->h;
    if (call->kind == COLL_SEND)
        return group_fail(g, -EINVAL,
                          "rank %d sent %llu elements of %s with tag %d; this rank expected %llu elements of %s",
                          h->src, (unsigned long long)h->count, dtype_name(h->dtype), h->tag,
                          (unsigned long long)call->count, dtype_name(call->t));
    return group_fail(g, -EINVAL,
                      "collective #%llu: rank %d called %s(count %llu, %s, %s, root %d) where this rank called "
                      "%s(count %llu, %s, %s, root %d)",
                      (unsigned long long)call->seq, h->src, coll_kind_name(h->kind), (unsigned long long)h->count,
                      dtype_name(h->dtype), reduce_op_name(h->op), h->root, coll_kind_name(call->kind),
                      (unsigned long long)call->count, dtype_name(call->t), reduce_op_name(call->op), call->root);
}

/* Waits until something arrives (and reads all of it into the queue), the job aborts, or
 * the deadline passes (-ETIMEDOUT, recorded by the caller). */
static int comm_poll(ddp_group *g, uint64_t deadline_ms) {
    comm *c = &g->comm;
    TRY(comm_check_abort(g));
    zmq_pollitem_t items[2] = {{.socket = c->pull, .events = ZMQ_POLLIN},
                               {.fd = g->agent.abort_fd, .events = ZMQ_POLLIN}};
    int n = zmq_poll(items, 2, clock_ms_until(deadline_ms));
    if (n < 0 && zmq_errno() != EINTR)
        return group_fail(g, -zmq_errno(), "waiting for the data plane: %s", zmq_strerror(zmq_errno()));
    if (n == 0 && clock_now_ms() >= deadline_ms)
        return -ETIMEDOUT;
    if (n > 0 && (items[0].revents & ZMQ_POLLIN)) {
        int events = 0;
        size_t size = sizeof(events);
        /* Take everything that is there: ZeroMQ signals edges, not levels. */
        while (zmq_getsockopt(c->pull, ZMQ_EVENTS, &events, &size) == 0 && (events & ZMQ_POLLIN))
            comm_read_one(g);
    }
    return 0;
}

int comm_recv(ddp_group *g, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame) {
    comm *c = &g->comm;
    bool waiting = false; /* told to ddpd's stall report once this call blocks */
    for (;;) {
        comm_frame *f = comm_take(c, src, call->seq, tag);
        if (f && waiting)
            agent_set_waiting(&g->agent, -1, NULL);
        if (f) {
            const comm_header *h = &f->h;
            bool same = h->kind == call->kind && h->dtype == call->t && h->count == call->count &&
                        (call->kind == COLL_SEND || (h->op == call->op && h->root == call->root));
            if (!same) {
                int r = comm_mismatch(g, f, call);
                comm_frame_free(f);
                return r;
            }
            *ret_frame = f;
            return 0;
        }
        if (!waiting) {
            char what[64];
            if (call->kind == COLL_SEND)
                snprintf(what, sizeof(what), "recv (tag %d)", tag);
            else
                snprintf(what, sizeof(what), "%s #%llu", coll_kind_name(call->kind), (unsigned long long)call->seq);
            agent_set_waiting(&g->agent, src, what);
            waiting = true;
        }
        int r = comm_poll(g, call->deadline_ms);
        if (r < 0)
            agent_set_waiting(&g->agent, -1, NULL);
        if (r != -ETIMEDOUT)
            TRY(r);
        else {
            char extra[256] = "";
            if (c->dropped)
                snprintf(extra, sizeof(extra), " (%llu malformed messages dropped, the last with %s)",
                         (unsigned long long)c->dropped, c->dropped_why);
            if (call->kind == COLL_SEND)
                return group_fail(g, -ETIMEDOUT, "recv timed out after %d ms waiting for rank %d (tag %d)%s",
                                  g->timeout_ms, src, tag, extra);
            return group_fail(g, -ETIMEDOUT, "%s #%llu timed out after %d ms waiting for rank %d%s",
                              coll_kind_name(call->kind), (unsigned long long)call->seq, g->timeout_ms, src, extra);
        }
    }
}

int comm_expect_range(ddp_group *g, const comm_frame *f, const comm_call *call, uint64_t offset, uint64_t n) {
    if (f->h.offset == offset && f->h.n == n)
        return 0;
    return group_fail(g, -EPROTO, "%s #%llu: rank %d sent elements [%llu, %llu) where [%llu, %llu) was due",
                      coll_kind_name(call->kind), (unsigned long long)call->seq, f->h.src,
                      (unsigned long long)f->h.offset, (unsigned long long)(f->h.offset + f->h.n),
                      (unsigned long long)offset, (unsigned long long)(offset + n));
}

/* Closes every peer socket with nothing to linger for; ZeroMQ then drops what is queued
 * and gives back the buffers. The sockets are made again on the next send. */
static void comm_cancel(ddp_group *g) {
    comm *c = &g->comm;
    int linger = 0;
    for (int i = 0; i < g->world_size; i++)
        if (c->push[i]) {
            zmq_setsockopt(c->push[i], ZMQ_LINGER, &linger, sizeof(linger));
            zmq_close(c->push[i]);
            c->push[i] = NULL;
        }
    /* The drop happens on ZeroMQ's threads: wait for it, briefly. */
    uint64_t deadline = clock_now_ms() + 2000;
    while (atomic_load(&c->inflight) > 0 && clock_now_ms() < deadline)
        sched_yield();
}

static int comm_flush(ddp_group *g, uint64_t deadline_ms) {
    comm *c = &g->comm;
    pthread_mutex_lock(&c->inflight_lock);
    while (atomic_load(&c->inflight) > 0) {
        /* Wake now and then to notice an abort: a dead peer never takes its data. */
        uint64_t wake = clock_now_ms() + 50;
        if (wake > deadline_ms)
            wake = deadline_ms;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t ms = wake - clock_now_ms();
        if ((int64_t)ms < 0)
            ms = 0;
        ts.tv_sec += (time_t)(ms / 1000);
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->inflight_done, &c->inflight_lock, &ts);
        if (atomic_load(&c->inflight) == 0)
            break;
        if (atomic_load(&g->agent.abort_code) || clock_now_ms() >= deadline_ms) {
            pthread_mutex_unlock(&c->inflight_lock);
            TRY(comm_check_abort(g));
            return group_fail(g, -ETIMEDOUT, "sends not taken by their peers within %d ms", g->timeout_ms);
        }
    }
    pthread_mutex_unlock(&c->inflight_lock);
    return 0;
}

/* Waits until every peer has read the buffers named in COMM_FLAG_REMOTE frames. */
static int comm_wait_remote_reads(ddp_group *g, uint64_t deadline_ms) {
    while (g->comm.remote_pending > 0) {
        int r = comm_poll(g, deadline_ms);
        if (r == -ETIMEDOUT)
            return group_fail(g, r, "%ld buffers not read by their peers within %d ms", g->comm.remote_pending,
                              g->timeout_ms);
        TRY(r);
    }
    return 0;
}

bool comm_buffers_exposed(const ddp_group *g) {
    return g->comm.exposed;
}

void comm_destroy_locks(ddp_group *g) {
    if (!g->comm.locks_ready)
        return;
    pthread_mutex_destroy(&g->comm.inflight_lock);
    pthread_cond_destroy(&g->comm.inflight_done);
    g->comm.locks_ready = false;
}

int comm_finish(ddp_group *g, int result, uint64_t deadline_ms) {
    comm *c = &g->comm;
    if (result == 0 && c->remote_pending > 0)
        result = comm_wait_remote_reads(g, deadline_ms);
    if (result == 0 && atomic_load(&c->inflight) > 0)
        result = comm_flush(g, deadline_ms);
    if (result < 0) {
        if (atomic_load(&c->inflight) > 0)
            comm_cancel(g);
        /* The job is over, but a peer may still read what it was told of: the caller must
         * not free such buffers (comm_buffers_exposed). */
        c->exposed = c->remote_pending > 0 || atomic_load(&c->inflight) > 0;
        c->remote_pending = 0;
    }
    return result;
}
