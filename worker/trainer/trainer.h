/* ddp-worker's trainer: one rank of a data-parallel job. It loads and partitions the data,
 * builds the model on a backend, and runs one of three sync modes, which train the same
 * math over different topologies (see DESIGN's modes table):
 *   ddp  peers all-reduce gradient buckets, overlapped with backward (sync_ddp.c)
 *   dp   rank 0 is DataParallel's first GPU: it gathers outputs, computes the loss, scatters
 *        output gradients, sums parameter gradients and alone steps (sync_dp.c)
 *   ps   ddpd reduces pushed gradients (sync_ps.c) */
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ddp/ddp.h"
#include "worker/trainer/backend.h"
#include "worker/trainer/dataset.h"
#include "worker/trainer/model.h"
#include "worker/trainer/sampler.h"

typedef enum { MODE_DDP, MODE_DP, MODE_PS } sync_mode;

typedef struct {
    char *config;
    char *coordinator;
    char *job;
    int world_size;
    int rank;
    char *mode;
    char *model;
    char *data;
    int epochs;
    int steps;
    int batch_size;   /* global */
    double lr;
    double momentum;
    int seed;
    char *device;
    char *devices;
    double bucket_mb;
    char *transport;
    char *checkpoint;
    bool resume;
    char *metrics;
    char *sampler;
    int blas_threads;
    int timeout_ms;
    bool help, version;
} worker_options;

typedef struct {
    double compute_s, comm_s, wait_s; /* this rank's time in each, summed */
} trainer_times;

typedef struct trainer {
    const worker_options *opts;
    sync_mode mode;
    ddp_group *g;
    int rank, world;
    backend b;                 /* the (first) device: the model's input side */
    backend b_split;           /* --devices: the second device, the model's later layers */
    int split_layer;           /* --devices: the second device's first layer; else -1 */
    model m;
    dataset data;
    float *toy_targets;        /* (n, outputs) MSE targets for the toy model, host */
    float *toy_test_targets;
    sampler smp;
    bool sampler_ready;
    int local_batch, global_batch;
    float *input_host;         /* (local_batch, inputs) staging for a batch */
    uint8_t *targets_host;     /* (local_batch) */
    float *mse_targets_host;   /* (local_batch, outputs) */
    uint8_t *targets;          /* (local_batch) on the device */
    float *mse_targets;        /* (local_batch, outputs) on the device */
    float *dlogits;            /* (local_batch, outputs) */
    /* Host staging for what goes on the wire when the backend's tensors are not host
     * memory (a GPU); NULL on the CPU, where collectives take the tensors themselves. */
    float *params_wire;        /* (n_params) */
    float *grads_wire;         /* (n_params) */
    float *outputs_wire;       /* (local_batch, outputs): dp's logits out, dlogits in */
    float *gathered_wire;      /* (global_batch, outputs): dp, rank 0 */
    /* dp mode, rank 0 only: DataParallel's extra memory on its first device */
    float *gathered_logits;    /* (global_batch, outputs) */
    float *gathered_dlogits;   /* (global_batch, outputs) */
    uint8_t *gathered_targets; /* (global_batch) on the device */
    uint8_t *gathered_targets_host;
    float *gathered_mse_targets;
    float *gathered_losses;    /* (global_batch) */
    float *gathered_probs;     /* (global_batch, outputs) */
    float *gathered_grads;     /* gradients not in host memory: every rank's, (world, n_params), host */
    float *dp_addend[MODEL_MAX_STAGES]; /* ... and one rank's at a time, on each stage's device */
    /* progress */
    uint64_t step;             /* optimizer steps taken */
    uint64_t epoch;
    size_t step_in_epoch;
    trainer_times times;
    double test_loss;          /* MSE models: the last evaluation */
    /* ddp and ps modes: gradient buckets, last layers first */
    int n_buckets;
    int bucket_first[MODEL_MAX_LAYERS], bucket_last[MODEL_MAX_LAYERS];
    unsigned long long bucket_count[MODEL_MAX_LAYERS]; /* elements */
    ddp_request *bucket_req[MODEL_MAX_LAYERS];
    int bucket_error;
    bool peer;                 /* ddp mode, --transport nccl: the backend all-reduces on the device */
    FILE *metrics;
    char error[768];           /* what went wrong, for the caller to print */
} trainer;

/* Set by ddp-worker's SIGTERM/SIGINT handler: the ranks agree to stop (every
 * TRAINER_STOP_CHECK_STEPS steps), rank 0 writes a checkpoint, and trainer_run returns. */
extern volatile sig_atomic_t trainer_stop_signal;
#define TRAINER_STOP_CHECK_STEPS 8

int trainer_open(trainer *t, const worker_options *opts);
/* Runs to the end (epochs or steps); 0 or a negative error with t->error set. */
int trainer_run(trainer *t);
void trainer_close(trainer *t);

/* Shared by the sync modes. */
int trainer_fail(trainer *t, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Loads this rank's rows of the current step into the model's input (and targets). */
void trainer_load_batch(trainer *t, const uint32_t *indices, size_t count);
/* The mean loss of the local batch after model_forward, and dlogits for it with scale. */
double trainer_loss(trainer *t, int B, float *losses, float *probs, const float *logits, const uint8_t *targets,
                    const float *mse_targets, float *dlogits, float scale);
/* Zeroes the gradients, runs forward and the loss of this rank's own batch of B (the ddp
 * and ps modes): returns its mean, with dlogits ready for backward. */
double trainer_forward_local(trainer *t, int B);
/* One SGD step with momentum over all parameters, from the gradients in the model. */
void trainer_sgd_step(trainer *t);
/* Waits for every device's queued work. */
void trainer_synchronize(trainer *t);
/* Whether collectives take the model's blocks as they are: one stage, in host memory. */
bool trainer_direct(const trainer *t);
/* The device whose host_alloc holds the staging buffers: a GPU's (pinned) if one holds a
 * stage, preferring the output's. */
backend *trainer_staging_backend(trainer *t);
/* The host memory a collective on n floats of dev, a tensor of the output device, uses:
 * dev itself when that device's memory is the host's, else the staging buffer wire,
 * filled from dev first when fill. trainer_unwire then copies what the collective wrote
 * back to dev. */
float *trainer_wire(trainer *t, float *wire, float *dev, size_t n, bool fill);
void trainer_unwire(trainer *t, float *dev, const float *wire, size_t n);
/* The same for a whole block of the model (n_params floats, whatever devices hold it). */
float *trainer_block_wire(trainer *t, model_block which, float *wire, bool fill);
void trainer_block_unwire(trainer *t, model_block which, const float *wire);
/* Gradient bucket k (ddp and ps modes): its range in the flat layout; when the gradients
 * are not host memory, its copy to the staging (grads_wire) queued behind the kernels that
 * made it, on the device that holds it, and the wait for it to land. */
void trainer_bucket_range(const trainer *t, int k, size_t *ret_offset, size_t *ret_count);
void trainer_bucket_stage(trainer *t, int k);
void trainer_bucket_wait_staged(trainer *t, int k);
double trainer_now(void);

int sync_ddp_setup(trainer *t);
int sync_ddp_step(trainer *t, int B, double *ret_loss);
int sync_dp_setup(trainer *t);
int sync_dp_step(trainer *t, int B, double *ret_loss);
int sync_ps_setup(trainer *t);
int sync_ps_step(trainer *t, int B, double *ret_loss);
