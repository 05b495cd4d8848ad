/* Host staging: what the collectives see of tensors that are not host memory. Collectives
 * move host memory. On the CPU with one stage they take the model's own blocks ("direct")
 * and nothing is allocated here; on a GPU, or with the model split over two devices, what
 * goes on the wire is copied to host buffers first (pinned, on a GPU, so that copies run
 * asynchronously) and back after. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "worker/trainer/model.h"

typedef struct {
    model *m;
    backend *host;     /* whose host_alloc holds the buffers: a GPU's if one holds a stage,
                          preferring the output's */
    bool direct;       /* the collectives take the model's blocks as they are */
    float *params;     /* (n_params) */
    float *grads;      /* (n_params) */
    bool grads_placed; /* grads is memory the collectives share (staging_place_grads) */
    float *outputs;    /* (local_batch, outputs): dp's logits out, dlogits in */
    size_t outputs_count;
} staging;

/* The buffers for a model and a local batch of rows; none when direct. */
int staging_open(staging *s, model *m, int local_batch);
void staging_close(staging *s);

/* Stages the gradients in block (n_params floats the collectives read in place: ddp_alloc's,
 * a region of shared memory) instead of the buffer staging_open made, registered with the
 * host backend, so that on a GPU a bucket's copy lands there by DMA and goes to the peers
 * with no copy more. The block stays the caller's. -EIO where the device cannot register
 * it: then the buffer stays as it was (one copy more). */
int staging_place_grads(staging *s, float *block);

/* The host memory a collective on n floats of dev, a tensor of the output device, uses:
 * dev itself when that device's memory is the host's, else wire, filled from dev first when
 * fill. staging_unwire then copies what the collective wrote back to dev. */
float *staging_wire(staging *s, float *wire, float *dev, size_t n, bool fill);
void staging_unwire(staging *s, float *dev, const float *wire, size_t n);
/* The same for a whole block of the model (n_params floats, whatever devices hold it). */
float *staging_block_wire(staging *s, model_block which, float *wire, bool fill);
void staging_block_unwire(staging *s, model_block which, const float *wire);
/* A gradient range [offset, offset + count) (a bucket, on one device): its copy to
 * s->grads queued behind the kernels that made it, as copy k; and the wait for it. */
void staging_grads_stage(staging *s, size_t offset, size_t count, int k);
void staging_grads_wait(staging *s, size_t offset, int k);
