/* A feed-forward model: linear layers with ReLU between them, softmax cross-entropy or MSE
 * at the end. Parameters, gradients and the optimizer's velocity are each one contiguous
 * block with per-layer views (weight (out, in) then bias (out), layer after layer), so a
 * range of the gradient block is a bucket that goes on the wire without a copy. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/trainer/backend.h"

#define MODEL_MAX_LAYERS 16

typedef enum { LOSS_CROSSENTROPY, LOSS_MSE } loss_kind;

typedef struct {
    char name[64];
    int n_layers;
    int sizes[MODEL_MAX_LAYERS + 1]; /* sizes[0] inputs ... sizes[n_layers] outputs */
    loss_kind loss;
    size_t n_params;
    size_t weight_offset[MODEL_MAX_LAYERS], bias_offset[MODEL_MAX_LAYERS]; /* into the blocks */
} model_spec;

/* "linear" (784-10), "mlp" (784-512-256-10), "toy" (10-10-5, MSE: the DDP tutorial's
 * ToyModel), or any "A-B-...-Z" with cross-entropy. */
int model_spec_parse(const char *name, model_spec *ret, char *err, size_t err_size);
/* PyTorch's nn.Linear initialisation: weights and biases uniform in +-1/sqrt(in), from a
 * seeded generator, so every rank starts from the same parameters. */
void model_init_params(const model_spec *spec, float *params_host, uint64_t seed);
/* The parameters [first, last] layers occupy: a bucket's range in the blocks. */
void model_layer_range(const model_spec *spec, int first, int last, size_t *ret_offset, size_t *ret_count);

/* Model parallel inside a worker (the DDP tutorial's ToyMpModel): with two stages the
 * first half of the layers lives on one backend, the rest on another; activations cross
 * forward and their gradients backward. Each stage holds its layers' parameters,
 * gradients and velocity as one block: the range [offset, offset + count) of the flat
 * layout above. */
#define MODEL_MAX_STAGES 2

typedef struct {
    backend *b;
    int first, last;                  /* its layers */
    size_t offset, count;             /* its parameters in the flat layout */
    float *params, *grads, *velocity; /* (count) each, on b; velocity NULL when this rank does not step */
    float *dacts[2];                  /* (batch, widest) ping-pong for activation gradients */
    float *out;                       /* a stage before the last: its output, before it crosses */
} model_stage;

typedef enum { MODEL_PARAMS, MODEL_GRADS, MODEL_VELOCITY } model_block;

typedef struct {
    model_spec spec;
    backend *b; /* the last stage's: outputs, losses and their inputs live there */
    int batch;  /* rows the activations hold */
    int n_stages;
    model_stage stages[MODEL_MAX_STAGES];
    float *params, *grads, *velocity;  /* one stage: its blocks, the whole model; NULL with two */
    float *acts[MODEL_MAX_LAYERS + 1]; /* acts[l] layer l's input, on its stage; acts[n_layers] the logits */
    float *losses;                     /* (batch) */
    float *probs;                      /* (batch, classes) */
    float *crossing;                   /* host memory activations and gradients cross stages through */
    size_t widest;
    unsigned lent; /* bit 1 << model_block: that block is the caller's (model_lend), not the backend's to free */
} model;

/* The first layer of the second stage: the first half of the layers (the larger half
 * when odd) stay on the first. -1 with one stage. */
int model_split_layer(const model_spec *spec, int n_stages);
/* On one backend, or split over n_backends (1 or 2, no more than layers) at
 * model_split_layer. */
int model_open(model *m, const model_spec *spec, backend *b, int batch, bool with_velocity);
int model_open_split(model *m, const model_spec *spec, backend *const *backends, int n_backends, int batch,
                     bool with_velocity);
void model_close(model *m);

/* acts[0] holds B rows of input; afterwards acts[n_layers] holds the outputs (logits). */
void model_forward(model *m, int B);
/* Back-propagates dout (B, outputs) into grads (accumulating: zero them first). After each
 * layer's gradients are complete, layer_done(ctx, layer) is called: layers count down. */
void model_backward(model *m, const float *dout, int B, void (*layer_done)(void *ctx, int layer), void *ctx);
/* The loss of B rows of logits, on the output device: the per-row losses (and probs, for
 * cross-entropy) written, dlogits = d loss / d logits * scale; returns the mean over the
 * rows. targets are class indices (cross-entropy) and mse_targets rows (MSE), both on
 * the output device; the loss kind uses one of them. */
double model_loss(model *m, int B, float *losses, float *probs, const float *logits, const uint8_t *targets,
                  const float *mse_targets, float *dlogits, float scale);
/* The sum of B per-row losses on the output device, added up on the host. */
double model_sum_losses(model *m, const float *losses, int B);
/* Waits for the work queued on every stage's device. */
void model_synchronize(model *m);

/* The whole model's blocks, whatever stages hold them. */
int model_stage_of_layer(const model *m, int layer);
/* A flat range's place: the pointer to element offset of the block, and its backend; the
 * range must lie in one stage (buckets never straddle stages). */
float *model_block_at(const model *m, model_block which, size_t offset, backend **ret_b);
void model_zero_grads(model *m);
/* Puts the parameter or gradient block (which) in block (n_params floats of host memory,
 * which the caller keeps and frees after model_close), its values copied, in place of the
 * backend's: for the collectives, which then read it where the peers can (ddp_alloc).
 * Only a one-stage model on the host, once a block: -EINVAL otherwise. The backend's
 * accounting still counts it. */
int model_lend(model *m, model_block which, float *block);
/* torch.optim.SGD over every stage that holds a velocity. */
void model_sgd_step(model *m, float lr, float momentum, int first_step);
/* The same with the gradients read from grads (n_params, host memory, the flat layout)
 * instead of the model's block: one stage on the host only (-EINVAL otherwise). */
int model_sgd_step_from(model *m, const float *grads, float lr, float momentum, int first_step);
/* n_params floats between the block and host, in the flat layout. */
void model_download_block(model *m, model_block which, float *host);
void model_upload_block(model *m, model_block which, const float *host);
