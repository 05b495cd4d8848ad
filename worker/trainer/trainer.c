/* The trainer's loop: set-up, epochs and steps, evaluation, output, metrics, checkpoints.
 * The sync modes (sync_*.c) do one optimizer step each. */
#include "worker/trainer/trainer.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/rng.h"

#define TOY_SAMPLES 8192 /* the toy model trains on random data, as the DDP tutorial's ToyModel */
#define TOY_TEST_SAMPLES 1024

volatile sig_atomic_t trainer_stop_signal;

/* Whether every rank should stop now: a signal reached at least one of them. Every rank
 * asks at the same steps, so the question is one collective. */
static int trainer_should_stop(trainer *t, bool *ret_stop) {
    *ret_stop = false;
    if (t->step % TRAINER_STOP_CHECK_STEPS != 0)
        return 0;
    int32_t flag = trainer_stop_signal != 0;
    int r = ddp_all_reduce(t->g, &flag, 1, DDP_I32, DDP_MAX);
    if (r < 0)
        return trainer_fail(t, r, "agreeing whether to stop: %s", ddp_last_error(t->g));
    *ret_stop = flag != 0;
    return 0;
}

int trainer_fail(trainer *t, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof(t->error), fmt, ap);
    va_end(ap);
    return err;
}

double trainer_now(void) {
    return (double)clock_now_us() / 1e6;
}

/* ---- data ---------------------------------------------------------------------------- */

/* Standard normal by Box-Muller: the toy model's inputs and targets. */
static float normal(rng *r) {
    float u = rng_float(r), v = rng_float(r);
    return sqrtf(-2.0f * logf(u > 0 ? u : 1e-7f)) * cosf(6.2831853f * v);
}

static int toy_split(dataset_split *s, float **targets, size_t n, int in, int out, rng *r) {
    s->n = n;
    s->dim = (size_t)in;
    s->x = malloc(n * (size_t)in * sizeof(float));
    s->y = calloc(n, 1);
    *targets = malloc(n * (size_t)out * sizeof(float));
    if (!s->x || !s->y || !*targets)
        return -ENOMEM;
    for (size_t i = 0; i < n * (size_t)in; i++)
        s->x[i] = normal(r);
    for (size_t i = 0; i < n * (size_t)out; i++)
        (*targets)[i] = normal(r);
    return 0;
}

static int trainer_load_data(trainer *t) {
    const model_spec *s = &t->m.spec;
    if (s->loss == LOSS_MSE) { /* random data, the same on every rank for the seed */
        rng r;
        rng_seed(&r, (uint64_t)t->opts->seed ^ 0x746f79u);
        int in = s->sizes[0], out = s->sizes[s->n_layers];
        int e = toy_split(&t->data.train, &t->toy_targets, TOY_SAMPLES, in, out, &r);
        if (e == 0)
            e = toy_split(&t->data.test, &t->toy_test_targets, TOY_TEST_SAMPLES, in, out, &r);
        t->data.n_classes = (unsigned)out;
        return e < 0 ? trainer_fail(t, e, "out of memory for the toy data") : 0;
    }
    char err[512];
    int e = dataset_load(t->opts->data, &t->data, err, sizeof(err));
    if (e < 0)
        return trainer_fail(t, e, "%s", err);
    if ((size_t)s->sizes[0] != t->data.train.dim)
        return trainer_fail(t, -EINVAL, "model '%s' takes %d inputs but the images in %s have %zu pixels", s->name,
                            s->sizes[0], t->opts->data, t->data.train.dim);
    if ((unsigned)s->sizes[s->n_layers] != t->data.n_classes)
        return trainer_fail(t, -EINVAL, "model '%s' has %d outputs but %s has %u classes", s->name,
                            s->sizes[s->n_layers], t->opts->data, t->data.n_classes);
    return 0;
}

void trainer_load_batch(trainer *t, const uint32_t *indices, size_t count) {
    const dataset_split *d = &t->data.train;
    int C = t->m.spec.sizes[t->m.spec.n_layers];
    for (size_t i = 0; i < count; i++) {
        memcpy(t->input_host + i * d->dim, d->x + (size_t)indices[i] * d->dim, d->dim * sizeof(float));
        t->targets_host[i] = d->y[indices[i]];
        if (t->toy_targets)
            memcpy(t->mse_targets_host + i * (size_t)C, t->toy_targets + (size_t)indices[i] * C, (size_t)C * sizeof(float));
    }
    t->b.ops->upload(&t->b, t->m.acts[0], t->input_host, count * d->dim * sizeof(float));
    backend *out = t->m.b; /* where the loss is computed */
    out->ops->upload(out, t->targets, t->targets_host, count);
    if (t->toy_targets)
        out->ops->upload(out, t->mse_targets, t->mse_targets_host, count * (size_t)C * sizeof(float));
}

/* The sum of B per-row losses on the output device, added up on the host in pieces. */
static double trainer_sum_losses(trainer *t, const float *losses, int B) {
    backend *b = t->m.b;
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

double trainer_loss(trainer *t, int B, float *losses, float *probs, const float *logits, const uint8_t *targets,
                    const float *mse_targets, float *dlogits, float scale) {
    backend *b = t->m.b;
    const backend_ops *o = b->ops;
    int C = t->m.spec.sizes[t->m.spec.n_layers];
    if (t->m.spec.loss == LOSS_MSE) {
        o->mse_forward(b, losses, logits, mse_targets, B, C);
        o->mse_backward(b, dlogits, logits, mse_targets, scale, B, C);
    } else {
        o->crossentropy_forward(b, losses, probs, logits, targets, B, C);
        o->crossentropy_backward(b, dlogits, probs, targets, scale, B, C);
    }
    return trainer_sum_losses(t, losses, B) / B;
}

double trainer_forward_local(trainer *t, int B) {
    model *m = &t->m;
    model_zero_grads(m);
    model_forward(m, B);
    return trainer_loss(t, B, m->losses, m->probs, m->acts[m->spec.n_layers], t->targets, t->mse_targets, t->dlogits,
                        1.0f / (float)B);
}

void trainer_sgd_step(trainer *t) {
    model_sgd_step(&t->m, (float)t->opts->lr, (float)t->opts->momentum, t->step == 0);
}

void trainer_synchronize(trainer *t) {
    for (int i = 0; i < t->m.n_stages; i++)
        t->m.stages[i].b->ops->synchronize(t->m.stages[i].b);
}

bool trainer_direct(const trainer *t) {
    return t->m.n_stages == 1 && t->b.ops->host_memory;
}

backend *trainer_staging_backend(trainer *t) {
    for (int i = t->m.n_stages - 1; i >= 0; i--) /* the output's device, unless the other is a GPU */
        if (!t->m.stages[i].b->ops->host_memory)
            return t->m.stages[i].b;
    return t->m.b;
}

float *trainer_wire(trainer *t, float *wire, float *dev, size_t n, bool fill) {
    backend *b = t->m.b;
    if (b->ops->host_memory)
        return dev;
    if (fill && n)
        b->ops->download(b, wire, dev, n * sizeof(float));
    return wire;
}

void trainer_unwire(trainer *t, float *dev, const float *wire, size_t n) {
    if (wire != dev && n)
        t->m.b->ops->upload(t->m.b, dev, wire, n * sizeof(float));
}

float *trainer_block_wire(trainer *t, model_block which, float *wire, bool fill) {
    if (trainer_direct(t))
        return model_block_at(&t->m, which, 0, NULL);
    if (fill)
        model_download_block(&t->m, which, wire);
    return wire;
}

void trainer_block_unwire(trainer *t, model_block which, const float *wire) {
    if (!trainer_direct(t))
        model_upload_block(&t->m, which, wire);
}

void trainer_bucket_range(const trainer *t, int k, size_t *ret_offset, size_t *ret_count) {
    model_layer_range(&t->m.spec, t->bucket_first[k], t->bucket_last[k], ret_offset, ret_count);
}

void trainer_bucket_stage(trainer *t, int k) {
    size_t off, count;
    backend *b;
    trainer_bucket_range(t, k, &off, &count);
    const float *src = model_block_at(&t->m, MODEL_GRADS, off, &b);
    b->ops->download_async(b, t->grads_wire + off, src, count * sizeof(float), k);
}

void trainer_bucket_wait_staged(trainer *t, int k) {
    size_t off, count;
    backend *b;
    trainer_bucket_range(t, k, &off, &count);
    model_block_at(&t->m, MODEL_GRADS, off, &b);
    b->ops->wait_download(b, k);
}

/* ---- set-up ------------------------------------------------------------------------- */

static int trainer_parse_mode(const char *name, sync_mode *ret) {
    static const char *const names[] = {"ddp", "dp", "ps"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) {
            *ret = (sync_mode)i;
            return 0;
        }
    return -EINVAL;
}

/* Gradient buckets of up to bucket_mb, in reverse layer order: each a contiguous range of
 * the gradient block (layers are laid out first to last), so it goes on the wire as it
 * is; a layer larger than a bucket is a bucket of its own. (PyTorch caps its first bucket
 * at 1 MiB to start communicating early; on two cores shared by two workers, overlap
 * costs the backward more than it hides, so the first bucket here is like the others.) */
static void trainer_plan_buckets(trainer *t) {
    const model_spec *s = &t->m.spec;
    size_t limit = (size_t)(t->opts->bucket_mb * 1024 * 1024);
    t->n_buckets = 0;
    int last = s->n_layers - 1;
    for (int l = s->n_layers - 1; l >= 0; l--) {
        size_t off, count, next_count = 0;
        if (l > 0)
            model_layer_range(s, l - 1, last, &off, &next_count);
        /* with --devices, a bucket stays on one device: the second stage starts a bucket */
        if (l == 0 || next_count * sizeof(float) > limit || l == t->split_layer) {
            model_layer_range(s, l, last, &off, &count);
            t->bucket_first[t->n_buckets] = l;
            t->bucket_last[t->n_buckets] = last;
            t->bucket_count[t->n_buckets] = count;
            t->n_buckets++;
            last = l - 1;
        }
    }
}

/* A CUDA error: the device is lost to this process. The job ends naming this rank (ddpd
 * tells the others at once), and the exit code says it was the device. */
static void trainer_device_failed(void *ctx, const char *what) {
    static volatile sig_atomic_t failing;
    trainer *t = ctx;
    if (!failing) { /* an error while leaving does not start over */
        failing = 1;
        fprintf(stderr, "ddp-worker: rank %d: %s\n", t->rank, what);
        if (t->g) {
            ddp_abort(t->g, what);
            ddp_finalize(t->g);
            t->g = NULL;
        }
    }
    exit(BACKEND_EXIT_DEVICE_ERROR);
}

/* "cuda" is LOCAL_RANK's GPU, as torchrun's workers pick theirs; "cuda:K" is GPU K of
 * those CUDA_VISIBLE_DEVICES leaves. */
static int trainer_parse_device(trainer *t, const char *dev, const char *flag, int *ret_gpu) {
    if (!strcmp(dev, "cpu")) {
        *ret_gpu = -1;
        return 0;
    }
    if (!strcmp(dev, "cuda")) {
        *ret_gpu = ddp_local_rank(t->g);
        return 0;
    }
    size_t digits = strncmp(dev, "cuda:", 5) == 0 ? strspn(dev + 5, "0123456789") : 0;
    if (digits == 0 || digits > 4 || dev[5 + digits])
        return trainer_fail(t, -EINVAL, "%s '%s': use cpu, cuda or cuda:K", flag, dev);
    *ret_gpu = atoi(dev + 5);
    return 0;
}

static int trainer_open_device(trainer *t, backend *b, const char *dev, const char *flag) {
    int gpu = -1;
    TRY(trainer_parse_device(t, dev, flag, &gpu));
    if (gpu < 0) {
        int r = backend_cpu_open(b, t->opts->blas_threads);
        return r < 0 ? trainer_fail(t, r, "cannot start the CPU backend") : 0;
    }
#ifdef DDP_HAVE_CUDA
    char err[256];
    int r = backend_cuda_open(b, gpu, trainer_device_failed, t, err, sizeof(err));
    if (r < 0 && !strcmp(dev, "cuda"))
        return trainer_fail(t, r, "%s cuda (GPU %d for LOCAL_RANK %d): %s; cuda:K names one GPU for every rank", flag,
                            gpu, ddp_local_rank(t->g), err);
    return r < 0 ? trainer_fail(t, r, "%s %s: %s", flag, dev, err) : 0;
#else
    return trainer_fail(t, -ENODEV, "%s %s: this ddp-worker was built without the CUDA backend; use cpu", flag, dev);
#endif
}

/* --devices A,B: model parallel, the first half of the layers on A, the rest on B (each
 * cpu, cuda:K, or a bare GPU number K); else one --device. */
static int trainer_open_backends(trainer *t) {
    const char *list = t->opts->devices;
    if (!list)
        return trainer_open_device(t, &t->b, t->opts->device, "--device");
    char devs[2][24];
    const char *comma = strchr(list, ',');
    size_t first = comma ? (size_t)(comma - list) : 0;
    if (!comma || strchr(comma + 1, ',') || first == 0 || first >= 16 || !comma[1] || strlen(comma + 1) >= 16)
        return trainer_fail(t, -EINVAL, "--devices '%s': name two devices, as in 0,1 or cuda:0,cuda:1", list);
    snprintf(devs[0], sizeof(devs[0]), "%.*s", (int)first, list);
    snprintf(devs[1], sizeof(devs[1]), "%s", comma + 1);
    for (int i = 0; i < 2; i++)
        if (strspn(devs[i], "0123456789") == strlen(devs[i])) { /* a bare number: that GPU */
            char number[16];
            snprintf(number, sizeof(number), "%.15s", devs[i]);
            snprintf(devs[i], sizeof(devs[i]), "cuda:%s", number);
        }
    TRY(trainer_open_device(t, &t->b, devs[0], "--devices"));
    return trainer_open_device(t, &t->b_split, devs[1], "--devices");
}

static int trainer_alloc_io(trainer *t) {
    const model_spec *s = &t->m.spec;
    size_t B = (size_t)t->local_batch, in = (size_t)s->sizes[0], C = (size_t)s->sizes[s->n_layers];
    backend *out = t->m.b; /* the loss's inputs live with the outputs */
    const backend_ops *o = out->ops;
    backend *staging = trainer_staging_backend(t);
    t->input_host = malloc(B * in * sizeof(float));
    t->targets_host = calloc(B, 1);
    t->mse_targets_host = malloc(B * C * sizeof(float));
    t->targets = o->alloc(out, B);
    t->mse_targets = o->alloc(out, B * C * sizeof(float));
    t->dlogits = o->alloc(out, B * C * sizeof(float));
    if (!t->input_host || !t->targets_host || !t->mse_targets_host || !t->targets || !t->mse_targets || !t->dlogits)
        return trainer_fail(t, -ENOMEM, "out of memory for a batch of %zu", B);
    if (!trainer_direct(t)) {
        size_t p = s->n_params * sizeof(float);
        t->params_wire = staging->ops->host_alloc(staging, p);
        t->grads_wire = staging->ops->host_alloc(staging, p);
        t->outputs_wire = staging->ops->host_alloc(staging, B * C * sizeof(float));
        if (!t->params_wire || !t->grads_wire || !t->outputs_wire)
            return trainer_fail(t, -ENOMEM, "out of memory for %zu bytes of host staging", 2 * p);
    }
    return 0;
}

static int trainer_resume(trainer *t) {
    model *m = &t->m;
    const model_spec *s = &m->spec;
    /* Rank 0 reads; everyone gets the same state, as a checkpoint may live on one host only. */
    uint64_t state[4] = {0}; /* 0 resumed, 1 failed, 2 nothing to resume; step, epoch, position */
    int r = 0;
    /* Read into host memory: the tensors' own on the CPU, the staging buffers on a GPU. */
    bool with_velocity = m->stages[0].velocity != NULL;
    float *params = trainer_block_wire(t, MODEL_PARAMS, t->params_wire, false);
    float *velocity = with_velocity ? trainer_block_wire(t, MODEL_VELOCITY, t->grads_wire, false) : NULL;
    if (t->rank == 0) {
        checkpoint_info expect = {.n_params = s->n_params}, info = {0};
        snprintf(expect.model, sizeof(expect.model), "%s", s->name);
        char err[512];
        r = checkpoint_read(t->opts->checkpoint, &expect, &info, params, velocity, err, sizeof(err));
        if (r == -ENOENT) { /* a service's first start: nothing to resume yet */
            printf("ddp-worker: no checkpoint at %s yet: starting from the beginning\n", t->opts->checkpoint);
            info = (checkpoint_info){0};
            r = 0;
            state[0] = 2;
        } else if (r < 0)
            snprintf(t->error, sizeof(t->error), "--resume: %s", err);
        else if (info.world_size != (uint32_t)t->world && t->smp.kind == SAMPLER_PARTITION)
            r = trainer_fail(t, -EINVAL,
                             "--resume: %s was written by %u workers, not %d: with the partition sampler each rank's "
                             "shard depends on it (--sampler global trains on the same batches for any number)",
                             t->opts->checkpoint, info.world_size, t->world);
        else if (info.global_batch != (uint32_t)t->global_batch || info.seed != (uint64_t)t->opts->seed)
            r = trainer_fail(t, -EINVAL,
                             "--resume: %s was written with batch size %u and seed %llu, not %d and %d: it would not "
                             "continue the same run",
                             t->opts->checkpoint, info.global_batch, (unsigned long long)info.seed, t->global_batch,
                             t->opts->seed);
        state[0] = r < 0 ? 1 : state[0];
        state[1] = info.step;
        state[2] = info.epoch;
        state[3] = info.step_in_epoch;
    }
    int e = ddp_broadcast(t->g, state, 4, DDP_I64, 0);
    if (e < 0)
        return trainer_fail(t, e, "--resume: %s", ddp_last_error(t->g));
    if (state[0] == 1) /* rank 0 could not read it: every rank stops with the reason */
        return r < 0 ? r : trainer_fail(t, -EINVAL, "--resume: rank 0 could not read %s", t->opts->checkpoint);
    if (state[0] == 2) /* none yet: every rank starts from its (equal) initial parameters */
        return 0;
    if ((e = ddp_broadcast(t->g, params, s->n_params, DDP_F32, 0)) < 0 ||
        (velocity && t->mode != MODE_DP && (e = ddp_broadcast(t->g, velocity, s->n_params, DDP_F32, 0)) < 0))
        return trainer_fail(t, e, "--resume: %s", ddp_last_error(t->g));
    trainer_block_unwire(t, MODEL_PARAMS, params);
    if (velocity)
        trainer_block_unwire(t, MODEL_VELOCITY, velocity);
    t->step = state[1];
    t->epoch = state[2];
    t->step_in_epoch = state[3];
    if (t->rank == 0)
        printf("ddp-worker: resumed from %s at step %llu (epoch %llu)\n", t->opts->checkpoint,
               (unsigned long long)t->step, (unsigned long long)t->epoch + 1);
    return 0;
}

int trainer_open(trainer *t, const worker_options *o) {
    memset(t, 0, sizeof(*t));
    t->opts = o;
    if (trainer_parse_mode(o->mode, &t->mode) < 0)
        return trainer_fail(t, -EINVAL, "--mode '%s': use ddp, dp or ps", o->mode);
    model_spec spec;
    char err[512];
    int r = model_spec_parse(o->model, &spec, err, sizeof(err));
    if (r < 0)
        return trainer_fail(t, r, "--model: %s", err);
    t->m.spec = spec;
    if (o->devices && spec.n_layers < 2)
        return trainer_fail(t, -EINVAL, "--devices: model '%s' has one layer, nothing to split", spec.name);
    t->split_layer = model_split_layer(&spec, o->devices ? 2 : 1);
    trainer_plan_buckets(t);

    ddp_options go = DDP_OPTIONS_INIT;
    go.coordinator = o->coordinator;
    go.job = o->job;
    go.world_size = o->world_size;
    go.rank = o->rank;
    go.timeout_ms = o->timeout_ms;
    /* Every member must agree on the mode; in ddp mode also on the bucket layout, which
     * --devices changes (a bucket never straddles the devices). */
    go.mode = t->mode == MODE_DDP && o->devices ? "ddp-split" : o->mode;
    if (t->mode == MODE_PS) { /* ddpd checks every push against this layout */
        go.ps_buckets = t->bucket_count;
        go.n_ps_buckets = (size_t)t->n_buckets;
    }
    if ((r = ddp_init(&go, &t->g)) < 0)
        return trainer_fail(t, r, "joining the job: %s", ddp_last_error(NULL));
    t->rank = ddp_rank(t->g);
    t->world = ddp_world_size(t->g);
    t->global_batch = o->batch_size;
    if (o->batch_size % t->world)
        return trainer_fail(t, -EINVAL, "--batch-size %d does not split evenly over %d workers", o->batch_size,
                            t->world);
    t->local_batch = o->batch_size / t->world;

    if ((r = trainer_load_data(t)) < 0)
        return r;
    sampler_kind kind;
    if (sampler_kind_from_string(o->sampler, &kind) < 0)
        return trainer_fail(t, -EINVAL, "--sampler '%s': use partition or global", o->sampler);
    if ((r = sampler_init(&t->smp, kind, t->data.train.n, t->rank, t->world, (size_t)t->global_batch,
                          (uint64_t)o->seed, err, sizeof(err))) < 0)
        return trainer_fail(t, r, "%s", err);
    t->sampler_ready = true;

    if ((r = trainer_open_backends(t)) < 0)
        return r;
    if (!strcmp(o->transport, "nccl")) {
        if (t->mode != MODE_DDP)
            return trainer_fail(t, -EINVAL, "--transport nccl: only --mode ddp all-reduces between peers");
        if (o->devices)
            return trainer_fail(t, -EINVAL, "--transport nccl: one device per rank; --devices splits the model");
        if (!t->b.ops->peer_all_reduce_avg)
            return trainer_fail(t, -ENOTSUP, "--transport nccl: needs --device cuda and a build with NCCL (this %s)",
                                t->b.device >= 0 ? "build has none" : "is the CPU");
        t->peer = true;
    }
    /* In dp mode only rank 0 steps, so only it holds the velocity. */
    bool velocity = t->mode != MODE_DP || t->rank == 0;
    backend *backends[] = {&t->b, &t->b_split};
    if ((r = model_open_split(&t->m, &spec, backends, o->devices ? 2 : 1, t->local_batch, velocity)) < 0)
        return trainer_fail(t, r, "out of memory for model '%s' with batch %d", spec.name, t->local_batch);
    float *init = malloc(spec.n_params * sizeof(float));
    if (!init)
        return trainer_fail(t, -ENOMEM, "out of memory");
    model_init_params(&spec, init, (uint64_t)o->seed);
    model_upload_block(&t->m, MODEL_PARAMS, init);
    free(init);
    if ((r = trainer_alloc_io(t)) < 0)
        return r;
    if (o->resume && (r = trainer_resume(t)) < 0)
        return r;
    switch (t->mode) {
    case MODE_DDP:
        r = sync_ddp_setup(t);
        break;
    case MODE_DP:
        r = sync_dp_setup(t);
        break;
    case MODE_PS:
        r = sync_ps_setup(t);
        break;
    }
    if (r < 0)
        return r;
    if (o->metrics) {
        char path[4096];
        size_t k = 0;
        for (const char *p = o->metrics; *p && k + 12 < sizeof(path); p++) /* %r: the rank */
            if (p[0] == '%' && p[1] == 'r') {
                k += (size_t)snprintf(path + k, sizeof(path) - k, "%d", t->rank);
                p++;
            } else
                path[k++] = *p;
        path[k] = '\0';
        bool mine = t->rank == 0 || strstr(o->metrics, "%r");
        if (mine && !(t->metrics = fopen(path, "w")))
            return trainer_fail(t, -errno, "--metrics: cannot write %s: %s", path, strerror(errno));
    }
    return 0;
}

/* ---- evaluation, output -------------------------------------------------------------- */

/* Accuracy (or mean loss, for MSE models) on the test split, each rank taking a slice. */
static int trainer_evaluate(trainer *t, double *ret_metric) {
    model *m = &t->m;
    const dataset_split *d = &t->data.test;
    int r;
    if (t->mode == MODE_DP) { /* only rank 0 stepped */
        float *params = trainer_block_wire(t, MODEL_PARAMS, t->params_wire, t->rank == 0);
        if ((r = ddp_broadcast(t->g, params, m->spec.n_params, DDP_F32, 0)) < 0)
            return trainer_fail(t, r, "evaluating: %s", ddp_last_error(t->g));
        trainer_block_unwire(t, MODEL_PARAMS, params);
    }
    backend *out = m->b;
    size_t first = d->n * (size_t)t->rank / (size_t)t->world, last = d->n * (size_t)(t->rank + 1) / (size_t)t->world;
    int C = m->spec.sizes[m->spec.n_layers];
    double totals[2] = {0, 0}; /* correct (or summed loss), samples */
    for (size_t i = first; i < last; i += (size_t)t->local_batch) {
        int B = (int)(last - i < (size_t)t->local_batch ? last - i : (size_t)t->local_batch);
        t->b.ops->upload(&t->b, m->acts[0], d->x + i * d->dim, (size_t)B * d->dim * sizeof(float));
        model_forward(m, B);
        if (m->spec.loss == LOSS_MSE) { /* the mean squared error instead of an accuracy */
            out->ops->upload(out, t->mse_targets, t->toy_test_targets + i * (size_t)C, (size_t)B * C * sizeof(float));
            out->ops->mse_forward(out, m->losses, m->acts[m->spec.n_layers], t->mse_targets, B, C);
            totals[0] += trainer_sum_losses(t, m->losses, B);
        } else {
            out->ops->upload(out, t->targets, d->y + i, (size_t)B);
            totals[0] += (double)out->ops->count_correct(out, m->acts[m->spec.n_layers], t->targets, B, C);
        }
        totals[1] += B;
    }
    if ((r = ddp_all_reduce(t->g, totals, 2, DDP_F64, DDP_SUM)) < 0)
        return trainer_fail(t, r, "evaluating: %s", ddp_last_error(t->g));
    *ret_metric = totals[0] / totals[1];
    return 0;
}

static long peak_rss_kb(void) {
    struct rusage u;
    return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : 0;
}

static void trainer_write_metrics(trainer *t, const char *kind, double loss, double accuracy, double samples_per_s,
                                  double seconds) {
    if (!t->metrics)
        return;
    ddp_stats st = {0};
    ddp_get_stats(t->g, &st);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "type", kind);
    cJSON_AddNumberToObject(j, "rank", t->rank);
    cJSON_AddNumberToObject(j, "world", t->world);
    cJSON_AddStringToObject(j, "mode", t->opts->mode);
    cJSON_AddNumberToObject(j, "step", (double)t->step);
    cJSON_AddNumberToObject(j, "epoch", (double)t->epoch);
    cJSON_AddNumberToObject(j, "loss", loss);
    if (!strcmp(kind, "epoch") && t->m.spec.loss == LOSS_MSE) /* the toy model: a loss, not an accuracy */
        cJSON_AddNumberToObject(j, "test_loss", t->test_loss);
    if (!isnan(accuracy))
        cJSON_AddNumberToObject(j, "test_accuracy", accuracy);
    cJSON_AddNumberToObject(j, "samples_per_s", samples_per_s);
    cJSON_AddNumberToObject(j, "seconds", seconds);
    cJSON_AddNumberToObject(j, "compute_s", t->times.compute_s);
    cJSON_AddNumberToObject(j, "comm_s", t->times.comm_s);
    cJSON_AddNumberToObject(j, "wait_s", t->times.wait_s);
    cJSON_AddNumberToObject(j, "bytes_sent", (double)st.bytes_sent);
    cJSON_AddNumberToObject(j, "bytes_received", (double)st.bytes_received);
    cJSON_AddNumberToObject(j, "peak_rss_kb", (double)peak_rss_kb());
    cJSON_AddStringToObject(j, "model", t->m.spec.name);
    cJSON_AddNumberToObject(j, "n_params", (double)t->m.spec.n_params);
    cJSON_AddNumberToObject(j, "outputs", t->m.spec.sizes[t->m.spec.n_layers]);
    cJSON_AddNumberToObject(j, "global_batch", t->global_batch);
    if (!strcmp(kind, "epoch")) { /* per peer; the last entry is ddpd */
        cJSON *to = cJSON_AddArrayToObject(j, "bytes_to"), *from = cJSON_AddArrayToObject(j, "bytes_from");
        for (int p = 0; p <= t->world; p++) {
            unsigned long long sent = 0, received = 0;
            ddp_get_peer_stats(t->g, p, &sent, &received);
            cJSON_AddItemToArray(to, cJSON_CreateNumber((double)sent));
            cJSON_AddItemToArray(from, cJSON_CreateNumber((double)received));
        }
    }
    /* Keyed "cpu" or "cuda:K": what this process allocated there; on a GPU also what the
     * device reports in use (every process and the CUDA context) and the host staging. */
    cJSON *mem = cJSON_AddObjectToObject(j, "device_memory");
    for (int i = 0; i < t->m.n_stages; i++) {
        backend *b = t->m.stages[i].b;
        char name[32];
        if (b->device >= 0)
            snprintf(name, sizeof(name), "%s:%d", b->ops->name, b->device);
        else
            snprintf(name, sizeof(name), "%s", b->ops->name);
        if (cJSON_GetObjectItem(mem, name)) /* --devices cpu,cpu or 0,0: one entry each */
            snprintf(name + strlen(name), sizeof(name) - strlen(name), "#%d", i);
        cJSON *dev = cJSON_AddObjectToObject(mem, name);
        cJSON_AddNumberToObject(dev, "current_bytes", (double)b->memory.current);
        cJSON_AddNumberToObject(dev, "peak_bytes", (double)b->memory.peak);
        size_t used, total;
        if (b->ops->device_memory(b, &used, &total) == 0) {
            cJSON_AddNumberToObject(dev, "device_used_bytes", (double)used);
            cJSON_AddNumberToObject(dev, "device_total_bytes", (double)total);
            cJSON_AddNumberToObject(dev, "host_staging_bytes", (double)b->host.peak);
        }
    }
    char *text = cJSON_PrintUnformatted(j);
    if (text) {
        fprintf(t->metrics, "%s\n", text);
        fflush(t->metrics);
    }
    free(text);
    cJSON_Delete(j);
}

static int trainer_save(trainer *t) {
    if (!t->opts->checkpoint || t->rank != 0)
        return 0;
    model *m = &t->m;
    size_t bytes = m->spec.n_params * sizeof(float);
    bool with_velocity = m->stages[0].velocity != NULL;
    float *params = malloc(bytes), *velocity = with_velocity ? malloc(bytes) : NULL;
    if (!params || (with_velocity && !velocity)) {
        free(params);
        free(velocity);
        return trainer_fail(t, -ENOMEM, "out of memory writing the checkpoint");
    }
    model_download_block(m, MODEL_PARAMS, params);
    if (velocity)
        model_download_block(m, MODEL_VELOCITY, velocity);
    checkpoint_info info = {.n_params = m->spec.n_params, .step = t->step, .epoch = t->epoch,
                            .step_in_epoch = t->step_in_epoch, .seed = (uint64_t)t->opts->seed,
                            .world_size = (uint32_t)t->world, .global_batch = (uint32_t)t->global_batch};
    snprintf(info.model, sizeof(info.model), "%s", m->spec.name);
    char err[512];
    int r = checkpoint_write(t->opts->checkpoint, &info, params, velocity, err, sizeof(err));
    free(params);
    free(velocity);
    return r < 0 ? trainer_fail(t, r, "%s", err) : 0;
}

static void progress(const trainer *t, size_t step, size_t steps, double loss) {
    if (t->rank != 0 || !isatty(STDOUT_FILENO))
        return;
    int width = 30, done = (int)(width * (step + 1) / (steps ? steps : 1));
    fprintf(stdout, "\r  [%.*s%*s] %zu/%zu loss %.4f", done, "==============================", width - done, "",
            step + 1, steps, loss);
    fflush(stdout);
}

/* ---- the loop ------------------------------------------------------------------------ */

int trainer_run(trainer *t) {
    const worker_options *o = t->opts;
    size_t steps_per_epoch = sampler_steps_per_epoch(&t->smp);
    uint64_t max_steps = o->steps > 0 ? (uint64_t)o->steps : UINT64_MAX;
    uint64_t epochs = o->steps > 0 ? UINT64_MAX : (uint64_t)o->epochs;
    int r = 0;
    double total_s = 0, last_accuracy = NAN;
    uint64_t total_samples = 0;
    if (t->rank == 0)
        printf("ddp-worker: %s mode, model %s (%zu parameters), %d workers, batch %d (%d each), %zu steps an epoch\n",
               o->mode, t->m.spec.name, t->m.spec.n_params, t->world, t->global_batch, t->local_batch,
               steps_per_epoch);
    while (t->epoch < epochs && t->step < max_steps) {
        sampler_set_epoch(&t->smp, t->epoch);
        double t0 = trainer_now(), loss_sum = 0;
        size_t n_steps = 0;
        for (; t->step_in_epoch < steps_per_epoch && t->step < max_steps; t->step_in_epoch++) {
            size_t count;
            const uint32_t *idx = sampler_batch(&t->smp, t->step_in_epoch, &count);
            double s0 = trainer_now(), loss = 0;
            trainer_load_batch(t, idx, count);
            switch (t->mode) {
            case MODE_DDP:
                r = sync_ddp_step(t, (int)count, &loss);
                break;
            case MODE_DP:
                r = sync_dp_step(t, (int)count, &loss);
                break;
            case MODE_PS:
                r = sync_ps_step(t, (int)count, &loss);
                break;
            }
            if (r < 0)
                return r;
            /* The loss reported is the global batch's mean, a scalar reduced across ranks:
             * per step when every step is written down, else once an epoch (the mean of
             * equal local batches' means is the global mean). Decided on the option, which
             * every rank has, not on whether this rank writes a file. */
            if (t->opts->metrics && t->mode != MODE_DP && (r = ddp_all_reduce(t->g, &loss, 1, DDP_F64, DDP_AVG)) < 0)
                return trainer_fail(t, r, "all-reducing the loss: %s", ddp_last_error(t->g));
            t->step++;
            loss_sum += loss;
            n_steps++;
            progress(t, t->step_in_epoch, steps_per_epoch, loss);
            double dt = trainer_now() - s0;
            ddp_report_progress(t->g, t->step, dt > 0 ? t->global_batch / dt : 0);
            trainer_write_metrics(t, "step", loss, NAN, dt > 0 ? t->global_batch / dt : 0, dt);
            bool stop;
            if ((r = trainer_should_stop(t, &stop)) < 0)
                return r;
            if (stop) { /* asked to stop: keep the place, so --resume continues from it */
                t->step_in_epoch++;
                if (t->step_in_epoch >= steps_per_epoch) {
                    t->epoch++;
                    t->step_in_epoch = 0;
                }
                if ((r = trainer_save(t)) < 0)
                    return r;
                if (t->rank == 0)
                    printf("ddp-worker: stopped by a signal at step %llu%s\n", (unsigned long long)t->step,
                           t->opts->checkpoint ? "; checkpoint written" : "");
                return 0;
            }
        }
        double train_s = trainer_now() - t0;
        if (!t->opts->metrics && t->mode != MODE_DP && (r = ddp_all_reduce(t->g, &loss_sum, 1, DDP_F64, DDP_AVG)) < 0)
            return trainer_fail(t, r, "all-reducing the loss: %s", ddp_last_error(t->g));
        bool epoch_done = t->step_in_epoch >= steps_per_epoch;
        double accuracy = NAN, test_metric = NAN;
        if ((r = trainer_evaluate(t, &test_metric)) < 0)
            return r;
        bool mse = t->m.spec.loss == LOSS_MSE;
        if (!mse)
            accuracy = test_metric;
        else
            t->test_loss = test_metric;
        double rate = train_s > 0 ? (double)(n_steps * (size_t)t->global_batch) / train_s : 0;
        total_s += train_s;
        total_samples += n_steps * (size_t)t->global_batch;
        last_accuracy = test_metric;
        double mean_loss = n_steps ? loss_sum / (double)n_steps : NAN;
        if (t->rank == 0) {
            if (isatty(STDOUT_FILENO))
                printf("\r%60s\r", "");
            if (mse)
                printf("epoch %llu: loss %.4f, test loss %.4f, %.0f samples/s (%.1f s, step %llu)\n",
                       (unsigned long long)t->epoch + 1, mean_loss, test_metric, rate, train_s,
                       (unsigned long long)t->step);
            else
                printf("epoch %llu: loss %.4f, test accuracy %.4f, %.0f samples/s (%.1f s, step %llu)\n",
                       (unsigned long long)t->epoch + 1, mean_loss, accuracy, rate, train_s,
                       (unsigned long long)t->step);
            fflush(stdout);
        }
        trainer_write_metrics(t, "epoch", mean_loss, accuracy, rate, train_s);
        if (epoch_done) {
            t->epoch++;
            t->step_in_epoch = 0;
        }
        if ((r = trainer_save(t)) < 0)
            return r;
    }
    if (t->rank == 0) /* one line for scripts, like the PyTorch anchor's RESULT */
        printf("RESULT world=%d model=%s mode=%s steps=%llu train_s=%.2f samples_per_s=%.0f test_%s=%.4f\n", t->world,
               t->m.spec.name, t->opts->mode, (unsigned long long)t->step, total_s,
               total_s > 0 ? (double)total_samples / total_s : 0, t->m.spec.loss == LOSS_MSE ? "loss" : "acc",
               last_accuracy);
    return 0;
}

void trainer_close(trainer *t) {
    if (t->m.b) { /* what lives with the outputs, then the model, then the devices */
        backend *out = t->m.b;
        const backend_ops *o = out->ops;
        int C = t->m.spec.sizes[t->m.spec.n_layers];
        size_t B = (size_t)t->local_batch, G = (size_t)t->global_batch;
        o->release(out, t->targets, B);
        o->release(out, t->mse_targets, B * (size_t)C * sizeof(float));
        o->release(out, t->dlogits, B * (size_t)C * sizeof(float));
        o->release(out, t->gathered_logits, G * (size_t)C * sizeof(float));
        o->release(out, t->gathered_dlogits, G * (size_t)C * sizeof(float));
        o->release(out, t->gathered_targets, G);
        o->release(out, t->gathered_mse_targets, G * (size_t)C * sizeof(float));
        o->release(out, t->gathered_losses, G * sizeof(float));
        o->release(out, t->gathered_probs, G * (size_t)C * sizeof(float));
        size_t p = t->m.spec.n_params * sizeof(float);
        backend *staging = trainer_staging_backend(t);
        staging->ops->host_release(staging, t->params_wire, p);
        staging->ops->host_release(staging, t->grads_wire, p);
        staging->ops->host_release(staging, t->outputs_wire, B * (size_t)C * sizeof(float));
        staging->ops->host_release(staging, t->gathered_wire, G * (size_t)C * sizeof(float));
        staging->ops->host_release(staging, t->gathered_grads, (size_t)t->world * p);
        for (int i = 0; i < t->m.n_stages; i++)
            t->m.stages[i].b->ops->release(t->m.stages[i].b, t->dp_addend[i], t->m.stages[i].count * sizeof(float));
        model_close(&t->m);
    }
    if (t->b_split.ops)
        backend_close(&t->b_split);
    if (t->b.ops)
        backend_close(&t->b);
    free(t->input_host);
    free(t->targets_host);
    free(t->mse_targets_host);
    free(t->gathered_targets_host);
    free(t->toy_targets);
    free(t->toy_test_targets);
    if (t->sampler_ready)
        sampler_free(&t->smp);
    dataset_free(&t->data);
    if (t->metrics)
        fclose(t->metrics);
    ddp_finalize(t->g);
    t->g = NULL;
}
