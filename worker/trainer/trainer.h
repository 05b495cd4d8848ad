/* ddp-worker's trainer: one rank of a data-parallel job. It loads and partitions the data,
 * builds the model on one device or two, and runs the epochs with one of the sync modes
 * (sync.h) doing each optimizer step. Its jobs, a file each:
 *   trainer.c   open, the loop, close
 *   device.c    --device / --devices: which backends
 *   evaluate.c  test accuracy (or loss), each rank a slice
 *   metrics.c   --metrics JSON lines
 *   resume.c    --checkpoint and --resume */
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ddp/ddp.h"
#include "worker/trainer/backend.h"
#include "worker/trainer/batch.h"
#include "worker/trainer/buckets.h"
#include "worker/trainer/checkpoint_keep.h"
#include "worker/trainer/dataset.h"
#include "worker/trainer/model.h"
#include "worker/trainer/sampler.h"
#include "worker/trainer/staging.h"
#include "worker/trainer/sync.h"
#include "worker/trainer/worker_options.h"

typedef struct trainer {
    const worker_options *opts;
    const sync_mode *mode;
    void *sync; /* the mode's state */
    ddp_group *g;
    int rank, world;
    backend devices[MODEL_MAX_STAGES]; /* the first holds the model's input side */
    int n_devices;                     /* 2 with --devices: the model split between them */
    model m;
    dataset data;
    sampler smp;
    bool sampler_ready;
    int local_batch, global_batch;
    batch batch;
    staging staging;
    bucket_plan buckets; /* ddp and ps modes */
    /* progress */
    uint64_t step; /* optimizer steps taken */
    uint64_t epoch;
    size_t step_in_epoch;
    size_t line_first_step, line_steps; /* the epoch line's steps: from step_in_epoch line_first_step, so many */
    sync_times times;
    double test_loss; /* MSE models: the last evaluation */
    FILE *metrics;
    char metrics_path[4096]; /* this rank's --metrics, %r expanded */
    int metrics_error;       /* the errno that ended the metrics, or 0 */
    int stopped_by;          /* the signal the ranks agreed to stop on (a checkpoint was written), or 0 */
    uint64_t saved_step;     /* rank 0: the step of the last checkpoint written (UINT64_MAX: none yet) */
    int save_error;          /* rank 0: the last save failed with this (training went on), or 0 */
    char save_failure[600];  /* ... and why */
    checkpoint_links links;  /* rank 0: the --checkpoint-keep links that are this run's */
    bool usage_error;        /* the error is the flags' or the environment's: ddp-worker exits 2 */
    char error[768];         /* what went wrong, for the caller to print */
} trainer;

/* The signal ddp-worker's SIGTERM/SIGINT/SIGHUP handler saw: the ranks agree to stop
 * (every TRAINER_STOP_CHECK_STEPS steps), rank 0 writes a checkpoint, and trainer_run
 * returns with t->stopped_by set to it. */
extern volatile sig_atomic_t trainer_stop_signal;
/* Set while trainer_run trains: a stop signal then waits for the ranks' agreement. */
extern volatile sig_atomic_t trainer_training;
#define TRAINER_STOP_CHECK_STEPS 8
/* What the ranks stop on when ddpd went away and did not come back (ddp_stop_requested):
 * above every signal's number; ddp-worker then exits EXIT_COORDINATOR_GONE. */
#define TRAINER_STOP_COORDINATOR 1000

int trainer_open(trainer *t, const worker_options *opts);
/* Runs to the end (epochs or steps); 0 or a negative error with t->error set. */
int trainer_run(trainer *t);
void trainer_close(trainer *t);
/* What carries the ranks' collectives: "nccl" (--transport nccl: ddp's gradients), else
 * libddp's "shm" or "zmq" (ps mode's gradients go to ddpd over ZeroMQ either way). */
const char *trainer_transport(const trainer *t);

/* Records what went wrong in t->error; returns err. trainer_refuse: the same for what the
 * flags or the environment ask that cannot be done (a usage error). */
int trainer_fail(trainer *t, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int trainer_refuse(trainer *t, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Once the job has formed and the data is loaded: whether every rank has rank 0's
 * settings (agree.c); a usage error on every rank, naming the flag, where one differs. */
int trainer_agree(trainer *t);

/* device.c: --devices A,B (each cpu, cuda:K, or a bare GPU number K), else one --device
 * (cpu, cuda: LOCAL_RANK's GPU, or cuda:K) into t->devices. */
int devices_open(trainer *t);
/* evaluate.c: accuracy (or mean loss, for MSE models) on the test split, each rank a slice. */
int evaluate(trainer *t, double *ret_metric);
/* metrics.c: --metrics FILE (rank 0's; with %r in the name, every rank's own) opened (a
 * resumed run continues it, without the lines past the checkpoint), one JSON line of kind
 * "step" or "epoch" (of epoch, counted from 0) written to it, and closed. A write that fails is said once and kept
 * in t->metrics_error: ddp-worker then exits 1. */
int metrics_open(trainer *t);
void metrics_write(trainer *t, const char *kind, uint64_t epoch, double loss, double accuracy, double samples_per_s,
                   double seconds);
/* The lines so far on disk: before a checkpoint, so that a resume finds every line up to
 * its step (an epoch's lines, once an epoch). */
void metrics_sync(trainer *t);
/* The same, then, with --metrics, a collective: every rank's lines are on disk before
 * rank 0 writes the checkpoint of their step. */
int metrics_sync_before_save(trainer *t);
void metrics_close(trainer *t);
/* resume.c: rank 0 writes --checkpoint; --resume reads it on rank 0 and gives every rank
 * the same state (a checkpoint may live on one host only). resume_check, at start-up on
 * rank 0: the path can be written, and a checkpoint there is not overwritten by a fresh
 * run unless --overwrite says so. */
int resume_check(trainer *t);
/* A save that fails is reported (path, error) and training goes on: the previous
 * checkpoint stays, and the next save tries again. resume_saved, at the end of a run:
 * 0 unless the last save failed, then the run's error. */
int resume_save(trainer *t);
int resume_saved(trainer *t);
int resume_load(trainer *t);
