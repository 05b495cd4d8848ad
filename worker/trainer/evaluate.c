/* Evaluation on the test split: accuracy, or for MSE models (the toy) the mean loss. */
#include "worker/trainer/trainer.h"

int evaluate(trainer *t, double *ret_metric) {
    model *m = &t->m;
    const dataset_split *d = &t->data.test;
    int r;
    if (t->mode->rank0_steps) { /* only rank 0 stepped: its parameters are the model's */
        float *params = staging_block_wire(&t->staging, MODEL_PARAMS, t->staging.params, t->rank == 0);
        if ((r = ddp_broadcast(t->g, params, m->spec.n_params, DDP_F32, 0)) < 0)
            return trainer_fail(t, r, "evaluating: %s", ddp_last_error(t->g));
        staging_block_unwire(&t->staging, MODEL_PARAMS, params);
    }
    backend *in = m->stages[0].b, *out = m->b;
    batch *b = &t->batch;
    size_t first = d->n * (size_t)t->rank / (size_t)t->world, last = d->n * (size_t)(t->rank + 1) / (size_t)t->world;
    int C = m->spec.sizes[m->spec.n_layers];
    double totals[2] = {0, 0}; /* correct (or summed loss), samples */
    for (size_t i = first; i < last; i += (size_t)t->local_batch) {
        int B = (int)(last - i < (size_t)t->local_batch ? last - i : (size_t)t->local_batch);
        dataset_rows(d, i, (size_t)B, b->input_host);
        in->ops->upload(in, m->acts[0], b->input_host, (size_t)B * d->dim * sizeof(float));
        model_forward(m, B);
        if (m->spec.loss == LOSS_MSE) { /* the mean squared error instead of an accuracy */
            out->ops->upload(out, b->mse_targets, d->targets + i * (size_t)C, (size_t)B * C * sizeof(float));
            out->ops->mse_forward(out, m->losses, m->acts[m->spec.n_layers], b->mse_targets, B, C);
            totals[0] += model_sum_losses(m, m->losses, B);
        } else {
            out->ops->upload(out, b->targets, d->y + i, (size_t)B);
            totals[0] += (double)out->ops->count_correct(out, m->acts[m->spec.n_layers], b->targets, B, C);
        }
        totals[1] += B;
    }
    if ((r = ddp_all_reduce(t->g, totals, 2, DDP_F64, DDP_SUM)) < 0)
        return trainer_fail(t, r, "evaluating: %s", ddp_last_error(t->g));
    *ret_metric = totals[0] / totals[1];
    return 0;
}
