/* The control agent: a thread that owns the connection to ddpd for a group.
 *
 * It heartbeats at ddpd's interval whatever the caller is doing (computing, or blocked in
 * a collective), notices when ddpd falls silent, and hands every other message from ddpd
 * to the caller's end of an inproc pipe, so a blocked wait can poll that pipe and wake on
 * an Abort. The caller sends through the agent too: a ZeroMQ socket has one owner. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <zmq.h>

#include "common/curve_keys.h"
#include "common/handshake_watch.h"
#include "common/wire.h"
#include "worker/libddp/job_end.h"

/* What the caller reads from the pipe: one heap-allocated event per frame (a pointer). */
typedef struct {
    wire_msg msg;              /* a message from ddpd; msg.env is NULL for a failure */
    int failure;               /* the agent lost the coordinator: -EHOSTUNREACH or -ECONNABORTED */
    char text[DDP_MAX_REASON]; /* and why */
} agent_event;

typedef struct {
    void *zmq_ctx;
    void *pipe;                 /* the caller's end (PAIR) */
    void *agent_pipe;           /* the agent's end */
    void *control;              /* DEALER to ddpd, the agent's */
    handshake_watch handshakes; /* the control socket's failed ones (a CURVE key ddpd refused) */
    char coordinator[DDP_MAX_ENDPOINT + 1];
    bool coordinator_here; /* on this host: its pid tells whether it is there */
    char job[DDP_MAX_JOB_NAME + 1];
    int connect_timeout_ms;
    int watchdog_ms;         /* after the job's end, how long the caller may stay away from libddp; 0: no limit */
    int coordinator_wait_ms; /* how long to rejoin a ddpd that went away (a restart); 0: the job ends at once */
    /* What this member brings back to a ddpd that restarted (a packed rejoin, rejoin.c), and
     * its generation and rank; set by the caller once the job runs, under progress_lock */
    uint8_t *rejoin;
    size_t rejoin_size;
    uint64_t rejoin_generation;
    int32_t rejoin_rank;
    /* The caller's request that awaits ddpd's answer (the agent thread's): sent again to a
     * ddpd that restarted before it answered */
    zmq_msg_t pending;
    bool has_pending;
    bool pending_held; /* made while ddpd was away: not sent to any ddpd yet */
    uint64_t pending_seq;
    /* ps mode: each bucket's push until its average comes (the agent thread's), sent again
     * to a ddpd that restarted: as a frame, from the push segment when it went in shared
     * memory, since the new ddpd holds no segment of this rank's */
    struct agent_pushes *pushes;
    pthread_t thread;
    bool running;
    job_end end; /* raised when ddpd aborts the job or is lost: every wait watches it */
    /* Progress the heartbeats carry to ddpd (ddpctl status, its stall report). */
    pthread_mutex_t progress_lock;
    uint64_t step;
    double samples_per_s;
    bool waiting;
    int waiting_on;
    uint64_t waiting_since_ms;
    char waiting_in[64];
} agent;

void agent_set_progress(agent *a, uint64_t step, double samples_per_s);
/* on < 0 clears: no longer waiting. */
void agent_set_waiting(agent *a, int on, const char *what);

/* Ends every wait of every group in this process (async-signal-safe): each control thread
 * then raises its job's end with -EINTR. For ddp_interrupt(). */
int agent_interrupt(void);

/* Connects to the coordinator and starts the thread. With curve_server_key, the control
 * connection speaks CURVE with own's key pair. Once the job has ended, a caller that has
 * not called libddp within watchdog_ms (0: never mind) has its process ended. */
int agent_start(agent *a, void *zmq_ctx, const char *coordinator, const char *job, int connect_timeout_ms,
                int watchdog_ms, int coordinator_wait_ms, const char *curve_server_key, const curve_keypair *own);
/* What to bring back to a ddpd that restarted: a Join of this member's running job (its
 * generation set); replaces the one before. Until there is one, a lost ddpd ends the job. */
int agent_set_rejoin(agent *a, const Ddp__Envelope *rejoin);
/* ps mode, before the first push: the buckets' places in this rank's push segment (base;
 * NULL when it pushes frames) and in ddpd's average segment (NULL likewise), whose counters
 * say, after ddpd restarts, where each bucket is. */
int agent_set_ps(agent *a, size_t n_buckets, char *segment, char *average, const size_t *offsets, const size_t *sizes);
/* A push of bucket: env alone when its data is in the push segment, else with the payload. */
int agent_push(agent *a, const Ddp__Envelope *env, uint32_t bucket, const void *payload, size_t bytes);
/* A push the caller made itself, in the push segment with ddpd's doorbell (ps_client.c):
 * kept like agent_push's, to go again (as a frame) to a ddpd that restarted before its
 * average came. -EAGAIN when pushes go as frames since such a restart: agent_push it. */
int agent_note_push(agent *a, const Ddp__Envelope *env, uint32_t bucket);
/* Whether pushes go as frames (since ddpd restarted): their averages come as messages. */
bool agent_pushes_framed(agent *a);
/* Bucket's average of step came (in the average segment, or as a message): its push of that
 * step or before is forgotten; a later one stays (an average read late must not forget the
 * next push). */
void agent_push_answered(agent *a, uint32_t bucket, uint64_t step);
/* Sends env to ddpd through the agent, with one payload frame when bytes > 0. */
int agent_send(agent *a, const Ddp__Envelope *env);
/* The same for a request whose answer echoes env->seq: if ddpd restarts before it answers,
 * the agent sends it again to the next one. */
int agent_request(agent *a, const Ddp__Envelope *env);
int agent_send_payload(agent *a, const Ddp__Envelope *env, const void *payload, size_t bytes);
/* Waits up to timeout_ms for the next event; -ETIMEDOUT, -EINTR on a signal. */
int agent_next(agent *a, int timeout_ms, agent_event **ret_event);
void agent_event_free(agent_event *ev);
/* Sends leave to ddpd when it is not NULL, stops the thread and closes its sockets. */
void agent_stop(agent *a, const Ddp__Envelope *leave);
