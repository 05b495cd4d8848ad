/* Parameter-server mode, the worker's side: push a bucket of gradients to ddpd, pull the
 * average of every rank's back. Where this rank shares memory with ddpd (ps_client_share),
 * a push copies the bucket into the push segment (nothing, when backward computed it
 * there), raises the bucket's counter after it and rings ddpd's doorbell; a pull waits on
 * the bucket's counter in ddpd's average segment and reads the average there: no message
 * and no thread on the way (common/ps_segment.h). Else the gradients and averages travel
 * on the control connection through the group's control thread, like every message from
 * ddpd; so do the pushes that go again to a ddpd that restarted (agent.c), and their
 * averages. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/ps_segment.h"
#include "common/shm_segment.h"
#include "worker/libddp/group.h"

/* each sleep on an average's counter, at most: a message or the job's end is seen this soon */
#define PS_SLEEP_MS 20

/* Where bucket starts in the segments: the layout, in order. */
static size_t ps_offset(const ddp_group *g, int bucket) {
    size_t off = 0;
    for (int b = 0; b < bucket; b++)
        off += g->ps_buckets[b];
    return off * sizeof(float);
}

static void ps_client_share(ddp_group *g) {
    size_t floats = 0;
    for (size_t b = 0; b < g->n_ps_buckets; b++)
        floats += g->ps_buckets[b];
    size_t float_bytes = floats * sizeof(float), bytes = ps_segment_bytes(float_bytes, g->n_ps_buckets);
    int fd = -1, sock = -1, average = -1, doorbell = -1, r;
    int32_t said = -1;
    char *pushed = NULL, *avg = NULL, why[128] = "";
    uint64_t deadline = clock_now_ms() + (uint64_t)g->timeout_ms;
    if ((r = shm_segment_make("ddp-ps-push", bytes, &fd)) < 0 || (r = fd_socket_connect(g->ps_socket, &sock)) < 0 ||
        (r = fd_socket_send(sock, fd, g->rank)) < 0 || (r = fd_socket_recv(sock, deadline, &average, &said)) < 0 ||
        (r = fd_socket_recv(sock, deadline, &doorbell, &said)) < 0 ||
        (r = shm_segment_map(fd, bytes, &pushed, why, sizeof(why))) < 0 ||
        (r = shm_segment_map(average, bytes, &avg, why, sizeof(why))) < 0) {
        /* another host's ddpd is not there to connect to: the frames will do (the socket's
         * name came from ddpd's Welcome, over ddpd's own connection) */
        log_debug("ps: no shared memory with ddpd (%s%s%s): pushing over ZeroMQ", error_string(r), why[0] ? ": " : "",
                  why);
        if (pushed)
            munmap(pushed, bytes);
        if (doorbell >= 0)
            fd_socket_close_passed(doorbell);
    } else {
        g->ps_pushed = pushed;
        g->ps_average = avg;
        g->ps_bytes = bytes;
        g->ps_float_bytes = float_bytes;
        g->ps_doorbell = doorbell;
    }
    if (fd >= 0)
        close(fd);
    if (sock >= 0)
        close(sock);
    if (average >= 0)
        fd_socket_close_passed(average);
}

int ps_client_start(ddp_group *g, bool share) {
    if (share)
        ps_client_share(g);
    size_t *offsets = calloc(g->n_ps_buckets, sizeof(size_t)), *sizes = calloc(g->n_ps_buckets, sizeof(size_t));
    int r = offsets && sizes ? 0 : -ENOMEM;
    for (size_t b = 0; r == 0 && b < g->n_ps_buckets; b++) {
        offsets[b] = ps_offset(g, (int)b);
        sizes[b] = g->ps_buckets[b] * sizeof(float);
    }
    if (r == 0)
        r = agent_set_ps(&g->agent, g->n_ps_buckets, g->ps_pushed, g->ps_average, offsets, sizes);
    free(offsets);
    free(sizes);
    return r;
}

static int ps_check(ddp_group *g, int bucket, const void *buf, const char *what) {
    if (!g)
        return -EINVAL;
    job_end_told(&g->agent.end);
    if (g->failed)
        return g->failed;
    if (!g->n_ps_buckets)
        return group_fail(g, -EINVAL, "%s: the group declared no ps buckets (ddp_options.ps_buckets)", what);
    if (bucket < 0 || (size_t)bucket >= g->n_ps_buckets)
        return group_fail(g, -EINVAL, "%s: bucket %d is not one of the %zu declared", what, bucket, g->n_ps_buckets);
    if (!buf)
        return group_fail(g, -EINVAL, "%s: NULL buffer", what);
    return 0;
}

/* A push in the push segment: noted with the agent (to go again to a ddpd that restarts
 * before the average comes), then told to ddpd by the bucket's counter and the doorbell.
 * -EAGAIN: pushes go as frames since such a restart. */
static int ps_ring(ddp_group *g, const Ddp__Envelope *env, int bucket, uint64_t step) {
    TRY(agent_note_push(&g->agent, env, (uint32_t)bucket));
    shm_flag_set(ps_segment_counter(g->ps_pushed, g->ps_float_bytes, (size_t)bucket), step + 1);
    uint64_t one = 1;
    if (write(g->ps_doorbell, &one, sizeof(one)) < 0)
        return -errno; /* EAGAIN only when rung 2^64 - 2 times unread */
    return 0;
}

DDP_EXPORT int ddp_ps_push(ddp_group *g, int bucket, const float *grads) {
    TRY(ps_check(g, bucket, grads, "ps_push"));
    if (g->ps_push_step[bucket] != g->ps_pull_step[bucket])
        return group_fail(g, -EINVAL, "ps_push: bucket %d was pushed for step %llu and not pulled yet", bucket,
                          (unsigned long long)g->ps_pull_step[bucket]);
    Ddp__GradPush body = DDP__GRAD_PUSH__INIT;
    body.step = g->ps_push_step[bucket];
    body.bucket = (uint32_t)bucket;
    body.shared = g->ps_pushed != NULL;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__GRAD_PUSH);
    env.grad_push = &body;
    size_t bytes = g->ps_buckets[bucket] * sizeof(float);
    int r;
    if (body.shared) { /* ddpd reads it once every rank has pushed, before it answers: no one writes it till then */
        char *at = g->ps_pushed + ps_offset(g, bucket);
        if ((const char *)grads != at) /* else the caller computed them there (ddp_ps_buffer) */
            memmove(at, grads, bytes);
        r = ps_ring(g, &env, bucket, body.step);
        if (r == -EAGAIN) /* the agent sends it as a frame from the segment */
            r = agent_push(&g->agent, &env, (uint32_t)bucket, NULL, 0);
    } else {
        r = agent_push(&g->agent, &env, (uint32_t)bucket, grads, bytes);
    }
    if (r < 0)
        return group_fail(g, r, "ps_push: could not hand bucket %d to ddpd: %s", bucket, error_string(r));
    g->ps_push_step[bucket]++;
    comm_count_ddpd(&g->comm, g->ps_buckets[bucket] * sizeof(float), 0);
    return 0;
}

/* A frame where this rank had shared memory: ddpd restarted, and the new one holds none of
 * it. ddp_ps_average points at this rank's own copy from now on, which starts as the old
 * segment: the averages pulled from it so far. */
static int ps_average_copy_make(ddp_group *g) {
    if (!(g->ps_average_copy = malloc(g->ps_float_bytes ? g->ps_float_bytes : 1)))
        return group_fail(g, -ENOMEM, "ps_pull: out of memory for the averages");
    memcpy(g->ps_average_copy, g->ps_average, g->ps_float_bytes);
    return 0;
}

/* What a pull waits for: bucket's average of step as a message, or ddpd's refusal of a
 * push (an Error). An average of an earlier step is one this rank read in the segment. */
typedef struct {
    uint32_t bucket;
    uint64_t step;
} ps_wanted;

static bool is_pulled(const agent_event *ev, void *ctx) {
    const Ddp__Envelope *e = ev->msg.env;
    const ps_wanted *w = ctx;
    return (e->type == DDP__MSG_TYPE__GRAD_AVG && e->grad_avg->bucket == w->bucket && e->grad_avg->step >= w->step) ||
           e->type == DDP__MSG_TYPE__ERROR;
}

/* Waits until ddpd's average segment holds bucket's average of step (*ret_event NULL), or
 * a message that is_pulled takes comes (ddpd restarted: the averages come as frames; or it
 * refused a push): sleeps on the bucket's counter, looking at the messages between. */
static int ps_wait(ddp_group *g, int bucket, uint64_t step, uint64_t deadline_ms, agent_event **ret_event) {
    ps_wanted wanted = {(uint32_t)bucket, step};
    *ret_event = NULL;
    if (!g->ps_average)
        return group_next_event(g, deadline_ms, is_pulled, &wanted, ret_event);
    shm_flag averaged = ps_segment_counter(g->ps_average, g->ps_float_bytes, (size_t)bucket);
    for (;;) {
        if (atomic_load_explicit(averaged.value, memory_order_acquire) > step)
            return 0;
        if (agent_pushes_framed(&g->agent)) /* the ddpd that rang no longer counts: its answer comes as a message */
            return group_next_event(g, deadline_ms, is_pulled, &wanted, ret_event);
        uint64_t now = clock_now_ms();
        int r = group_next_event(g, now, is_pulled, &wanted, ret_event);
        if (r != -ETIMEDOUT)
            return r;
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        shm_flag_sleep(averaged, step + 1, deadline_ms - now < PS_SLEEP_MS ? deadline_ms - now : PS_SLEEP_MS);
    }
}

DDP_EXPORT float *ddp_ps_buffer(ddp_group *g, int bucket) {
    if (!g || !g->ps_pushed || bucket < 0 || (size_t)bucket >= g->n_ps_buckets)
        return NULL;
    return (float *)(g->ps_pushed + ps_offset(g, bucket));
}

DDP_EXPORT const float *ddp_ps_average(ddp_group *g, int bucket) {
    if (!g || !g->ps_average || bucket < 0 || (size_t)bucket >= g->n_ps_buckets)
        return NULL;
    if (g->ps_average_copy)
        return (const float *)((char *)g->ps_average_copy + ps_offset(g, bucket));
    return (const float *)(g->ps_average + ps_offset(g, bucket));
}

DDP_EXPORT int ddp_ps_pull(ddp_group *g, int bucket, float *ret_average) {
    /* NULL: the average stays where ddpd wrote it (ddp_ps_average), if it writes one */
    TRY(ps_check(g, bucket, ret_average ? (const void *)ret_average : ddp_ps_average(g, bucket), "ps_pull"));
    size_t bytes = g->ps_buckets[bucket] * sizeof(float), off = ps_offset(g, bucket);
    uint64_t step = g->ps_pull_step[bucket];
    if (step >= g->ps_push_step[bucket])
        return group_fail(g, -EINVAL, "ps_pull: bucket %d was not pushed for step %llu", bucket,
                          (unsigned long long)step);
    agent_event *ev = g->ps_early[bucket];
    g->ps_early[bucket] = NULL;
    if (ev && ev->msg.env->grad_avg->step < step) { /* read in the segment already */
        agent_event_free(ev);
        ev = NULL;
    }
    if (!ev) {
        int r = ps_wait(g, bucket, step, clock_now_ms() + (uint64_t)g->timeout_ms, &ev);
        if (r == -ETIMEDOUT) {
            g->failed = group_fail(g, r, "ps_pull: no average of bucket %d (step %llu) from ddpd within %d ms", bucket,
                                   (unsigned long long)step, g->timeout_ms);
            return r;
        }
        if (r < 0)
            return r;
        if (ev && ev->msg.env->type == DDP__MSG_TYPE__ERROR) { /* ddpd refused a push */
            g->failed = group_fail(g, ev->msg.env->error->code, "%s", ev->msg.env->error->message);
            agent_event_free(ev);
            return g->failed;
        }
    }
    const Ddp__GradAvg *avg = ev ? ev->msg.env->grad_avg : NULL;
    bool in_segment = !avg || avg->shared; /* else a frame */
    int r = 0;
    size_t got = in_segment ? bytes : zmq_msg_size(&ev->msg.payload[0]);
    if ((avg && avg->step != step) || got != bytes)
        g->failed = r =
            group_fail(g, -EPROTO, "ps_pull: ddpd sent bucket %d of step %llu (%zu bytes) for step %llu (%zu)", bucket,
                       (unsigned long long)(avg ? avg->step : step), got, (unsigned long long)step, bytes);
    else if (in_segment && !g->ps_average)
        g->failed = r =
            group_fail(g, -EPROTO, "ps_pull: ddpd sent bucket %d in shared memory this rank never mapped", bucket);
    else if (!in_segment && g->ps_average && !g->ps_average_copy && (r = ps_average_copy_make(g)) < 0)
        g->failed = r;
    else {
        const void *from = in_segment ? g->ps_average + off : zmq_msg_data(&ev->msg.payload[0]);
        if (g->ps_average_copy && from != (char *)g->ps_average_copy + off)
            memcpy((char *)g->ps_average_copy + off, from, bytes);
        if (ret_average)
            memcpy(ret_average, from, bytes);
        if (!avg)
            agent_push_answered(&g->agent, (uint32_t)bucket, step);
        g->ps_pull_step[bucket]++;
        comm_count_ddpd(&g->comm, 0, bytes);
        group_update_rejoin(g);
    }
    agent_event_free(ev);
    return r;
}
