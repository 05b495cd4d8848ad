/* The CPU backend: GEMMs on OpenBLAS, the rest plain loops. The reference every other
 * backend is tested against. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "worker/trainer/backend.h"

#define HUGE_PAGE_BYTES (2u << 20)

/* Zero-filled, 64-byte aligned memory; large blocks on huge pages. */
static void *cpu_memory(size_t bytes) {
    /* 64-byte aligned for the vector units; calloc'd semantics: zero-filled. Large blocks
     * (the parameters, gradients, velocity) on transparent huge pages, as PyTorch's CPU
     * allocator does: fewer TLB misses, and a peer's remote read pins 2 MiB pages, not 4 KiB. */
    void *p = NULL;
    size_t align = bytes >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 64;
    if (posix_memalign(&p, align, bytes ? bytes : 64) != 0)
        return NULL;
    if (align == HUGE_PAGE_BYTES)
        madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 0, bytes);
    return p;
}

static void *cpu_alloc(backend *b, size_t bytes) {
    void *p = cpu_memory(bytes);
    if (p)
        backend_count_alloc(&b->memory, bytes);
    return p;
}

static void cpu_release(backend *b, void *p, size_t bytes) {
    if (!p)
        return;
    free(p);
    backend_count_release(&b->memory, bytes);
}

static void *cpu_host_alloc(backend *b, size_t bytes) {
    void *p = cpu_memory(bytes);
    if (p)
        backend_count_alloc(&b->host, bytes);
    return p;
}

static void cpu_host_release(backend *b, void *p, size_t bytes) {
    if (!p)
        return;
    free(p);
    backend_count_release(&b->host, bytes);
}

static int cpu_host_register(backend *b, void *p, size_t bytes) {
    (void)p; /* host memory as it is */
    backend_count_alloc(&b->host, bytes);
    return 0;
}

static void cpu_host_unregister(backend *b, void *p, size_t bytes) {
    (void)p;
    backend_count_release(&b->host, bytes);
}

static void cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    if (bytes)
        memcpy(dst, src, bytes);
}

static void cpu_download_async(backend *b, void *host, const void *src, size_t bytes, int stage) {
    (void)stage; /* nothing is queued on the CPU: the copy is done when this returns */
    cpu_copy(b, host, src, bytes);
}

static void cpu_wait_download(backend *b, int stage) {
    (void)b;
    (void)stage;
}

static int cpu_device_memory(backend *b, size_t *ret_used, size_t *ret_total) {
    (void)b;
    (void)ret_used;
    (void)ret_total;
    return -ENOTSUP;
}

static void cpu_zero(backend *b, void *p, size_t bytes) {
    (void)b;
    memset(p, 0, bytes);
}

static void cpu_synchronize(backend *b) {
    (void)b;
}

static void cpu_linear_forward(backend *b, float *out, const float *inp, const float *weight, const float *bias, int B,
                               int IC, int OC) {
    (void)b;
    for (int i = 0; i < B; i++) /* start from the bias, let the GEMM add */
        memcpy(out + (size_t)i * OC, bias, (size_t)OC * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, IC, 1.0f, inp, IC, weight, IC, 1.0f, out, OC);
}

static void cpu_linear_backward(backend *b, float *dinp, float *dweight, float *dbias, const float *dout,
                                const float *inp, const float *weight, int B, int IC, int OC) {
    (void)b;
    if (dinp) /* (B, OC) . (OC, IC) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
    /* (OC, B) . (B, IC), accumulated */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, B, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
    for (int i = 0; i < B; i++) {
        const float *restrict row = dout + (size_t)i * OC;
        float *restrict sum = dbias;
        for (int o = 0; o < OC; o++)
            sum[o] += row[o];
    }
}

/* The element-wise loops below are written for the vectoriser (this file is built with
 * -O3): restrict pointers, no branch on the data, no condition inside the loop. */
static void cpu_relu_forward(backend *b, float *restrict x, size_t n) {
    (void)b;
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_mask(float *restrict dinp, const float *restrict dout, const float *restrict out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = dout[i]; /* loaded either way: a select, not a branch */
        dinp[i] = out[i] > 0.0f ? g : 0.0f;
    }
}

static void relu_mask_in_place(float *restrict d, const float *restrict out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = d[i];
        d[i] = out[i] > 0.0f ? g : 0.0f;
    }
}

static void cpu_relu_backward(backend *b, float *dinp, const float *dout, const float *out, size_t n) {
    (void)b;
    if (dinp == dout) /* model.c's: in place */
        relu_mask_in_place(dinp, out, n);
    else
        relu_mask(dinp, dout, out, n);
}

static void cpu_crossentropy_forward(backend *b, float *losses, float *probs, const float *logits,
                                     const uint8_t *targets, int B, int C) {
    (void)b;
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * C;
        float *p = probs + (size_t)i * C;
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

static void cpu_crossentropy_backward(backend *b, float *dlogits, const float *probs, const uint8_t *targets,
                                      float scale, int B, int C) {
    (void)b;
    for (int i = 0; i < B; i++) {
        const float *p = probs + (size_t)i * C;
        float *d = dlogits + (size_t)i * C;
        for (int c = 0; c < C; c++)
            d[c] = (p[c] - (c == targets[i] ? 1.0f : 0.0f)) * scale;
    }
}

static void cpu_mse_forward(backend *b, float *losses, const float *out, const float *target, int B, int C) {
    (void)b;
    for (int i = 0; i < B; i++) {
        double sum = 0;
        for (int c = 0; c < C; c++) {
            double d = (double)out[(size_t)i * C + c] - target[(size_t)i * C + c];
            sum += d * d;
        }
        losses[i] = (float)(sum / C);
    }
}

static void cpu_mse_backward(backend *b, float *dout, const float *out, const float *target, float scale, int B,
                             int C) {
    (void)b;
    for (size_t i = 0; i < (size_t)B * C; i++)
        dout[i] = 2.0f * (out[i] - target[i]) / (float)C * scale;
}

static void cpu_sgd_step(backend *b, float *restrict params, float *restrict velocity, const float *restrict grads,
                         size_t n, float lr, float momentum, int first_step) {
    (void)b;
    if (first_step || momentum == 0.0f)
        for (size_t i = 0; i < n; i++) {
            velocity[i] = grads[i];
            params[i] -= lr * grads[i];
        }
    else
        for (size_t i = 0; i < n; i++) {
            float v = momentum * velocity[i] + grads[i];
            velocity[i] = v;
            params[i] -= lr * v;
        }
}

static void cpu_accumulate(backend *b, float *restrict acc, const float *restrict in, size_t n) {
    (void)b;
    for (size_t i = 0; i < n; i++)
        acc[i] += in[i];
}

static long cpu_count_correct(backend *b, const float *logits, const uint8_t *targets, int B, int C) {
    (void)b;
    long correct = 0;
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (z[c] > z[best])
                best = c;
        correct += best == targets[i];
    }
    return correct;
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .host_alloc = cpu_host_alloc,
    .host_release = cpu_host_release,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .upload = cpu_copy,
    .download = cpu_copy,
    .download_async = cpu_download_async,
    .wait_download = cpu_wait_download,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .device_memory = cpu_device_memory,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .mse_forward = cpu_mse_forward,
    .mse_backward = cpu_mse_backward,
    .sgd_step = cpu_sgd_step,
    .accumulate = cpu_accumulate,
    .count_correct = cpu_count_correct,
};

int backend_cpu_open(backend *ret, int blas_threads) {
    if (blas_threads < 1)
        return -EINVAL;
    openblas_set_num_threads(blas_threads);
    *ret = (backend){.ops = &cpu_ops, .device = -1};
    return 0;
}
