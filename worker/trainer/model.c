#include "worker/trainer/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trainer/rng.h"

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

static float *stage_alloc(const model_stage *st, size_t floats) {
    return st->b->ops->alloc(st->b, floats * sizeof(float));
}

static void stage_release(const model_stage *st, float *p, size_t floats) {
    st->b->ops->release(st->b, p, floats * sizeof(float));
}

int model_stage_of_layer(const model *m, int layer) {
    return m->n_stages > 1 && layer > m->stages[0].last ? 1 : 0;
}

/* acts[l] is layer l's input, on its stage; the logits, acts[n_layers], on the last. */
static const model_stage *act_stage(const model *m, int l) {
    return &m->stages[l < m->spec.n_layers ? model_stage_of_layer(m, l) : m->n_stages - 1];
}

int model_split_layer(const model_spec *spec, int n_stages) {
    return n_stages > 1 ? (spec->n_layers + 1) / 2 : -1;
}

int model_open(model *m, const model_spec *spec, backend *b, int batch, bool with_velocity) {
    return model_open_split(m, spec, &b, 1, batch, with_velocity);
}

int model_open_split(model *m, const model_spec *spec, backend *const *backends, int n_backends, int batch,
                     bool with_velocity) {
    *m = (model){.spec = *spec, .batch = batch};
    if (n_backends < 1 || n_backends > MODEL_MAX_STAGES || n_backends > spec->n_layers)
        return -EINVAL;
    m->n_stages = n_backends;
    for (int l = 0; l <= spec->n_layers; l++)
        if ((size_t)spec->sizes[l] > m->widest)
            m->widest = (size_t)spec->sizes[l];
    int half = model_split_layer(spec, n_backends);
    for (int s = 0; s < n_backends; s++) {
        model_stage *st = &m->stages[s];
        st->b = backends[s];
        st->first = n_backends == 1 || s == 0 ? 0 : half;
        st->last = n_backends == 1 || s == 1 ? spec->n_layers - 1 : half - 1;
        size_t count;
        model_layer_range(spec, st->first, st->last, &st->offset, &count);
        st->count = count;
    }
    m->b = m->stages[n_backends - 1].b;
    int classes = spec->sizes[spec->n_layers];
    bool ok = true;
    for (int s = 0; s < n_backends && ok; s++) {
        model_stage *st = &m->stages[s];
        ok = (st->params = stage_alloc(st, st->count)) && (st->grads = stage_alloc(st, st->count)) &&
             (!with_velocity || (st->velocity = stage_alloc(st, st->count))) &&
             (st->dacts[0] = stage_alloc(st, (size_t)batch * m->widest)) &&
             (st->dacts[1] = stage_alloc(st, (size_t)batch * m->widest)) &&
             (s == n_backends - 1 || (st->out = stage_alloc(st, (size_t)batch * (size_t)spec->sizes[st->last + 1])));
    }
    const model_stage *last = &m->stages[n_backends - 1];
    ok = ok && (m->losses = stage_alloc(last, (size_t)batch)) &&
         (m->probs = stage_alloc(last, (size_t)batch * (size_t)classes));
    for (int l = 0; ok && l <= spec->n_layers; l++)
        ok = (m->acts[l] = stage_alloc(act_stage(m, l), (size_t)batch * (size_t)spec->sizes[l])) != NULL;
    if (ok && n_backends > 1)
        ok = (m->crossing = malloc((size_t)batch * m->widest * sizeof(float))) != NULL;
    if (!ok) {
        model_close(m);
        return -ENOMEM;
    }
    if (n_backends == 1) { /* the whole model in one block of each */
        m->params = m->stages[0].params;
        m->grads = m->stages[0].grads;
        m->velocity = m->stages[0].velocity;
    }
    return 0;
}

void model_close(model *m) {
    if (!m->n_stages)
        return;
    const model_spec *s = &m->spec;
    size_t a = (size_t)m->batch * m->widest;
    for (int i = 0; i < m->n_stages; i++) {
        const model_stage *st = &m->stages[i];
        float *blocks[2] = {st->params, st->grads}; /* MODEL_PARAMS, MODEL_GRADS */
        for (int k = 0; k < 2; k++)
            if (m->lent & (1u << k))
                backend_count_release(&st->b->memory, st->count * sizeof(float));
            else
                stage_release(st, blocks[k], st->count);
        stage_release(st, st->velocity, st->count);
        stage_release(st, st->dacts[0], a);
        stage_release(st, st->dacts[1], a);
        if (i < m->n_stages - 1)
            stage_release(st, st->out, (size_t)m->batch * (size_t)s->sizes[st->last + 1]);
    }
    const model_stage *last = &m->stages[m->n_stages - 1];
    stage_release(last, m->losses, (size_t)m->batch);
    stage_release(last, m->probs, (size_t)m->batch * (size_t)s->sizes[s->n_layers]);
    for (int l = 0; l <= s->n_layers; l++)
        stage_release(act_stage(m, l), m->acts[l], (size_t)m->batch * (size_t)s->sizes[l]);
    free(m->crossing);
    m->n_stages = 0;
    m->b = NULL;
}

/* Moves n floats from one stage's device to the next one's, through host memory (as the
 * tutorial's .to('cuda:1') does between GPUs without peer access). */
static void cross(model *m, const model_stage *from, const float *src, const model_stage *to, float *dst, size_t n) {
    from->b->ops->download(from->b, m->crossing, src, n * sizeof(float));
    to->b->ops->upload(to->b, dst, m->crossing, n * sizeof(float));
}

static float *layer_weight(const model_stage *st, const model_spec *s, float *block, int l) {
    return block + (s->weight_offset[l] - st->offset);
}

static float *layer_bias(const model_stage *st, const model_spec *s, float *block, int l) {
    return block + (s->bias_offset[l] - st->offset);
}

void model_forward(model *m, int B) {
    const model_spec *s = &m->spec;
    for (int l = 0; l < s->n_layers; l++) {
        const model_stage *st = &m->stages[model_stage_of_layer(m, l)];
        const backend_ops *o = st->b->ops;
        bool crosses = l == st->last && l + 1 < s->n_layers;
        float *out = crosses ? st->out : m->acts[l + 1];
        size_t n = (size_t)B * (size_t)s->sizes[l + 1];
        o->linear_forward(st->b, out, m->acts[l], layer_weight(st, s, st->params, l), layer_bias(st, s, st->params, l),
                          B, s->sizes[l], s->sizes[l + 1]);
        if (l + 1 < s->n_layers) /* ReLU between layers, none after the last */
            o->relu_forward(st->b, out, n);
        if (crosses)
            cross(m, st, out, st + 1, m->acts[l + 1], n);
    }
}

void model_backward(model *m, const float *dout, int B, void (*layer_done)(void *ctx, int layer), void *ctx) {
    const model_spec *s = &m->spec;
    const float *d = dout;
    for (int l = s->n_layers - 1; l >= 0; l--) {
        const model_stage *st = &m->stages[model_stage_of_layer(m, l)];
        const backend_ops *o = st->b->ops;
        float *dinp = l > 0 ? st->dacts[l % 2] : NULL;
        o->linear_backward(st->b, dinp, layer_weight(st, s, st->grads, l), layer_bias(st, s, st->grads, l), d,
                           m->acts[l], layer_weight(st, s, st->params, l), B, s->sizes[l], s->sizes[l + 1]);
        if (layer_done)
            layer_done(ctx, l);
        if (l > 0) { /* through the ReLU that produced acts[l] */
            size_t n = (size_t)B * (size_t)s->sizes[l];
            o->relu_backward(st->b, dinp, dinp, m->acts[l], n);
            if (l == st->first) { /* to the stage before, into its own buffer of the same parity */
                cross(m, st, dinp, st - 1, (st - 1)->dacts[l % 2], n);
                dinp = (st - 1)->dacts[l % 2];
            }
            d = dinp;
        }
    }
}

double model_sum_losses(model *m, const float *losses, int B) {
    backend *b = m->b;
    float host[4096];
    double sum = 0;
    for (int done = 0; done < B; done += 4096) {
        int n = B - done < 4096 ? B - done : 4096;
        b->ops->download(b, host, losses + done, (size_t)n * sizeof(float));
        for (int i = 0; i < n; i++)
            sum += host[i];
    }
    return sum;
}

double model_loss(model *m, int B, float *losses, float *probs, const float *logits, const uint8_t *targets,
                  const float *mse_targets, float *dlogits, float scale) {
    backend *b = m->b;
    const backend_ops *o = b->ops;
    int C = m->spec.sizes[m->spec.n_layers];
    if (m->spec.loss == LOSS_MSE) {
        o->mse_forward(b, losses, logits, mse_targets, B, C);
        o->mse_backward(b, dlogits, logits, mse_targets, scale, B, C);
    } else {
        o->crossentropy_forward(b, losses, probs, logits, targets, B, C);
        o->crossentropy_backward(b, dlogits, probs, targets, scale, B, C);
    }
    return model_sum_losses(m, losses, B) / B;
}

void model_synchronize(model *m) {
    for (int i = 0; i < m->n_stages; i++)
        m->stages[i].b->ops->synchronize(m->stages[i].b);
}

static float *stage_block(const model_stage *st, model_block which) {
    return which == MODEL_PARAMS ? st->params : which == MODEL_GRADS ? st->grads : st->velocity;
}

float *model_block_at(const model *m, model_block which, size_t offset, backend **ret_b) {
    const model_stage *st = &m->stages[m->n_stages > 1 && offset >= m->stages[1].offset ? 1 : 0];
    if (ret_b)
        *ret_b = st->b;
    float *block = stage_block(st, which);
    return block ? block + (offset - st->offset) : NULL;
}

int model_lend(model *m, model_block which, float *block) {
    model_stage *st = &m->stages[0];
    unsigned bit = 1u << which;
    if (m->n_stages != 1 || !st->b->ops->host_memory || (m->lent & bit) || which == MODEL_VELOCITY)
        return -EINVAL;
    float **place = which == MODEL_PARAMS ? &st->params : &st->grads;
    memcpy(block, *place, st->count * sizeof(float));
    stage_release(st, *place, st->count);
    backend_count_alloc(&st->b->memory, st->count * sizeof(float));
    *place = block;
    if (which == MODEL_PARAMS)
        m->params = block;
    else
        m->grads = block;
    m->lent |= bit;
    return 0;
}

void model_zero_grads(model *m) {
    for (int i = 0; i < m->n_stages; i++)
        m->stages[i].b->ops->zero(m->stages[i].b, m->stages[i].grads, m->stages[i].count * sizeof(float));
}

void model_sgd_step(model *m, float lr, float momentum, int first_step) {
    for (int i = 0; i < m->n_stages; i++) {
        const model_stage *st = &m->stages[i];
        if (st->velocity)
            st->b->ops->sgd_step(st->b, st->params, st->velocity, st->grads, st->count, lr, momentum, first_step);
    }
}

int model_sgd_step_from(model *m, const float *grads, float lr, float momentum, int first_step) {
    const model_stage *st = &m->stages[0];
    if (m->n_stages != 1 || !st->b->ops->host_memory)
        return -EINVAL;
    if (st->velocity)
        st->b->ops->sgd_step(st->b, st->params, st->velocity, grads, st->count, lr, momentum, first_step);
    return 0;
}

void model_download_block(model *m, model_block which, float *host) {
    for (int i = 0; i < m->n_stages; i++) {
        const model_stage *st = &m->stages[i];
        st->b->ops->download(st->b, host + st->offset, stage_block(st, which), st->count * sizeof(float));
    }
}

void model_upload_block(model *m, model_block which, const float *host) {
    for (int i = 0; i < m->n_stages; i++) {
        const model_stage *st = &m->stages[i];
        st->b->ops->upload(st->b, stage_block(st, which), host + st->offset, st->count * sizeof(float));
    }
}
