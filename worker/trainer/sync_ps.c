/* Parameter server: every rank forwards and backwards its shard and pushes each gradient
 * bucket to ddpd as soon as its layers' backward is done; ddpd averages every rank's push
 * in rank order and sends the average back; every rank then steps its own optimizer with
 * it. ddpd holds the reduction buffers; the ranks' memory stays equal. */
#include "worker/trainer/trainer.h"

#include <errno.h>

int sync_ps_setup(trainer *t) {
    /* The same seed gives every rank the same parameters; broadcast anyway, as in ddp
     * mode, so that a rank that resumed differently cannot drift. */
    size_t n = t->m.spec.n_params;
    float *params = trainer_block_wire(t, MODEL_PARAMS, t->params_wire, t->rank == 0);
    int r = ddp_broadcast(t->g, params, n, DDP_F32, 0);
    if (r < 0)
        return trainer_fail(t, r, "broadcasting the parameters from rank 0: %s", ddp_last_error(t->g));
    trainer_block_unwire(t, MODEL_PARAMS, params);
    return 0;
}

/* A finished bucket goes to ddpd; on a GPU it is first copied to pinned host memory
 * behind its layers' kernels, and pushed once sync_ps_step has queued all of backward. */
static void on_layer_done(void *ctx, int layer) {
    trainer *t = ctx;
    for (int k = 0; k < t->n_buckets; k++)
        if (t->bucket_first[k] == layer && !t->bucket_error) {
            size_t off, count;
            trainer_bucket_range(t, k, &off, &count);
            if (trainer_direct(t))
                t->bucket_error = ddp_ps_push(t->g, k, t->m.grads + off);
            else
                trainer_bucket_stage(t, k);
        }
}

int sync_ps_step(trainer *t, int B, double *ret_loss) {
    model *m = &t->m;
    double t0 = trainer_now();
    double loss = trainer_forward_local(t, B);
    t->bucket_error = 0;
    model_backward(m, t->dlogits, B, on_layer_done, t);
    float *grads = trainer_block_wire(t, MODEL_GRADS, t->grads_wire, false);
    for (int k = 0; k < t->n_buckets && !trainer_direct(t) && !t->bucket_error; k++) {
        size_t off, count;
        trainer_bucket_range(t, k, &off, &count);
        trainer_bucket_wait_staged(t, k);
        t->bucket_error = ddp_ps_push(t->g, k, grads + off);
    }
    trainer_synchronize(t);
    double t1 = trainer_now();
    int r = t->bucket_error;
    for (int k = 0; k < t->n_buckets && r == 0; k++) {
        size_t off, count;
        trainer_bucket_range(t, k, &off, &count);
        r = ddp_ps_pull(t->g, k, grads + off); /* the average replaces this rank's gradients */
    }
    double t2 = trainer_now();
    if (r < 0)
        return trainer_fail(t, r, "exchanging gradients with ddpd at step %llu: %s", (unsigned long long)t->step,
                            ddp_last_error(t->g));
    trainer_block_unwire(t, MODEL_GRADS, grads);
    trainer_sgd_step(t);
    trainer_synchronize(t);
    double t3 = trainer_now();
    t->times.compute_s += (t1 - t0) + (t3 - t2);
    t->times.comm_s += t2 - t1; /* pulling the averages: ddpd's reduction and the transfer */
    *ret_loss = loss;
    return 0;
}
