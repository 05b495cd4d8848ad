/* Parameter server: every rank forwards and backwards its shard and pushes each gradient
 * bucket to ddpd as soon as its layers' backward is done; ddpd averages every rank's push
 * in rank order and sends the average back; every rank then steps its own optimizer with
 * it. ddpd holds the reduction buffers; the ranks' memory stays equal. Where a model on
 * the host shares memory with ddpd, nothing is copied: backward computes the gradients in
 * the push segment (ddp_ps_buffer) and SGD reads the averages where ddpd wrote them
 * (ddp_ps_average). */
#include <errno.h>
#include <stdlib.h>

#include "worker/trainer/sync.h"

typedef struct {
    sync_ctx c;
    int error;        /* the first push that failed, during backward */
    bool in_segments; /* gradients in the push segment, averages read in ddpd's */
} ps_state;

/* ddpd checks every push against the layout the members declare. */
static void ps_join(ddp_options *join, const bucket_plan *buckets, bool split) {
    (void)split;
    join->ps_buckets = buckets->count;
    join->n_ps_buckets = (size_t)buckets->n;
}

static void ps_close(void *state) {
    free(state);
}

/* Whether the segments shared with ddpd hold the buckets where the model's gradient block
 * does (the buckets one after another from the block's start, as with the one bucket of
 * the default plan): then backward and SGD can work in them. */
static bool segments_fit(const sync_ctx *c) {
    if (!ddp_ps_buffer(c->g, 0) || !ddp_ps_average(c->g, 0))
        return false;
    for (int k = 0; k < c->buckets->n; k++) {
        size_t off, count;
        bucket_range(c->buckets, &c->m->spec, k, &off, &count);
        if (ddp_ps_buffer(c->g, k) != ddp_ps_buffer(c->g, 0) + off ||
            ddp_ps_average(c->g, k) != ddp_ps_average(c->g, 0) + off)
            return false;
    }
    return true;
}

static int ps_open(const sync_ctx *c, void **ret_state) {
    ps_state *s = calloc(1, sizeof(*s));
    if (!s)
        return sync_fail(c, -ENOMEM, "out of memory");
    s->c = *c;
    /* The same seed gives every rank the same parameters; broadcast anyway, as in ddp
     * mode, so that a rank that resumed differently cannot drift. */
    float *params = staging_block_wire(c->staging, MODEL_PARAMS, c->staging->params, c->rank == 0);
    int r = ddp_broadcast(c->g, params, c->m->spec.n_params, DDP_F32, 0);
    if (r < 0) {
        ps_close(s);
        return sync_fail(c, r, "broadcasting the parameters from rank 0: %s", ddp_last_error(c->g));
    }
    staging_block_unwire(c->staging, MODEL_PARAMS, params);
    s->in_segments =
        c->staging->direct && segments_fit(c) && model_lend(c->m, MODEL_GRADS, ddp_ps_buffer(c->g, 0)) == 0;
    *ret_state = s;
    return 0;
}

/* A finished bucket goes to ddpd; on a GPU it is first copied to pinned host memory
 * behind its layers' kernels, and pushed once ps_step has queued all of backward. */
static void on_layer_done(void *ctx, int layer) {
    ps_state *s = ctx;
    const sync_ctx *c = &s->c;
    for (int k = 0; k < c->buckets->n; k++)
        if (c->buckets->first[k] == layer && !s->error) {
            size_t off, count;
            bucket_range(c->buckets, &c->m->spec, k, &off, &count);
            if (c->staging->direct)
                s->error = ddp_ps_push(c->g, k, c->m->grads + off);
            else
                staging_grads_stage(c->staging, off, count, k);
        }
}

static int ps_step(void *state, int B, double *ret_loss) {
    ps_state *s = state;
    const sync_ctx *c = &s->c;
    model *m = c->m;
    staging *st = c->staging;
    double t0 = sync_now();
    double loss = sync_forward_local(c, B);
    double tf = sync_now();
    s->error = 0;
    model_backward(m, c->batch->dlogits, B, on_layer_done, s);
    float *grads = staging_block_wire(st, MODEL_GRADS, st->grads, false);
    for (int k = 0; k < c->buckets->n && !st->direct && !s->error; k++) {
        size_t off, count;
        bucket_range(c->buckets, &m->spec, k, &off, &count);
        staging_grads_wait(st, off, k);
        s->error = ddp_ps_push(c->g, k, grads + off);
    }
    model_synchronize(m);
    double t1 = sync_now();
    int r = s->error;
    for (int k = 0; k < c->buckets->n && r == 0; k++) {
        size_t off, count;
        bucket_range(c->buckets, &m->spec, k, &off, &count);
        /* the average replaces this rank's gradients, or stays in ddpd's segment */
        r = ddp_ps_pull(c->g, k, s->in_segments ? NULL : grads + off);
    }
    double t2 = sync_now();
    if (r < 0)
        return sync_fail(c, r, "exchanging gradients with ddpd at step %llu: %s", (unsigned long long)*c->step,
                         ddp_last_error(c->g));
    staging_block_unwire(st, MODEL_GRADS, grads);
    if (s->in_segments)
        model_sgd_step_from(m, ddp_ps_average(c->g, 0), c->lr, c->momentum, *c->step == 0);
    else
        sync_sgd_step(c);
    model_synchronize(m);
    double t3 = sync_now();
    sync_count_compute(c, tf - t0, t1 - tf, t3 - t2); /* backward counts its pushes */
    /* pulling the averages: ddpd's reduction and the transfer */
    c->times->comm_s += t2 - t1;
    *ret_loss = loss;
    return 0;
}

const sync_mode sync_mode_ps = {
    .name = "ps",
    .join = ps_join,
    .open = ps_open,
    .step = ps_step,
    .close = ps_close,
};
