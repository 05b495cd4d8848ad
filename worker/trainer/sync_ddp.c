/* DistributedDataParallel: every rank forwards and backwards its shard; gradients are
 * all-reduced (AVG) in buckets, last layers first, each launched with
 * ddp_all_reduce_async as soon as its layers' backward is done, so communication overlaps
 * the rest of backward; every rank then steps its own optimizer. Parameters start equal:
 * rank 0's are broadcast before step one.
 *
 * On a GPU a finished bucket is first copied to pinned host memory on the backend's copy
 * stream; backward's kernels are all queued by then, so while the GPU computes the earlier
 * layers, this thread waits for each bucket's copy in turn and hands it to the
 * communication thread. The averages go back to the device in one copy. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/trainer/sync.h"

#define NCCL_ID_KEY "ddp-worker/nccl-id"

typedef struct {
    sync_ctx c;
    ddp_request *req[MODEL_MAX_LAYERS]; /* each bucket's all-reduce in flight */
    int error;                          /* the first bucket that failed, during backward */
} ddp_state;

static int job_ended(void *ctx) {
    ddp_state *s = ctx;
    return ddp_job_status(s->c.g) != 0;
}

/* --transport nccl: rank 0 makes the communicator's id, the job's store hands it out. */
static int peer_setup(ddp_state *s) {
    const sync_ctx *c = &s->c;
    backend *b = c->m->b;
    char id[BACKEND_PEER_ID_BYTES], err[256];
    int r;
    if (c->rank == 0) {
        if ((r = b->ops->peer_id(b, id, sizeof(id), err, sizeof(err))) < 0)
            return sync_fail(c, r, "--transport nccl: %s", err);
        if ((r = ddp_store_set(c->g, NCCL_ID_KEY, id, sizeof(id))) < 0)
            return sync_fail(c, r, "--transport nccl: %s", ddp_last_error(c->g));
    } else {
        size_t size = 0;
        if ((r = ddp_store_get(c->g, NCCL_ID_KEY, id, sizeof(id), &size)) < 0)
            return sync_fail(c, r, "--transport nccl: %s", ddp_last_error(c->g));
        if (size != sizeof(id))
            return sync_fail(c, -EPROTO, "--transport nccl: rank 0's id is %zu bytes, not %zu", size, sizeof(id));
    }
    if ((r = b->ops->peer_join(b, id, sizeof(id), c->rank, c->world, ddp_timeout_ms(c->g), job_ended, s, err,
                               sizeof(err))) < 0)
        return sync_fail(c, r, "--transport nccl: %s", err);
    return 0;
}

/* Every member must agree on the bucket layout, which --devices changes (a bucket never
 * straddles the devices). */
static void ddp_join(ddp_options *join, const bucket_plan *buckets, bool split) {
    (void)buckets;
    if (split)
        join->mode = "ddp-split";
}

/* The gradient block in memory the peers read in place (ddp_alloc: over shared memory the
 * all-reduce skips copying it in). A model on the host computes into it; a GPU's buckets
 * land in it by DMA (registered, pinned). Every rank allocates it, a collective; it goes
 * with the group, after the model and the staging. */
static int place_grads(const sync_ctx *c) {
    float *block;
    TRY(sync_shared_block(c, "gradients", &block));
    if (c->staging->direct)
        model_lend(c->m, MODEL_GRADS, block);
    else if (staging_place_grads(c->staging, block) < 0)
        fprintf(stderr,
                "ddp-worker: rank %d: the device cannot pin the shared gradient block; its buckets are "
                "staged in pinned memory of their own, one copy more\n",
                c->rank);
    return 0;
}

static void ddp_close(void *state) {
    free(state);
}

static int ddp_open(const sync_ctx *c, void **ret_state) {
    ddp_state *s = calloc(1, sizeof(*s));
    if (!s)
        return sync_fail(c, -ENOMEM, "out of memory");
    s->c = *c;
    float *params = staging_block_wire(c->staging, MODEL_PARAMS, c->staging->params, c->rank == 0);
    int r = ddp_broadcast(c->g, params, c->m->spec.n_params, DDP_F32, 0);
    if (r < 0)
        r = sync_fail(c, r, "broadcasting the parameters from rank 0: %s", ddp_last_error(c->g));
    else
        staging_block_unwire(c->staging, MODEL_PARAMS, params);
    if (r == 0 && c->device_all_reduce)
        r = peer_setup(s);
    else if (r == 0)
        r = place_grads(c);
    if (r < 0) {
        ddp_close(s);
        return r;
    }
    *ret_state = s;
    return 0;
}

static void bucket_launch(ddp_state *s, int k, float *grads) {
    size_t off, count;
    bucket_range(s->c.buckets, &s->c.m->spec, k, &off, &count);
    s->error = ddp_all_reduce_async(s->c.g, grads + off, count, DDP_F32, DDP_AVG, &s->req[k]);
    if (s->error)
        s->req[k] = NULL;
}

/* Called by backward as each layer's gradients complete: launch the bucket it finishes. */
static void on_layer_done(void *ctx, int layer) {
    ddp_state *s = ctx;
    const sync_ctx *c = &s->c;
    for (int k = 0; k < c->buckets->n; k++) {
        if (c->buckets->first[k] != layer || s->error)
            continue;
        size_t off, count;
        bucket_range(c->buckets, &c->m->spec, k, &off, &count);
        if (c->device_all_reduce) {
            backend *b = c->m->b;
            char err[256];
            if ((s->error = b->ops->peer_all_reduce_avg(b, c->m->grads + off, count, err, sizeof(err))) < 0)
                sync_fail(c, s->error, "all-reducing gradients at step %llu: %s", (unsigned long long)*c->step, err);
        } else if (!c->staging->direct) /* queued behind this layer's kernels; sent once it lands */
            staging_grads_stage(c->staging, off, count, k);
        else if (layer > 0)
            /* The bucket of the first layers completes with backward itself: nothing is
             * left to overlap it with, so ddp_step runs it on this thread, sparing two
             * hand-offs to the communication thread while the other core is busy with the
             * other rank. */
            bucket_launch(s, k, c->m->grads);
    }
}

/* --transport nccl: each bucket is averaged on the devices as its layers finish, on the
 * backend's peer stream; the optimizer's kernels are queued behind them. */
static int ddp_step_on_devices(ddp_state *s, int B, double *ret_loss) {
    const sync_ctx *c = &s->c;
    model *m = c->m;
    backend *b = m->b;
    double t0 = sync_now();
    double loss = sync_forward_local(c, B);
    double tf = sync_now();
    s->error = 0;
    model_backward(m, c->batch->dlogits, B, on_layer_done, s);
    if (s->error) /* sync_fail has said why */
        return s->error;
    double t1 = sync_now(); /* backward is queued; the GPU and NCCL are at work */
    char err[256];
    int r = b->ops->peer_wait(b, ddp_timeout_ms(c->g), job_ended, s, err, sizeof(err));
    if (r < 0) {
        if (r == -ECONNABORTED) /* ddpd's reason names the rank that ended the job */
            return sync_fail(c, ddp_job_status(c->g), "all-reducing gradients at step %llu: %s",
                             (unsigned long long)*c->step, ddp_last_error(c->g));
        return sync_fail(c, r, "all-reducing gradients at step %llu: %s", (unsigned long long)*c->step, err);
    }
    double t2 = sync_now();
    sync_sgd_step(c);
    b->ops->synchronize(b);
    double t3 = sync_now();
    sync_count_compute(c, tf - t0, t1 - tf, t3 - t2);
    c->times->comm_s += t2 - t1; /* the rest of backward and the all-reduces, overlapped */
    *ret_loss = loss;
    return 0;
}

static int ddp_step(void *state, int B, double *ret_loss) {
    ddp_state *s = state;
    const sync_ctx *c = &s->c;
    if (c->device_all_reduce)
        return ddp_step_on_devices(s, B, ret_loss);
    model *m = c->m;
    staging *st = c->staging;
    double t0 = sync_now(), waited0 = 0, waited1 = 0;
    ddp_get_arrival_wait(c->g, &waited0);
    double loss = sync_forward_local(c, B);
    double tf = sync_now();
    s->error = 0;
    memset(s->req, 0, sizeof(s->req));
    model_backward(m, c->batch->dlogits, B, on_layer_done, s);
    int last = c->buckets->n - 1;
    float *grads = staging_block_wire(st, MODEL_GRADS, st->grads, false);
    if (!st->direct) /* every bucket but the last to the communication thread as it lands */
        for (int k = 0; k < last && !s->error; k++) {
            size_t off, count;
            bucket_range(c->buckets, &m->spec, k, &off, &count);
            staging_grads_wait(st, off, k);
            bucket_launch(s, k, grads);
        }
    double t1 = sync_now();
    int r = s->error;
    if (r == 0) { /* the last bucket: layers 0.. (after the async ones, in order) */
        size_t off, count;
        bucket_range(c->buckets, &m->spec, last, &off, &count);
        if (!st->direct)
            staging_grads_wait(st, off, last);
        r = ddp_all_reduce(c->g, grads + off, count, DDP_F32, DDP_AVG);
    }
    double t1b = sync_now(); /* communication: the last bucket; waiting: what async ones left */
    for (int k = 0; k < c->buckets->n; k++)
        if (s->req[k]) {
            int w = ddp_wait(s->req[k]);
            r = r ? r : w;
        }
    double t2 = sync_now();
    if (r < 0)
        return sync_fail(c, r, "all-reducing gradients at step %llu: %s", (unsigned long long)*c->step,
                         ddp_last_error(c->g));
    ddp_get_arrival_wait(c->g, &waited1); /* every request is done: nothing runs meanwhile */
    c->times->peer_wait_s += waited1 - waited0;
    staging_block_unwire(st, MODEL_GRADS, grads);
    double t3 = sync_now();
    sync_sgd_step(c);
    model_synchronize(m);
    double t4 = sync_now();
    sync_count_compute(c, tf - t0, t1 - tf, t4 - t3);
    c->times->comm_s += t1b - t1; /* the last bucket's all-reduce, in the open */
    c->times->wait_s += t2 - t1b; /* async buckets backward did not hide */
    c->times->comm_s += t3 - t2;
    *ret_loss = loss;
    return 0;
}

const sync_mode sync_mode_ddp = {
    .name = "ddp",
    .device_all_reduce = true,
    .join = ddp_join,
    .open = ddp_open,
    .step = ddp_step,
    .close = ddp_close,
};
