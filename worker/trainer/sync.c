/* The list of sync modes, and what they share. */
#include "worker/trainer/sync.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define SYNC_MODE_ENTRY(name) &sync_mode_##name,

static const sync_mode *const modes[] = {SYNC_MODES(SYNC_MODE_ENTRY)};
const char *const sync_mode_names[] = {SYNC_MODES(SYNC_MODE_STRING) NULL};

const sync_mode *sync_mode_find(const char *name) {
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
        if (!strcmp(modes[i]->name, name))
            return modes[i];
    return NULL;
}

int sync_fail(const sync_ctx *c, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, c->error_size, fmt, ap);
    va_end(ap);
    return err;
}

int sync_shared_block(const sync_ctx *c, const char *what, float **ret) {
    *ret = ddp_alloc(c->g, c->m->spec.n_params * sizeof(float));
    if (!*ret)
        return sync_fail(c, ddp_job_status(c->g) ? ddp_job_status(c->g) : -ENOMEM, "placing the %s: %s", what,
                         ddp_last_error(c->g));
    return 0;
}

double sync_forward_local(const sync_ctx *c, int B) {
    model *m = c->m;
    model_zero_grads(m);
    model_forward(m, B);
    return model_loss(m, B, m->losses, m->probs, m->acts[m->spec.n_layers], c->batch->targets, c->batch->mse_targets,
                      c->batch->dlogits, 1.0f / (float)B);
}

void sync_sgd_step(const sync_ctx *c) {
    model_sgd_step(c->m, c->lr, c->momentum, *c->step == 0);
}

void sync_count_compute(const sync_ctx *c, double forward_s, double backward_s, double optimizer_s) {
    c->times->forward_s += forward_s;
    c->times->backward_s += backward_s;
    c->times->optimizer_s += optimizer_s;
    c->times->compute_s += forward_s + backward_s + optimizer_s;
}

double sync_now(void) { /* to the nanosecond: a small model's SGD step takes less than a microsecond */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
