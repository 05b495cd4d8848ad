/* ddp-worker's options (worker_options, trainer.h) as flags, config keys and environment
 * variables: one table, read by ddp-worker and by ddp-compare, which refuses after its --
 * the worker flags it sets itself, however they are abbreviated. */
#pragma once
#include <stdbool.h>

#include "common/config.h"

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
    int batch_size; /* global */
    double lr;
    double momentum;
    int seed;
    char *device;
    char *devices;
    double bucket_mb;
    char *transport;
    char *checkpoint;
    int checkpoint_keep;
    bool resume;
    bool overwrite;
    char *metrics;
    char *sampler;
    int blas_threads;
    int timeout_ms;
    bool help, version;
} worker_options;


/* The spec, made on the first call (its mode help lists the sync modes). */
const config_spec *worker_options_spec(void);
