/* The data plane: tagged messages between ranks over ZeroMQ.
 *
 * Each rank binds one PULL socket (advertised at join) and connects a PUSH socket to each
 * peer it sends to, lazily. A message is [header][payload]; the header names the sender,
 * the call (collective sequence number, or 0 for point-to-point), a tag (the step of an
 * algorithm, or the user's tag) and what the caller passed (kind, dtype, op, count), so a
 * rank that called something else is caught instead of mixing data. Messages that arrive
 * before anyone asks for them wait in a matching queue. Every wait also watches the
 * group's abort eventfd and a deadline.
 *
 * When every rank is on this host and the kernel lets them (checked once at init), a
 * large zero-copy send within a collective carries no payload: the frame names the
 * buffer's address and the receiver copies straight out of the sender's memory with
 * process_vm_readv (cross-memory attach, as MPI libraries do on one node), then
 * acknowledges so that the sender's comm_finish() knows the buffer is free. That skips
 * two kernel socket copies of every large chunk. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "common/dtype.h"
#include "common/reduce.h"

typedef struct ddp_group ddp_group;

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
} coll_kind;

const char *coll_kind_name(coll_kind kind);

#define COMM_MAGIC 0x44445044u /* "DPDD" little-endian */
#define COMM_VERSION 1

/* Little-endian on the wire, as every supported host is. */
typedef struct {
    uint32_t magic;
    uint16_t version;
    uint8_t kind; /* coll_kind */
    uint8_t dtype;
    uint8_t op;
    uint8_t flags; /* COMM_FLAG_* */
    uint8_t reserved[2];
    int32_t src;  /* sender's rank */
    int32_t tag;  /* algorithm step, or the user's tag */
    int32_t root; /* root or peer the caller named */
    uint64_t generation;
    uint64_t seq;    /* collective number; 0 for point-to-point */
    uint64_t count;  /* the caller's count */
    uint64_t offset; /* first element of this frame within its stream */
    uint64_t n;      /* elements in this frame */
    uint64_t addr;   /* COMM_FLAG_REMOTE: where the elements are in the sender's memory */
} comm_header;

#define COMM_FLAG_REMOTE 1 /* no payload: read n elements at addr from the sender */
#define COMM_FLAG_ACK 2    /* the receiver has read a COMM_FLAG_REMOTE frame */

typedef struct comm_frame {
    comm_header h;
    zmq_msg_t payload;
    const void *data; /* the payload, aligned for its dtype; NULL until read for a remote frame */
    void *aligned_copy;
    struct comm_frame *next;
} comm_frame;

typedef struct {
    void *pull;         /* bound at init */
    void **push;        /* per peer, connected on first use */
    comm_frame **queue; /* per source: frames nobody has asked for yet, in arrival order */
    size_t queued_bytes;
    _Atomic long inflight; /* zero-copy sends ZeroMQ still holds */
    pthread_mutex_t inflight_lock;
    pthread_cond_t inflight_done;
    uint64_t dropped; /* malformed or stale frames */
    char dropped_why[160];
    unsigned long long bytes_sent, bytes_received, messages_sent, messages_received;
    unsigned long long *sent_to, *received_from; /* (world + 1) per peer; [world]: ddpd (ps mode) */
    bool remote_reads;                           /* every peer's memory can be read with process_vm_readv */
    void *scratch;                               /* where remote frames land when they are to be reduced, not kept */
    size_t scratch_size;
    long remote_pending; /* COMM_FLAG_REMOTE frames sent and not yet acknowledged */
    bool exposed;        /* a failed call left buffers a peer or ZeroMQ may still read */
    bool locks_ready;
} comm;

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

/* Options of every data socket, set before bind or connect: message limit, no high-water
 * mark, large kernel buffers. */
int comm_socket_setup(void *socket);

int comm_init(ddp_group *g);
/* Finds out, with every rank, whether remote reads work between neighbours; a collective
 * of the whole group, run once by ddp_init. */
int comm_probe_remote_reads(ddp_group *g);
void comm_close(ddp_group *g);

/* Sends n elements at data to dst. With zero_copy the buffer goes to ZeroMQ as it is and
 * must stay untouched until comm_flush(); otherwise it is copied. */
int comm_send(ddp_group *g, int dst, const comm_call *call, int32_t tag, uint64_t offset, const void *data, uint64_t n,
              bool zero_copy);
/* Waits for the next frame from src with the call's seq and this tag; checks it against
 * the call. The caller closes it with comm_frame_free(). */
int comm_recv(ddp_group *g, int src, const comm_call *call, int32_t tag, comm_frame **ret_frame);
/* A frame's elements: copied to dst, or as a pointer valid until the next call on the
 * group. For a remote frame this is when the sender's memory is read and acknowledged. */
int comm_frame_copy_to(ddp_group *g, comm_frame *f, void *dst);
int comm_frame_data(ddp_group *g, comm_frame *f, const void **ret_data);
/* dst = the frame's elements op own (reduce_pair, in the frame's dtype); for a remote
 * frame, read and reduced in cache-sized pieces. */
int comm_frame_reduce_pair(ddp_group *g, comm_frame *f, void *dst, const void *own, reduce_op op);
/* Checks that a received frame carries exactly [offset, offset + n). */
int comm_expect_range(ddp_group *g, const comm_frame *f, const comm_call *call, uint64_t offset, uint64_t n);
void comm_frame_free(comm_frame *f);
/* Ends a call that may have sent zero-copy buffers: when it succeeded (result 0), waits
 * until ZeroMQ has let go of them all; when it failed, drops every queued send so that no
 * buffer is read after the call returns. Returns the call's result, or the flush's. */
int comm_finish(ddp_group *g, int result, uint64_t deadline_ms);
/* After comm_finish() failed: whether the call's own buffers must be left allocated. */
bool comm_buffers_exposed(const ddp_group *g);
/* Once ZeroMQ's threads are gone (after zmq_ctx_term): its callbacks take these locks. */
void comm_destroy_locks(ddp_group *g);

/* Elements per frame for a dtype: frames stay well under the socket's message limit and
 * small enough for reduction to overlap transfer; larger when they are read from the
 * peer's memory, where a frame costs a message and an acknowledgement but no socket
 * buffer. Every rank agrees on it: remote reads are on for all or none. */
uint64_t comm_chunk_elems(const ddp_group *g, dtype t);
