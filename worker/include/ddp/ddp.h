/* libddp: a process group for data-parallel training, what torch.distributed is to Python.
 *
 * Every process calls ddp_init() with the same job name and world size; ddpd (the
 * coordinator) forms the group, assigns ranks and watches every member. Functions that can
 * fail return 0 or a negative errno-style code (ddp_strerror() describes it; for the
 * details, ddp_last_error() says what happened and to whom, e.g. "rank 2 (pid 4242 on
 * lab1) died"). Every call that waits has a timeout; none hangs on a dead peer.
 *
 * A group is used by one thread at a time. */
#ifndef DDP_DDP_H
#define DDP_DDP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header (the build takes the project's version from here). A program
 * may compare DDP_VERSION_CODE with ddp_get_version(), the library's it runs with. */
#define DDP_VERSION_MAJOR 0
#define DDP_VERSION_MINOR 1
#define DDP_VERSION_PATCH 0
#define DDP_VERSION_CODE (DDP_VERSION_MAJOR * 10000 + DDP_VERSION_MINOR * 100 + DDP_VERSION_PATCH)
int ddp_get_version(void);

typedef struct ddp_group ddp_group;
typedef struct ddp_request ddp_request;

typedef enum { DDP_F32, DDP_F64, DDP_F16, DDP_BF16, DDP_I32, DDP_I64, DDP_U8 } ddp_dtype;
/* DDP_AVG divides the sum by the world size; on integer types it is -EINVAL, as in NCCL. */
typedef enum { DDP_SUM, DDP_PROD, DDP_MIN, DDP_MAX, DDP_AVG } ddp_op;

/* Start from DDP_OPTIONS_INIT (or ddp_options_init()): a field left unset is taken from
 * the environment, as torchrun sets it, then from the default. */
typedef struct ddp_options {
    size_t size;               /* sizeof(ddp_options) where the caller was compiled, as
                                  DDP_OPTIONS_INIT sets it: a later libddp with more fields
                                  knows which of them the caller has; an earlier one refuses
                                  a size it does not know (-EINVAL) rather than ignore them */
    const char *coordinator;   /* ddpd's endpoint; unset: $DDP_COORDINATOR, else
                                  tcp://$MASTER_ADDR:$MASTER_PORT (either set;
                                  127.0.0.1 and 29500 for the other), else
                                  ipc:///run/ddp/ddpd.sock (the lab service) */
    const char *job;           /* job name; unset: $DDP_JOB, else "default" */
    int world_size;            /* > 0; unset (0): $WORLD_SIZE, required */
    int rank;                  /* >= 0; unset (-1): $RANK, else ddpd assigns one */
    int local_rank;            /* rank on this host; unset (-1): $LOCAL_RANK, else 0 */
    int timeout_ms;            /* each barrier or collective; unset (0): $DDP_TIMEOUT_MS, else 60000 */
    int join_timeout_ms;       /* until the job forms; unset (0): $DDP_JOIN_TIMEOUT_MS, else 300000 */
    int connect_timeout_ms;    /* until ddpd first answers; unset (0): $DDP_CONNECT_TIMEOUT_MS, else 10000 */
    const char *mode;          /* sync mode every member must agree on; unset: "" */
    const char *data_endpoint; /* where this process listens for peers; unset: $DDP_DATA_ENDPOINT,
                                  else tcp://127.0.0.1:* */
    const char *transport;     /* the collectives' path: "auto" (shared memory when every rank is
                                  on this host, else ZeroMQ), "shm" or "zmq" (point-to-point is
                                  always ZeroMQ); unset: $DDP_TRANSPORT, else "auto" */
    const unsigned long long *ps_buckets; /* mode "ps": elements of each gradient bucket */
    size_t n_ps_buckets;
} ddp_options;

#define DDP_OPTIONS_INIT {.size = sizeof(ddp_options), .rank = -1, .local_rank = -1}
void ddp_options_init(ddp_options *opts);

/* Joins the job and waits until it forms. opts may be NULL: everything from the
 * environment (env://). On failure *ret_group is untouched and the error says why:
 * -EHOSTUNREACH (no coordinator answered), -ECONNREFUSED (rejected: duplicate rank, other
 * world size, protocol version or mode), -ETIMEDOUT (the job did not form in time),
 * -EINVAL (bad options or environment). ddp_last_error(NULL) says which, in words. */
int ddp_init(const ddp_options *opts, ddp_group **ret_group);
/* Ends the job for every rank (ddpd tells them why, naming this rank): what a rank calls
 * when it cannot go on, so that the others fail at once instead of at their timeout. */
int ddp_abort(ddp_group *g, const char *reason);
/* Leaves the job and frees the group. NULL is a no-op. */
void ddp_finalize(ddp_group *g);
/* For a program's signal handler (async-signal-safe): every call of libddp that waits, in
 * every group of this process, now or later, ends at once with -EINTR, and the groups are
 * over; ddp_init in progress tells ddpd it left. libddp never installs a handler: without
 * this, a signal the program handles leaves waits to their timeouts (as a wait in a
 * collective must not end halfway because of, say, SIGCHLD). */
int ddp_interrupt(void);

/* The group's rank, world size, rank on this host, and the limit in ms of each barrier and
 * collective (ddp_options.timeout_ms, else $DDP_TIMEOUT_MS, else 60000: for waits outside
 * libddp, such as NCCL's, to honour the same one). -EINVAL on NULL. */
int ddp_rank(const ddp_group *g);
int ddp_world_size(const ddp_group *g);
int ddp_local_rank(const ddp_group *g);
int ddp_timeout_ms(const ddp_group *g);
/* What carries the group's collectives: "shm" (shared memory, every rank on this host),
 * "shm+zmq" (ranks on several hosts: shared memory between those of one host, ZeroMQ
 * between hosts) or "zmq"; NULL on a NULL group. */
const char *ddp_transport(const ddp_group *g);

/* Returns once every rank has entered it. -ECONNABORTED when a member died or the job was
 * aborted, -EPIPE when a member left, -ETIMEDOUT after timeout_ms. */
int ddp_barrier(ddp_group *g);

/* Collectives and point-to-point. Every rank calls the same collectives in the same order
 * with the same count, dtype, op and root; a rank that does not gets -EINVAL naming the
 * difference, not garbage. count is elements per rank: gather and all_gather's recv holds
 * world*count, scatter's send holds world*count, reduce_scatter's send holds world*count
 * and its recv count. send and recv may share memory only in place (MPI_IN_PLACE's forms):
 * gather's (at the root) and all_gather's send at this rank's part of recv, scatter's (at
 * the root) and reduce_scatter's recv at this rank's part of send; any other overlap is
 * refused with -EINVAL. Results are bitwise identical on every rank and from run to run.
 * Each call waits at most timeout_ms; a dead peer ends it with an error naming the rank. */
int ddp_send(ddp_group *g, const void *buf, size_t count, ddp_dtype t, int dst, int tag);
/* Whether a message from src with tag has come (1) or not yet (0), without waiting or taking
 * it (MPI_Iprobe): its ddp_recv will not wait for the sender. */
int ddp_probe(ddp_group *g, int src, int tag);
int ddp_recv(ddp_group *g, void *buf, size_t count, ddp_dtype t, int src, int tag);
int ddp_broadcast(ddp_group *g, void *buf, size_t count, ddp_dtype t, int root);
int ddp_reduce(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op, int root);
int ddp_all_reduce(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op);
int ddp_gather(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, int root);
int ddp_scatter(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, int root);
int ddp_all_gather(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t);
int ddp_reduce_scatter(ddp_group *g, const void *send, void *recv, size_t count, ddp_dtype t, ddp_op op);

/* Starts an all-reduce on the group's communication thread and returns at once; buf must
 * stay untouched until ddp_wait(). Calls on the group after it run after it, in order. */
int ddp_all_reduce_async(ddp_group *g, void *buf, size_t count, ddp_dtype t, ddp_op op, ddp_request **ret_req);
/* Completes the request, frees it and returns its result: wait for each request once (as
 * free()). ddp_finalize runs the requests still queued and frees those never waited for. */
int ddp_wait(ddp_request *req);

/* Memory for buffers the collectives read in place, as MPI_Alloc_mem: where the job's
 * ranks share memory (ddp_transport "shm"), the peers read an all-reduce's or a reduce's
 * input straight from it, without the copy into shared memory that any other buffer
 * takes. Elsewhere it is ordinary memory. Page-aligned. A collective call: every rank
 * allocates the same bytes, in the same order (a rank that asks for another size fails,
 * as its peers do). NULL on failure, with ddp_last_error() saying why. The memory lasts
 * until ddp_free (this rank's alone: a peer never reads it outside a call) or
 * ddp_finalize. ddp_free(g, NULL) is 0; a buffer ddp_alloc did not give is -EINVAL. */
void *ddp_alloc(ddp_group *g, size_t bytes);
int ddp_free(ddp_group *g, void *buf);

/* Parameter server (mode "ps"): ddpd holds the reduction. Each step every rank pushes each
 * bucket declared in ddp_options.ps_buckets once; ddpd averages the ranks' pushes in rank
 * order and sends the average to all; pull waits for it (at most timeout_ms). */
int ddp_ps_push(ddp_group *g, int bucket, const float *grads);
int ddp_ps_pull(ddp_group *g, int bucket, float *ret_average);
/* Where a rank that shares memory with ddpd (on its host) meets it, so that nothing is
 * copied: ddp_ps_buffer is where ddpd reads bucket's pushes from (a push whose grads are
 * there is not copied; they may be written again once the bucket is pulled), and
 * ddp_ps_average where it writes bucket's average (read-only; valid from the pull until
 * the bucket's next push; ddp_ps_pull with ret_average NULL only waits for it). The
 * buckets lie one after another, in their order. NULL where the averages come as frames
 * (another host, DDP_TRANSPORT=zmq). */
float *ddp_ps_buffer(ddp_group *g, int bucket);
const float *ddp_ps_average(ddp_group *g, int bucket);

/* The job's key-value store, kept by ddpd (torch.distributed's TCPStore): keys are
 * printable text of 1 to 512 bytes, values up to 1 MiB. Get waits, at most the group's
 * timeout, until some rank has set the key; it copies up to size bytes of the value to buf
 * and sets *ret_size (unless NULL) to its whole size. */
int ddp_store_set(ddp_group *g, const char *key, const void *value, size_t size);
int ddp_store_get(ddp_group *g, const char *key, void *buf, size_t size, size_t *ret_size);

/* 0 while the job runs; once ddpd has ended it (a rank died or aborted), the negative
 * code that ended it, with ddp_last_error() saying why. For waits outside libddp (an NCCL
 * collective, a GPU kernel) to give up in time instead of at their own timeout. */
int ddp_job_status(ddp_group *g);

/* 0 while the job may go on; -ECONNABORTED, with ddp_last_error() saying why, once libddp
 * asks the program to stop: its ddpd went away and did not come back within
 * DDP_COORDINATOR_WAIT_MS. The job still runs (the ranks' collectives need no ddpd), so
 * that the ranks can agree on a step, keep a checkpoint and leave; after as long again the
 * job ends as after an abort. Also the job's end, as ddp_job_status. */
int ddp_stop_requested(ddp_group *g);

/* Tells ddpd how far this rank is (its heartbeats carry it to ddpctl status): a training
 * program calls it after each step. */
int ddp_report_progress(ddp_group *g, unsigned long long step, double samples_per_s);

/* What the group has moved so far, for metrics: payload bytes this rank sent and
 * received on the data plane (a chunk read from a peer's memory counts on both sides). */
typedef struct ddp_stats {
    unsigned long long bytes_sent, bytes_received;
    unsigned long long messages_sent, messages_received;
} ddp_stats;
int ddp_get_stats(const ddp_group *g, ddp_stats *ret_stats);
/* The same, per peer: bytes sent to and received from rank peer; peer == world size is
 * ddpd (what ps mode pushes and pulls). */
int ddp_get_peer_stats(const ddp_group *g, int peer, unsigned long long *ret_sent, unsigned long long *ret_received);
/* Seconds this rank's all-reduces, reduces, reduce-scatters and barriers have waited, so
 * far, for the other ranks to call them (over shared memory; 0 over ZeroMQ): time lost to
 * a slower rank rather than to moving data, as Horovod's timeline shows negotiation apart
 * from the all-reduce. */
int ddp_get_arrival_wait(const ddp_group *g, double *ret_seconds);

/* What this rank's data plane has turned away so far, none of it ever reaching a result:
 * connections from processes that are not ranks of its job (over ipc://, by the kernel's
 * pid and user; over tcp://, by CURVE key), with the last in words, and frames it dropped
 * (malformed, stale, or naming another sender than their connection's rank). */
typedef struct ddp_refusals {
    unsigned long long connections, frames;
    char last_connection[192];
} ddp_refusals;
int ddp_get_refusals(const ddp_group *g, ddp_refusals *ret_refusals);

/* A description of err: static text that no later call changes ("unknown error" for a code
 * nobody knows). */
const char *ddp_strerror(int err);
/* What went wrong in the group's last failed call, e.g. "rank 2 (pid 4242 on lab1) died:
 * silent for 1500 ms"; "" when nothing has. With NULL: why this thread's last ddp_init()
 * failed. */
const char *ddp_last_error(const ddp_group *g);

#ifdef __cplusplus
}
#endif
#endif
