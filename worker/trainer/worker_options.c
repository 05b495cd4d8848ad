/* ddp-worker's flags, config keys and environment variables. */
#include "worker/trainer/worker_options.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/limits.h"
#include "worker/trainer/sync_modes.h"

/* "sync mode: ddp, dp or ps", from the list of modes (sync_modes.h), made on the first call. */
static char mode_help[96];
static const char *const modes[] = {SYNC_MODES(SYNC_MODE_STRING) NULL};
static const char *const samplers[] = {"partition", "global", NULL};
static const char *const transports[] = {"auto", "shm", "zmq", "nccl", NULL};

static const config_option worker_table[] = {
    {"config", CONFIG_STRING, 1, 4096, NULL, offsetof(worker_options, config), "read options from an INI file", "FILE"},
    {"coordinator", CONFIG_STRING, 1, DDP_MAX_ENDPOINT, NULL, offsetof(worker_options, coordinator),
     "ddpd's endpoint (default: DDP_COORDINATOR, else MASTER_ADDR:MASTER_PORT)", "EP"},
    {"job", CONFIG_STRING, 1, DDP_MAX_JOB_NAME, NULL, offsetof(worker_options, job), "job name (default: DDP_JOB)",
     "NAME"},
    {"world-size", CONFIG_INT, 0, DDP_MAX_WORLD_SIZE, "0", offsetof(worker_options, world_size),
     "workers in the job (default: WORLD_SIZE)", "N"},
    {"rank", CONFIG_INT, -1, DDP_MAX_WORLD_SIZE - 1, "-1", offsetof(worker_options, rank),
     "this worker's rank (default: RANK, else ddpd assigns one)", "R"},
    {"mode", CONFIG_STRING, 1, 32, "ddp", offsetof(worker_options, mode), mode_help, "MODE", modes},
    {"model", CONFIG_STRING, 1, 63, "mlp", offsetof(worker_options, model),
     "linear, mlp, toy, or layer sizes like 784-128-10", "M"},
    {"data", CONFIG_STRING, 1, 4096, "/usr/share/datasets/fashion-mnist", offsetof(worker_options, data),
     "directory of IDX files (gzip'd or not)", "DIR"},
    {"epochs", CONFIG_INT, 1, 100000, "1", offsetof(worker_options, epochs), "epochs to train", "E"},
    {"steps", CONFIG_INT, 0, 1000000000, "0", offsetof(worker_options, steps),
     "stop after S optimizer steps in all (0: train --epochs)", "S"},
    {"batch-size", CONFIG_INT, 1, 1 << 20, "128", offsetof(worker_options, batch_size),
     "global batch, split evenly across workers", "B"},
    {"lr", CONFIG_DOUBLE, 0, 100, "0.01", offsetof(worker_options, lr), "SGD learning rate", "X"},
    {"momentum", CONFIG_DOUBLE, 0, 1, "0.5", offsetof(worker_options, momentum), "SGD momentum", "X"},
    {"seed", CONFIG_INT, 0, 2147483647, "1234", offsetof(worker_options, seed),
     "seed of the initial parameters and the data order", "S"},
    {"device", CONFIG_STRING, 1, 16, "cpu", offsetof(worker_options, device), "cpu, cuda or cuda:K", "DEV"},
    {"devices", CONFIG_STRING, 1, 33, NULL, offsetof(worker_options, devices),
     "model parallel: the first half of the layers on A, the rest on B (0,1 or cuda:0,cuda:1; cpu,cpu)", "A,B"},
    {"bucket-mb", CONFIG_DOUBLE, 0.001, 4096, "25", offsetof(worker_options, bucket_mb),
     "ddp mode: gradient bucket size in MiB", "X"},
    {"transport", CONFIG_STRING, 1, 16, "auto", offsetof(worker_options, transport),
     "the data plane: shm (one host), zmq, auto (shm where it can, else zmq; DDP_TRANSPORT) or nccl (ddp mode's "
     "all-reduce GPU to GPU, --device cuda)",
     "T", transports},
    {"checkpoint", CONFIG_STRING, 1, 4096, NULL, offsetof(worker_options, checkpoint),
     "rank 0 writes a checkpoint here after every epoch and at the end", "PATH"},
    {"checkpoint-keep", CONFIG_INT, 1, 1000, "1", offsetof(worker_options, checkpoint_keep),
     "keep the last N checkpoints: PATH, and PATH.STEP for each of them (hard links)", "N"},
    {"resume", CONFIG_BOOL, 0, 1, NULL, offsetof(worker_options, resume), "continue from --checkpoint"},
    {"overwrite", CONFIG_BOOL, 0, 1, NULL, offsetof(worker_options, overwrite),
     "start over although --checkpoint exists (it is replaced at the first save)"},
    {"metrics", CONFIG_STRING, 1, 4096, NULL, offsetof(worker_options, metrics),
     "JSON lines per step and epoch (rank 0; %r in the name: every rank, its own file)", "FILE"},
    {"sampler", CONFIG_STRING, 1, 16, "partition", offsetof(worker_options, sampler),
     "partition (the tutorial's DataPartitioner) or global (the same global batches for any world size)", "S",
     samplers},
    {"blas-threads", CONFIG_INT, 1, 256, "1", offsetof(worker_options, blas_threads), "OpenBLAS threads per worker",
     "N"},
    {"timeout-ms", CONFIG_INT, 0, DDP_MAX_TIMEOUT_MS, "0", offsetof(worker_options, timeout_ms),
     "each collective's limit (0: DDP_TIMEOUT_MS, else 60000)", "MS"},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(worker_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(worker_options, help), "print this help and exit", NULL, NULL, NULL,
     'h'},
};

static const config_spec worker_spec = {
    .program = "ddp-worker",
    .usage = "[OPTIONS]",
    .summary = "One rank of a data-parallel training job (run N of them with ddp-run).",
    .env_prefix = "DDP_WORKER_",
    .options = worker_table,
    .n_options = sizeof(worker_table) / sizeof(worker_table[0]),
};

const config_spec *worker_options_spec(void) {
    if (!mode_help[0]) {
        snprintf(mode_help, sizeof(mode_help), "sync mode: ");
        sync_modes_describe(mode_help + strlen(mode_help), sizeof(mode_help) - strlen(mode_help));
    }
    return &worker_spec;
}
