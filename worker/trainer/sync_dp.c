/* DataParallel, with rank 0 as the first GPU. Each step: rank 0 broadcasts the parameters
 * (replicate); every rank forwards its shard; the outputs are gathered on rank 0, which
 * computes the loss of the whole batch and scatters the output gradients; every rank
 * backwards; parameter gradients are summed onto rank 0, which alone holds optimizer state
 * and steps. Rank 0 holds the gathered outputs, their gradients and the velocity: the
 * imbalance nn.DataParallel is known for.
 *
 * Where gradients live in host memory (the CPU) the sum is libddp's reduce. On a GPU it is
 * DataParallel's reduce_add on the first device: every rank's gradients come to rank 0 and
 * are added there, one rank after another, by the backend's accumulate kernel. */
#include "worker/trainer/trainer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

/* Rank 0's extra buffers live with its outputs, on the (last) device that computes the loss. */
static void *dp_alloc(trainer *t, size_t bytes) {
    return t->m.b->ops->alloc(t->m.b, bytes);
}

int sync_dp_setup(trainer *t) {
    if (t->rank != 0)
        return 0;
    int C = t->m.spec.sizes[t->m.spec.n_layers];
    size_t out = (size_t)t->global_batch * (size_t)C;
    t->gathered_logits = dp_alloc(t, out * sizeof(float));
    t->gathered_dlogits = dp_alloc(t, out * sizeof(float));
    t->gathered_targets = dp_alloc(t, (size_t)t->global_batch);
    t->gathered_targets_host = calloc((size_t)t->global_batch, 1);
    t->gathered_losses = dp_alloc(t, (size_t)t->global_batch * sizeof(float));
    t->gathered_probs = dp_alloc(t, out * sizeof(float));
    if (t->m.spec.loss == LOSS_MSE)
        t->gathered_mse_targets = dp_alloc(t, out * sizeof(float));
    backend *staging = trainer_staging_backend(t);
    if (!t->m.b->ops->host_memory && !(t->gathered_wire = staging->ops->host_alloc(staging, out * sizeof(float))))
        return trainer_fail(t, -ENOMEM, "out of memory for rank 0's gathered outputs");
    if (!t->gathered_logits || !t->gathered_dlogits || !t->gathered_targets || !t->gathered_targets_host ||
        !t->gathered_losses || !t->gathered_probs ||
        (t->m.spec.loss == LOSS_MSE && !t->gathered_mse_targets))
        return trainer_fail(t, -ENOMEM, "out of memory for rank 0's gathered outputs");
    if (!trainer_direct(t)) { /* every rank's gradients, and a device buffer to add each from */
        size_t n = t->m.spec.n_params;
        t->gathered_grads = staging->ops->host_alloc(staging, (size_t)t->world * n * sizeof(float));
        for (int i = 0; i < t->m.n_stages; i++) {
            const model_stage *st = &t->m.stages[i];
            if (!(t->dp_addend[i] = st->b->ops->alloc(st->b, st->count * sizeof(float))) || !t->gathered_grads)
                return trainer_fail(t, -ENOMEM, "out of memory for rank 0's gradient sum");
        }
    }
    return 0;
}

/* The whole batch's gradients on rank 0: libddp's reduce, or on a device, DataParallel's
 * reduce_add (see the top). */
static int dp_sum_gradients(trainer *t) {
    model *m = &t->m;
    size_t n = m->spec.n_params;
    float *grads = trainer_block_wire(t, MODEL_GRADS, t->grads_wire, true);
    if (trainer_direct(t))
        return ddp_reduce(t->g, grads, n, DDP_F32, DDP_SUM, 0);
    TRY(ddp_gather(t->g, grads, t->gathered_grads, n, DDP_F32, 0));
    if (t->rank != 0)
        return 0;
    for (int k = 1; k < t->world; k++) /* rank 0's own are on the device already */
        for (int i = 0; i < m->n_stages; i++) {
            const model_stage *st = &m->stages[i];
            const float *theirs = t->gathered_grads + (size_t)k * n + st->offset;
            st->b->ops->upload(st->b, t->dp_addend[i], theirs, st->count * sizeof(float));
            st->b->ops->accumulate(st->b, st->grads, t->dp_addend[i], st->count);
        }
    return 0;
}

int sync_dp_step(trainer *t, int B, double *ret_loss) {
    model *m = &t->m;
    const model_spec *s = &m->spec;
    int C = s->sizes[s->n_layers], r;
    size_t n = s->n_params;
    double c0 = trainer_now();
    /* replicate */
    float *params = trainer_block_wire(t, MODEL_PARAMS, t->params_wire, t->rank == 0);
    if ((r = ddp_broadcast(t->g, params, n, DDP_F32, 0)) < 0)
        return trainer_fail(t, r, "replicating the parameters: %s", ddp_last_error(t->g));
    if (t->rank != 0)
        trainer_block_unwire(t, MODEL_PARAMS, params);
    double c1 = trainer_now();
    model_zero_grads(m);
    model_forward(m, B);
    trainer_synchronize(t);
    double c2 = trainer_now();
    /* outputs (and targets) to rank 0 */
    size_t out = (size_t)B * (size_t)C, gathered = (size_t)t->global_batch * (size_t)C;
    float *logits = trainer_wire(t, t->outputs_wire, m->acts[s->n_layers], out, true);
    float *all = trainer_wire(t, t->gathered_wire, t->gathered_logits, gathered, false);
    r = ddp_gather(t->g, logits, all, out, DDP_F32, 0);
    if (r == 0 && t->rank == 0)
        trainer_unwire(t, t->gathered_logits, all, gathered);
    if (r == 0 && s->loss == LOSS_CROSSENTROPY)
        r = ddp_gather(t->g, t->targets_host, t->gathered_targets_host, (size_t)B, DDP_U8, 0);
    if (r == 0 && s->loss == LOSS_MSE) {
        all = trainer_wire(t, t->gathered_wire, t->gathered_mse_targets, gathered, false);
        r = ddp_gather(t->g, t->mse_targets_host, all, out, DDP_F32, 0);
        if (r == 0 && t->rank == 0)
            trainer_unwire(t, t->gathered_mse_targets, all, gathered);
    }
    if (r < 0)
        return trainer_fail(t, r, "gathering outputs on rank 0: %s", ddp_last_error(t->g));
    double c3 = trainer_now();
    double loss = 0;
    if (t->rank == 0) { /* the loss of the whole batch, on the first device */
        int G = t->global_batch;
        m->b->ops->upload(m->b, t->gathered_targets, t->gathered_targets_host, (size_t)G);
        loss = trainer_loss(t, G, t->gathered_losses, t->gathered_probs, t->gathered_logits, t->gathered_targets,
                            t->gathered_mse_targets, t->gathered_dlogits, 1.0f / (float)G);
    }
    double c4 = trainer_now();
    all = trainer_wire(t, t->gathered_wire, t->gathered_dlogits, gathered, t->rank == 0);
    float *dlogits = trainer_wire(t, t->outputs_wire, t->dlogits, out, false);
    if ((r = ddp_scatter(t->g, all, dlogits, out, DDP_F32, 0)) < 0)
        return trainer_fail(t, r, "scattering output gradients: %s", ddp_last_error(t->g));
    trainer_unwire(t, t->dlogits, dlogits, out);
    double c5 = trainer_now();
    model_backward(m, t->dlogits, B, NULL, NULL);
    trainer_synchronize(t);
    double c6 = trainer_now();
    /* dlogits carry 1/G already: the sum over ranks is the whole batch's gradient */
    if ((r = dp_sum_gradients(t)) < 0)
        return trainer_fail(t, r, "summing gradients onto rank 0: %s", ddp_last_error(t->g));
    double c7 = trainer_now();
    if (t->rank == 0)
        trainer_sgd_step(t);
    trainer_synchronize(t);
    double c8 = trainer_now();
    /* everyone reports the loss rank 0 computed */
    if ((r = ddp_broadcast(t->g, &loss, 1, DDP_F64, 0)) < 0)
        return trainer_fail(t, r, "broadcasting the loss: %s", ddp_last_error(t->g));
    double c9 = trainer_now();
    t->times.compute_s += (c2 - c1) + (c4 - c3) + (c6 - c5) + (c8 - c7);
    t->times.comm_s += (c1 - c0) + (c3 - c2) + (c5 - c4) + (c7 - c6) + (c9 - c8);
    *ret_loss = loss;
    return 0;
}
