/* A sync mode: how one optimizer step's gradients become the same on every rank. The three
 * train the same math over different topologies (README, "Modes"):
 *   ddp  peers all-reduce gradient buckets, overlapped with backward (sync_ddp.c)
 *   dp   rank 0 is DataParallel's first GPU: it gathers outputs, computes the loss, scatters
 *        output gradients, sums parameter gradients and alone steps (sync_dp.c)
 *   ps   ddpd reduces pushed gradients (sync_ps.c)
 * Each is a table of functions over a narrow context; each owns its own state. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ddp/ddp.h"
#include "worker/trainer/batch.h"
#include "worker/trainer/buckets.h"
#include "worker/trainer/model.h"
#include "worker/trainer/staging.h"
#include "worker/trainer/sync_modes.h"

typedef struct {
    double compute_s, comm_s, wait_s; /* this rank's time in each, summed over the steps */
    double peer_wait_s;               /* of comm_s, the collectives waiting for the other ranks to call them */
    /* Of compute_s: forward with the loss, backward (on a GPU: until its kernels are
     * queued; the rest shows in comm_s or wait_s), and the optimizer's step. */
    double forward_s, backward_s, optimizer_s;
} sync_times;

/* What a mode works with; the trainer owns all of it. */
typedef struct {
    model *m;
    ddp_group *g;
    staging *staging;
    const bucket_plan *buckets;
    batch *batch; /* the step's rows, loaded into the model before each step */
    int rank, world, global_batch;
    float lr, momentum;     /* torch.optim.SGD's */
    const uint64_t *step;   /* optimizer steps taken before this one */
    bool device_all_reduce; /* --transport nccl: gradients averaged on the devices */
    sync_times *times;
    char *error; /* what went wrong, for the trainer to print */
    size_t error_size;
} sync_ctx;

typedef struct {
    const char *name;
    /* Only rank 0 holds the optimizer's state and steps (dp): the velocity lives on rank 0
     * alone, and another rank's parameters are current only once rank 0's are broadcast. */
    bool rank0_steps;
    /* The step's loss is the global batch's already (dp computes it on rank 0), not this
     * rank's share to be averaged. */
    bool global_loss;
    /* It can average gradients on the devices (--transport nccl). */
    bool device_all_reduce;
    /* What every member must also agree on at join, given the bucket plan and whether the
     * model is split over two devices (NULL: the mode's name only). */
    void (*join)(ddp_options *join, const bucket_plan *buckets, bool split);
    /* Sets up the mode's state (and whatever it needs of the other ranks: it may run
     * collectives); every rank calls it after the parameters are initialised or resumed. */
    int (*open)(const sync_ctx *ctx, void **ret_state);
    /* One optimizer step on the batch loaded into the model (B rows); *ret_loss is this
     * rank's mean loss, or the global batch's (global_loss). 0, or a negative error with
     * ctx->error saying what. */
    int (*step)(void *state, int B, double *ret_loss);
    void (*close)(void *state);
} sync_mode;

#define SYNC_DECLARE_MODE(name) extern const sync_mode sync_mode_##name;
SYNC_MODES(SYNC_DECLARE_MODE)

/* Every mode's name, NULL-terminated, in SYNC_MODES order (--mode's choices). */
extern const char *const sync_mode_names[];
/* The mode of that name, or NULL. */
const sync_mode *sync_mode_find(const char *name);

/* Shared by the modes. */
int sync_fail(const sync_ctx *c, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Zeroes the gradients, runs forward and the loss of this rank's B rows (the ddp and ps
 * modes): returns its mean, with the batch's dlogits ready for backward. */
double sync_forward_local(const sync_ctx *c, int B);
/* n_params floats of ddp_alloc's memory, which the collectives read in place where the
 * peers can (over shared memory: no copy into a staging buffer). A collective: every rank
 * asks, in the same order. It goes with the group, after the model. */
int sync_shared_block(const sync_ctx *c, const char *what, float **ret);
/* One SGD step with momentum over the parameters this rank holds velocity for. */
void sync_sgd_step(const sync_ctx *c);
/* Adds a step's compute, by phase (sync_times), to ctx->times. */
void sync_count_compute(const sync_ctx *c, double forward_s, double backward_s, double optimizer_s);
/* Seconds on the monotonic clock, for the step's timers. */
double sync_now(void);
