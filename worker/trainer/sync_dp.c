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
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "worker/trainer/sync.h"

typedef struct {
    sync_ctx c;
    /* rank 0 only: DataParallel's extra memory on its first device, (global_batch, ...) */
    float *gathered_logits;    /* (G, outputs) */
    float *gathered_dlogits;   /* (G, outputs) */
    uint8_t *gathered_targets; /* (G) on the device */
    uint8_t *gathered_targets_host;
    float *gathered_mse_targets;
    float *gathered_losses;          /* (G) */
    float *gathered_probs;           /* (G, outputs) */
    float *gathered_wire;            /* (G, outputs) host staging of the above, where they are not host memory */
    float *gathered_grads;           /* gradients not in host memory: every rank's, (world, n_params), host */
    float *addend[MODEL_MAX_STAGES]; /* ... and one rank's at a time, on each stage's device */
} dp_state;

/* Rank 0's extra buffers live with its outputs, on the (last) device that computes the loss. */
static void *dp_alloc(const sync_ctx *c, size_t bytes) {
    return c->m->b->ops->alloc(c->m->b, bytes);
}

static void dp_close(void *state) {
    dp_state *s = state;
    const sync_ctx *c = &s->c;
    backend *out = c->m->b, *host = c->staging->host;
    const backend_ops *o = out->ops;
    size_t G = (size_t)c->global_batch, C = (size_t)c->m->spec.sizes[c->m->spec.n_layers];
    o->release(out, s->gathered_logits, G * C * sizeof(float));
    o->release(out, s->gathered_dlogits, G * C * sizeof(float));
    o->release(out, s->gathered_targets, G);
    o->release(out, s->gathered_mse_targets, G * C * sizeof(float));
    o->release(out, s->gathered_losses, G * sizeof(float));
    o->release(out, s->gathered_probs, G * C * sizeof(float));
    host->ops->host_release(host, s->gathered_wire, G * C * sizeof(float));
    host->ops->host_release(host, s->gathered_grads, (size_t)c->world * c->m->spec.n_params * sizeof(float));
    for (int i = 0; i < c->m->n_stages; i++) {
        const model_stage *st = &c->m->stages[i];
        st->b->ops->release(st->b, s->addend[i], st->count * sizeof(float));
    }
    free(s->gathered_targets_host);
    free(s);
}

static int dp_alloc_rank0(dp_state *s) {
    const sync_ctx *c = &s->c;
    const model *m = c->m;
    int C = m->spec.sizes[m->spec.n_layers];
    size_t out = (size_t)c->global_batch * (size_t)C;
    s->gathered_logits = dp_alloc(c, out * sizeof(float));
    s->gathered_dlogits = dp_alloc(c, out * sizeof(float));
    s->gathered_targets = dp_alloc(c, (size_t)c->global_batch);
    s->gathered_targets_host = calloc((size_t)c->global_batch, 1);
    s->gathered_losses = dp_alloc(c, (size_t)c->global_batch * sizeof(float));
    s->gathered_probs = dp_alloc(c, out * sizeof(float));
    if (m->spec.loss == LOSS_MSE)
        s->gathered_mse_targets = dp_alloc(c, out * sizeof(float));
    backend *host = c->staging->host;
    if (!m->b->ops->host_memory && !(s->gathered_wire = host->ops->host_alloc(host, out * sizeof(float))))
        return sync_fail(c, -ENOMEM, "out of memory for rank 0's gathered outputs");
    if (!s->gathered_logits || !s->gathered_dlogits || !s->gathered_targets || !s->gathered_targets_host ||
        !s->gathered_losses || !s->gathered_probs || (m->spec.loss == LOSS_MSE && !s->gathered_mse_targets))
        return sync_fail(c, -ENOMEM, "out of memory for rank 0's gathered outputs");
    if (!c->staging->direct) { /* every rank's gradients, and a device buffer to add each from */
        size_t n = m->spec.n_params;
        s->gathered_grads = host->ops->host_alloc(host, (size_t)c->world * n * sizeof(float));
        for (int i = 0; i < m->n_stages; i++) {
            const model_stage *st = &m->stages[i];
            if (!(s->addend[i] = st->b->ops->alloc(st->b, st->count * sizeof(float))) || !s->gathered_grads)
                return sync_fail(c, -ENOMEM, "out of memory for rank 0's gradient sum");
        }
    }
    return 0;
}

/* A model on the host keeps its parameters and gradients where the collectives read them
 * in place (sync_shared_block): each step's broadcast of the parameters and sum of the
 * gradients then copy nothing into a staging buffer first. Every rank allocates both (a
 * collective, whatever its device); a rank whose model is not on the host stages through
 * its own buffers and gives them back. */
static int dp_place_blocks(const sync_ctx *c) {
    float *params, *grads;
    TRY(sync_shared_block(c, "parameters", &params));
    TRY(sync_shared_block(c, "gradients", &grads));
    if (!c->staging->direct) {
        ddp_free(c->g, params);
        ddp_free(c->g, grads);
        return 0;
    }
    if (model_lend(c->m, MODEL_PARAMS, params) < 0 || model_lend(c->m, MODEL_GRADS, grads) < 0)
        return sync_fail(c, -EINVAL, "the model cannot take its parameters and gradients in shared memory");
    return 0;
}

static int dp_open(const sync_ctx *c, void **ret_state) {
    dp_state *s = calloc(1, sizeof(*s));
    if (!s)
        return sync_fail(c, -ENOMEM, "out of memory");
    s->c = *c;
    int r = dp_place_blocks(c);
    if (r == 0 && c->rank == 0)
        r = dp_alloc_rank0(s);
    if (r < 0) {
        dp_close(s);
        return r;
    }
    *ret_state = s;
    return 0;
}

/* The whole batch's gradients on rank 0: libddp's reduce, or on a device, DataParallel's
 * reduce_add (see the top). */
static int dp_sum_gradients(dp_state *s) {
    const sync_ctx *c = &s->c;
    model *m = c->m;
    size_t n = m->spec.n_params;
    float *grads = staging_block_wire(c->staging, MODEL_GRADS, c->staging->grads, true);
    if (c->staging->direct)
        return ddp_reduce(c->g, grads, n, DDP_F32, DDP_SUM, 0);
    TRY(ddp_gather(c->g, grads, s->gathered_grads, n, DDP_F32, 0));
    if (c->rank != 0)
        return 0;
    for (int k = 1; k < c->world; k++) /* rank 0's own are on the device already */
        for (int i = 0; i < m->n_stages; i++) {
            const model_stage *st = &m->stages[i];
            const float *theirs = s->gathered_grads + (size_t)k * n + st->offset;
            st->b->ops->upload(st->b, s->addend[i], theirs, st->count * sizeof(float));
            st->b->ops->accumulate(st->b, st->grads, s->addend[i], st->count);
        }
    return 0;
}

static int dp_step(void *state, int B, double *ret_loss) {
    dp_state *s = state;
    const sync_ctx *c = &s->c;
    model *m = c->m;
    staging *st = c->staging;
    batch *b = c->batch;
    const model_spec *spec = &m->spec;
    int C = spec->sizes[spec->n_layers], r;
    size_t n = spec->n_params;
    double c0 = sync_now();
    /* replicate */
    float *params = staging_block_wire(st, MODEL_PARAMS, st->params, c->rank == 0);
    if ((r = ddp_broadcast(c->g, params, n, DDP_F32, 0)) < 0)
        return sync_fail(c, r, "replicating the parameters: %s", ddp_last_error(c->g));
    if (c->rank != 0)
        staging_block_unwire(st, MODEL_PARAMS, params);
    double c1 = sync_now();
    model_zero_grads(m);
    model_forward(m, B);
    model_synchronize(m);
    double c2 = sync_now();
    /* outputs (and targets) to rank 0 */
    size_t out = (size_t)B * (size_t)C, gathered = (size_t)c->global_batch * (size_t)C;
    float *logits = staging_wire(st, st->outputs, m->acts[spec->n_layers], out, true);
    float *all = staging_wire(st, s->gathered_wire, s->gathered_logits, gathered, false);
    r = ddp_gather(c->g, logits, all, out, DDP_F32, 0);
    if (r == 0 && c->rank == 0)
        staging_unwire(st, s->gathered_logits, all, gathered);
    if (r == 0 && spec->loss == LOSS_CROSSENTROPY)
        r = ddp_gather(c->g, b->targets_host, s->gathered_targets_host, (size_t)B, DDP_U8, 0);
    if (r == 0 && spec->loss == LOSS_MSE) {
        all = staging_wire(st, s->gathered_wire, s->gathered_mse_targets, gathered, false);
        r = ddp_gather(c->g, b->mse_targets_host, all, out, DDP_F32, 0);
        if (r == 0 && c->rank == 0)
            staging_unwire(st, s->gathered_mse_targets, all, gathered);
    }
    if (r < 0)
        return sync_fail(c, r, "gathering outputs on rank 0: %s", ddp_last_error(c->g));
    double c3 = sync_now();
    double loss = 0;
    if (c->rank == 0) { /* the loss of the whole batch, on the first device */
        int G = c->global_batch;
        m->b->ops->upload(m->b, s->gathered_targets, s->gathered_targets_host, (size_t)G);
        loss = model_loss(m, G, s->gathered_losses, s->gathered_probs, s->gathered_logits, s->gathered_targets,
                          s->gathered_mse_targets, s->gathered_dlogits, 1.0f / (float)G);
    }
    double c4 = sync_now();
    all = staging_wire(st, s->gathered_wire, s->gathered_dlogits, gathered, c->rank == 0);
    float *dlogits = staging_wire(st, st->outputs, b->dlogits, out, false);
    if ((r = ddp_scatter(c->g, all, dlogits, out, DDP_F32, 0)) < 0)
        return sync_fail(c, r, "scattering output gradients: %s", ddp_last_error(c->g));
    staging_unwire(st, b->dlogits, dlogits, out);
    double c5 = sync_now();
    model_backward(m, b->dlogits, B, NULL, NULL);
    model_synchronize(m);
    double c6 = sync_now();
    /* dlogits carry 1/G already: the sum over ranks is the whole batch's gradient */
    if ((r = dp_sum_gradients(s)) < 0)
        return sync_fail(c, r, "summing gradients onto rank 0: %s", ddp_last_error(c->g));
    double c7 = sync_now();
    if (c->rank == 0)
        sync_sgd_step(c);
    model_synchronize(m);
    double c8 = sync_now();
    /* everyone reports the loss rank 0 computed */
    if ((r = ddp_broadcast(c->g, &loss, 1, DDP_F64, 0)) < 0)
        return sync_fail(c, r, "broadcasting the loss: %s", ddp_last_error(c->g));
    double c9 = sync_now();
    sync_count_compute(c, (c2 - c1) + (c4 - c3), c6 - c5, c8 - c7); /* the loss (rank 0) with forward */
    c->times->comm_s += (c1 - c0) + (c3 - c2) + (c5 - c4) + (c7 - c6) + (c9 - c8);
    *ret_loss = loss;
    return 0;
}

const sync_mode sync_mode_dp = {
    .name = "dp",
    .rank0_steps = true,
    .global_loss = true,
    .open = dp_open,
    .step = dp_step,
    .close = dp_close,
};
