/* The data plane: tagged frames between the ranks of one job, over a transport.
 *
 * A frame carries a header that names the sender, the call (collective sequence number, or
 * 0 for point-to-point), a tag (the step of an algorithm, or the user's tag) and what the
 * caller passed (kind, dtype, op, count), so a rank that called something else is caught
 * instead of mixing data. Frames that arrive before anyone asks for them wait. Every wait
 * also watches the job's end and a deadline, and tells ddpd's stall report whom it waits
 * for.
 *
 * The data plane knows of the group only a view of the peers, the job's end and where to
 * write its errors. How frames travel is the transport's: a table of functions (as NCCL's
 * transports, Gloo's pairs) over the data plane's state. comm_zmq.c is the ZeroMQ one. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/curve_keys.h"
#include "common/dtype.h"
#include "common/reduce.h"
#include "worker/libddp/job_end.h"

/* What a call is, on the wire and in error messages. */
typedef enum {
    COLL_SEND = 1,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALL_REDUCE,
    COLL_GATHER,
    COLL_SCATTER,
    COLL_ALL_GATHER,
    COLL_REDUCE_SCATTER,
    COLL_BARRIER, /* through shared memory only: over ZeroMQ, ddpd keeps the barrier */
} coll_kind;

const char *coll_kind_name(coll_kind kind);

#define COMM_MAGIC 0x44445044u /* "DPDD" little-endian */
#define COMM_VERSION 2 /* 2: an empty point-to-point message is a frame */

/* Little-endian on the wire, as every supported host is. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint8_t kind; /* coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t flags; /* the transport's */
    uint8_t reserved[2];
    int32_t src;  /* sender's rank */
    int32_t tag;  /* algorithm step, or the user's tag; negative: the data plane's own */
    int32_t root; /* root or peer the caller named */
    uint64_t generation;
    uint64_t seq;    /* collective number; 0 for point-to-point */
    uint64_t count;  /* the caller's count */
    uint64_t offset; /* first element of this frame within its stream */
    uint64_t n;      /* elements in this frame */
    uint64_t addr;   /* the transport's */
} comm_header;

struct comm_transport;

/* A received frame; the transport's own state follows it. */
typedef struct {
    comm_header h;
    const void *data;                       /* the elements, aligned for their dtype, once read */
    const struct comm_transport *transport; /* whose frame it is */
} comm_frame;

/* What a wait expects of a frame; the rest of the header must match the caller's call. */
typedef struct {
    coll_kind kind;
    dtype t;
    reduce_op op;
    int root;
    uint64_t seq;
    uint64_t count;
    uint64_t deadline_ms;
} comm_call;

/* The peers, as the job's Welcome named them. */
typedef struct {
    int rank, world;
    uint64_t generation;
    char **endpoints;     /* every rank's data endpoint, in rank order */
    char **keys;          /* every rank's data socket's CURVE public key ("" unless it is tcp://) */
    const uint32_t *pids; /* every rank's pid */
    const bool *here;     /* every rank: whether it runs on this host (this rank does) */
    bool one_host;        /* every rank runs on this host */
    bool hosts_shared;    /* some host runs two ranks or more (the same on every rank) */
} comm_peers;

/* What this rank moved: payload bytes and messages, in all and per peer. */
typedef struct {
    unsigned long long bytes_sent, bytes_received, messages_sent, messages_received;
    unsigned long long *sent_to, *received_from; /* (world + 1) per peer; [world]: ddpd (ps mode) */
    unsigned long long arrival_wait_us;          /* over shared memory: waiting for the others to call a collective */
    unsigned long long frames_dropped;           /* malformed, stale, or not from the rank they name */
} comm_stats;

typedef struct comm comm;
struct coll_args;

typedef struct comm_transport {
    const char *name;
    /* Before the job forms: listens where peers will find this rank (endpoint as given,
     * possibly with a wildcard); ret_endpoint is what to advertise, and ret_key the public
     * key the peers need to reach it ("" when they need none). */
    int (*listen)(comm *c, const char *endpoint, char *ret_endpoint, size_t size, char ret_key[CURVE_KEY_Z85]);
    /* Once c->peers is set: what must happen before the first frame. Every rank calls it
     * at once: it may exchange frames. */
    int (*start)(comm *c);
    /* Lets what is queued reach its peer, unless the job failed; frees everything. */
    void (*close)(comm *c, bool job_failed);
    /* Sends n elements at data to dst. With zero_copy the buffer is taken as it is and must
     * stay untouched until finish(); otherwise it is copied. */
    int (*send)(comm *c, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data, uint64_t n,
                bool zero_copy);
    /* The next frame from src with the call's seq and this tag, checked against the call. */
    int (*recv)(comm *c, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame);
    /* Whether a point-to-point frame from src with tag has come (1) or not yet (0): reads
     * what has arrived, waits for nothing. */
    int (*probe)(comm *c, int src, int32_t tag);
    /* A frame's elements copied to dst; or as a pointer valid until the next call. */
    int (*frame_copy_to)(comm *c, comm_frame *f, void *dst);
    int (*frame_data)(comm *c, comm_frame *f, const void **ret_data);
    /* dst = the frame's elements op own (reduce_pair, in the frame's dtype). */
    int (*frame_reduce_pair)(comm *c, comm_frame *f, void *dst, const void *own, reduce_op op);
    void (*frame_free)(comm_frame *f);
    /* Ends a call that may have sent zero-copy buffers: when it succeeded (result 0), waits
     * until every peer has them; when it failed, drops every queued send. Returns the
     * call's result, or the wait's. */
    int (*finish)(comm *c, int result, uint64_t deadline_ms);
    /* After finish() failed: whether the call's own buffers must be left allocated. */
    bool (*buffers_exposed)(const comm *c);
    /* Bytes per frame of a large transfer: the same on every rank. */
    uint64_t (*chunk_bytes)(const comm *c);
    /* Connections to this rank refused so far (not ranks of the job), the last in words;
     * NULL where nobody else can connect. */
    unsigned long long (*refused)(const comm *c, char *last, size_t size);
} comm_transport;

/* Whole collectives, point-to-point included, that a transport of its own runs (shared
 * memory among the ranks of one host, coll_shm.c), instead of the algorithms of coll_*.c
 * over frames (which it may still use, for a large message's data). */
typedef struct {
    const char *name;
    int (*run)(comm *c, const struct coll_args *a);
    /* ddp_alloc and ddp_free: memory the peers read in place (alloc is a collective of the
     * job, every rank with the same bytes, in the same order). */
    int (*alloc)(comm *c, size_t bytes, void **ret);
    int (*free)(comm *c, void *buf);
    /* ddp_probe: whether a message from src with tag has come (1) or not yet (0). */
    int (*probe)(comm *c, int src, int32_t tag);
    void (*close)(comm *c);
} comm_collectives;

struct comm {
    const comm_transport *transport;
    void *impl; /* the transport's state */
    /* In a job on several hosts, frames between the ranks of this host go through shared
     * memory (comm_mailbox.c), with its state; NULL: every frame takes transport. */
    const comm_transport *local;
    void *local_impl;
    const comm_collectives *collectives; /* NULL: the algorithms over frames */
    void *collectives_impl;
    comm_peers peers;
    int timeout_ms;     /* each call's limit, for messages */
    const job_end *end; /* the job's end: every wait gives up with it */
    /* The stall report: called with the rank a wait blocks on (and what it is in), then
     * with -1 when it no longer does. */
    void (*waiting)(void *ctx, int peer, const char *what);
    void *waiting_ctx;
    char *error; /* the last failure, in words (the group's last error) */
    size_t error_size;
    comm_stats stats;
};

/* The data plane over ZeroMQ (comm_zmq.c), with a ZeroMQ context of its own. */
int comm_zmq_open(comm *c);
/* Once the data plane has started, in a job on several hosts: frames between the ranks of
 * this host through mailboxes in shared memory (comm_mailbox.c), the rest as before. A
 * collective of the job: every rank calls it (those alone on their host too, as the frames'
 * size changes with it). */
int comm_mailbox_open(comm *c);

/* Before the job forms: listens where the peers will find this rank (endpoint as given,
 * possibly with a wildcard); ret_endpoint and ret_key are what to advertise at join. */
static inline int comm_listen(comm *c, const char *endpoint, char *ret_endpoint, size_t size,
                              char ret_key[CURVE_KEY_Z85]) {
    return c->transport->listen(c, endpoint, ret_endpoint, size, ret_key);
}
/* Once the Welcome named the peers: allocates what is per peer and starts the transport.
 * The peers view is the caller's and must outlive the data plane. */
int comm_start(comm *c, const comm_peers *peers);
void comm_close(comm *c, bool job_failed);

/* The transport that carries frames between this rank and peer. */
static inline const comm_transport *comm_route(const comm *c, int peer) {
    return c->local && c->peers.here[peer] ? c->local : c->transport;
}

/* The transports' functions, on the data plane. */
static inline int comm_send(comm *c, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data,
                            uint64_t n, bool zero_copy) {
    return comm_route(c, dst)->send(c, dst, call, tag, offset, data, n, zero_copy);
}
static inline int comm_recv(comm *c, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame) {
    return comm_route(c, src)->recv(c, src, call, tag, ret_frame);
}
static inline int comm_probe(comm *c, int src, int32_t tag) {
    return comm_route(c, src)->probe(c, src, tag);
}
static inline int comm_frame_copy_to(comm *c, comm_frame *f, void *dst) {
    return f->transport->frame_copy_to(c, f, dst);
}
static inline int comm_frame_data(comm *c, comm_frame *f, const void **ret_data) {
    return f->transport->frame_data(c, f, ret_data);
}
static inline int comm_frame_reduce_pair(comm *c, comm_frame *f, void *dst, const void *own, reduce_op op) {
    return f->transport->frame_reduce_pair(c, f, dst, own, op);
}
static inline void comm_frame_free(comm *c, comm_frame *f) {
    (void)c;
    if (f)
        f->transport->frame_free(f);
}
/* (Only transport holds buffers: the local one copies.) */
static inline int comm_finish(comm *c, int result, uint64_t deadline_ms) {
    return c->transport->finish(c, result, deadline_ms);
}
static inline bool comm_buffers_exposed(const comm *c) {
    return c->transport->buffers_exposed(c);
}
/* Elements per frame for a dtype: what both transports carry. */
static inline uint64_t comm_chunk_elems(const comm *c, dtype t) {
    uint64_t bytes = c->transport->chunk_bytes(c);
    if (c->local && c->local->chunk_bytes(c) < bytes)
        bytes = c->local->chunk_bytes(c);
    return bytes / dtype_size(t);
}

/* For transports: the header of a frame this rank sends for call. */
comm_header comm_header_of(const comm *c, const comm_call *call, int32_t tag, uint64_t offset, uint64_t n);
/* Why a received header cannot be a frame of this job for this rank (NULL when it can). */
const char *comm_header_invalid(const comm *c, const comm_header *h);
/* The frame functions of a transport whose frames hold their elements at f->data. */
int comm_data_copy_to(comm *c, comm_frame *f, void *dst);
int comm_data_of(comm *c, comm_frame *f, const void **ret_data);
int comm_data_reduce_pair(comm *c, comm_frame *f, void *dst, const void *own, reduce_op op);

/* Every rank's value becomes the least of them: it goes round the ring from rank 0 to rank
 * n-1 and back (2(n-1) small frames, on the data plane's own tags). For agreeing at set-up. */
int comm_agree_min(comm *c, int32_t *value);

/* For transports and algorithms: records the failure in c->error; returns err. */
int comm_fail(comm *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The job's end, if it has come, recorded as the failure; else 0. */
int comm_check_end(comm *c);
/* The same, or -EPIPE when rank r, whom call waits for, has left the job (ddpd says so). */
int comm_check_peer(comm *c, int r, const comm_call *call);
/* A frame whose header does not match the call it was received for: the error that says
 * who called what. */
int comm_mismatch(comm *c, const comm_frame *f, const comm_call *call);
/* comm_mismatch unless the frame is of the call (its kind, dtype, count, and for a
 * collective its op and root). */
int comm_check_frame(comm *c, const comm_frame *f, const comm_call *call);
/* -EINVAL, named, where a frame still queued from src belongs to a collective before the
 * call: every frame of a collective is received in it, so src called something else
 * there, where this rank had nothing to receive from it (both ranks a broadcast's root). */
int comm_check_stale(comm *c, const comm_header *h, const comm_call *call);
/* Checks that a received frame carries exactly [offset, offset + n). */
int comm_expect_range(comm *c, const comm_frame *f, const comm_call *call, uint64_t offset, uint64_t n);
/* A wait blocks on src for the call (tag for point-to-point), or no longer (src -1). */
void comm_report_waiting(comm *c, int src, const comm_call *call, int32_t tag);
/* The same, for a wait that may be a send's (point-to-point: "send (tag N)"). */
void comm_report_waiting_as(comm *c, int src, const comm_call *call, int32_t tag, bool sending);
/* The timeout of a wait on src, with what was dropped meanwhile (extra, may be ""). */
int comm_timed_out(comm *c, int src, const comm_call *call, int32_t tag, const char *extra);
/* Counts a frame sent to, or received from, peer. */
void comm_count_sent(comm *c, int peer, uint64_t bytes);
void comm_count_received(comm *c, int peer, uint64_t bytes);
/* Counts ps mode's gradients to and from ddpd (the slot after the ranks'): bytes only, as
 * they travel on the control connection, not the data plane's messages. */
void comm_count_ddpd(comm *c, uint64_t sent, uint64_t received);
