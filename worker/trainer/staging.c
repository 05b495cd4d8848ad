#include "worker/trainer/staging.h"

#include <errno.h>

#include "common/error.h"

/* The output's device, unless the other is a GPU: pinned memory is a GPU's to give. */
static backend *staging_host_backend(const model *m) {
    for (int i = m->n_stages - 1; i >= 0; i--)
        if (!m->stages[i].b->ops->host_memory)
            return m->stages[i].b;
    return m->b;
}

int staging_open(staging *s, model *m, int local_batch) {
    *s = (staging){.m = m, .host = staging_host_backend(m)};
    s->direct = m->n_stages == 1 && m->stages[0].b->ops->host_memory;
    if (s->direct)
        return 0;
    size_t p = m->spec.n_params * sizeof(float);
    s->outputs_count = (size_t)local_batch * (size_t)m->spec.sizes[m->spec.n_layers];
    s->params = s->host->ops->host_alloc(s->host, p);
    s->grads = s->host->ops->host_alloc(s->host, p);
    s->outputs = s->host->ops->host_alloc(s->host, s->outputs_count * sizeof(float));
    return s->params && s->grads && s->outputs ? 0 : -ENOMEM;
}

int staging_place_grads(staging *s, float *block) {
    size_t p = s->m->spec.n_params * sizeof(float);
    if (s->direct || s->grads_placed)
        return -EINVAL;
    TRY(s->host->ops->host_register(s->host, block, p));
    s->host->ops->host_release(s->host, s->grads, p);
    s->grads = block;
    s->grads_placed = true;
    return 0;
}

void staging_close(staging *s) {
    if (!s->host)
        return;
    size_t p = s->m->spec.n_params * sizeof(float);
    model_synchronize(s->m); /* a step that failed may have left copies into them in flight */
    s->host->ops->host_release(s->host, s->params, p);
    if (s->grads_placed) /* the block is its owner's: only given back to the device */
        s->host->ops->host_unregister(s->host, s->grads, p);
    else
        s->host->ops->host_release(s->host, s->grads, p);
    s->host->ops->host_release(s->host, s->outputs, s->outputs_count * sizeof(float));
    *s = (staging){0};
}

float *staging_wire(staging *s, float *wire, float *dev, size_t n, bool fill) {
    backend *b = s->m->b;
    if (b->ops->host_memory)
        return dev;
    if (fill && n)
        b->ops->download(b, wire, dev, n * sizeof(float));
    return wire;
}

void staging_unwire(staging *s, float *dev, const float *wire, size_t n) {
    if (wire != dev && n)
        s->m->b->ops->upload(s->m->b, dev, wire, n * sizeof(float));
}

float *staging_block_wire(staging *s, model_block which, float *wire, bool fill) {
    if (s->direct)
        return model_block_at(s->m, which, 0, NULL);
    if (fill)
        model_download_block(s->m, which, wire);
    return wire;
}

void staging_block_unwire(staging *s, model_block which, const float *wire) {
    if (!s->direct)
        model_upload_block(s->m, which, wire);
}

void staging_grads_stage(staging *s, size_t offset, size_t count, int k) {
    backend *b;
    const float *src = model_block_at(s->m, MODEL_GRADS, offset, &b);
    b->ops->download_async(b, s->grads + offset, src, count * sizeof(float), k);
}

void staging_grads_wait(staging *s, size_t offset, int k) {
    backend *b;
    model_block_at(s->m, MODEL_GRADS, offset, &b);
    b->ops->wait_download(b, k);
}
