/* The CUDA backend: worker/trainer/backend.h on one GPU. GEMMs on cuBLAS, the rest in kernels.cu,
 * all queued on one compute stream in order; copies for staging gradients run on a second
 * stream, so they overlap the backward work queued after them.
 *
 * cuBLAS is column-major, our tensors row-major: a row-major (r, c) matrix is the
 * column-major (c, r) matrix of its transpose, so each GEMM is written for the transposes,
 * C^T = B^T A^T, with the operands swapped. */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <errno.h>

#include "cuda/check.h"
#include "cuda/impl.h"
#include "cuda/kernels.h"

cuda_impl *cuda_enter(backend *b) {
    int current = -1;
    CUDA_TRY(cudaGetDevice(&current));
    if (current != b->device)
        CUDA_TRY(cudaSetDevice(b->device));
    return static_cast<cuda_impl *>(b->impl);
}

namespace {

backend_fatal_fn fatal_fn;
void *fatal_ctx;

void *cuda_alloc(backend *b, size_t bytes) {
    cuda_impl *c = cuda_enter(b);
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) { /* out of memory is the caller's to report */
        cudaGetLastError();
        return nullptr;
    }
    CUDA_TRY(e);
    CUDA_TRY(cudaMemsetAsync(p, 0, bytes, c->compute));
    backend_count_alloc(&b->memory, bytes);
    return p;
}

void cuda_release(backend *b, void *p, size_t bytes) {
    if (!p)
        return;
    cuda_enter(b);
    CUDA_TRY(cudaFree(p));
    backend_count_release(&b->memory, bytes);
}

void *cuda_host_alloc(backend *b, size_t bytes) {
    cuda_enter(b);
    void *p = nullptr;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        return nullptr;
    }
    CUDA_TRY(e);
    memset(p, 0, bytes);
    backend_count_alloc(&b->host, bytes);
    return p;
}

void cuda_host_release(backend *b, void *p, size_t bytes) {
    if (!p)
        return;
    cuda_enter(b);
    CUDA_TRY(cudaFreeHost(p));
    backend_count_release(&b->host, bytes);
}

int cuda_host_register(backend *b, void *p, size_t bytes) {
    cuda_enter(b);
    /* portable: pinned for every device's context, as the stages of a model on two GPUs
     * both copy into it */
    cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) { /* the memory stays usable: it is only not pinned */
        cudaGetLastError();
        return -EIO;
    }
    backend_count_alloc(&b->host, bytes);
    return 0;
}

void cuda_host_unregister(backend *b, void *p, size_t bytes) {
    cuda_enter(b);
    CUDA_TRY(cudaHostUnregister(p));
    backend_count_release(&b->host, bytes);
}

void cuda_upload(backend *b, void *dst, const void *host, size_t bytes) {
    cuda_impl *c = cuda_enter(b);
    if (!bytes)
        return;
    CUDA_TRY(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->compute));
    CUDA_TRY(cudaStreamSynchronize(c->compute)); /* host may be reused at once */
}

void cuda_download(backend *b, void *host, const void *src, size_t bytes) {
    cuda_impl *c = cuda_enter(b);
    if (!bytes)
        return;
    CUDA_TRY(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->compute));
    CUDA_TRY(cudaStreamSynchronize(c->compute));
}

void cuda_download_async(backend *b, void *host, const void *src, size_t bytes, int stage) {
    cuda_impl *c = cuda_enter(b);
    if (stage < 0 || stage >= BACKEND_MAX_STAGES)
        cuda_fail("download_async", "stage out of range", __FILE__, __LINE__);
    CUDA_TRY(cudaEventRecord(c->queued, c->compute));
    CUDA_TRY(cudaStreamWaitEvent(c->copy, c->queued, 0));
    if (bytes)
        CUDA_TRY(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->copy));
    CUDA_TRY(cudaEventRecord(c->staged[stage], c->copy));
}

void cuda_wait_download(backend *b, int stage) {
    cuda_impl *c = cuda_enter(b);
    if (stage < 0 || stage >= BACKEND_MAX_STAGES)
        cuda_fail("wait_download", "stage out of range", __FILE__, __LINE__);
    CUDA_TRY(cudaEventSynchronize(c->staged[stage]));
}

void cuda_zero(backend *b, void *p, size_t bytes) {
    cuda_impl *c = cuda_enter(b);
    if (bytes)
        CUDA_TRY(cudaMemsetAsync(p, 0, bytes, c->compute));
}

void cuda_synchronize(backend *b) {
    cuda_impl *c = cuda_enter(b);
    CUDA_TRY(cudaStreamSynchronize(c->compute));
    CUDA_TRY(cudaStreamSynchronize(c->copy));
}

int cuda_device_memory(backend *b, size_t *ret_used, size_t *ret_total) {
    cuda_enter(b);
    size_t free_bytes = 0, total = 0;
    CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
    *ret_used = total - free_bytes;
    *ret_total = total;
    return 0;
}

void cuda_linear_forward(backend *b, float *out, const float *inp, const float *weight, const float *bias, int B,
                         int IC, int OC) {
    cuda_impl *c = cuda_enter(b);
    const float one = 1.0f;
    kernel_bias_rows(out, bias, B, OC, c->compute); /* start from the bias, let the GEMM add */
    /* out^T (OC, B) += W (OC, IC) . inp^T (IC, B); W^T is stored (IC, OC), inp^T (IC, B) */
    CUBLAS_TRY(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, B, IC, &one, weight, IC, inp, IC, &one, out, OC));
}

void cuda_linear_backward(backend *b, float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                          const float *weight, int B, int IC, int OC) {
    cuda_impl *c = cuda_enter(b);
    const float one = 1.0f, zero = 0.0f;
    if (dinp) /* dinp^T (IC, B) = W^T (IC, OC) . dout^T (OC, B) */
        CUBLAS_TRY(
            cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, IC, B, OC, &one, weight, IC, dout, OC, &zero, dinp, IC));
    /* dweight^T (IC, OC) += inp^T (IC, B) . dout (B, OC), accumulated */
    CUBLAS_TRY(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, B, &one, inp, IC, dout, OC, &one, dweight, IC));
    kernel_bias_backward(dbias, dout, B, OC, c->compute);
}

void cuda_relu_forward(backend *b, float *x, size_t n) {
    kernel_relu_forward(x, n, cuda_enter(b)->compute);
}

void cuda_relu_backward(backend *b, float *dinp, const float *dout, const float *out, size_t n) {
    kernel_relu_backward(dinp, dout, out, n, cuda_enter(b)->compute);
}

void cuda_crossentropy_forward(backend *b, float *losses, float *probs, const float *logits, const uint8_t *targets,
                               int B, int C) {
    kernel_crossentropy_forward(losses, probs, logits, targets, B, C, cuda_enter(b)->compute);
}

void cuda_crossentropy_backward(backend *b, float *dlogits, const float *probs, const uint8_t *targets, float scale,
                                int B, int C) {
    kernel_crossentropy_backward(dlogits, probs, targets, scale, B, C, cuda_enter(b)->compute);
}

void cuda_mse_forward(backend *b, float *losses, const float *out, const float *target, int B, int C) {
    kernel_mse_forward(losses, out, target, B, C, cuda_enter(b)->compute);
}

void cuda_mse_backward(backend *b, float *dout, const float *out, const float *target, float scale, int B, int C) {
    kernel_mse_backward(dout, out, target, scale, B, C, cuda_enter(b)->compute);
}

void cuda_sgd_step(backend *b, float *params, float *velocity, const float *grads, size_t n, float lr, float momentum,
                   int first_step) {
    kernel_sgd_step(params, velocity, grads, n, lr, momentum, first_step, cuda_enter(b)->compute);
}

void cuda_accumulate(backend *b, float *acc, const float *in, size_t n) {
    kernel_accumulate(acc, in, n, cuda_enter(b)->compute);
}

long cuda_count_correct(backend *b, const float *logits, const uint8_t *targets, int B, int C) {
    cuda_impl *c = cuda_enter(b);
    unsigned long long correct = 0;
    CUDA_TRY(cudaMemsetAsync(c->correct, 0, sizeof(*c->correct), c->compute));
    kernel_count_correct(c->correct, logits, targets, B, C, c->compute);
    CUDA_TRY(cudaMemcpyAsync(&correct, c->correct, sizeof(correct), cudaMemcpyDeviceToHost, c->compute));
    CUDA_TRY(cudaStreamSynchronize(c->compute));
    return (long)correct;
}

void cuda_close(backend *b) {
    cuda_impl *c = static_cast<cuda_impl *>(b->impl);
    if (!c)
        return;
    cuda_enter(b);
    cuda_peer_close(c);
    CUDA_TRY(cudaStreamSynchronize(c->compute));
    CUDA_TRY(cudaStreamSynchronize(c->copy));
    CUDA_TRY(cudaFree(c->correct));
    for (cudaEvent_t e : c->staged)
        CUDA_TRY(cudaEventDestroy(e));
    CUDA_TRY(cudaEventDestroy(c->queued));
    CUBLAS_TRY(cublasDestroy(c->blas));
    CUDA_TRY(cudaStreamDestroy(c->copy));
    CUDA_TRY(cudaStreamDestroy(c->compute));
    delete c;
    b->impl = nullptr;
}

const backend_ops cuda_ops = {
    .name = "cuda",
    .host_memory = false,
    .close = cuda_close,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .host_alloc = cuda_host_alloc,
    .host_release = cuda_host_release,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .upload = cuda_upload,
    .download = cuda_download,
    .download_async = cuda_download_async,
    .wait_download = cuda_wait_download,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .device_memory = cuda_device_memory,
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .relu_forward = cuda_relu_forward,
    .relu_backward = cuda_relu_backward,
    .crossentropy_forward = cuda_crossentropy_forward,
    .crossentropy_backward = cuda_crossentropy_backward,
    .mse_forward = cuda_mse_forward,
    .mse_backward = cuda_mse_backward,
    .sgd_step = cuda_sgd_step,
    .accumulate = cuda_accumulate,
    .count_correct = cuda_count_correct,
#ifdef DDP_HAVE_NCCL
    .peer_id = cuda_peer_id,
    .peer_join = cuda_peer_join,
    .peer_all_reduce_avg = cuda_peer_all_reduce_avg,
    .peer_wait = cuda_peer_wait,
#endif
};

} // namespace

#ifndef DDP_HAVE_NCCL
void cuda_peer_close(cuda_impl *) {} /* nothing to close: no peer_join in this build */
#endif

void cuda_set_fatal(backend_fatal_fn fatal, void *ctx) {
    fatal_fn = fatal;
    fatal_ctx = ctx;
}

void cuda_fail(const char *call, const char *error, const char *file, int line) {
    char what[512];
    snprintf(what, sizeof(what), "CUDA error at %s:%d: %s: %s", file, line, call, error);
    if (fatal_fn)
        fatal_fn(fatal_ctx, what);
    fprintf(stderr, "%s\n", what);
    exit(BACKEND_EXIT_DEVICE_ERROR);
}

static int cuda_device_count(char *err, size_t err_size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        snprintf(err, err_size, "no usable GPU: no NVIDIA driver is loaded, or it is older than CUDA %d.%d needs",
                 runtime / 1000, runtime % 1000 / 10);
        return -ENODEV;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, err_size, "no usable GPU: %s", cudaGetErrorString(e));
        return -ENODEV;
    }
    if (n == 0) {
        snprintf(err, err_size, "no GPU is visible%s%s", getenv("CUDA_VISIBLE_DEVICES") ? " with CUDA_VISIBLE_DEVICES=" : "",
                 getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
        return -ENODEV;
    }
    return n;
}

static int cuda_open(backend *ret, int device, backend_fatal_fn fatal, void *ctx, char *err, size_t err_size) {
    int n = cuda_device_count(err, err_size);
    if (n < 0)
        return n;
    if (device < 0 || device >= n) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(err, err_size, "no GPU %d: %d visible (numbered 0 to %d%s%s)", device, n, n - 1,
                 visible ? ", as CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "");
        return -ENODEV;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaFree(nullptr); /* creates the context now: a broken GPU fails here, not mid-step */
    if (e != cudaSuccess) {
        cudaGetLastError();
        snprintf(err, err_size, "GPU %d cannot be used: %s", device, cudaGetErrorString(e));
        return -ENODEV;
    }
    cuda_set_fatal(fatal, ctx);
    *ret = backend{};
    ret->ops = &cuda_ops;
    ret->device = device;
    cuda_impl *c = new cuda_impl{};
    ret->impl = c;
    CUDA_TRY(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
    CUDA_TRY(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&c->blas));
    CUBLAS_TRY(cublasSetStream(c->blas, c->compute));
    /* FP32 GEMMs, never TF32, so the GPU trains the CPU's math within float rounding. */
    CUBLAS_TRY(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    CUDA_TRY(cudaEventCreateWithFlags(&c->queued, cudaEventDisableTiming));
    for (cudaEvent_t &s : c->staged)
        CUDA_TRY(cudaEventCreateWithFlags(&s, cudaEventDisableTiming));
    CUDA_TRY(cudaMalloc(&c->correct, sizeof(*c->correct)));
    return 0;
}

/* What the worker looks up once it has loaded this module (backend.h). */
extern "C" __attribute__((visibility("default"))) const backend_cuda_module ddp_backend_cuda = {
    .ops_size = sizeof(backend_ops),
    .version = DDP_VERSION,
    .open = cuda_open,
    .device_count = cuda_device_count,
};
