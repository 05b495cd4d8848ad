/* The control plane's waits: requests to ddpd and the one loop that reads its messages. */
#include <stdlib.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/libddp/group.h"

void group_envelope(ddp_group *g, Ddp__Envelope *env, Ddp__MsgType type) {
    wire_envelope_init(env, type, g->job, g->rank, g->generation, ++g->next_seq);
}

/* A ps average (its payload, or word that it is in shared memory): what ddp_ps_pull will
 * want. The wire layer has checked that the frames match. */
static bool is_average(const agent_event *ev) {
    return ev->msg.env->type == DDP__MSG_TYPE__GRAD_AVG;
}

int group_next_event(ddp_group *g, uint64_t deadline_ms, bool (*match)(const agent_event *ev, void *ctx), void *ctx,
                     agent_event **ret_event) {
    for (;;) {
        job_end_told(&g->agent.end); /* the caller's thread: whatever ended the job, it returns it */
        agent_event *ev = NULL;
        int r = agent_next(&g->agent, clock_ms_until(deadline_ms), &ev);
        if (r == -EINTR)
            continue;
        if (r == -ETIMEDOUT)
            return r;
        if (r < 0)
            return group_fail(g, r, "waiting for ddpd: %s", error_string(r));
        const Ddp__Envelope *e = ev->msg.env;
        if (!e || e->type == DDP__MSG_TYPE__ABORT)
            job_end_told(&g->agent.end); /* raised before it was posted: this return says it */
        if (!e)                          /* the control thread lost ddpd */
            g->failed = group_fail(g, ev->failure, "%s", ev->text);
        else if (e->type == DDP__MSG_TYPE__ABORT)
            g->failed = group_fail(g, e->abort->code, "job '%s' aborted: %s", g->job, e->abort->reason);
        else if (match(ev, ctx)) {
            *ret_event = ev;
            return 0;
        } else if (is_average(ev) && e->grad_avg->bucket < g->n_ps_buckets && !g->ps_early[e->grad_avg->bucket]) {
            g->ps_early[e->grad_avg->bucket] = ev; /* for its ddp_ps_pull */
            continue;
        }
        agent_event_free(ev);
        if (g->failed)
            return g->failed;
    }
}

/* The reply to a request: the message with its sequence number. */
static bool is_reply(const agent_event *ev, void *ctx) {
    const Ddp__Envelope *e = ev->msg.env;
    return e->seq == *(const uint64_t *)ctx && e->type != DDP__MSG_TYPE__GRAD_AVG;
}

int group_request(ddp_group *g, Ddp__Envelope *env, Ddp__MsgType reply_type, int timeout_ms, const char *timeout_text,
                  agent_event **ret_event) {
    if (g->failed)
        return g->failed;
    int r = agent_request(&g->agent, env);
    if (r < 0)
        return group_fail(g, r, "could not hand a %s request to the control thread: %s", wire_type_name(env->type),
                          error_string(r));
    agent_event *ev = NULL;
    uint64_t seq = env->seq;
    r = group_next_event(g, clock_now_ms() + (uint64_t)timeout_ms, is_reply, &seq, &ev);
    if (r == -ETIMEDOUT)
        return group_fail(g, r, "%s", timeout_text);
    if (r < 0)
        return r;
    const Ddp__Envelope *reply = ev->msg.env;
    if (reply->type == reply_type) {
        *ret_event = ev;
        return 0;
    }
    if (reply->type == DDP__MSG_TYPE__ERROR)
        r = group_fail(g, reply->error->code, "%s", reply->error->message);
    else if (reply->type == DDP__MSG_TYPE__REJECT)
        r = group_fail(g, reply->reject->code, "%s", reply->reject->reason);
    else
        r = group_fail(g, -EPROTO, "ddpd answered a %s request with %s", wire_type_name(env->type),
                       wire_type_name(reply->type));
    agent_event_free(ev);
    return r;
}
