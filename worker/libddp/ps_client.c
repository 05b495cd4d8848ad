/* Parameter-server mode, the worker's side: push a bucket of gradients to ddpd, pull the
 * average of every rank's back. The messages travel on the control connection, through
 * the group's control thread, like every message from ddpd; the gradients and averages
 * too, unless this rank shares memory with ddpd (ps_client_share): then a push copies the
 * bucket into the push segment and says so, and a pull copies the average from ddpd's. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/shm_segment.h"
#include "worker/libddp/group.h"

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
    size_t bytes = floats * sizeof(float);
    int fd = -1, sock = -1, average = -1, r;
    int32_t said = -1;
    char *pushed = NULL, *avg = NULL, why[128] = "";
    fd_peer who;
    if ((r = shm_segment_make("ddp-ps-push", bytes, &fd)) < 0 || (r = fd_socket_connect(g->ps_socket, &sock)) < 0 ||
        (r = fd_socket_peer(sock, &who)) < 0 || (r = fd_socket_send(sock, fd, g->rank)) < 0 ||
        (r = fd_socket_recv(sock, clock_now_ms() + (uint64_t)g->timeout_ms, &average, &said)) < 0 ||
        (r = shm_segment_map(fd, bytes, &pushed, why, sizeof(why))) < 0 ||
        (r = shm_segment_map(average, bytes, &avg, why, sizeof(why))) < 0) {
        /* another host's ddpd is not there to connect to: the frames will do */
        log_debug("ps: no shared memory with ddpd (%s%s%s): pushing over ZeroMQ", error_string(r), why[0] ? ": " : "",
                  why);
        if (pushed)
            munmap(pushed, bytes);
        pushed = NULL;
    } else {
        g->ps_pushed = pushed;
        g->ps_average = avg;
        g->ps_bytes = bytes;
    }
    (void)who; /* the socket's name came from ddpd's Welcome, over ddpd's own connection */
    if (fd >= 0)
        close(fd);
    if (sock >= 0)
        close(sock);
    if (average >= 0)
        close(average);
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
        r = agent_set_ps(&g->agent, g->n_ps_buckets, g->ps_pushed, offsets, sizes);
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
        r = agent_push(&g->agent, &env, (uint32_t)bucket, NULL, 0);
    } else {
        r = agent_push(&g->agent, &env, (uint32_t)bucket, grads, bytes);
    }
    if (r < 0)
        return group_fail(g, r, "ps_push: could not hand bucket %d to the control thread: %s", bucket, error_string(r));
    g->ps_push_step[bucket]++;
    comm_count_ddpd(&g->comm, g->ps_buckets[bucket] * sizeof(float), 0);
    return 0;
}

/* A frame where this rank had shared memory: ddpd restarted, and the new one holds none of
 * it. ddp_ps_average points at this rank's own copy from now on, which starts as the old
 * segment: the averages pulled from it so far. */
static int ps_average_copy_make(ddp_group *g) {
    if (!(g->ps_average_copy = malloc(g->ps_bytes ? g->ps_bytes : 1)))
        return group_fail(g, -ENOMEM, "ps_pull: out of memory for the averages");
    memcpy(g->ps_average_copy, g->ps_average, g->ps_bytes);
    return 0;
}

/* What a pull waits for: bucket's average, or ddpd's refusal of a push (an Error). */
static bool is_pulled(const agent_event *ev, void *ctx) {
    const Ddp__Envelope *e = ev->msg.env;
    return (e->type == DDP__MSG_TYPE__GRAD_AVG && e->grad_avg->bucket == *(uint32_t *)ctx) ||
           e->type == DDP__MSG_TYPE__ERROR;
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
    size_t bytes = g->ps_buckets[bucket] * sizeof(float);
    uint64_t step = g->ps_pull_step[bucket];
    if (step >= g->ps_push_step[bucket])
        return group_fail(g, -EINVAL, "ps_pull: bucket %d was not pushed for step %llu", bucket,
                          (unsigned long long)step);
    agent_event *ev = g->ps_early[bucket];
    g->ps_early[bucket] = NULL;
    if (!ev) {
        uint32_t wanted = (uint32_t)bucket;
        int r = group_next_event(g, clock_now_ms() + (uint64_t)g->timeout_ms, is_pulled, &wanted, &ev);
        if (r == -ETIMEDOUT) {
            g->failed = group_fail(g, r, "ps_pull: no average of bucket %d (step %llu) from ddpd within %d ms", bucket,
                                   (unsigned long long)step, g->timeout_ms);
            return r;
        }
        if (r < 0)
            return r;
        if (ev->msg.env->type == DDP__MSG_TYPE__ERROR) { /* ddpd refused a push */
            g->failed = group_fail(g, ev->msg.env->error->code, "%s", ev->msg.env->error->message);
            agent_event_free(ev);
            return g->failed;
        }
    }
    const Ddp__GradAvg *avg = ev->msg.env->grad_avg;
    int r = 0;
    size_t got = avg->shared ? bytes : zmq_msg_size(&ev->msg.payload[0]);
    if (avg->step != step || got != bytes)
        g->failed = r =
            group_fail(g, -EPROTO, "ps_pull: ddpd sent bucket %d of step %llu (%zu bytes) for step %llu (%zu)", bucket,
                       (unsigned long long)avg->step, got, (unsigned long long)step, bytes);
    else if (avg->shared && !g->ps_average)
        g->failed = r =
            group_fail(g, -EPROTO, "ps_pull: ddpd sent bucket %d in shared memory this rank never mapped", bucket);
    else if (!avg->shared && g->ps_average && !g->ps_average_copy && (r = ps_average_copy_make(g)) < 0)
        g->failed = r;
    else {
        const void *from = avg->shared ? g->ps_average + ps_offset(g, bucket) : zmq_msg_data(&ev->msg.payload[0]);
        if (!avg->shared && g->ps_average_copy)
            memcpy((char *)g->ps_average_copy + ps_offset(g, bucket), from, bytes);
        if (ret_average)
            memcpy(ret_average, from, bytes);
        g->ps_pull_step[bucket]++;
        comm_count_ddpd(&g->comm, 0, bytes);
        group_update_rejoin(g);
    }
    agent_event_free(ev);
    return r;
}
