#include "worker/trainer/batch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int batch_open(batch *b, const model *m, int size) {
    const model_spec *s = &m->spec;
    size_t B = (size_t)size, in = (size_t)s->sizes[0], C = (size_t)s->sizes[s->n_layers];
    backend *out = m->b;
    *b = (batch){.size = size};
    b->input_host = malloc(B * in * sizeof(float));
    b->targets_host = calloc(B, 1);
    b->mse_targets_host = malloc(B * C * sizeof(float));
    b->targets = out->ops->alloc(out, B);
    b->mse_targets = out->ops->alloc(out, B * C * sizeof(float));
    b->dlogits = out->ops->alloc(out, B * C * sizeof(float));
    if (!b->input_host || !b->targets_host || !b->mse_targets_host || !b->targets || !b->mse_targets || !b->dlogits)
        return -ENOMEM;
    return 0;
}

void batch_close(batch *b, const model *m) {
    if (m->b) {
        size_t B = (size_t)b->size, C = (size_t)m->spec.sizes[m->spec.n_layers];
        backend *out = m->b;
        out->ops->release(out, b->targets, B);
        out->ops->release(out, b->mse_targets, B * C * sizeof(float));
        out->ops->release(out, b->dlogits, B * C * sizeof(float));
    }
    free(b->input_host);
    free(b->targets_host);
    free(b->mse_targets_host);
    *b = (batch){0};
}

void batch_load(batch *b, model *m, const dataset_split *d, const uint32_t *indices, size_t count) {
    size_t C = (size_t)m->spec.sizes[m->spec.n_layers];
    for (size_t i = 0; i < count; i++) {
        dataset_rows(d, indices[i], 1, b->input_host + i * d->dim);
        b->targets_host[i] = d->y[indices[i]];
        if (d->targets)
            memcpy(b->mse_targets_host + i * C, d->targets + (size_t)indices[i] * C, C * sizeof(float));
    }
    backend *first = m->stages[0].b, *out = m->b; /* the input's device, and where the loss is computed */
    first->ops->upload(first, m->acts[0], b->input_host, count * d->dim * sizeof(float));
    out->ops->upload(out, b->targets, b->targets_host, count);
    if (d->targets)
        out->ops->upload(out, b->mse_targets, b->mse_targets_host, count * C * sizeof(float));
}
