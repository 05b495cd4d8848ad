#include "worker/libddp/agent.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/process_state.h"
#include "common/ps_segment.h"

#define AGENT_FORWARD 'F'
#define AGENT_QUIT 'Q'
#define AGENT_REQUEST 'R' /* forward, and remember until answered: [R, seq] */
#define AGENT_PUSH 'P'    /* a ps push, remembered until its average comes: [P, bucket, step] */

struct agent_pushes {
    pthread_mutex_t lock; /* the caller notes pushes it made in shared memory (agent_note_push) */
    size_t n;
    char *segment;         /* the push segment, or NULL: this rank pushes frames */
    size_t *offset, *size; /* each bucket's place in it */
    zmq_msg_t *env, *payload;
    uint64_t *step;       /* the saved push's */
    uint64_t *heard;      /* the step after the last average that came as a message (the agent thread's) */
    bool *saved, *framed; /* a push of the bucket awaits its average; it came with a payload */
    bool *held;           /* ... made while ddpd was away: not sent to any ddpd yet */
    bool frames;          /* since a rejoin: the new ddpd holds no segment, every push is a frame */
    char *average;        /* ddpd's average segment, or NULL; its counters are final once that ddpd is gone */
    size_t float_bytes;
    /* The last average of each bucket that came as a message, kept (the agent thread's) until
     * the next: sent to this rank, it may not have reached another when ddpd went away, and a
     * ddpd that restarts asks for it back (Heartbeat.ps_average_from). */
    zmq_msg_t *last_average;
    uint64_t *last_step;
    bool *has_last;
    uint64_t *given_back; /* the step after the last average given back, and to which ddpd (its */
    uint64_t *given_to;   /* instance): not twice to one, but again to the next if it went too */
};

/* How many averages of bucket the ddpd that shared its segment wrote there. */
static uint64_t agent_averaged(const struct agent_pushes *p, size_t bucket) {
    return atomic_load_explicit(ps_segment_counter(p->average, p->float_bytes, bucket).value, memory_order_acquire);
}
#define AGENT_LEAVE_LINGER_MS 2000 /* how long a Leave may take to go out at exit */

static void agent_post(agent *a, agent_event *ev) {
    if (!ev->msg.env)
        job_end_raise(&a->end, ev->failure, ev->text);
    else if (ev->msg.env->type == DDP__MSG_TYPE__ABORT) {
        char text[DDP_MAX_REASON + 64];
        snprintf(text, sizeof(text), "job '%s' aborted: %s", a->job, ev->msg.env->abort->reason);
        job_end_raise(&a->end, ev->msg.env->abort->code, text);
    }
    if (zmq_send(a->agent_pipe, &ev, sizeof(ev), ZMQ_DONTWAIT) < 0)
        agent_event_free(ev);
}

void agent_set_progress(agent *a, uint64_t step, double samples_per_s) {
    pthread_mutex_lock(&a->progress_lock);
    a->step = step;
    a->samples_per_s = samples_per_s >= 0 && samples_per_s < 1e15 ? samples_per_s : 0;
    pthread_mutex_unlock(&a->progress_lock);
}

void agent_set_waiting(agent *a, int on, const char *what) {
    pthread_mutex_lock(&a->progress_lock);
    a->waiting = on >= 0;
    a->waiting_on = on;
    if (on >= 0) {
        a->waiting_since_ms = clock_now_ms();
        snprintf(a->waiting_in, sizeof(a->waiting_in), "%s", what);
    }
    pthread_mutex_unlock(&a->progress_lock);
}

static void agent_send_heartbeat(agent *a, uint32_t interval_ms, uint32_t liveness) {
    Ddp__Heartbeat body = DDP__HEARTBEAT__INIT;
    body.interval_ms = interval_ms;
    body.liveness = liveness;
    char waiting_in[64] = "";
    pthread_mutex_lock(&a->progress_lock);
    body.step = a->step;
    body.samples_per_s = a->samples_per_s;
    body.waiting = a->waiting;
    body.waiting_on = a->waiting ? a->waiting_on : -1;
    body.waiting_ms = a->waiting ? clock_now_ms() - a->waiting_since_ms : 0;
    if (a->waiting)
        snprintf(waiting_in, sizeof(waiting_in), "%s", a->waiting_in);
    pthread_mutex_unlock(&a->progress_lock);
    body.waiting_in = waiting_in;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, a->job, -1, 0, 0);
    env.heartbeat = &body;
    wire_send(a->control, NULL, 0, &env, NULL, 0); /* a full queue drops a beat: the next one will do */
}

/* Moves the rest of a multipart message from the pipe to the control socket, whole or
 * not at all: if ddpd's queue is full, a payload must not go out as a message of its own
 * (the caller's wait then ends at its timeout, with its own error). */
/* A request (remember) is kept until answered, as pending; held is for while ddpd is away:
 * kept, not sent, until the next ddpd has taken this member back. */
static void agent_forward(agent *a, bool remember, uint64_t seq, bool held) {
    int more = 1;
    size_t more_size = sizeof(more);
    bool dropping = false, first = true;
    while (zmq_getsockopt(a->agent_pipe, ZMQ_RCVMORE, &more, &more_size) == 0 && more) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, a->agent_pipe, 0) < 0) {
            zmq_msg_close(&frame);
            return;
        }
        zmq_getsockopt(a->agent_pipe, ZMQ_RCVMORE, &more, &more_size);
        if (first && remember && !more) { /* a request is its envelope alone */
            if (a->has_pending)
                zmq_msg_close(&a->pending);
            zmq_msg_init(&a->pending);
            a->has_pending = zmq_msg_copy(&a->pending, &frame) == 0;
            a->pending_seq = seq;
            a->pending_held = held;
            if (held) {
                zmq_msg_close(&frame);
                return;
            }
        }
        first = false;
        /* ZeroMQ takes the later parts of a message whose first part it took */
        if (dropping || zmq_msg_send(&frame, a->control, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            dropping = true;
        }
    }
}

static void agent_push_forget(struct agent_pushes *p, size_t b) {
    if (!p->saved[b])
        return;
    zmq_msg_close(&p->env[b]);
    if (p->framed[b])
        zmq_msg_close(&p->payload[b]);
    p->saved[b] = p->framed[b] = p->held[b] = false;
}

static void agent_pushes_free(struct agent_pushes *p) {
    if (!p)
        return;
    for (size_t b = 0; p->saved && p->framed && b < p->n; b++)
        agent_push_forget(p, b);
    for (size_t b = 0; p->has_last && b < p->n; b++)
        if (p->has_last[b])
            zmq_msg_close(&p->last_average[b]);
    pthread_mutex_destroy(&p->lock);
    free(p->offset);
    free(p->size);
    free(p->env);
    free(p->payload);
    free(p->step);
    free(p->heard);
    free(p->saved);
    free(p->framed);
    free(p->held);
    free(p->last_average);
    free(p->last_step);
    free(p->has_last);
    free(p->given_back);
    free(p->given_to);
    free(p);
}

/* msg becomes e, packed (left as it was if that fails: it goes unchanged). */
static void msg_repack(zmq_msg_t *msg, const Ddp__Envelope *e) {
    zmq_msg_t repacked;
    if (wire_pack(e, &repacked) < 0)
        return;
    zmq_msg_close(msg);
    zmq_msg_init(msg);
    zmq_msg_move(msg, &repacked);
}

/* Sends a push (consuming env and payload, which may be NULL: its data is in the push
 * segment). After a rejoin such a push goes as a frame: the new ddpd holds no segment. */
static void agent_send_push(agent *a, zmq_msg_t *env, zmq_msg_t *payload, uint32_t bucket) {
    struct agent_pushes *p = a->pushes;
    zmq_msg_t data;
    if (!payload && p && p->frames && p->segment && bucket < p->n) {
        Ddp__Envelope *e = ddp__envelope__unpack(NULL, zmq_msg_size(env), zmq_msg_data(env));
        if (e && e->grad_push) {
            e->grad_push->shared = 0;
            msg_repack(env, e);
        }
        if (e)
            ddp__envelope__free_unpacked(e, NULL);
        /* the bucket stays as it is until its average comes: ZeroMQ may read it till then */
        zmq_msg_init_data(&data, p->segment + p->offset[bucket], p->size[bucket], NULL, NULL);
        payload = &data;
    }
    if (zmq_msg_send(env, a->control, (payload ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(env);
        if (payload)
            zmq_msg_close(payload);
        return; /* the pull's timeout says so */
    }
    if (payload && zmq_msg_send(payload, a->control, ZMQ_DONTWAIT) < 0)
        zmq_msg_close(payload);
}

/* A push from the caller: kept until its average comes, sent unless ddpd is away (held):
 * then it goes to the next ddpd once that has taken this member back. */
static void agent_forward_push(agent *a, uint32_t bucket, uint64_t step, bool held) {
    zmq_msg_t env, payload;
    zmq_msg_init(&env);
    zmq_msg_init(&payload);
    if (zmq_msg_recv(&env, a->agent_pipe, 0) < 0) {
        zmq_msg_close(&env);
        return;
    }
    bool framed = zmq_msg_more(&env);
    if (framed && zmq_msg_recv(&payload, a->agent_pipe, 0) < 0)
        framed = false;
    struct agent_pushes *p = a->pushes;
    if (p)
        pthread_mutex_lock(&p->lock);
    if (p && bucket < p->n) {
        agent_push_forget(p, bucket);
        zmq_msg_init(&p->env[bucket]);
        zmq_msg_copy(&p->env[bucket], &env);
        if (framed) {
            zmq_msg_init(&p->payload[bucket]);
            zmq_msg_copy(&p->payload[bucket], &payload);
        }
        p->step[bucket] = step;
        p->saved[bucket] = true;
        p->framed[bucket] = framed;
        p->held[bucket] = held;
    }
    if (held) {
        zmq_msg_close(&env);
        zmq_msg_close(&payload);
    } else {
        agent_send_push(a, &env, framed ? &payload : NULL, bucket);
        if (!framed)
            zmq_msg_close(&payload);
    }
    if (p)
        pthread_mutex_unlock(&p->lock);
}

/* After a rejoin: every push that has no average yet goes again, to the new ddpd; or, back
 * at the same ddpd (held_only), the pushes made while it was away, which it never had. */
static void agent_send_pushes_again(agent *a, bool held_only) {
    struct agent_pushes *p = a->pushes;
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    bool shared = p->average && !p->frames; /* the first restart: the segment's counters say what was averaged */
    if (!held_only)
        p->frames = true;
    for (size_t b = 0; b < p->n; b++) {
        if (!held_only && p->saved[b] && shared && p->step[b] < agent_averaged(p, b))
            agent_push_forget(p, b); /* averaged by the ddpd that went away: the rank reads it in its segment */
        if (!p->saved[b] || (held_only && !p->held[b]))
            continue;
        p->held[b] = false;
        zmq_msg_t env, payload;
        zmq_msg_init(&env);
        zmq_msg_copy(&env, &p->env[b]);
        if (p->framed[b]) {
            zmq_msg_init(&payload);
            zmq_msg_copy(&payload, &p->payload[b]);
        }
        agent_send_push(a, &env, p->framed[b] ? &payload : NULL, (uint32_t)b);
    }
    pthread_mutex_unlock(&p->lock);
}

/* ddp_interrupt(): a flag for the threads, and an eventfd that never empties, to wake
 * them; made once, before any agent runs, and kept for the life of the process. */
static volatile sig_atomic_t interrupted;
static int interrupt_fd = -1;
static pthread_once_t interrupt_once = PTHREAD_ONCE_INIT;

static void interrupt_fd_make(void) {
    interrupt_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

int agent_interrupt(void) {
    interrupted = 1;
    uint64_t one = 1;
    if (interrupt_fd >= 0 && write(interrupt_fd, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}

/* When the watchdog ends this process: a while after the job ended, unless the caller's
 * thread has been in libddp since (then it knows, and goes its own way). */
static uint64_t agent_watchdog_deadline(agent *a) {
    if (a->watchdog_ms <= 0 || !job_end_code(&a->end) || atomic_load(&a->end.told))
        return UINT64_MAX;
    return atomic_load(&a->end.at_ms) + (uint64_t)a->watchdog_ms;
}

/* As PyTorch's NCCL watchdog: a rank whose program never comes back to see its job's end
 * (a hung or endless computation) must not live on, holding its rank and its memory, so
 * that the job can form again. SIGABRT, so that a core dump shows where it hung. */
static void agent_watchdog_fire(agent *a, uint64_t now) {
    fprintf(stderr,
            "ddp: %s\nddp: that was %.1f s ago, and this program has not called libddp since (busy or hung): the "
            "watchdog ends the process (DDP_WATCHDOG_MS=%d)\n",
            a->end.text, (double)(now - atomic_load(&a->end.at_ms)) / 1000.0, a->watchdog_ms);
    fflush(stderr);
    abort();
}

/* The control thread's view of ddpd. */
typedef struct {
    uint64_t start, last_heard, next_beat;
    uint32_t interval, liveness;
    uint32_t coordinator_pid, stall_limit_ms; /* ddpd on this host says who it is */
    uint64_t instance, rejoin_instance;       /* ddpd's, heard last, and when the rejoin began */
    bool heard, failed;
    /* rejoining a ddpd that went away, since this time (0: not); the next try, and the gap */
    uint64_t rejoin_since, next_rejoin, rejoin_gap;
} agent_view;

#define AGENT_REJOIN_FIRST_GAP_MS 100 /* then doubling, up to the heartbeat interval */

static void agent_fail(agent *a, agent_view *v, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void agent_fail(agent *a, agent_view *v, int code, const char *fmt, ...) {
    v->failed = true;
    v->rejoin_since = 0;
    agent_event *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return;
    ev->failure = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ev->text, sizeof(ev->text), fmt, ap);
    va_end(ap);
    agent_post(a, ev);
}

/* ddpd went away (silent, or it said it is stopping): the job goes on without it while
 * the agent rejoins the next ddpd at the same endpoint, if the caller has said how. */
static bool agent_begin_rejoin(agent *a, agent_view *v, uint64_t now, const char *why) {
    pthread_mutex_lock(&a->progress_lock);
    bool can = a->rejoin && a->coordinator_wait_ms > 0;
    pthread_mutex_unlock(&a->progress_lock);
    if (!can)
        return false;
    fprintf(stderr, "ddp: %s; the job goes on, rejoining ddpd for up to %d ms (DDP_COORDINATOR_WAIT_MS)\n", why,
            a->coordinator_wait_ms);
    v->rejoin_since = v->next_rejoin = now;
    v->rejoin_instance = v->instance;
    v->rejoin_gap = AGENT_REJOIN_FIRST_GAP_MS;
    return true;
}

/* ps: each bucket is at the step after the last average this rank has, though it may not
 * have pulled it when it packed the rejoin: one that came as a message and waits for the
 * pull, or, sharing memory with the ddpd that went away (the first restart: later ones
 * share none), one that ddpd wrote in its segment, whose counters are final by now (a
 * ddpd that only stalled knows the rank when it gets back to it, and ignores the steps). */
static void agent_rejoin_steps(agent *a, Ddp__Envelope *e) {
    struct agent_pushes *p = a->pushes;
    if (!p || !e->join || e->join->n_ps_steps != p->n)
        return;
    for (size_t b = 0; b < p->n; b++) {
        uint64_t had = p->heard[b];
        if (p->average && !p->frames && agent_averaged(p, b) > had)
            had = agent_averaged(p, b);
        if (e->join->ps_steps[b] < had)
            e->join->ps_steps[b] = had;
    }
}

/* The rejoin as it stands now: the ps steps (above), and the ranks that have left, which
 * the next ddpd is not to wait for (a job with one would never be whole again). */
static void agent_rejoin_now(agent *a, zmq_msg_t *frame) {
    Ddp__Envelope *e = ddp__envelope__unpack(NULL, zmq_msg_size(frame), zmq_msg_data(frame));
    if (!e || !e->join) {
        if (e)
            ddp__envelope__free_unpacked(e, NULL);
        return;
    }
    agent_rejoin_steps(a, e);
    uint32_t left[DDP_MAX_WORLD_SIZE];
    size_t n_left = 0;
    for (uint32_t r = 0; r < e->join->world_size && r < DDP_MAX_WORLD_SIZE; r++)
        if (atomic_load(&a->end.left[r]))
            left[n_left++] = r;
    uint32_t *unpacked_left = e->join->left; /* freed with the envelope: put back first */
    size_t unpacked_n = e->join->n_left;
    e->join->left = left;
    e->join->n_left = n_left;
    msg_repack(frame, e);
    e->join->left = unpacked_left;
    e->join->n_left = unpacked_n;
    ddp__envelope__free_unpacked(e, NULL);
}

static void agent_send_rejoin(agent *a) {
    zmq_msg_t frame;
    pthread_mutex_lock(&a->progress_lock);
    int r = zmq_msg_init_size(&frame, a->rejoin_size);
    if (r == 0)
        memcpy(zmq_msg_data(&frame), a->rejoin, a->rejoin_size);
    pthread_mutex_unlock(&a->progress_lock);
    if (r == 0)
        agent_rejoin_now(a, &frame);
    if (r == 0 && zmq_msg_send(&frame, a->control, ZMQ_DONTWAIT) < 0)
        zmq_msg_close(&frame); /* the next try will do */
}

/* An average came as a message: its push is answered, a rejoin says the rank has it, and
 * its payload (NULL: it is in the segment) is kept, for a ddpd that restarts to ask back. */
static void agent_on_average(agent *a, uint32_t bucket, uint64_t step, zmq_msg_t *payload) {
    struct agent_pushes *p = a->pushes;
    if (!p || bucket >= p->n)
        return;
    agent_push_answered(a, bucket, step);
    if (p->heard[bucket] <= step)
        p->heard[bucket] = step + 1;
    if (!payload)
        return;
    if (p->has_last[bucket])
        zmq_msg_close(&p->last_average[bucket]);
    zmq_msg_init(&p->last_average[bucket]);
    p->has_last[bucket] = zmq_msg_copy(&p->last_average[bucket], payload) == 0; /* shared, not copied */
    p->last_step[bucket] = step;
}

/* ddpd restarted, and ranks behind this one lack the last average of a bucket that the ddpd
 * before sent this rank: it gives it back, once, from the message it kept or from the
 * segment of the ddpd before (its counters and data final), whichever is later. */
static void agent_give_back(agent *a, const Ddp__Heartbeat *hb) {
    struct agent_pushes *p = a->pushes;
    if (!p || hb->n_ps_average_from != p->n)
        return;
    pthread_mutex_lock(&a->progress_lock);
    int32_t rank = a->rejoin_rank;
    uint64_t generation = a->rejoin_generation;
    pthread_mutex_unlock(&a->progress_lock);
    for (size_t b = 0; b < p->n; b++) {
        if (hb->ps_average_from[b] != rank)
            continue;
        uint64_t in_segment = p->average ? agent_averaged(p, b) : 0; /* the step after its last average */
        bool kept = p->has_last[b] && p->last_step[b] + 1 >= in_segment;
        if (!kept && !in_segment)
            continue; /* none to give: the ranks behind say so at their pull's timeout */
        uint64_t step = kept ? p->last_step[b] : in_segment - 1;
        if (p->given_back[b] > step && p->given_to[b] == hb->instance)
            continue;
        zmq_msg_t payload;
        zmq_msg_init(&payload);
        if (kept)
            zmq_msg_copy(&payload, &p->last_average[b]);
        else if (zmq_msg_init_size(&payload, p->size[b]) == 0)
            memcpy(zmq_msg_data(&payload), p->average + p->offset[b], p->size[b]);
        else
            continue;
        Ddp__GradPush body = DDP__GRAD_PUSH__INIT;
        body.step = step;
        body.bucket = (uint32_t)b;
        body.average = true;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_PUSH, a->job, rank, generation, 0);
        env.grad_push = &body;
        zmq_msg_t frame;
        if (wire_pack(&env, &frame) < 0) {
            zmq_msg_close(&payload);
            continue;
        }
        if (zmq_msg_send(&frame, a->control, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            zmq_msg_close(&payload);
            continue; /* asked again with the next heartbeat */
        }
        if (zmq_msg_send(&payload, a->control, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&payload);
        p->given_back[b] = step + 1;
        p->given_to[b] = hb->instance;
        fprintf(stderr, "ddp: gave bucket %zu's average of step %llu back to ddpd (a rank lacked it)\n", b,
                (unsigned long long)step);
    }
}

/* A heartbeat from ddpd: its settings, who left, and (while rejoining) that it has taken
 * this member back. */
static void agent_on_heartbeat(agent *a, agent_view *v, const Ddp__Envelope *env, uint64_t now) {
    const Ddp__Heartbeat *hb = env->heartbeat;
    v->interval = hb->interval_ms;
    v->liveness = hb->liveness;
    v->coordinator_pid = hb->coordinator_pid;
    v->stall_limit_ms = hb->stall_timeout_ms;
    v->instance = hb->instance;
    for (size_t i = 0; i < hb->n_left; i++) /* checked below the world size */
        atomic_store(&a->end.left[hb->left[i]], 1);
    if (hb->stopping) {
        if (!v->failed && !v->rejoin_since) {
            char why[DDP_MAX_ENDPOINT + 64];
            snprintf(why, sizeof(why), "ddpd at %s is stopping (a restart?)", a->coordinator);
            if (!agent_begin_rejoin(a, v, now, why))
                agent_fail(a, v, -ECONNABORTED,
                           "%s, and this rank may not wait for the next (DDP_COORDINATOR_WAIT_MS=%d)", why,
                           a->coordinator_wait_ms);
        }
        return;
    }
    if (hb->n_ps_average_from)
        agent_give_back(a, hb);
    pthread_mutex_lock(&a->progress_lock);
    bool back = v->rejoin_since && env->generation == a->rejoin_generation;
    pthread_mutex_unlock(&a->progress_lock);
    if (!back)
        return;
    /* the ddpd that was only silent (stalled, cut off) still holds what this rank sent it: a
     * request or push sent again would be one too many (a push twice ends the job) */
    bool same = hb->instance && hb->instance == v->rejoin_instance;
    fprintf(stderr, "ddp: rejoined ddpd at %s after %.1f s%s\n", a->coordinator,
            (double)(now - v->rejoin_since) / 1000.0, same ? " (the same ddpd, silent meanwhile)" : "");
    v->rejoin_since = 0;
    v->next_beat = now;
    if (a->has_pending && (!same || a->pending_held)) { /* asked of the ddpd that went away, or not asked yet */
        zmq_msg_t copy;
        zmq_msg_init(&copy);
        zmq_msg_copy(&copy, &a->pending);
        if (zmq_msg_send(&copy, a->control, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&copy);
    }
    a->pending_held = false;
    agent_send_pushes_again(a, same);
}

/* ddpd does not know this member (-ENXIO), answering a heartbeat, a request or a push: it
 * restarted before its silence showed. Rejoins it (true: the message was the agent's to
 * take; the request is asked again and the push sent again once it is back), unless this
 * member has no job to bring back. */
static bool agent_unknown(agent *a, agent_view *v, uint64_t now) {
    if (v->failed)
        return false;
    if (v->rejoin_since)
        return true;
    char why[DDP_MAX_ENDPOINT + 64];
    snprintf(why, sizeof(why), "ddpd at %s does not know this rank (it restarted)", a->coordinator);
    return agent_begin_rejoin(a, v, now, why);
}

/* Reads what ddpd sent: heartbeats are the agent's, the rest goes to the caller. */
static void agent_read_control(agent *a, agent_view *v) {
    for (;;) {
        agent_event *ev = calloc(1, sizeof(*ev));
        if (!ev)
            return;
        int r = wire_recv(a->control, false, ZMQ_DONTWAIT, &ev->msg);
        if (r == -EAGAIN || r == -EINTR || r == -ETERM) {
            free(ev);
            return;
        }
        if (r < 0) { /* ddpd broke the protocol: drop it, the caller's timeout still holds */
            agent_event_free(ev);
            continue;
        }
        uint64_t now = clock_now_ms();
        const Ddp__Envelope *env = ev->msg.env;
        v->heard = true;
        v->last_heard = now;
        if (env->type == DDP__MSG_TYPE__ERROR && env->error->code == -ENXIO && agent_unknown(a, v, now)) {
            agent_event_free(ev); /* held: asked again once ddpd takes this member back */
            continue;
        }
        if (env->type == DDP__MSG_TYPE__GRAD_AVG)
            agent_on_average(a, env->grad_avg->bucket, env->grad_avg->step,
                             env->grad_avg->shared || !ev->msg.n_payload ? NULL : &ev->msg.payload[0]);
        if (a->has_pending && env->seq == a->pending_seq && env->type != DDP__MSG_TYPE__HEARTBEAT) {
            zmq_msg_close(&a->pending); /* answered */
            a->has_pending = false;
        }
        if (env->type == DDP__MSG_TYPE__HEARTBEAT) {
            agent_on_heartbeat(a, v, env, now);
            agent_event_free(ev);
        } else if (env->type == DDP__MSG_TYPE__REJECT && v->rejoin_since && !v->failed) {
            agent_fail(a, v, env->reject->code, "ddpd at %s restarted and would not take this rank back: %s",
                       a->coordinator, env->reject->reason);
            agent_event_free(ev);
        } else
            agent_post(a, ev);
    }
}

/* Judges ddpd's silence: before it first answered, after, and while rejoining it. */
static void agent_judge(agent *a, agent_view *v, uint64_t now) {
    if (v->failed)
        return;
    if (v->rejoin_since) {
        uint64_t away = now - v->rejoin_since, wait = (uint64_t)a->coordinator_wait_ms;
        char why[DDP_MAX_ENDPOINT + 128];
        snprintf(why, sizeof(why),
                 "lost the coordinator at %s, and it did not come back within %d ms (DDP_COORDINATOR_WAIT_MS)",
                 a->coordinator, a->coordinator_wait_ms);
        if (away >= 2 * wait) /* asked to stop, the program did not: the job ends */
            agent_fail(a, v, -ECONNABORTED, "%s, nor did the program stop in as long again", why);
        else if (away >= wait && !atomic_load(&a->end.stop_asked)) {
            fprintf(stderr, "ddp: %s: asking the program to stop (ddp_stop_requested)\n", why);
            job_end_ask_stop(&a->end, why);
        }
        return;
    }
    if (!v->heard && now - v->start >= (uint64_t)a->connect_timeout_ms) {
        handshake_outcome handshake = handshake_watch_read(&a->handshakes);
        unsigned ms = (unsigned)a->connect_timeout_ms;
        if (handshake == HANDSHAKE_KEY_REFUSED)
            agent_fail(a, v, -EHOSTUNREACH,
                       "ddpd at %s refused this client's CURVE key (its --curve-users does not name it); no answer "
                       "within %u ms",
                       a->coordinator, ms);
        else if (handshake == HANDSHAKE_MECHANISM_DIFFERS)
            agent_fail(a, v, -EHOSTUNREACH,
                       "ddpd at %s dropped the connection before it answered: one side speaks CURVE and the other "
                       "not (DDP_CURVE_SERVER_KEY, DDP_CURVE_KEY); no answer within %u ms",
                       a->coordinator, ms);
        else
            agent_fail(a, v, -EHOSTUNREACH, "no coordinator answered at %s within %u ms (is ddpd running there?)",
                       a->coordinator, ms);
        return;
    }
    uint64_t silent = now - v->last_heard;
    if (!v->heard || silent <= (uint64_t)v->interval * v->liveness)
        return;
    char state[32];
    /* ddpd on this host, silent but there (starved by a crowd of ranks, stopped): it is
     * judged as it judges us, by its stall limit */
    bool there =
        v->coordinator_pid && a->coordinator_here && process_state(v->coordinator_pid, state, sizeof(state)) == 0;
    if (there && silent <= (uint64_t)v->stall_limit_ms)
        return;
    if (there) {
        agent_fail(a, v, -ECONNABORTED,
                   "the coordinator at %s (pid %u) stopped responding %.1f s ago (state %s; its --stall-timeout %u s)",
                   a->coordinator, v->coordinator_pid, (double)silent / 1000.0, state, v->stall_limit_ms / 1000);
        return;
    }
    char why[DDP_MAX_ENDPOINT + 64];
    snprintf(why, sizeof(why), "lost the coordinator at %s: silent for %llu ms", a->coordinator,
             (unsigned long long)silent);
    if (!agent_begin_rejoin(a, v, now, why))
        agent_fail(a, v, -ECONNABORTED, "%s", why);
}

/* The caller's command: a message to forward (and remember, for a request), or quit. */
static bool agent_on_command(agent *a, const agent_view *v) {
    zmq_msg_t cmd;
    zmq_msg_init(&cmd);
    if (zmq_msg_recv(&cmd, a->agent_pipe, 0) < 0) {
        zmq_msg_close(&cmd);
        return false;
    }
    char kind = zmq_msg_size(&cmd) ? *(const char *)zmq_msg_data(&cmd) : 0;
    uint64_t seq = 0;
    uint32_t bucket = UINT32_MAX;
    if (kind == AGENT_REQUEST && zmq_msg_size(&cmd) == 1 + sizeof(seq))
        memcpy(&seq, (const char *)zmq_msg_data(&cmd) + 1, sizeof(seq));
    if (kind == AGENT_PUSH && zmq_msg_size(&cmd) == 1 + sizeof(bucket) + sizeof(seq)) {
        memcpy(&bucket, (const char *)zmq_msg_data(&cmd) + 1, sizeof(bucket));
        memcpy(&seq, (const char *)zmq_msg_data(&cmd) + 1 + sizeof(bucket), sizeof(seq)); /* the push's step */
    }
    zmq_msg_close(&cmd);
    if (kind == AGENT_PUSH)
        agent_forward_push(a, bucket, seq, v->rejoin_since != 0);
    else
        agent_forward(a, kind == AGENT_REQUEST, seq, v->rejoin_since != 0);
    return kind == AGENT_QUIT;
}

static void *agent_main(void *arg) {
    agent *a = arg;
    uint64_t start = clock_now_ms();
    agent_view v = {
        .start = start, .next_beat = start, .interval = DDP_DEFAULT_HEARTBEAT_MS, .liveness = DDP_DEFAULT_LIVENESS};

    for (;;) {
        uint64_t now = clock_now_ms(), deadline = v.rejoin_since ? v.next_rejoin : v.next_beat;
        if (!v.failed) {
            uint64_t wait = (uint64_t)a->coordinator_wait_ms * (atomic_load(&a->end.stop_asked) ? 2 : 1);
            uint64_t judge = v.rejoin_since ? v.rejoin_since + wait
                             : v.heard      ? v.last_heard + (uint64_t)v.interval * v.liveness + 1
                                            : v.start + (uint64_t)a->connect_timeout_ms;
            if (judge > now) /* past it, ddpd is stalled: judged again at each beat */
                deadline = judge < deadline ? judge : deadline;
        }
        uint64_t watchdog = agent_watchdog_deadline(a);
        deadline = watchdog < deadline ? watchdog : deadline;
        zmq_pollitem_t items[3] = {{.socket = a->control, .events = ZMQ_POLLIN},
                                   {.socket = a->agent_pipe, .events = ZMQ_POLLIN},
                                   {.fd = interrupt_fd, .events = ZMQ_POLLIN}};
        int n = zmq_poll(items, v.failed || interrupt_fd < 0 ? 2 : 3, clock_ms_until(deadline));
        if (n < 0 && zmq_errno() == ETERM)
            break;
        if (interrupted && !v.failed) /* every wait on this group ends, with this reason */
            agent_fail(a, &v, -EINTR, "interrupted: the program called ddp_interrupt (a signal)");
        if (n > 0 && (items[1].revents & ZMQ_POLLIN) && agent_on_command(a, &v))
            break;
        if (n > 0 && (items[0].revents & ZMQ_POLLIN))
            agent_read_control(a, &v);

        now = clock_now_ms();
        if (now > deadline + v.interval) {
            /* This process did not run for a while (stopped, starved): ddpd's silence since
             * is not ddpd's. Beat at once and give it a whole window to answer; if the job
             * ended meanwhile, its answer says so. */
            v.start = v.last_heard = now;
            v.next_beat = v.next_rejoin = now;
        }
        if (now >= watchdog)
            agent_watchdog_fire(a, now);
        if (v.rejoin_since && now >= v.next_rejoin) {
            agent_send_rejoin(a);
            v.next_rejoin = now + v.rejoin_gap;
            v.rejoin_gap = v.rejoin_gap * 2 < v.interval ? v.rejoin_gap * 2 : v.interval;
        } else if (!v.rejoin_since && now >= v.next_beat) {
            agent_send_heartbeat(a, v.interval, v.liveness);
            v.next_beat = now + v.interval;
        }
        agent_judge(a, &v, now);
    }

    int linger = AGENT_LEAVE_LINGER_MS;
    zmq_setsockopt(a->control, ZMQ_LINGER, &linger, sizeof(linger));
    handshake_watch_stop(&a->handshakes);
    zmq_close(a->control);
    zmq_close(a->agent_pipe);
    if (a->has_pending)
        zmq_msg_close(&a->pending);
    a->has_pending = false;
    return NULL;
}

/* Whether the coordinator runs on this host (a Unix socket, loopback TCP): then its pid,
 * which its heartbeats give, says whether it is there. */
static bool coordinator_on_this_host(const char *endpoint) {
    if (strncmp(endpoint, "ipc://", 6) == 0)
        return true;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    char host[DDP_MAX_ENDPOINT + 1];
    snprintf(host, sizeof(host), "%s", endpoint + 6);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = '\0';
    const char *h = host;
    if (h[0] == '[') { /* [::1] */
        h++;
        host[strlen(host) - 1] = '\0';
    }
    return wire_address_loopback(h);
}

static void agent_routing_id(uint8_t *id, size_t size) {
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id, 1, size, f) : 0;
    if (f)
        fclose(f);
    if (got < size) { /* no urandom: pid and clock are unique enough on one host */
        uint64_t seed[2] = {(uint64_t)getpid(), clock_now_us()};
        memcpy(id, seed, size < sizeof(seed) ? size : sizeof(seed));
    }
    id[0] |= 0x80;
}

int agent_start(agent *a, void *zmq_ctx, const char *coordinator, const char *job, int connect_timeout_ms,
                int watchdog_ms, int coordinator_wait_ms, const char *curve_server_key, const curve_keypair *own) {
    pthread_once(&interrupt_once, interrupt_fd_make);
    static _Atomic unsigned long pipe_counter;
    char pipe_name[64];
    snprintf(pipe_name, sizeof(pipe_name), "inproc://ddp-agent-%lu", (unsigned long)pipe_counter++);
    *a = (agent){.zmq_ctx = zmq_ctx,
                 .connect_timeout_ms = connect_timeout_ms,
                 .watchdog_ms = watchdog_ms,
                 .coordinator_wait_ms = coordinator_wait_ms};
    atomic_flag_clear(&a->end.raised);
    atomic_flag_clear(&a->end.stop_taken);
    a->end.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->end.fd < 0)
        return -errno;
    pthread_mutex_init(&a->progress_lock, NULL);
    a->waiting_on = -1;
    snprintf(a->coordinator, sizeof(a->coordinator), "%s", coordinator);
    a->coordinator_here = coordinator_on_this_host(coordinator);
    snprintf(a->job, sizeof(a->job), "%s", job);

    int r = 0;
    a->pipe = zmq_socket(zmq_ctx, ZMQ_PAIR);
    a->agent_pipe = zmq_socket(zmq_ctx, ZMQ_PAIR);
    a->control = zmq_socket(zmq_ctx, ZMQ_DEALER);
    if (!a->pipe || !a->agent_pipe || !a->control)
        r = -errno;
    /* Our own routing id, so that ddpd knows us again if the connection is re-made. ZeroMQ
     * reserves ids that start with a zero byte. */
    uint8_t id[16];
    agent_routing_id(id, sizeof(id));
    int ipv6 = strchr(coordinator, '[') != NULL;
    if (r == 0)
        r = wire_socket_setup(a->pipe, sizeof(agent_event *));
    if (r == 0)
        r = wire_socket_setup(a->agent_pipe, DDP_MAX_CONTROL_MSG_BYTES);
    if (r == 0)
        r = wire_socket_setup(a->control, DDP_MAX_CONTROL_MSG_BYTES);
    if (r == 0 && (zmq_setsockopt(a->control, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0 ||
                   zmq_setsockopt(a->control, ZMQ_ROUTING_ID, id, sizeof(id)) < 0))
        r = -errno;
    if (r == 0 && curve_server_key)
        r = curve_client_setup(a->control, curve_server_key, own);
    if (r == 0) /* a refused key shows only there: ZeroMQ retries in silence */
        r = handshake_watch_start(&a->handshakes, zmq_ctx, a->control);
    if (r == 0 && (zmq_bind(a->agent_pipe, pipe_name) < 0 || zmq_connect(a->pipe, pipe_name) < 0))
        r = -errno;
    if (r == 0 && zmq_connect(a->control, coordinator) < 0)
        r = -EINVAL; /* a malformed endpoint; the caller names it */
    if (r == 0 && (r = -pthread_create(&a->thread, NULL, agent_main, a)) == 0) {
        a->running = true;
        return 0;
    }
    handshake_watch_stop(&a->handshakes);
    if (a->control)
        zmq_close(a->control);
    if (a->agent_pipe)
        zmq_close(a->agent_pipe);
    if (a->pipe)
        zmq_close(a->pipe);
    a->pipe = a->agent_pipe = a->control = NULL;
    close(a->end.fd);
    a->end.fd = -1;
    pthread_mutex_destroy(&a->progress_lock);
    return r;
}

/* The command frame: cmd, then what it names (a request's seq, a push's bucket). */
static int agent_command_with(agent *a, char cmd, const void *named, size_t named_size, const Ddp__Envelope *env,
                              const void *payload, size_t bytes) {
    /* The agent always drains its pipe, so only a quit may block: it must get through. */
    int dontwait = cmd == AGENT_QUIT ? 0 : ZMQ_DONTWAIT;
    zmq_msg_t frame;
    if (env)
        TRY(wire_pack(env, &frame));
    char head[1 + 2 * sizeof(uint64_t)] = {cmd}; /* a request's seq; a push's bucket and step */
    size_t head_size = 1 + (named_size < sizeof(head) ? named_size : 0);
    if (head_size > 1)
        memcpy(head + 1, named, head_size - 1);
    if (zmq_send(a->pipe, head, head_size, (env ? ZMQ_SNDMORE : 0) | dontwait) < 0) {
        int r = -errno;
        if (env)
            zmq_msg_close(&frame);
        return r;
    }
    /* A multipart message goes whole once its first part went: the rest cannot fail on a full queue. */
    if (env && zmq_msg_send(&frame, a->pipe, (bytes ? ZMQ_SNDMORE : 0) | dontwait) < 0) {
        zmq_msg_close(&frame);
        return -errno;
    }
    if (bytes && zmq_send(a->pipe, payload, bytes, dontwait) < 0)
        return -errno;
    return 0;
}

static int agent_command(agent *a, char cmd, const Ddp__Envelope *env, const void *payload, size_t bytes) {
    return agent_command_with(a, cmd, NULL, 0, env, payload, bytes);
}

int agent_send(agent *a, const Ddp__Envelope *env) {
    return agent_command(a, AGENT_FORWARD, env, NULL, 0);
}

int agent_request(agent *a, const Ddp__Envelope *env) {
    return agent_command_with(a, AGENT_REQUEST, &env->seq, sizeof(env->seq), env, NULL, 0);
}

int agent_push(agent *a, const Ddp__Envelope *env, uint32_t bucket, const void *payload, size_t bytes) {
    char named[sizeof(bucket) + sizeof(uint64_t)];
    memcpy(named, &bucket, sizeof(bucket));
    memcpy(named + sizeof(bucket), &env->grad_push->step, sizeof(uint64_t));
    return agent_command_with(a, AGENT_PUSH, named, sizeof(named), env, payload, bytes);
}

int agent_note_push(agent *a, const Ddp__Envelope *env, uint32_t bucket) {
    struct agent_pushes *p = a->pushes;
    if (!p || bucket >= p->n || !p->segment)
        return -EINVAL;
    zmq_msg_t frame;
    TRY(wire_pack(env, &frame));
    pthread_mutex_lock(&p->lock);
    int r = p->frames ? -EAGAIN : 0;
    if (r == 0) {
        agent_push_forget(p, bucket);
        zmq_msg_init(&p->env[bucket]);
        zmq_msg_move(&p->env[bucket], &frame);
        p->step[bucket] = env->grad_push->step;
        p->saved[bucket] = true;
    }
    pthread_mutex_unlock(&p->lock);
    zmq_msg_close(&frame);
    return r;
}

bool agent_pushes_framed(agent *a) {
    struct agent_pushes *p = a->pushes;
    if (!p)
        return true;
    pthread_mutex_lock(&p->lock);
    bool frames = p->frames;
    pthread_mutex_unlock(&p->lock);
    return frames;
}

void agent_push_answered(agent *a, uint32_t bucket, uint64_t step) {
    struct agent_pushes *p = a->pushes;
    if (!p || bucket >= p->n)
        return;
    pthread_mutex_lock(&p->lock);
    if (p->saved[bucket] && p->step[bucket] <= step) /* not a later push */
        agent_push_forget(p, bucket);
    pthread_mutex_unlock(&p->lock);
}

int agent_set_ps(agent *a, size_t n_buckets, char *segment, char *average, const size_t *offsets, const size_t *sizes) {
    struct agent_pushes *p = calloc(1, sizeof(*p));
    if (!p || !(p->offset = calloc(n_buckets, sizeof(size_t))) || !(p->size = calloc(n_buckets, sizeof(size_t))) ||
        !(p->env = calloc(n_buckets, sizeof(zmq_msg_t))) || !(p->payload = calloc(n_buckets, sizeof(zmq_msg_t))) ||
        !(p->step = calloc(n_buckets, sizeof(uint64_t))) || !(p->heard = calloc(n_buckets, sizeof(uint64_t))) ||
        !(p->saved = calloc(n_buckets, sizeof(bool))) || !(p->framed = calloc(n_buckets, sizeof(bool))) ||
        !(p->held = calloc(n_buckets, sizeof(bool))) || !(p->last_average = calloc(n_buckets, sizeof(zmq_msg_t))) ||
        !(p->last_step = calloc(n_buckets, sizeof(uint64_t))) || !(p->has_last = calloc(n_buckets, sizeof(bool))) ||
        !(p->given_back = calloc(n_buckets, sizeof(uint64_t))) ||
        !(p->given_to = calloc(n_buckets, sizeof(uint64_t)))) {
        agent_pushes_free(p);
        return -ENOMEM;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->n = n_buckets;
    p->segment = segment;
    p->average = average;
    memcpy(p->offset, offsets, n_buckets * sizeof(size_t));
    memcpy(p->size, sizes, n_buckets * sizeof(size_t));
    for (size_t b = 0; b < n_buckets; b++)
        p->float_bytes += sizes[b];
    agent_pushes_free(a->pushes); /* before the first push: the agent has not looked at it */
    a->pushes = p;
    return 0;
}

int agent_set_rejoin(agent *a, const Ddp__Envelope *rejoin) {
    zmq_msg_t frame;
    TRY(wire_pack(rejoin, &frame));
    uint8_t *copy = malloc(zmq_msg_size(&frame));
    if (!copy) {
        zmq_msg_close(&frame);
        return -ENOMEM;
    }
    memcpy(copy, zmq_msg_data(&frame), zmq_msg_size(&frame));
    pthread_mutex_lock(&a->progress_lock);
    free(a->rejoin);
    a->rejoin = copy;
    a->rejoin_size = zmq_msg_size(&frame);
    a->rejoin_generation = rejoin->generation;
    a->rejoin_rank = rejoin->rank;
    pthread_mutex_unlock(&a->progress_lock);
    zmq_msg_close(&frame);
    return 0;
}

int agent_send_payload(agent *a, const Ddp__Envelope *env, const void *payload, size_t bytes) {
    return agent_command(a, AGENT_FORWARD, env, payload, bytes);
}

int agent_next(agent *a, int timeout_ms, agent_event **ret_event) {
    zmq_pollitem_t item = {.socket = a->pipe, .events = ZMQ_POLLIN};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n < 0)
        return -zmq_errno();
    if (n == 0)
        return -ETIMEDOUT;
    agent_event *ev = NULL;
    if (zmq_recv(a->pipe, &ev, sizeof(ev), 0) != (int)sizeof(ev) || !ev)
        return -EPROTO;
    *ret_event = ev;
    return 0;
}

void agent_event_free(agent_event *ev) {
    if (!ev)
        return;
    wire_msg_close(&ev->msg);
    free(ev);
}

void agent_stop(agent *a, const Ddp__Envelope *leave) {
    if (!a->running)
        return;
    if (agent_command(a, AGENT_QUIT, leave, NULL, 0) < 0 && leave)
        agent_command(a, AGENT_QUIT, NULL, NULL, 0);
    pthread_join(a->thread, NULL);
    /* Free whatever the agent posted that nobody read. */
    agent_event *ev;
    while (zmq_recv(a->pipe, &ev, sizeof(ev), ZMQ_DONTWAIT) == (int)sizeof(ev))
        agent_event_free(ev);
    zmq_close(a->pipe);
    a->pipe = NULL;
    close(a->end.fd);
    a->end.fd = -1;
    free(a->rejoin);
    a->rejoin = NULL;
    agent_pushes_free(a->pushes);
    a->pushes = NULL;
    pthread_mutex_destroy(&a->progress_lock);
    a->running = false;
}
