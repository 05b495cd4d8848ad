/* A feed-forward model: linear layers with ReLU between them, softmax cross-entropy or MSE
 * at the end. Parameters, gradients and the optimizer's velocity are each one contiguous
 * block with per-layer views (weight (out, in) then bias (out), layer after layer), so a
 * range of the gradient block is a bucket that goes on the wire without a copy. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/backend.h"

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

typedef struct {
    model_spec spec;
    backend *b;
    int batch;                          /* rows the activations hold */
    float *params, *grads, *velocity;   /* (n_params) each; velocity NULL when this rank does not step */
    float *acts[MODEL_MAX_LAYERS + 1];  /* acts[0] the input (batch, sizes[0]); acts[l+1] layer l's output */
    float *dacts[2];                    /* (batch, widest) ping-pong for activation gradients */
    float *losses;                      /* (batch) */
    float *probs;                       /* (batch, classes) */
    size_t widest;
} model;

int model_open(model *m, const model_spec *spec, backend *b, int batch, bool with_velocity);
void model_close(model *m);
size_t model_bytes(const model *m);

/* acts[0] holds B rows of input; afterwards acts[n_layers] holds the outputs (logits). */
void model_forward(model *m, int B);
/* Back-propagates dout (B, outputs) into grads (accumulating: zero them first). After each
 * layer's gradients are complete, layer_done(ctx, layer) is called: layers count down. */
void model_backward(model *m, const float *dout, int B, void (*layer_done)(void *ctx, int layer), void *ctx);
