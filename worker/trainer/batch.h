/* One step's rows on this rank: copied out of the dataset into host buffers, then up to the
 * devices (the inputs to the first stage's, the targets to the output's, where the loss is
 * computed), with room for the gradient of the loss. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "worker/trainer/dataset.h"
#include "worker/trainer/model.h"

typedef struct {
    int size;                /* rows it holds: the local batch */
    float *input_host;       /* (size, inputs) */
    uint8_t *targets_host;   /* (size) */
    float *mse_targets_host; /* (size, outputs) */
    uint8_t *targets;        /* (size) on the output device */
    float *mse_targets;      /* (size, outputs) on the output device */
    float *dlogits;          /* (size, outputs) on the output device */
} batch;

int batch_open(batch *b, const model *m, int size);
void batch_close(batch *b, const model *m);
/* Rows indices[0..count) of d into the model's input and the batch's targets. */
void batch_load(batch *b, model *m, const dataset_split *d, const uint32_t *indices, size_t count);
