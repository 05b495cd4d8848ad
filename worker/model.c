#include "worker/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/rng.h"

int model_spec_parse(const char *name, model_spec *ret, char *err, size_t err_size) {
    model_spec s = {0};
    snprintf(s.name, sizeof(s.name), "%s", name);
    const char *layers = name;
    s.loss = LOSS_CROSSENTROPY;
    if (!strcmp(name, "linear"))
        layers = "784-10";
    else if (!strcmp(name, "mlp"))
        layers = "784-512-256-10";
    else if (!strcmp(name, "toy")) {
        layers = "10-10-5";
        s.loss = LOSS_MSE;
    }
    int n = 0;
    const char *p = layers;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1000000 || (*end && *end != '-') || n > MODEL_MAX_LAYERS) {
            snprintf(err, err_size,
                     "unknown model '%.40s': use linear, mlp, toy or layer sizes like 784-128-10 (2 to %d sizes, each "
                     "1..1000000)",
                     name, MODEL_MAX_LAYERS + 1);
            return -EINVAL;
        }
        s.sizes[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n < 2) {
        snprintf(err, err_size, "model '%.40s' needs at least an input and an output size", name);
        return -EINVAL;
    }
    if (s.loss == LOSS_CROSSENTROPY && s.sizes[n - 1] > 255) {
        snprintf(err, err_size, "model '%.40s': at most 255 classes", name);
        return -EINVAL;
    }
    s.n_layers = n - 1;
    size_t off = 0;
    for (int l = 0; l < s.n_layers; l++) {
        s.weight_offset[l] = off;
        off += (size_t)s.sizes[l + 1] * (size_t)s.sizes[l];
        s.bias_offset[l] = off;
        off += (size_t)s.sizes[l + 1];
    }
    s.n_params = off;
    *ret = s;
    return 0;
}

void model_init_params(const model_spec *spec, float *params, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    for (int l = 0; l < spec->n_layers; l++) {
        float bound = 1.0f / sqrtf((float)spec->sizes[l]);
        size_t n = (size_t)spec->sizes[l + 1] * (size_t)(spec->sizes[l] + 1); /* weight then bias */
        for (size_t i = 0; i < n; i++)
            params[spec->weight_offset[l] + i] = (2.0f * rng_float(&r) - 1.0f) * bound;
    }
}

void model_layer_range(const model_spec *spec, int first, int last, size_t *ret_offset, size_t *ret_count) {
    *ret_offset = spec->weight_offset[first];
    *ret_count = spec->bias_offset[last] + (size_t)spec->sizes[last + 1] - spec->weight_offset[first];
}

static float *model_alloc(model *m, size_t floats) {
    return m->b->ops->alloc(m->b, floats * sizeof(float));
}

int model_open(model *m, const model_spec *spec, backend *b, int batch, bool with_velocity) {
    *m = (model){.spec = *spec, .b = b, .batch = batch};
    for (int l = 0; l <= spec->n_layers; l++)
        if ((size_t)spec->sizes[l] > m->widest)
            m->widest = (size_t)spec->sizes[l];
    int classes = spec->sizes[spec->n_layers];
    bool ok = (m->params = model_alloc(m, spec->n_params)) && (m->grads = model_alloc(m, spec->n_params)) &&
              (!with_velocity || (m->velocity = model_alloc(m, spec->n_params))) &&
              (m->dacts[0] = model_alloc(m, (size_t)batch * m->widest)) &&
              (m->dacts[1] = model_alloc(m, (size_t)batch * m->widest)) && (m->losses = model_alloc(m, (size_t)batch)) &&
              (m->probs = model_alloc(m, (size_t)batch * (size_t)classes));
    for (int l = 0; ok && l <= spec->n_layers; l++)
        ok = (m->acts[l] = model_alloc(m, (size_t)batch * (size_t)spec->sizes[l])) != NULL;
    if (!ok) {
        model_close(m);
        return -ENOMEM;
    }
    return 0;
}

void model_close(model *m) {
    if (!m->b)
        return;
    const model_spec *s = &m->spec;
    size_t p = s->n_params * sizeof(float), a = (size_t)m->batch * m->widest * sizeof(float);
    m->b->ops->release(m->b, m->params, p);
    m->b->ops->release(m->b, m->grads, p);
    m->b->ops->release(m->b, m->velocity, p);
    m->b->ops->release(m->b, m->dacts[0], a);
    m->b->ops->release(m->b, m->dacts[1], a);
    m->b->ops->release(m->b, m->losses, (size_t)m->batch * sizeof(float));
    m->b->ops->release(m->b, m->probs, (size_t)m->batch * (size_t)s->sizes[s->n_layers] * sizeof(float));
    for (int l = 0; l <= s->n_layers; l++)
        m->b->ops->release(m->b, m->acts[l], (size_t)m->batch * (size_t)s->sizes[l] * sizeof(float));
    m->b = NULL;
}

void model_forward(model *m, int B) {
    const model_spec *s = &m->spec;
    const backend_ops *o = m->b->ops;
    for (int l = 0; l < s->n_layers; l++) {
        o->linear_forward(m->b, m->acts[l + 1], m->acts[l], m->params + s->weight_offset[l],
                          m->params + s->bias_offset[l], B, s->sizes[l], s->sizes[l + 1]);
        if (l + 1 < s->n_layers) /* ReLU between layers, none after the last */
            o->relu_forward(m->b, m->acts[l + 1], (size_t)B * (size_t)s->sizes[l + 1]);
    }
}

void model_backward(model *m, const float *dout, int B, void (*layer_done)(void *ctx, int layer), void *ctx) {
    const model_spec *s = &m->spec;
    const backend_ops *o = m->b->ops;
    const float *d = dout;
    for (int l = s->n_layers - 1; l >= 0; l--) {
        float *dinp = l > 0 ? m->dacts[l % 2] : NULL;
        o->linear_backward(m->b, dinp, m->grads + s->weight_offset[l], m->grads + s->bias_offset[l], d, m->acts[l],
                           m->params + s->weight_offset[l], B, s->sizes[l], s->sizes[l + 1]);
        if (layer_done)
            layer_done(ctx, l);
        if (l > 0) { /* through the ReLU that produced acts[l] */
            o->relu_backward(m->b, dinp, dinp, m->acts[l], (size_t)B * (size_t)s->sizes[l]);
            d = dinp;
        }
    }
}

size_t model_bytes(const model *m) {
    return m->spec.n_params * sizeof(float);
}
