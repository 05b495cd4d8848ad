/* The CUDA backend's kernels (see kernels.h). Element-wise kernels use a grid-stride loop
 * so that any n fits one launch. */
#include "cuda/check.h"
#include "cuda/kernels.h"

namespace {

constexpr int THREADS = 256;

unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return b == 0 ? 1 : b > 65535 ? 65535 : (unsigned)b; /* the grid-stride loop does the rest */
}

#define GRID_STRIDE(i, n)                                                                        \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void bias_rows(float *out, const float *bias, int B, int OC) {
    GRID_STRIDE(i, (size_t)B * OC) out[i] = bias[i % OC];
}

/* A thread per column: neighbouring threads read neighbouring floats of each row. */
__global__ void bias_backward(float *dbias, const float *dout, int B, int OC) {
    GRID_STRIDE(o, (size_t)OC) {
        float sum = 0.0f;
        for (int i = 0; i < B; i++)
            sum += dout[(size_t)i * OC + o];
        dbias[o] += sum;
    }
}

__global__ void relu_forward(float *x, size_t n) {
    GRID_STRIDE(i, n) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward(float *dinp, const float *dout, const float *out, size_t n) {
    GRID_STRIDE(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

__global__ void crossentropy_forward(float *losses, float *probs, const float *logits, const uint8_t *targets, int B,
                                     int C) {
    GRID_STRIDE(i, (size_t)B) {
        const float *z = logits + i * C;
        float *p = probs + i * C;
        float max = z[0];
        for (int c = 1; c < C; c++)
            max = z[c] > max ? z[c] : max;
        double sum = 0; /* subtract the max: exp never overflows */
        for (int c = 0; c < C; c++) {
            p[c] = expf(z[c] - max);
            sum += p[c];
        }
        for (int c = 0; c < C; c++)
            p[c] = (float)(p[c] / sum);
        /* -log softmax straight from the logits, not log(p), which underflows */
        losses[i] = (float)(log(sum) - (double)(z[targets[i]] - max));
    }
}

__global__ void crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, float scale, int B,
                                      int C) {
    GRID_STRIDE(k, (size_t)B * C) {
        size_t i = k / C;
        int c = (int)(k % C);
        dlogits[k] = (probs[k] - (c == targets[i] ? 1.0f : 0.0f)) * scale;
    }
}

__global__ void mse_forward(float *losses, const float *out, const float *target, int B, int C) {
    GRID_STRIDE(i, (size_t)B) {
        double sum = 0;
        for (int c = 0; c < C; c++) {
            double d = (double)out[i * C + c] - target[i * C + c];
            sum += d * d;
        }
        losses[i] = (float)(sum / C);
    }
}

__global__ void mse_backward(float *dout, const float *out, const float *target, float scale, size_t n, int C) {
    GRID_STRIDE(i, n) dout[i] = 2.0f * (out[i] - target[i]) / (float)C * scale;
}

/* torch.optim.SGD: v = momentum * v + g (v = g at the first step); p -= lr * v. Rounded
 * after each operation, never fused into one (nvcc would): the CPU backend's bits, so that
 * a job of CPU and GPU ranks, which all take the same averaged gradients, keeps the same
 * parameters on every rank. */
__global__ void sgd_step(float *params, float *velocity, const float *grads, size_t n, float lr, float momentum,
                         int first_step) {
    GRID_STRIDE(i, n) {
        float v = first_step || momentum == 0.0f ? grads[i] : __fadd_rn(__fmul_rn(momentum, velocity[i]), grads[i]);
        velocity[i] = v;
        params[i] = __fsub_rn(params[i], __fmul_rn(lr, v));
    }
}

__global__ void accumulate(float *acc, const float *in, size_t n) {
    GRID_STRIDE(i, n) acc[i] += in[i];
}

__global__ void count_correct(unsigned long long *correct, const float *logits, const uint8_t *targets, int B, int C) {
    GRID_STRIDE(i, (size_t)B) {
        const float *z = logits + i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (z[c] > z[best])
                best = c;
        if (best == targets[i])
            atomicAdd(correct, 1ull);
    }
}

} // namespace

void kernel_bias_rows(float *out, const float *bias, int B, int OC, cudaStream_t s) {
    bias_rows<<<blocks_for((size_t)B * OC), THREADS, 0, s>>>(out, bias, B, OC);
    CUDA_LAUNCHED();
}

void kernel_bias_backward(float *dbias, const float *dout, int B, int OC, cudaStream_t s) {
    bias_backward<<<blocks_for((size_t)OC), THREADS, 0, s>>>(dbias, dout, B, OC);
    CUDA_LAUNCHED();
}

void kernel_relu_forward(float *x, size_t n, cudaStream_t s) {
    relu_forward<<<blocks_for(n), THREADS, 0, s>>>(x, n);
    CUDA_LAUNCHED();
}

void kernel_relu_backward(float *dinp, const float *dout, const float *out, size_t n, cudaStream_t s) {
    relu_backward<<<blocks_for(n), THREADS, 0, s>>>(dinp, dout, out, n);
    CUDA_LAUNCHED();
}

void kernel_crossentropy_forward(float *losses, float *probs, const float *logits, const uint8_t *targets, int B,
                                 int C, cudaStream_t s) {
    crossentropy_forward<<<blocks_for((size_t)B), THREADS, 0, s>>>(losses, probs, logits, targets, B, C);
    CUDA_LAUNCHED();
}

void kernel_crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, float scale, int B,
                                  int C, cudaStream_t s) {
    crossentropy_backward<<<blocks_for((size_t)B * C), THREADS, 0, s>>>(dlogits, probs, targets, scale, B, C);
    CUDA_LAUNCHED();
}

void kernel_mse_forward(float *losses, const float *out, const float *target, int B, int C, cudaStream_t s) {
    mse_forward<<<blocks_for((size_t)B), THREADS, 0, s>>>(losses, out, target, B, C);
    CUDA_LAUNCHED();
}

void kernel_mse_backward(float *dout, const float *out, const float *target, float scale, int B, int C,
                         cudaStream_t s) {
    mse_backward<<<blocks_for((size_t)B * C), THREADS, 0, s>>>(dout, out, target, scale, (size_t)B * C, C);
    CUDA_LAUNCHED();
}

void kernel_sgd_step(float *params, float *velocity, const float *grads, size_t n, float lr, float momentum,
                     int first_step, cudaStream_t s) {
    sgd_step<<<blocks_for(n), THREADS, 0, s>>>(params, velocity, grads, n, lr, momentum, first_step);
    CUDA_LAUNCHED();
}

void kernel_accumulate(float *acc, const float *in, size_t n, cudaStream_t s) {
    accumulate<<<blocks_for(n), THREADS, 0, s>>>(acc, in, n);
    CUDA_LAUNCHED();
}

void kernel_count_correct(unsigned long long *correct, const float *logits, const uint8_t *targets, int B, int C,
                          cudaStream_t s) {
    count_correct<<<blocks_for((size_t)B), THREADS, 0, s>>>(correct, logits, targets, B, C);
    CUDA_LAUNCHED();
}
