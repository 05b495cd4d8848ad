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
#include "worker/trainer/trainer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int job_ended(void *ctx) {
    trainer *t = ctx;
    return ddp_job_status(t->g) != 0;
}

/* --transport nccl: rank 0 makes the communicator's id, the job's store hands it out. */
static int peer_setup(trainer *t) {
    const backend_ops *o = t->b.ops;
    char id[BACKEND_PEER_ID_BYTES], err[256];
    int r;
    if (t->rank == 0) {
        if ((r = o->peer_id(&t->b, id, sizeof(id), err, sizeof(err))) < 0)
            return trainer_fail(t, r, "--transport nccl: %s", err);
        if ((r = ddp_store_set(t->g, "ddp-worker/nccl-id", id, sizeof(id))) < 0)
            return trainer_fail(t, r, "--transport nccl: %s", ddp_last_error(t->g));
    } else {
        size_t size = 0;
        if ((r = ddp_store_get(t->g, "ddp-worker/nccl-id", id, sizeof(id), &size)) < 0)
            return trainer_fail(t, r, "--transport nccl: %s", ddp_last_error(t->g));
        if (size != sizeof(id))
            return trainer_fail(t, -EPROTO, "--transport nccl: rank 0's id is %zu bytes, not %zu", size, sizeof(id));
    }
    int timeout = t->opts->timeout_ms > 0 ? t->opts->timeout_ms : 60000;
    if ((r = o->peer_join(&t->b, id, sizeof(id), t->rank, t->world, timeout, job_ended, t, err, sizeof(err))) < 0)
        return trainer_fail(t, r, "--transport nccl: %s", err);
    return 0;
}

int sync_ddp_setup(trainer *t) {
    const model_spec *s = &t->m.spec;
    float *params = trainer_block_wire(t, MODEL_PARAMS, t->params_wire, t->rank == 0);
    int r = ddp_broadcast(t->g, params, s->n_params, DDP_F32, 0);
    if (r < 0)
        return trainer_fail(t, r, "broadcasting the parameters from rank 0: %s", ddp_last_error(t->g));
    trainer_block_unwire(t, MODEL_PARAMS, params);
    return t->peer ? peer_setup(t) : 0;
}

/* --transport nccl: each bucket is averaged on the devices as its layers finish, on the
 * backend's peer stream; the optimizer's kernels are queued behind them. */
static int sync_ddp_step_peer(trainer *t, int B, double *ret_loss);

static void bucket_launch(trainer *t, int k, float *grads) {
    size_t off, count;
    trainer_bucket_range(t, k, &off, &count);
    t->bucket_error = ddp_all_reduce_async(t->g, grads + off, count, DDP_F32, DDP_AVG, &t->bucket_req[k]);
    if (t->bucket_error)
        t->bucket_req[k] = NULL;
}


/* Called by backward as each layer's gradients complete: launch the bucket it finishes. */
static void on_layer_done(void *ctx, int layer) {
    trainer *t = ctx;
    const backend_ops *o = t->b.ops;
    for (int k = 0; k < t->n_buckets; k++) {
        if (t->bucket_first[k] != layer || t->bucket_error)
            continue;
        if (t->peer) {
            size_t off, count;
            char err[256];
            trainer_bucket_range(t, k, &off, &count);
            if ((t->bucket_error = o->peer_all_reduce_avg(&t->b, t->m.grads + off, count, err, sizeof(err))) < 0)
                trainer_fail(t, t->bucket_error, "all-reducing gradients at step %llu: %s",
                             (unsigned long long)t->step, err);
        } else if (!trainer_direct(t)) /* queued behind this layer's kernels; sent once it lands */
            trainer_bucket_stage(t, k);
        else if (layer > 0)
            /* The bucket of the first layers completes with backward itself: nothing is
             * left to overlap it with, so sync_ddp_step runs it on this thread, sparing two
             * hand-offs to the communication thread while the other core is busy with the
             * other rank. */
            bucket_launch(t, k, t->m.grads);
    }
}

int sync_ddp_step(trainer *t, int B, double *ret_loss) {
    if (t->peer)
        return sync_ddp_step_peer(t, B, ret_loss);
    model *m = &t->m;
    double t0 = trainer_now();
    double loss = trainer_forward_local(t, B);
    t->bucket_error = 0;
    memset(t->bucket_req, 0, sizeof(t->bucket_req));
    model_backward(m, t->dlogits, B, on_layer_done, t);
    int last = t->n_buckets - 1;
    bool direct = trainer_direct(t);
    float *grads = trainer_block_wire(t, MODEL_GRADS, t->grads_wire, false);
    if (!direct) /* every bucket but the last to the communication thread as it lands */
        for (int k = 0; k < last && !t->bucket_error; k++) {
            trainer_bucket_wait_staged(t, k);
            bucket_launch(t, k, grads);
        }
    double t1 = trainer_now();
    int r = t->bucket_error;
    if (r == 0) { /* the last bucket: layers 0.. (after the async ones, in order) */
        size_t off, count;
        trainer_bucket_range(t, last, &off, &count);
        if (!direct)
            trainer_bucket_wait_staged(t, last);
        r = ddp_all_reduce(t->g, grads + off, count, DDP_F32, DDP_AVG);
    }
    double t1b = trainer_now(); /* communication: the last bucket; waiting: what async ones left */
    for (int k = 0; k < t->n_buckets; k++)
        if (t->bucket_req[k]) {
            int w = ddp_wait(t->bucket_req[k]);
            r = r ? r : w;
        }
    double t2 = trainer_now();
    if (r < 0)
        return trainer_fail(t, r, "all-reducing gradients at step %llu: %s", (unsigned long long)t->step,
                            ddp_last_error(t->g));
    trainer_block_unwire(t, MODEL_GRADS, grads);
    double t3 = trainer_now();
    trainer_sgd_step(t);
    trainer_synchronize(t);
    double t4 = trainer_now();
    t->times.compute_s += (t1 - t0) + (t4 - t3);
    t->times.comm_s += t1b - t1;  /* the last bucket's all-reduce, in the open */
    t->times.wait_s += t2 - t1b;  /* async buckets backward did not hide */
    t->times.comm_s += t3 - t2;
    *ret_loss = loss;
    return 0;
}

static int sync_ddp_step_peer(trainer *t, int B, double *ret_loss) {
    model *m = &t->m;
    const backend_ops *o = t->b.ops;
    double t0 = trainer_now();
    double loss = trainer_forward_local(t, B);
    t->bucket_error = 0;
    model_backward(m, t->dlogits, B, on_layer_done, t);
    if (t->bucket_error) /* trainer_fail has said why */
        return t->bucket_error;
    double t1 = trainer_now(); /* backward is queued; the GPU and NCCL are at work */
    char err[256];
    int timeout = t->opts->timeout_ms > 0 ? t->opts->timeout_ms : 60000;
    int r = o->peer_wait(&t->b, timeout, job_ended, t, err, sizeof(err));
    if (r < 0) {
        if (r == -ECONNABORTED) /* ddpd's reason names the rank that ended the job */
            return trainer_fail(t, ddp_job_status(t->g), "all-reducing gradients at step %llu: %s",
                                (unsigned long long)t->step, ddp_last_error(t->g));
        return trainer_fail(t, r, "all-reducing gradients at step %llu: %s", (unsigned long long)t->step, err);
    }
    double t2 = trainer_now();
    trainer_sgd_step(t);
    o->synchronize(&t->b);
    double t3 = trainer_now();
    t->times.compute_s += (t1 - t0) + (t3 - t2);
    t->times.comm_s += t2 - t1; /* the rest of backward and the all-reduces, overlapped */
    *ret_loss = loss;
    return 0;
}
