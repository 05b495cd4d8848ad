/* The trainer's loop: set-up, epochs and steps, output, and the end. The sync mode does
 * each optimizer step; device.c, evaluate.c, metrics.c and resume.c do the rest. */
#include "worker/trainer/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "worker/trainer/blas_kernels.h"

#define TOY_SAMPLES 8192 /* the toy model trains on random data, as the DDP tutorial's ToyModel */
#define TOY_TEST_SAMPLES 1024
#define TOY_SEED 0x746f79u /* "toy", mixed into --seed */

volatile sig_atomic_t trainer_stop_signal;
volatile sig_atomic_t trainer_training;

int trainer_fail(trainer *t, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof(t->error), fmt, ap);
    va_end(ap);
    return err;
}

int trainer_refuse(trainer *t, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof(t->error), fmt, ap);
    va_end(ap);
    t->usage_error = true;
    return err;
}

/* Whether every rank should stop now: a signal reached at least one of them. Every rank
 * asks at the same steps, so the question is one collective. */
static int trainer_should_stop(trainer *t, bool *ret_stop) {
    *ret_stop = false;
    if (t->step % TRAINER_STOP_CHECK_STEPS != 0)
        return 0;
    int32_t sig = trainer_stop_signal; /* the highest signal any rank saw: every rank exits with it */
    if (!sig && ddp_stop_requested(t->g) == -ECONNABORTED) /* ddpd went away and did not come back */
        sig = TRAINER_STOP_COORDINATOR;
    int r = ddp_all_reduce(t->g, &sig, 1, DDP_I32, DDP_MAX);
    if (r < 0)
        return trainer_fail(t, r, "agreeing whether to stop: %s", ddp_last_error(t->g));
    t->stopped_by = sig;
    *ret_stop = sig != 0;
    return 0;
}

/* ---- set-up ------------------------------------------------------------------------- */

/* A stop signal before training: nothing to keep, so set-up ends between its phases (and
 * libddp's waits end at once, by ddp_interrupt). */
static int trainer_check_stop(trainer *t) {
    int sig = trainer_stop_signal;
    return sig ? trainer_fail(t, -EINTR, "stopped by signal %d while starting", sig) : 0;
}

static int trainer_load_data(trainer *t) {
    const model_spec *s = &t->m.spec;
    if (s->loss == LOSS_MSE) { /* random data, the same on every rank for the seed */
        int e = dataset_toy(&t->data, TOY_SAMPLES, TOY_TEST_SAMPLES, s->sizes[0], s->sizes[s->n_layers],
                            (uint64_t)t->opts->seed ^ TOY_SEED);
        return e < 0 ? trainer_fail(t, e, "out of memory for the toy data") : 0;
    }
    char err[512];
    int e = dataset_load(t->opts->data, (size_t)s->sizes[0], &t->data, err, sizeof(err));
    if (e == -EDOM)
        return trainer_refuse(t, -EINVAL, "model '%s' takes %d inputs but the images in %s do not: %s", s->name,
                              s->sizes[0], t->opts->data, err);
    if (e < 0)
        return trainer_fail(t, e, "%s", err);
    if ((unsigned)s->sizes[s->n_layers] != t->data.n_classes)
        return trainer_refuse(t, -EINVAL, "model '%s' has %d outputs but %s has %u classes", s->name,
                              s->sizes[s->n_layers], t->opts->data, t->data.n_classes);
    return 0;
}

/* Joins the job: every member must agree on the mode, and on what the mode declares. */
static int trainer_join(trainer *t) {
    const worker_options *o = t->opts;
    ddp_options go = DDP_OPTIONS_INIT;
    go.coordinator = o->coordinator;
    go.job = o->job;
    go.world_size = o->world_size;
    go.rank = o->rank;
    go.timeout_ms = o->timeout_ms;
    go.mode = t->mode->name;
    /* auto and nccl leave libddp's data plane to DDP_TRANSPORT, else its own choice */
    bool named = !strcmp(o->transport, "shm") || !strcmp(o->transport, "zmq");
    go.transport = named ? o->transport : NULL;
    if (t->mode->join)
        t->mode->join(&go, &t->buckets, o->devices != NULL);
    int r = ddp_init(&go, &t->g);
    if (r == -EINVAL) /* the options or the environment (WORLD_SIZE, RANK, ...), or the job's are other */
        return trainer_refuse(t, r, "joining the job: %s", ddp_last_error(NULL));
    if (r < 0)
        return trainer_fail(t, r, "joining the job: %s", ddp_last_error(NULL));
    t->rank = ddp_rank(t->g);
    t->world = ddp_world_size(t->g);
    return 0;
}

/* A rank that cannot start says why at once, and still joins, so that its abort (the
 * caller's) tells the others now rather than at the end of their join timeout. err and
 * t->error stay the first failure's, whatever the join's outcome. */
static int trainer_join_to_tell(trainer *t, int err) {
    fprintf(stderr, "ddp-worker: %s; joining the job to tell the other ranks\n", t->error);
    char error[sizeof(t->error)];
    memcpy(error, t->error, sizeof(error));
    bool usage_error = t->usage_error;
    (void)trainer_join(t);
    memcpy(t->error, error, sizeof(error));
    t->usage_error = usage_error;
    return err;
}

const char *trainer_transport(const trainer *t) {
    return !strcmp(t->opts->transport, "nccl") ? "nccl" : ddp_transport(t->g);
}

static int trainer_check_transport(trainer *t) {
    const worker_options *o = t->opts;
    if (strcmp(o->transport, "nccl") != 0)
        return 0;
    if (!t->mode->device_all_reduce) {
        char able[64] = "";
        for (const char *const *name = sync_mode_names; *name; name++)
            if (sync_mode_find(*name)->device_all_reduce)
                snprintf(able + strlen(able), sizeof(able) - strlen(able), "%s%s", able[0] ? " or " : "", *name);
        return trainer_refuse(t, -EINVAL, "--transport nccl: only --mode %s all-reduces between peers", able);
    }
    if (o->devices)
        return trainer_refuse(t, -EINVAL, "--transport nccl: one device per rank; --devices splits the model");
    if (!t->devices[0].ops->peer_all_reduce_avg)
        return trainer_refuse(t, -ENOTSUP, "--transport nccl: needs --device cuda and a build with NCCL (this %s)",
                              t->devices[0].device >= 0 ? "build has none" : "is the CPU");
    return 0;
}

/* The model on its devices, with the same initial parameters on every rank. */
static int trainer_open_model(trainer *t, const model_spec *spec) {
    /* Where only rank 0 steps (dp), only it holds the velocity. */
    bool velocity = !t->mode->rank0_steps || t->rank == 0;
    backend *backends[MODEL_MAX_STAGES] = {&t->devices[0], &t->devices[1]};
    int r = model_open_split(&t->m, spec, backends, t->n_devices, t->local_batch, velocity);
    if (r < 0)
        return trainer_fail(t, r, "out of memory for model '%s' with batch %d", spec->name, t->local_batch);
    float *init = malloc(spec->n_params * sizeof(float));
    if (!init)
        return trainer_fail(t, -ENOMEM, "out of memory");
    model_init_params(spec, init, (uint64_t)t->opts->seed);
    model_upload_block(&t->m, MODEL_PARAMS, init);
    free(init);
    if (batch_open(&t->batch, &t->m, t->local_batch) < 0)
        return trainer_fail(t, -ENOMEM, "out of memory for a batch of %d", t->local_batch);
    if (staging_open(&t->staging, &t->m, t->local_batch) < 0)
        return trainer_fail(t, -ENOMEM, "out of memory for %zu bytes of host staging",
                            2 * spec->n_params * sizeof(float));
    return 0;
}

static int trainer_open_sync(trainer *t) {
    sync_ctx c = {
        .m = &t->m,
        .g = t->g,
        .staging = &t->staging,
        .buckets = &t->buckets,
        .batch = &t->batch,
        .rank = t->rank,
        .world = t->world,
        .global_batch = t->global_batch,
        .lr = (float)t->opts->lr,
        .momentum = (float)t->opts->momentum,
        .step = &t->step,
        .device_all_reduce = !strcmp(t->opts->transport, "nccl"),
        .times = &t->times,
        .error = t->error,
        .error_size = sizeof(t->error),
    };
    return t->mode->open(&c, &t->sync);
}

int trainer_open(trainer *t, const worker_options *o) {
    memset(t, 0, sizeof(*t));
    t->saved_step = UINT64_MAX;
    t->opts = o;
    if (!(t->mode = sync_mode_find(o->mode)))
        return trainer_refuse(t, -EINVAL, "--mode '%s' is not a sync mode", o->mode);
    model_spec spec;
    char err[512];
    int r = model_spec_parse(o->model, &spec, err, sizeof(err));
    if (r < 0)
        return trainer_refuse(t, r, "--model: %s", err);
    t->m.spec = spec;
    if (o->devices && spec.n_layers < 2)
        return trainer_refuse(t, -EINVAL, "--devices: model '%s' has one layer, nothing to split", spec.name);
    bucket_plan_make(&t->buckets, &spec, o->bucket_mb, model_split_layer(&spec, o->devices ? 2 : 1));
    /* The data before the join: a slow load (a large file, a network disk) is then spent
     * while the job forms, within the join's allowance, not in the first collective's
     * timeout of the ranks that loaded sooner. */
    r = trainer_load_data(t);
    if (r < 0)
        return trainer_join_to_tell(t, r);
    TRY(trainer_check_stop(t));
    TRY(trainer_join(t));
    TRY(resume_check(t));
    t->global_batch = o->batch_size;
    if (o->batch_size % t->world)
        return trainer_refuse(t, -EINVAL, "--batch-size %d does not split evenly over %d workers", o->batch_size,
                              t->world);
    t->local_batch = o->batch_size / t->world;

    sampler_kind kind;
    if (sampler_kind_from_string(o->sampler, &kind) < 0)
        return trainer_refuse(t, -EINVAL, "--sampler '%s': use partition or global", o->sampler);
    if ((r = sampler_init(&t->smp, kind, t->data.train.n, t->rank, t->world, (size_t)t->global_batch, (uint64_t)o->seed,
                          err, sizeof(err))) < 0)
        return trainer_fail(t, r, "%s", err);
    t->sampler_ready = true;
    TRY(trainer_agree(t));

    TRY(devices_open(t));
    TRY(trainer_check_transport(t));
    TRY(trainer_open_model(t, &spec));
    TRY(trainer_check_stop(t));
    if (o->resume)
        TRY(resume_load(t));
    TRY(trainer_open_sync(t));
    return metrics_open(t);
}

/* ---- the loop ------------------------------------------------------------------------ */

/* The ranks agreed to stop and the checkpoint of this step is written (or failed: then
 * the run's error). */
static int trainer_stopped(trainer *t) {
    TRY(resume_saved(t));
    if (t->rank == 0 && t->stopped_by == TRAINER_STOP_COORDINATOR)
        printf("ddp-worker: stopped at step %llu, its coordinator gone%s\n", (unsigned long long)t->step,
               t->opts->checkpoint ? "; checkpoint written" : "");
    else if (t->rank == 0)
        printf("ddp-worker: stopped by a signal at step %llu%s\n", (unsigned long long)t->step,
               t->opts->checkpoint ? "; checkpoint written" : "");
    return 0;
}

/* Rank 0's progress bar, on a terminal. */
static void progress(const trainer *t, size_t step, size_t steps, double loss) {
    if (t->rank != 0 || !isatty(STDOUT_FILENO))
        return;
    int width = 30, done = (int)(width * (step + 1) / (steps ? steps : 1));
    fprintf(stdout, "\r  [%.*s%*s] %zu/%zu loss %.4f", done, "==============================", width - done, "",
            step + 1, steps, loss);
    fflush(stdout);
}

int trainer_run(trainer *t) {
    const worker_options *o = t->opts;
    size_t steps_per_epoch = sampler_steps_per_epoch(&t->smp);
    uint64_t max_steps = o->steps > 0 ? (uint64_t)o->steps : UINT64_MAX;
    uint64_t epochs = o->steps > 0 ? UINT64_MAX : (uint64_t)o->epochs;
    int r = 0;
    double total_s = 0, last_accuracy = NAN;
    uint64_t total_samples = 0;
    trainer_training = 1;
    if (t->rank == 0) {
        char kernels[64] = "";
        if (t->devices[0].device < 0)
            snprintf(kernels, sizeof(kernels), ", OpenBLAS %s kernels", blas_kernels_in_use());
        printf("ddp-worker: %s mode, model %s (%zu parameters), %d workers over %s, batch %d (%d each), %zu steps "
               "an epoch%s\n",
               t->mode->name, t->m.spec.name, t->m.spec.n_params, t->world, trainer_transport(t), t->global_batch,
               t->local_batch, steps_per_epoch, kernels);
    }
    bool stopping = false; /* asked to stop at an epoch's last step: it ends as any epoch, then the run */
    while (t->epoch < epochs && t->step < max_steps && !stopping) {
        sampler_set_epoch(&t->smp, t->epoch);
        double t0 = sync_now(), loss_sum = 0;
        size_t n_steps = 0, first_step = t->step_in_epoch; /* not 0 when resumed inside the epoch */
        for (; t->step_in_epoch < steps_per_epoch && t->step < max_steps; t->step_in_epoch++) {
            size_t count;
            const uint32_t *idx = sampler_batch(&t->smp, t->step_in_epoch, &count);
            double s0 = sync_now(), loss = 0;
            batch_load(&t->batch, &t->m, &t->data.train, idx, count);
            if ((r = t->mode->step(t->sync, (int)count, &loss)) < 0)
                return r;
            /* The loss reported is the global batch's mean, a scalar reduced across ranks:
             * per step when every step is written down, else once an epoch (the mean of
             * equal local batches' means is the global mean). Decided on the option, which
             * every rank has, not on whether this rank writes a file. */
            if (t->opts->metrics && !t->mode->global_loss && (r = ddp_all_reduce(t->g, &loss, 1, DDP_F64, DDP_AVG)) < 0)
                return trainer_fail(t, r, "all-reducing the loss: %s", ddp_last_error(t->g));
            t->step++;
            loss_sum += loss;
            n_steps++;
            progress(t, t->step_in_epoch, steps_per_epoch, loss);
            double dt = sync_now() - s0;
            ddp_report_progress(t->g, t->step, dt > 0 ? t->global_batch / dt : 0);
            metrics_write(t, "step", t->epoch, loss, NAN, dt > 0 ? t->global_batch / dt : 0, dt);
            bool stop;
            if ((r = trainer_should_stop(t, &stop)) < 0)
                return r;
            if (stop) { /* asked to stop: keep the place, so --resume continues from it */
                t->step_in_epoch++;
                if (t->step_in_epoch >= steps_per_epoch) {
                    /* The epoch's last step: it ends as any epoch (saved, then evaluated
                     * and its line written), as --resume starts the next epoch and would
                     * never write that line. */
                    stopping = true;
                    break;
                }
                if ((r = metrics_sync_before_save(t)) < 0 || (r = resume_save(t)) < 0)
                    return r;
                return trainer_stopped(t);
            }
        }
        double train_s = sync_now() - t0;
        if (!t->opts->metrics && !t->mode->global_loss &&
            (r = ddp_all_reduce(t->g, &loss_sum, 1, DDP_F64, DDP_AVG)) < 0)
            return trainer_fail(t, r, "all-reducing the loss: %s", ddp_last_error(t->g));
        bool epoch_done = t->step_in_epoch >= steps_per_epoch;
        uint64_t epoch = t->epoch; /* the one these steps were of */
        if (epoch_done) {
            t->epoch++;
            t->step_in_epoch = 0;
        }
        /* The checkpoint before the evaluation, which does not change the model: a long
         * one cannot cost it (a stop's grace running out, a crash). */
        if ((r = metrics_sync_before_save(t)) < 0 || (r = resume_save(t)) < 0)
            return r;
        double accuracy = NAN, test_metric = NAN;
        if ((r = evaluate(t, &test_metric)) < 0)
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
            /* The loss and the rate are of the steps this process ran: a part of the epoch
             * (resumed inside it, or stopped by --steps) says which. */
            char which[96];
            int w = snprintf(which, sizeof(which), "epoch %llu", (unsigned long long)epoch + 1);
            if (first_step != 0 || !epoch_done)
                snprintf(which + w, sizeof(which) - (size_t)w, " (steps %zu-%zu of %zu)", first_step + 1,
                         first_step + n_steps, steps_per_epoch);
            if (isatty(STDOUT_FILENO))
                printf("\r%60s\r", "");
            if (mse)
                printf("%s: loss %.4f, test loss %.4f, %.0f samples/s (%.1f s, step %llu)\n", which, mean_loss,
                       test_metric, rate, train_s, (unsigned long long)t->step);
            else
                printf("%s: loss %.4f, test accuracy %.4f, %.0f samples/s (%.1f s, step %llu)\n", which, mean_loss,
                       accuracy, rate, train_s, (unsigned long long)t->step);
            fflush(stdout);
        }
        t->line_first_step = first_step;
        t->line_steps = n_steps;
        metrics_write(t, "epoch", epoch, mean_loss, accuracy, rate, train_s);
        metrics_sync(t);
    }
    if (stopping)
        return trainer_stopped(t);
    if ((r = resume_saved(t)) < 0)
        return r;
    if (isnan(last_accuracy)) { /* resumed where the run had ended: say so, and how good it is */
        if (t->rank == 0)
            printf("ddp-worker: nothing left to train: the run is at step %llu, %llu epoch%s done\n",
                   (unsigned long long)t->step, (unsigned long long)t->epoch, t->epoch == 1 ? "" : "s");
        if ((r = evaluate(t, &last_accuracy)) < 0)
            return r;
    }
    if (t->rank == 0) /* one line for scripts, like the PyTorch anchor's RESULT */
        printf("RESULT world=%d model=%s mode=%s steps=%llu train_s=%.2f samples_per_s=%.0f test_%s=%.4f\n", t->world,
               t->m.spec.name, t->mode->name, (unsigned long long)t->step, total_s,
               total_s > 0 ? (double)total_samples / total_s : 0, t->m.spec.loss == LOSS_MSE ? "loss" : "acc",
               last_accuracy);
    return 0;
}

void trainer_close(trainer *t) {
    checkpoint_links_free(&t->links);
    if (t->sync)
        t->mode->close(t->sync);
    t->sync = NULL;
    /* what lives with the outputs, then the model, then the devices */
    staging_close(&t->staging);
    batch_close(&t->batch, &t->m);
    if (t->m.b)
        model_close(&t->m);
    for (int i = MODEL_MAX_STAGES - 1; i >= 0; i--)
        if (t->devices[i].ops)
            backend_close(&t->devices[i]);
    if (t->sampler_ready)
        sampler_free(&t->smp);
    dataset_free(&t->data);
    metrics_close(t);
    ddp_finalize(t->g);
    t->g = NULL;
}
