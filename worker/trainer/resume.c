/* The training's state on disk: parameters, velocity and the place in training, written by
 * rank 0 (checkpoint.c is the format) and read back by --resume. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/atomic_file.h"
#include "common/error.h"

#include "worker/trainer/checkpoint.h"
#include "worker/trainer/checkpoint_keep.h"
#include "worker/trainer/trainer.h"

int resume_check(trainer *t) {
    const char *path = t->opts->checkpoint;
    if (!path || t->rank != 0)
        return 0;
    char err[512];
    int r = atomic_file_check(path, "--checkpoint", err, sizeof(err));
    if (r < 0)
        return trainer_refuse(t, r, "%s", err);
    struct stat st;
    if (!t->opts->resume && !t->opts->overwrite && stat(path, &st) == 0)
        return trainer_refuse(t, -EEXIST,
                              "--checkpoint %s exists: add --resume to continue from it, or --overwrite to start over "
                              "and replace it",
                              path);
    return 0;
}

int resume_save(trainer *t) {
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
    checkpoint_info info = {.n_params = m->spec.n_params,
                            .step = t->step,
                            .epoch = t->epoch,
                            .step_in_epoch = t->step_in_epoch,
                            .seed = (uint64_t)t->opts->seed,
                            .world_size = (uint32_t)t->world,
                            .global_batch = (uint32_t)t->global_batch,
                            .lr = t->opts->lr,
                            .momentum = t->opts->momentum,
                            .train_samples = t->data.train.n,
                            .data_fingerprint = dataset_fingerprint(&t->data)};
    snprintf(info.model, sizeof(info.model), "%s", m->spec.name);
    snprintf(info.sampler, sizeof(info.sampler), "%s", t->opts->sampler);
    char err[512];
    bool replaced = false;
    int r = checkpoint_write(t->opts->checkpoint, &info, params, velocity, &replaced, err, sizeof(err));
    free(params);
    free(velocity);
    if (r < 0 && replaced) { /* in place, but its directory's sync failed: training goes on */
        t->save_error = r;
        t->saved_step = t->step;
        snprintf(t->save_failure, sizeof(t->save_failure), "%s", err);
        fprintf(stderr,
                "ddp-worker: rank 0: checkpoint of step %llu written but not made durable: %s; training goes on\n",
                (unsigned long long)t->step, err);
    } else if (r < 0) { /* the file as it was stays; training goes on, and the next save tries again */
        t->save_error = r;
        if (t->saved_step == UINT64_MAX)
            snprintf(t->save_failure, sizeof(t->save_failure), "%s (no checkpoint was written before)", err);
        else
            snprintf(t->save_failure, sizeof(t->save_failure), "%s (the one of step %llu stays)", err,
                     (unsigned long long)t->saved_step);
        fprintf(stderr, "ddp-worker: rank 0: checkpoint of step %llu not written: %s; training goes on\n",
                (unsigned long long)t->step, t->save_failure);
        return 0;
    } else {
        t->save_error = 0;
        t->saved_step = t->step;
    }
    if (checkpoint_keep(t->opts->checkpoint, t->step, t->opts->checkpoint_keep, &t->links, err, sizeof(err)) < 0)
        fprintf(stderr, "ddp-worker: rank 0: %s (the checkpoint itself was written)\n", err);
    return 0;
}

int resume_saved(trainer *t) {
    if (t->save_error)
        return trainer_fail(t, t->save_error, "trained to step %llu, but the last checkpoint save failed: %s",
                            (unsigned long long)t->step, t->save_failure);
    return 0;
}

/* What rank 0 found, for every rank to act on alike (and exit with rank 0's code). */
enum resume_state { RESUME_READ, RESUME_FAILED, RESUME_NOTHING, RESUME_REFUSED };

int resume_load(trainer *t) {
    model *m = &t->m;
    const model_spec *s = &m->spec;
    /* Rank 0 reads; everyone gets the same state, as a checkpoint may live on one host only. */
    uint64_t state[4] = {0}; /* a resume_state; step, epoch, position */
    int r = 0;
    /* Read into host memory: the tensors' own on the CPU, the staging buffers on a GPU. */
    bool with_velocity = m->stages[0].velocity != NULL;
    float *params = staging_block_wire(&t->staging, MODEL_PARAMS, t->staging.params, false);
    float *velocity = with_velocity ? staging_block_wire(&t->staging, MODEL_VELOCITY, t->staging.grads, false) : NULL;
    if (t->rank == 0) {
        checkpoint_info expect = {.n_params = s->n_params}, info = {0};
        snprintf(expect.model, sizeof(expect.model), "%s", s->name);
        char err[512];
        r = checkpoint_read(t->opts->checkpoint, &expect, &info, params, velocity, err, sizeof(err));
        if (r == -ENOENT) { /* a service's first start: nothing to resume yet */
            printf("ddp-worker: no checkpoint at %s yet: starting from the beginning\n", t->opts->checkpoint);
            info = (checkpoint_info){0};
            r = 0;
            state[0] = RESUME_NOTHING;
        } else if (r == -EINVAL) /* of another model or size: the flags ask what this file is not */
            r = trainer_refuse(t, r, "--resume: %s", err);
        else if (r < 0)
            snprintf(t->error, sizeof(t->error), "--resume: %s", err);
        else if (info.world_size != (uint32_t)t->world && t->smp.kind == SAMPLER_PARTITION)
            r = trainer_refuse(t, -EINVAL,
                               "--resume: %s was written by %u workers, not %d: with the partition sampler each rank's "
                               "shard depends on it (--sampler global trains on the same batches for any number)",
                               t->opts->checkpoint, info.world_size, t->world);
        else if (info.global_batch != (uint32_t)t->global_batch || info.seed != (uint64_t)t->opts->seed)
            r = trainer_refuse(t, -EINVAL,
                               "--resume: %s was written with batch size %u and seed %llu, not %d and %d: it would not "
                               "continue the same run",
                               t->opts->checkpoint, info.global_batch, (unsigned long long)info.seed, t->global_batch,
                               t->opts->seed);
        else if (info.has_settings && (strcmp(info.sampler, t->opts->sampler) != 0 || info.lr != t->opts->lr ||
                                       info.momentum != t->opts->momentum))
            r = trainer_refuse(t, -EINVAL,
                               "--resume: %s was written with --sampler %s --lr %g --momentum %g, not --sampler %s "
                               "--lr %g --momentum %g: it would not continue the same run",
                               t->opts->checkpoint, info.sampler, info.lr, info.momentum, t->opts->sampler, t->opts->lr,
                               t->opts->momentum);
        else if (info.has_data &&
                 (info.train_samples != t->data.train.n || info.data_fingerprint != dataset_fingerprint(&t->data)))
            r = trainer_refuse(t, -EINVAL,
                               "--resume: %s was trained on other data (%llu training samples%s, here %zu): it would "
                               "not continue the same run",
                               t->opts->checkpoint, (unsigned long long)info.train_samples,
                               info.train_samples == t->data.train.n ? ", other labels or pixels" : "",
                               t->data.train.n);
        else if (info.step_in_epoch >= sampler_steps_per_epoch(&t->smp)) /* else an empty epoch, loss nan */
            r = trainer_refuse(
                t, -EINVAL,
                "--resume: %s stopped %llu steps into an epoch, but an epoch here has %zu steps: the data "
                "differ from that run's",
                t->opts->checkpoint, (unsigned long long)info.step_in_epoch, sampler_steps_per_epoch(&t->smp));
        if (r < 0)
            state[0] = t->usage_error ? RESUME_REFUSED : RESUME_FAILED;
        state[1] = info.step;
        state[2] = info.epoch;
        state[3] = info.step_in_epoch;
    }
    int e = ddp_broadcast(t->g, state, 4, DDP_I64, 0);
    if (e < 0)
        return trainer_fail(t, e, "--resume: %s", ddp_last_error(t->g));
    if (state[0] == RESUME_FAILED || state[0] == RESUME_REFUSED) {
        /* Every rank stops, the others naming rank 0 and with its exit code. Not before all
         * have the state: rank 0's abort, next, must not overtake it (the barrier's own
         * result does not matter: the job ends here). */
        (void)ddp_barrier(t->g);
        if (r < 0)
            return r;
        if (state[0] == RESUME_REFUSED)
            return trainer_refuse(t, -EINVAL, "--resume: rank 0 refused %s (see its error)", t->opts->checkpoint);
        return trainer_fail(t, -EIO, "--resume: rank 0 could not read %s (see its error)", t->opts->checkpoint);
    }
    if (state[0] == RESUME_NOTHING) /* none yet: every rank starts from its (equal) initial parameters */
        return 0;
    /* Only rank 0 holds a velocity where only it steps (dp). */
    if ((e = ddp_broadcast(t->g, params, s->n_params, DDP_F32, 0)) < 0 ||
        (velocity && !t->mode->rank0_steps && (e = ddp_broadcast(t->g, velocity, s->n_params, DDP_F32, 0)) < 0))
        return trainer_fail(t, e, "--resume: %s", ddp_last_error(t->g));
    staging_block_unwire(&t->staging, MODEL_PARAMS, params);
    if (velocity)
        staging_block_unwire(&t->staging, MODEL_VELOCITY, velocity);
    t->step = state[1];
    t->epoch = state[2];
    t->step_in_epoch = state[3];
    t->saved_step = t->step;
    t->links.resumed = true; /* the links up to here are this run's past (--checkpoint-keep) */
    t->links.resumed_step = t->step;
    if (t->rank == 0 && t->step_in_epoch == 0)
        printf("ddp-worker: resumed from %s at step %llu, after epoch %llu\n", t->opts->checkpoint,
               (unsigned long long)t->step, (unsigned long long)t->epoch);
    else if (t->rank == 0)
        printf("ddp-worker: resumed from %s at step %llu, in epoch %llu\n", t->opts->checkpoint,
               (unsigned long long)t->step, (unsigned long long)t->epoch + 1);
    return 0;
}
