/* The process group's insides, shared by the files of libddp. */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/fd_socket.h"
#include "common/limits.h"
#include "common/store.h"
#include "ddp/ddp.h"
#include "worker/libddp/agent.h"
#include "worker/libddp/comm.h"

/* What leaves libddp.so: the public API of ddp.h; everything else is hidden. */
#define DDP_EXPORT __attribute__((visibility("default")))

struct ddp_group {
    char coordinator[DDP_MAX_ENDPOINT + 1];
    char job[DDP_MAX_JOB_NAME + 1];
    char mode[DDP_MAX_MODE + 1];
    char host[DDP_MAX_HOST + 1];
    int rank, world_size, local_rank;
    int timeout_ms;
    uint64_t generation;
    uint64_t next_seq; /* of control requests */
    uint64_t barrier_round;
    char **endpoints;                         /* every rank's data endpoint, in rank order */
    char **data_keys;                         /* every rank's data socket's CURVE public key, or "" */
    uint32_t *pids;                           /* every rank's pid */
    bool *here;                               /* every rank: whether it runs on this host */
    void *zmq_ctx;                            /* the control thread's */
    char data_endpoint[DDP_MAX_ENDPOINT + 1]; /* where the data plane listens, as advertised at join */
    char data_key[CURVE_KEY_Z85];             /* its CURVE public key, advertised with it ("" unless tcp://) */
    agent agent;
    comm comm;          /* the data plane, over a view of the peers above */
    uint64_t coll_seq;  /* collectives issued so far, every rank in the same order */
    _Atomic int failed; /* the first fatal error (an Abort, a lost coordinator), or 0; the
                           communication thread may set it while the caller reads it */
    char last_error[DDP_MAX_REASON + 256];

    /* ps mode: the declared buckets, the step of each, averages that came early */
    uint64_t *ps_buckets;
    size_t n_ps_buckets;
    uint64_t *ps_push_step, *ps_pull_step;
    agent_event **ps_early;               /* (n_ps_buckets) an average waiting to be pulled */
    char ps_socket[FD_SOCKET_NAME_BYTES]; /* where ddpd takes push segments (the Welcome's), or "" */
    char *ps_pushed, *ps_average;         /* this rank's push segment and ddpd's average one, mapped, or NULL */
    float *ps_average_copy; /* since ddpd restarted (its averages come as frames): where they go, or NULL */
    size_t ps_bytes;        /* of each segment (common/ps_segment.h) */
    size_t ps_float_bytes;  /* every bucket's floats */
    int ps_doorbell;        /* ddpd's eventfd, rung after a push in the segment; -1: none */

    /* The communication thread that runs async requests, in order, one at a time. */
    pthread_t comm_thread;
    bool comm_thread_started;
    pthread_mutex_t queue_lock;
    pthread_cond_t queue_changed;
    struct ddp_request *queue_head, *queue_tail;
    struct ddp_request *unwaited; /* every request ddp_wait has not freed yet: ddp_finalize frees them */
    bool comm_busy;               /* a request is running on it */
    bool stopping;

    /* The store keys this rank set, with their values: what it brings back to a ddpd that
     * restarted (rejoin.c) */
    store store_sets;

    /* ddp_alloc's memory where no peer reads it (ZeroMQ, or a world of one): ddp_free
     * frees only these, and ddp_finalize what is left */
    void **private_buffers;
    size_t n_private_buffers;
};

/* Records err and its description as the group's last error; returns err. */
int group_fail(ddp_group *g, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* rejoin.c: what this rank brings back to a ddpd that restarted under its running job. */
/* Hands the agent this rank's rejoin as it stands (rank, generation, barriers, store keys,
 * ps steps): after the job forms, and after each change. */
void group_update_rejoin(ddp_group *g);

/* ps_client.c: with share (ddpd on this host), hands ddpd this rank's push segment and
 * maps its average segment, so that pushes and averages skip the socket; where it cannot
 * (another host, DDP_TRANSPORT=zmq), pushes and averages stay payload frames. Tells the
 * control thread where the buckets are, to push them again to a ddpd that restarts. */
int ps_client_start(ddp_group *g, bool share);

/* control.c: the messages to and from ddpd. */
/* Fills the header of a request from this group: type, job, rank, generation, next seq. */
void group_envelope(ddp_group *g, Ddp__Envelope *env, Ddp__MsgType type);
/* Waits until deadline_ms for the next message from ddpd that match(ev, ctx) takes; the
 * caller frees it. On the way, the job's end (an Abort, a lost coordinator) fails the
 * group with its reason, a ps average that is not taken waits for its pull, and anything
 * else (a late answer) is dropped. -ETIMEDOUT when the time runs out, for the caller to
 * word. The one loop over ddpd's messages: requests and ps pulls both wait in it. */
int group_next_event(ddp_group *g, uint64_t deadline_ms, bool (*match)(const agent_event *ev, void *ctx), void *ctx,
                     agent_event **ret_event);
/* Sends a control request and waits up to timeout_ms for the reply with its sequence
 * number (of type reply_type, or an Error). Every failure is recorded in last_error: an
 * Abort, a lost coordinator, ddpd's error, or timeout_text when the time runs out
 * (-ETIMEDOUT). The caller frees *ret_event on success. */
int group_request(ddp_group *g, Ddp__Envelope *env, Ddp__MsgType reply_type, int timeout_ms, const char *timeout_text,
                  agent_event **ret_event);

/* collectives.c: the communication thread that runs async requests. */
/* Waits until every async request has run, so the caller may use the data plane. */
void coll_drain(ddp_group *g);
/* ddp_barrier through the group's own collectives (shared memory), numbered as they are. */
int coll_barrier(ddp_group *g);
/* Stops the communication thread once its queue is empty, and frees the requests nobody
 * waited for. */
void coll_shutdown(ddp_group *g);
