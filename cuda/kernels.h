/* The CUDA backend's kernels, one launcher each, queued on the given stream. Each mirrors
 * the CPU op of the same name (worker/trainer/backend_cpu.c) element for element; the tests hold
 * them to it. Row-wise kernels give a row to a thread: the models here have few classes. */
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

void kernel_bias_rows(float *out, const float *bias, int B, int OC, cudaStream_t s);
void kernel_bias_backward(float *dbias, const float *dout, int B, int OC, cudaStream_t s);
void kernel_relu_forward(float *x, size_t n, cudaStream_t s);
void kernel_relu_backward(float *dinp, const float *dout, const float *out, size_t n, cudaStream_t s);
void kernel_crossentropy_forward(float *losses, float *probs, const float *logits, const uint8_t *targets, int B,
                                 int C, cudaStream_t s);
void kernel_crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, float scale, int B,
                                  int C, cudaStream_t s);
void kernel_mse_forward(float *losses, const float *out, const float *target, int B, int C, cudaStream_t s);
void kernel_mse_backward(float *dout, const float *out, const float *target, float scale, int B, int C,
                         cudaStream_t s);
void kernel_sgd_step(float *params, float *velocity, const float *grads, size_t n, float lr, float momentum,
                     int first_step, cudaStream_t s);
void kernel_accumulate(float *acc, const float *in, size_t n, cudaStream_t s);
/* Adds the number of rows whose first maximum is at the target to *correct (on the device). */
void kernel_count_correct(unsigned long long *correct, const float *logits, const uint8_t *targets, int B, int C,
                          cudaStream_t s);
