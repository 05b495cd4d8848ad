/* The compute backend: where a worker's tensors live and the ops of training run.
 *
 * The CPU backend (backend_cpu.c, on OpenBLAS) is the readable reference; the CUDA backend
 * (cuda/) implements the same table, op for op, with the same names and argument order:
 * outputs, then inputs, then dimensions (as in llm.c). Tensors are row-major float32.
 * Every allocation goes through the backend's accounting (current and peak bytes per
 * device), which is what the DP-vs-DDP comparison reports. */
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;

typedef struct {
    size_t current, peak; /* bytes allocated through the backend */
} backend_memory;

typedef struct {
    const char *name;

    /* Memory: device buffers, zero-filled, counted. */
    void *(*alloc)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p, size_t bytes);
    void (*upload)(backend *b, void *dst, const void *host, size_t bytes);
    void (*download)(backend *b, void *host, const void *src, size_t bytes);
    void (*zero)(backend *b, void *p, size_t bytes);
    /* Waits for queued work (a no-op on the CPU). */
    void (*synchronize)(backend *b);

    /* out = inp . weight^T + bias */
    void (*linear_forward)(backend *b, float *out /* (B, OC) */, const float *inp /* (B, IC) */,
                           const float *weight /* (OC, IC) */, const float *bias /* (OC) */, int B, int IC, int OC);
    /* dinp = dout . weight (written; NULL to skip); dweight += dout^T . inp; dbias += sum_B dout */
    void (*linear_backward)(backend *b, float *dinp /* (B, IC) */, float *dweight /* (OC, IC) */,
                            float *dbias /* (OC) */, const float *dout /* (B, OC) */, const float *inp /* (B, IC) */,
                            const float *weight /* (OC, IC) */, int B, int IC, int OC);
    /* in place: x = max(x, 0) */
    void (*relu_forward)(backend *b, float *x, size_t n);
    /* dx = dout where out > 0, else 0 (in place on dout: dinp and dout may be the same) */
    void (*relu_backward)(backend *b, float *dinp, const float *dout, const float *out, size_t n);
    /* losses[i] = -log softmax(logits[i])[targets[i]], probs = softmax(logits) (stable, fused) */
    void (*crossentropy_forward)(backend *b, float *losses /* (B) */, float *probs /* (B, C) */,
                                 const float *logits /* (B, C) */, const uint8_t *targets /* (B) */, int B, int C);
    /* dlogits = (probs - onehot(targets)) * scale (written) */
    void (*crossentropy_backward)(backend *b, float *dlogits /* (B, C) */, const float *probs /* (B, C) */,
                                  const uint8_t *targets /* (B) */, float scale, int B, int C);
    /* losses[i] = mean_j (out[i,j] - target[i,j])^2 */
    void (*mse_forward)(backend *b, float *losses /* (B) */, const float *out /* (B, C) */,
                        const float *target /* (B, C) */, int B, int C);
    /* dout = 2 (out - target) / C * scale (written) */
    void (*mse_backward)(backend *b, float *dout /* (B, C) */, const float *out /* (B, C) */,
                         const float *target /* (B, C) */, float scale, int B, int C);
    /* torch.optim.SGD: v = momentum * v + g (v = g at the first step); p -= lr * v */
    void (*sgd_step)(backend *b, float *params, float *velocity, const float *grads, size_t n, float lr,
                     float momentum, int first_step);
    /* acc += in (dp mode: gradients summed on rank 0's device) */
    void (*accumulate)(backend *b, float *acc, const float *in, size_t n);
    /* correct = number of rows whose argmax equals the target (result on the host) */
    long (*count_correct)(backend *b, const float *logits /* (B, C) */, const uint8_t *targets /* (B) */, int B, int C);
} backend_ops;

struct backend {
    const backend_ops *ops;
    int device;              /* -1 for the CPU */
    backend_memory memory;   /* this backend's device */
    void *impl;
};

/* The CPU backend, with this many BLAS threads (one per worker unless told otherwise). */
int backend_cpu_open(backend *ret, int blas_threads);
void backend_close(backend *b);

/* Accounting shared by every backend: called by their alloc and release. */
void backend_count_alloc(backend *b, size_t bytes);
void backend_count_release(backend *b, size_t bytes);
