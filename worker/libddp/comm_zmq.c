/* The data plane over ZeroMQ.
 *
 * Each rank binds one PULL socket (advertised at join) and connects a PUSH socket to each
 * peer it sends to, lazily. A message is [header][payload]. Messages that arrive before
 * anyone asks for them wait in a per-source matching queue. Every wait polls the socket
 * and the job's end together, with a deadline, and notices when ddpd says its peer left.
 * Between hosts, and on one host where shared memory was not chosen (ranks on one host
 * share memory instead: coll_shm.c when every rank is on it, comm_mailbox.c otherwise). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/wire.h"
#include "worker/libddp/comm.h"
#include "worker/libddp/data_guard.h"

#define ZMQ_CHUNK_BYTES (1u << 20)        /* frames of a large transfer */
#define ZMQ_SOCKET_BUFFER (4 << 20)       /* kernel buffers: fewer wake-ups per megabyte (capped by wmem_max) */
#define ZMQ_ZERO_COPY_MIN (64u << 10)     /* below this a copy is cheaper than the bookkeeping */
#define ZMQ_MAX_QUEUED_BYTES (1ull << 30) /* early arrivals held at once */
#define ZMQ_PEER_CHECK_MS 100             /* a wait checks this often whether its peer left */

typedef struct zmq_frame {
    comm_frame f; /* first: the data plane's view */
    zmq_msg_t payload;
    void *aligned_copy;
    struct zmq_frame *next;
} zmq_frame;

typedef struct {
    void *ctx;         /* the data plane's own ZeroMQ context */
    void *pull;        /* bound by listen */
    data_guard *guard; /* who may connect to pull */
    curve_keypair own; /* pull's CURVE keys, when it listens on tcp:// ("" otherwise); push's */
    void **push;       /* per peer, connected on first use */
    zmq_frame **queue; /* per source: frames nobody has asked for yet, in arrival order */
    size_t queued_bytes;
    _Atomic long inflight; /* zero-copy sends ZeroMQ still holds */
    pthread_mutex_t inflight_lock;
    pthread_cond_t inflight_done;
    char dropped_why[160]; /* the last frame dropped (c->stats.frames_dropped counts them) */
    int overflowed;        /* a rank one of whose frames the full queue could not hold, plus 1; 0: none */
    bool exposed;          /* a failed call left buffers a peer or ZeroMQ may still read */
} zmq_plane;

static zmq_plane *plane(const comm *c) {
    return c->impl;
}

/* Options of every data socket, set before bind or connect: message limit, no high-water
 * mark, large kernel buffers. */
static int zmq_socket_setup(void *socket) {
    int unlimited = 0, buffer = ZMQ_SOCKET_BUFFER;
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

static uint64_t zmq_chunk_bytes(const comm *c) {
    (void)c;
    return ZMQ_CHUNK_BYTES;
}

/* "ipc://@*": an abstract Unix socket of a name nobody can guess (no file to clean up, and
 * reachable from units with a private /tmp). */
static int zmq_abstract_name(comm *c, char *dst, size_t size) {
    uint8_t raw[12];
    if (getentropy(raw, sizeof(raw)) < 0)
        return comm_fail(c, -errno, "cannot name the data socket: %s", strerror(errno));
    int n = snprintf(dst, size, "ipc://@ddp-data-%d-", (int)getpid());
    for (size_t i = 0; i < sizeof(raw) && n + 2 < (int)size; i++)
        n += snprintf(dst + n, size - (size_t)n, "%02x", raw[i]);
    return 0;
}

static int zmq_listen(comm *c, const char *endpoint, char *ret_endpoint, size_t size, char ret_key[CURVE_KEY_Z85]) {
    zmq_plane *p = plane(c);
    char named[64];
    if (strcmp(endpoint, "ipc://@*") == 0) {
        TRY(zmq_abstract_name(c, named, sizeof(named)));
        endpoint = named;
    }
    if (!(p->pull = zmq_socket(p->ctx, ZMQ_PULL)))
        return comm_fail(c, -errno, "cannot create the data socket: %s", zmq_strerror(errno));
    TRY(zmq_socket_setup(p->pull));
    int r = data_guard_start(p->ctx, p->pull, &p->guard);
    if (r < 0)
        return comm_fail(c, r, "cannot guard the data socket: %s", zmq_strerror(-r));
    /* Over TCP the peers may be anywhere: CURVE, with a key pair of this process's own. */
    if (strncmp(endpoint, "tcp://", 6) == 0) {
        int on = 1;
        if (zmq_curve_keypair(p->own.public_key, p->own.secret_key) < 0 ||
            zmq_setsockopt(p->pull, ZMQ_CURVE_SERVER, &on, sizeof(on)) < 0 ||
            zmq_setsockopt(p->pull, ZMQ_CURVE_SECRETKEY, p->own.secret_key, CURVE_KEY_Z85) < 0)
            return comm_fail(c, -errno, "cannot set CURVE up on the data socket: %s", zmq_strerror(errno));
    }
    if (zmq_bind(p->pull, endpoint) < 0) {
        r = -errno;
        return comm_fail(c, r, "Failed to bind the data endpoint '%s': %s", endpoint, zmq_strerror(-r));
    }
    if (zmq_getsockopt(p->pull, ZMQ_LAST_ENDPOINT, ret_endpoint, &size) < 0)
        return comm_fail(c, -errno, "cannot read back the data endpoint: %s", zmq_strerror(errno));
    memcpy(ret_key, p->own.public_key, CURVE_KEY_Z85);
    return 0;
}

static void zmq_frame_free(comm_frame *f) {
    zmq_frame *z = (zmq_frame *)f;
    zmq_msg_close(&z->payload);
    free(z->aligned_copy);
    free(z);
}

/* ZeroMQ packs small messages into one receive buffer at any offset; the kernels read
 * elements of their type, so such a payload is copied to memory that malloc aligned. */
static int zmq_frame_align(zmq_frame *z) {
    size_t size = zmq_msg_size(&z->payload);
    z->f.data = zmq_msg_data(&z->payload);
    if ((uintptr_t)z->f.data % dtype_size(z->f.h.dtype) == 0)
        return 0;
    if (!(z->aligned_copy = malloc(size)))
        return -ENOMEM;
    memcpy(z->aligned_copy, z->f.data, size);
    z->f.data = z->aligned_copy;
    return 0;
}

/* ZeroMQ calls this, from its I/O thread, once it no longer needs a zero-copy buffer. */
static void zmq_released(void *data, void *hint) {
    (void)data;
    zmq_plane *p = hint;
    if (atomic_fetch_sub(&p->inflight, 1) == 1) {
        pthread_mutex_lock(&p->inflight_lock);
        pthread_cond_broadcast(&p->inflight_done);
        pthread_mutex_unlock(&p->inflight_lock);
    }
}

/* A socket to rank dst speaks what dst's data socket expects: CURVE with dst's key over
 * TCP, plain over ipc:// (where dst's guard asks the kernel who connects). */
static int zmq_peer_security(comm *c, int dst, void *s) {
    zmq_plane *p = plane(c);
    const char *endpoint = c->peers.endpoints[dst];
    if (!c->peers.here[dst] && strncmp(endpoint, "ipc://", 6) == 0)
        return comm_fail(c, -EPROTO,
                         "rank %d, on another host, listens on %s, a Unix socket that only its own host reaches: "
                         "give the ranks DDP_DATA_ENDPOINT=tcp://ADDRESS:* where a job spans hosts",
                         dst, endpoint);
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return 0;
    if (!c->peers.keys[dst][0] || !p->own.public_key[0])
        return comm_fail(c, -EPROTO, "rank %d listens on %s: TCP between ranks needs CURVE keys on both sides %s", dst,
                         endpoint,
                         p->own.public_key[0] ? "(it advertised none)"
                                              : "(this rank listens on ipc://: give DDP_DATA_ENDPOINT=tcp://... to "
                                                "the ranks of every host)");
    int r = curve_client_setup(s, c->peers.keys[dst], &p->own);
    return r < 0 ? comm_fail(c, r, "cannot set CURVE up to rank %d: %s", dst, zmq_strerror(-r)) : 0;
}

static int zmq_peer_socket(comm *c, int dst, void **ret) {
    zmq_plane *p = plane(c);
    if (!p->push[dst]) {
        const char *endpoint = c->peers.endpoints[dst];
        void *s = zmq_socket(p->ctx, ZMQ_PUSH);
        if (!s)
            return comm_fail(c, -errno, "cannot create a socket to rank %d: %s", dst, zmq_strerror(errno));
        int ipv6 = strchr(endpoint, '[') != NULL, r = zmq_peer_security(c, dst, s);
        if (r < 0) {
            zmq_close(s);
            return r;
        }
        r = zmq_socket_setup(s);
        if (r == 0 && (zmq_setsockopt(s, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0 || zmq_connect(s, endpoint) < 0))
            r = -errno;
        if (r < 0) {
            zmq_close(s);
            return comm_fail(c, r, "cannot connect to rank %d at '%s': %s", dst, endpoint, zmq_strerror(-r));
        }
        p->push[dst] = s;
    }
    *ret = p->push[dst];
    return 0;
}

static int zmq_send_frame(comm *c, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data,
                          uint64_t n, bool zero_copy) {
    zmq_plane *p = plane(c);
    void *s = NULL;
    TRY(zmq_peer_socket(c, dst, &s));
    comm_header h = comm_header_of(c, call, tag, offset, n);
    size_t bytes = (size_t)n * dtype_size(call->t);
    zmq_msg_t m;
    if (zero_copy && bytes >= ZMQ_ZERO_COPY_MIN) {
        atomic_fetch_add(&p->inflight, 1);
        if (zmq_msg_init_data(&m, (void *)data, bytes, zmq_released, p) < 0) {
            atomic_fetch_sub(&p->inflight, 1);
            return comm_fail(c, -ENOMEM, "out of memory sending to rank %d", dst);
        }
    } else {
        if (zmq_msg_init_size(&m, bytes) < 0)
            return comm_fail(c, -ENOMEM, "out of memory sending to rank %d", dst);
        if (bytes)
            memcpy(zmq_msg_data(&m), data, bytes);
    }
    /* With no high-water mark these never block; a full queue is memory, bounded by the call. */
    if (zmq_send(s, &h, sizeof(h), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || zmq_msg_send(&m, s, ZMQ_DONTWAIT) < 0) {
        int r = -errno;
        zmq_msg_close(&m);
        return comm_fail(c, r, "cannot send to rank %d: %s", dst, zmq_strerror(-r));
    }
    comm_count_sent(c, dst, bytes);
    return 0;
}

/* Why a frame that says it comes from rank src cannot (NULL when it can): the connection
 * it came on belongs to the rank the guard admitted. */
static const char *zmq_frame_impostor(zmq_msg_t *m, int src) {
    const char *user = zmq_msg_gets(m, "User-Id");
    char *end;
    long rank = user ? strtol(user, &end, 10) : -1;
    if (!user || !*user || *end)
        return "a connection nobody admitted";
    return rank == src ? NULL : "a header naming another rank than its connection's";
}

/* Reads one message from the data socket into the matching queue, or drops it. */
static void zmq_read_one(comm *c) {
    zmq_plane *p = plane(c);
    zmq_frame *z = calloc(1, sizeof(*z));
    zmq_msg_t head;
    zmq_msg_init(&head);
    int more = 0;
    size_t more_size = sizeof(more);
    const char *why = NULL;
    if (!z || zmq_msg_recv(&head, p->pull, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&head);
        free(z);
        return;
    }
    zmq_msg_init(&z->payload);
    z->f.transport = c->transport;
    zmq_getsockopt(p->pull, ZMQ_RCVMORE, &more, &more_size);
    if (zmq_msg_size(&head) != sizeof(comm_header) || !more)
        why = "a frame that is not a data header";
    else {
        memcpy(&z->f.h, zmq_msg_data(&head), sizeof(comm_header));
        zmq_msg_recv(&z->payload, p->pull, 0);
        zmq_getsockopt(p->pull, ZMQ_RCVMORE, &more, &more_size);
    }
    zmq_msg_close(&head);
    /* Drain any extra parts so the next read starts at a message boundary. */
    while (more) {
        zmq_msg_t extra;
        zmq_msg_init(&extra);
        zmq_msg_recv(&extra, p->pull, 0);
        zmq_msg_close(&extra);
        zmq_getsockopt(p->pull, ZMQ_RCVMORE, &more, &more_size);
        why = why ? why : "more than two frames";
    }
    const comm_header *h = &z->f.h;
    if (!why)
        why = comm_header_invalid(c, h);
    if (!why)
        why = zmq_frame_impostor(&z->payload, h->src);
    if (!why) {
        if (zmq_msg_size(&z->payload) != h->n * dtype_size(h->dtype))
            why = "a payload whose size does not match its header";
        else if (p->queued_bytes + zmq_msg_size(&z->payload) > ZMQ_MAX_QUEUED_BYTES)
            why = "more early data than the matching queue holds";
        else if (zmq_frame_align(z) < 0)
            why = "no memory to align its payload";
        if (why) /* a frame of the job's, lost: a later recv must fail, not take the next one */
            p->overflowed = p->overflowed ? p->overflowed : h->src + 1;
    }
    if (why) {
        c->stats.frames_dropped++;
        snprintf(p->dropped_why, sizeof(p->dropped_why), "%s", why);
        zmq_frame_free(&z->f);
        return;
    }
    p->queued_bytes += zmq_msg_size(&z->payload);
    comm_count_received(c, h->src, h->n * dtype_size(h->dtype));
    zmq_frame **tail = &p->queue[h->src];
    while (*tail)
        tail = &(*tail)->next;
    *tail = z;
}

static zmq_frame *zmq_take(zmq_plane *p, int src, uint64_t seq, int32_t tag) {
    for (zmq_frame **q = &p->queue[src]; *q; q = &(*q)->next)
        if ((*q)->f.h.seq == seq && (*q)->f.h.tag == tag) {
            zmq_frame *z = *q;
            *q = z->next;
            z->next = NULL;
            p->queued_bytes -= zmq_msg_size(&z->payload);
            return z;
        }
    return NULL;
}

/* Waits until something arrives (and reads all of it into the queue), the job ends, or
 * the deadline passes (-ETIMEDOUT, recorded by the caller). */
static int zmq_poll_data(comm *c, uint64_t deadline_ms) {
    zmq_plane *p = plane(c);
    TRY(comm_check_end(c));
    zmq_pollitem_t items[2] = {{.socket = p->pull, .events = ZMQ_POLLIN}, {.fd = c->end->fd, .events = ZMQ_POLLIN}};
    int n = zmq_poll(items, 2, clock_ms_until(deadline_ms));
    if (n < 0 && zmq_errno() != EINTR)
        return comm_fail(c, -zmq_errno(), "waiting for the data plane: %s", zmq_strerror(zmq_errno()));
    if (n == 0 && clock_now_ms() >= deadline_ms)
        return -ETIMEDOUT;
    if (n > 0 && (items[0].revents & ZMQ_POLLIN)) {
        int events = 0;
        size_t size = sizeof(events);
        /* Take everything that is there: ZeroMQ signals edges, not levels. */
        while (zmq_getsockopt(p->pull, ZMQ_EVENTS, &events, &size) == 0 && (events & ZMQ_POLLIN))
            zmq_read_one(c);
    }
    return 0;
}

/* A frame of the job's that the queue could not hold is lost: no recv may be matched after
 * it (a later one would take the next message in its place). */
static int zmq_overflow_error(comm *c) {
    zmq_plane *p = plane(c);
    return comm_fail(c, -ENOBUFS, "a frame from rank %d was dropped (%s): what follows it cannot be matched",
                     p->overflowed - 1, p->dropped_why);
}

static int zmq_probe(comm *c, int src, int32_t tag) {
    zmq_plane *p = plane(c);
    int r = zmq_poll_data(c, clock_now_ms()); /* what has come, at once */
    if (r < 0 && r != -ETIMEDOUT)
        return r;
    if (p->overflowed) /* what was dropped may be the message asked about */
        return zmq_overflow_error(c);
    for (const zmq_frame *q = p->queue[src]; q; q = q->next)
        if (q->f.h.seq == 0 && q->f.h.tag == tag)
            return 1;
    return 0;
}

static int zmq_recv_frame(comm *c, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame) {
    zmq_plane *p = plane(c);
    bool waiting = false; /* told to ddpd's stall report once this call blocks */
    for (;;) {
        if (p->overflowed)
            return zmq_overflow_error(c);
        for (const zmq_frame *q = p->queue[src]; q; q = q->next)
            TRY(comm_check_stale(c, &q->f.h, call));
        zmq_frame *z = zmq_take(p, src, call->seq, tag);
        if (z && waiting)
            comm_report_waiting(c, -1, call, tag);
        if (z) {
            int r = comm_check_frame(c, &z->f, call);
            if (r < 0) {
                zmq_frame_free(&z->f);
                return r;
            }
            *ret_frame = &z->f;
            return 0;
        }
        if (!waiting) {
            comm_report_waiting(c, src, call, tag);
            waiting = true;
        }
        /* in slices: ddpd may say meanwhile that src has left */
        uint64_t slice = clock_now_ms() + ZMQ_PEER_CHECK_MS;
        int r = comm_check_peer(c, src, call);
        if (r == 0)
            r = zmq_poll_data(c, slice < call->deadline_ms ? slice : call->deadline_ms);
        if (r == -ETIMEDOUT && clock_now_ms() < call->deadline_ms)
            continue;
        if (r < 0)
            comm_report_waiting(c, -1, call, tag);
        if (r != -ETIMEDOUT)
            TRY(r);
        else {
            char extra[512] = "";
            char refused_why[192];
            unsigned long long refused = data_guard_refused(p->guard, refused_why, sizeof(refused_why));
            int n = 0;
            if (c->stats.frames_dropped)
                n = snprintf(extra, sizeof(extra), " (%llu malformed messages dropped, the last with %s)",
                             c->stats.frames_dropped, p->dropped_why);
            if (refused && n >= 0 && (size_t)n < sizeof(extra))
                snprintf(extra + n, sizeof(extra) - (size_t)n, " (%llu connections refused, the last %s)", refused,
                         refused_why);
            return comm_timed_out(c, src, call, tag, extra);
        }
    }
}

/* Closes every peer socket with nothing to linger for; ZeroMQ then drops what is queued
 * and gives back the buffers. The sockets are made again on the next send. */
static void zmq_cancel(comm *c) {
    zmq_plane *p = plane(c);
    int linger = 0;
    for (int i = 0; i < c->peers.world; i++)
        if (p->push[i]) {
            zmq_setsockopt(p->push[i], ZMQ_LINGER, &linger, sizeof(linger));
            zmq_close(p->push[i]);
            p->push[i] = NULL;
        }
    /* The drop happens on ZeroMQ's threads: wait for it, briefly. */
    uint64_t deadline = clock_now_ms() + 2000;
    while (atomic_load(&p->inflight) > 0 && clock_now_ms() < deadline)
        sched_yield();
}

static int zmq_flush(comm *c, uint64_t deadline_ms) {
    zmq_plane *p = plane(c);
    pthread_mutex_lock(&p->inflight_lock);
    while (atomic_load(&p->inflight) > 0) {
        /* Wake now and then to notice the job's end: a dead peer never takes its data. */
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
        pthread_cond_timedwait(&p->inflight_done, &p->inflight_lock, &ts);
        if (atomic_load(&p->inflight) == 0)
            break;
        if (job_end_code(c->end) || clock_now_ms() >= deadline_ms) {
            pthread_mutex_unlock(&p->inflight_lock);
            TRY(comm_check_end(c));
            return comm_fail(c, -ETIMEDOUT, "sends not taken by their peers within %d ms", c->timeout_ms);
        }
    }
    pthread_mutex_unlock(&p->inflight_lock);
    return 0;
}

static unsigned long long zmq_refused(const comm *c, char *last, size_t size) {
    return plane(c)->guard ? data_guard_refused(plane(c)->guard, last, size) : 0;
}

static bool zmq_buffers_exposed(const comm *c) {
    return plane(c)->exposed;
}

static int zmq_finish(comm *c, int result, uint64_t deadline_ms) {
    zmq_plane *p = plane(c);
    if (result == 0 && atomic_load(&p->inflight) > 0)
        result = zmq_flush(c, deadline_ms);
    if (result < 0) {
        if (atomic_load(&p->inflight) > 0)
            zmq_cancel(c);
        /* The job is over, but ZeroMQ may still hold a buffer: the caller must not free
         * such buffers (buffers_exposed). */
        p->exposed = atomic_load(&p->inflight) > 0;
    }
    return result;
}

static int zmq_start(comm *c) {
    zmq_plane *p = plane(c);
    p->push = calloc((size_t)c->peers.world, sizeof(void *));
    p->queue = calloc((size_t)c->peers.world, sizeof(zmq_frame *));
    if (!p->push || !p->queue)
        return comm_fail(c, -ENOMEM, "out of memory");
    data_guard_admit(p->guard, &c->peers);
    return 0;
}

static void zmq_close_plane(comm *c, bool job_failed) {
    zmq_plane *p = plane(c);
    if (!p)
        return;
    if (p->push) {
        /* Let what is queued reach its peer, unless the job is over anyway. */
        int linger = job_failed ? 0 : c->timeout_ms;
        for (int i = 0; i < c->peers.world; i++)
            if (p->push[i]) {
                zmq_setsockopt(p->push[i], ZMQ_LINGER, &linger, sizeof(linger));
                zmq_close(p->push[i]);
            }
        free(p->push);
    }
    if (p->queue) {
        for (int i = 0; i < c->peers.world; i++)
            while (p->queue[i]) {
                zmq_frame *z = p->queue[i];
                p->queue[i] = z->next;
                zmq_frame_free(&z->f);
            }
        free(p->queue);
    }
    data_guard_unwatch(p->guard);
    if (p->pull)
        zmq_close(p->pull);
    data_guard_stop(p->guard); /* after the socket: no handshake may find the handler gone */
    /* Once the context is gone, so are ZeroMQ's threads, and with them the last call of
     * zmq_released: only then may its locks go. */
    zmq_ctx_term(p->ctx);
    pthread_mutex_destroy(&p->inflight_lock);
    pthread_cond_destroy(&p->inflight_done);
    free(p);
    c->impl = NULL;
}

static const comm_transport zmq_transport = {
    .name = "zmq",
    .listen = zmq_listen,
    .start = zmq_start,
    .close = zmq_close_plane,
    .send = zmq_send_frame,
    .recv = zmq_recv_frame,
    .frame_copy_to = comm_data_copy_to,
    .frame_data = comm_data_of,
    .frame_reduce_pair = comm_data_reduce_pair,
    .frame_free = zmq_frame_free,
    .finish = zmq_finish,
    .buffers_exposed = zmq_buffers_exposed,
    .chunk_bytes = zmq_chunk_bytes,
    .refused = zmq_refused,
    .probe = zmq_probe,
};

int comm_zmq_open(comm *c) {
    zmq_plane *p = calloc(1, sizeof(*p));
    if (!p || !(p->ctx = zmq_ctx_new())) {
        int r = p ? -errno : -ENOMEM;
        free(p);
        return comm_fail(c, r, "cannot create a ZeroMQ context: %s", zmq_strerror(-r));
    }
    /* Two I/O threads: ZeroMQ puts the receiving and sending sockets on different ones, so
     * a ring step's outgoing chunk does not wait behind an incoming one. */
    zmq_ctx_set(p->ctx, ZMQ_IO_THREADS, 2);
    atomic_init(&p->inflight, 0);
    pthread_mutex_init(&p->inflight_lock, NULL);
    pthread_condattr_t attr; /* waits measured on the monotonic clock, like every deadline here */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->inflight_done, &attr);
    pthread_condattr_destroy(&attr);
    c->transport = &zmq_transport;
    c->impl = p;
    return 0;
}
