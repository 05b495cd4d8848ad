/* The compute backend: where a worker's tensors live and the ops of training run.
 *
 * The CPU backend (backend_cpu.c, on OpenBLAS) is the readable reference; the CUDA backend
 * (cuda/) implements the same table, op for op, with the same names and argument order:
 * outputs, then inputs, then dimensions (as in llm.c). Tensors are row-major float32.
 * Every allocation goes through the backend's accounting (current and peak bytes per
 * device), which is what the DP-vs-DDP comparison reports. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* the CUDA backend is compiled as CUDA C++ */
#endif

/* ddp-worker's exit code when its device failed (a CUDA error): distinct from a training
 * error (1) and a usage error (2), so a supervisor can tell a broken GPU apart. */
#define BACKEND_EXIT_DEVICE_ERROR 3
/* Buckets staged to the host at once: one per layer at most. */
#define BACKEND_MAX_STAGES 16

typedef struct backend backend;

typedef struct {
    size_t current, peak; /* bytes allocated through the backend */
} backend_memory;

typedef struct {
    const char *name;
    /* The device's buffers are host memory: collectives can take them as they are. When
     * false, what goes on the wire is staged through host memory (host_alloc). */
    bool host_memory;

    void (*close)(backend *b);
    /* Memory: device buffers, zero-filled, counted. */
    void *(*alloc)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p, size_t bytes);
    /* Host buffers for staging (pinned on a GPU, so copies run asynchronously), counted
     * apart from the device's. */
    void *(*host_alloc)(backend *b, size_t bytes);
    void (*host_release)(backend *b, void *p, size_t bytes);
    /* Host memory made elsewhere (shared memory the collectives read in place) made fit
     * for staging as host_alloc's is (pinned: a GPU's copies land in it by DMA), counted
     * with it; -EIO when the device refuses it. host_unregister before it goes away. */
    int (*host_register)(backend *b, void *p, size_t bytes);
    void (*host_unregister)(backend *b, void *p, size_t bytes);
    /* Synchronous copies: when they return, host holds the data or may be reused. */
    void (*upload)(backend *b, void *dst, const void *host, size_t bytes);
    void (*download)(backend *b, void *host, const void *src, size_t bytes);
    /* A copy to a host_alloc buffer after the work queued so far, on a stream of its own
     * so that it overlaps what is queued next (which must not write src); wait_download
     * (stage) waits for it. */
    void (*download_async)(backend *b, void *host, const void *src, size_t bytes, int stage);
    void (*wait_download)(backend *b, int stage);
    void (*zero)(backend *b, void *p, size_t bytes);
    /* Waits for queued work (a no-op on the CPU). */
    void (*synchronize)(backend *b);
    /* What the device itself reports in use and in all (cudaMemGetInfo); -ENOTSUP on the
     * CPU, whose tracked bytes are the whole story. */
    int (*device_memory)(backend *b, size_t *ret_used, size_t *ret_total);

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
    void (*sgd_step)(backend *b, float *params, float *velocity, const float *grads, size_t n, float lr, float momentum,
                     int first_step);
    /* acc += in (dp mode: gradients summed on rank 0's device) */
    void (*accumulate)(backend *b, float *acc, const float *in, size_t n);
    /* correct = number of rows whose argmax equals the target (result on the host) */
    long (*count_correct)(backend *b, const float *logits /* (B, C) */, const uint8_t *targets /* (B) */, int B, int C);

    /* A device-side all-reduce among the job's ranks (NCCL on CUDA); NULL where the backend
     * has none. Rank 0 makes an id (peer_id), every rank joins with it (peer_join, which
     * waits for all of them, at most timeout_ms); peer_all_reduce_avg averages n floats in
     * place on their own stream, after the work queued so far (what is queued next may run
     * beside it: it must not touch buf); peer_wait waits for all of them, at most
     * timeout_ms. Waits give up at once when should_stop(ctx) says the job has ended. Each
     * returns 0 or a negative error with err. */
    int (*peer_id)(backend *b, void *id, size_t size, char *err, size_t err_size);
    int (*peer_join)(backend *b, const void *id, size_t size, int rank, int world, int timeout_ms,
                     int (*should_stop)(void *ctx), void *ctx, char *err, size_t err_size);
    int (*peer_all_reduce_avg)(backend *b, float *buf, size_t n, char *err, size_t err_size);
    int (*peer_wait)(backend *b, int timeout_ms, int (*should_stop)(void *ctx), void *ctx, char *err, size_t err_size);
} backend_ops;

/* The id of a device-side communicator, for the job's store: NCCL's is 128 bytes. */
#define BACKEND_PEER_ID_BYTES 128

/* Called when the device fails (a CUDA error): what failed, naming the file and line. It
 * must not return; if it does, the backend exits with BACKEND_EXIT_DEVICE_ERROR. */
typedef void (*backend_fatal_fn)(void *ctx, const char *what);

struct backend {
    const backend_ops *ops;
    int device;            /* -1 for the CPU; the CUDA device ordinal */
    backend_memory memory; /* this backend's device */
    backend_memory host;   /* its staging buffers in host memory */
    void *impl;
};

/* The CPU backend, with this many BLAS threads (one per worker unless told otherwise). */
int backend_cpu_open(backend *ret, int blas_threads);
/* The CUDA backend (cuda/, when the build has it) on device ordinal `device` as
 * CUDA_VISIBLE_DEVICES numbers them; 0 or a negative error with err saying why (no
 * driver, no such device, the module missing). fatal is called on any later CUDA error. */
int backend_cuda_open(backend *ret, int device, backend_fatal_fn fatal, void *fatal_ctx, char *err, size_t err_size);
/* GPUs the CUDA runtime sees, or a negative error with err saying why none can be used. */
int backend_cuda_device_count(char *err, size_t err_size);

/* The CUDA backend is a module, backend_cuda.so, that the two calls above load the first
 * time (backend_cuda_module.c), from where the build puts it beside the programs: a CPU
 * worker neither loads CUDA's libraries (half a second of start-up) nor needs them
 * installed. The module exports this table as BACKEND_CUDA_MODULE_SYMBOL; one from another
 * build (another version, another backend_ops) is refused. */
typedef struct {
    size_t ops_size;     /* sizeof(backend_ops) where the module was built */
    const char *version; /* DDP_VERSION */
    int (*open)(backend *ret, int device, backend_fatal_fn fatal, void *fatal_ctx, char *err, size_t err_size);
    int (*device_count)(char *err, size_t err_size);
} backend_cuda_module;
#define BACKEND_CUDA_MODULE_SYMBOL "ddp_backend_cuda"

static inline void backend_close(backend *b) {
    if (b->ops && b->ops->close)
        b->ops->close(b);
    b->ops = NULL;
}

/* Accounting shared by every backend: called by their alloc and release. */
static inline void backend_count_alloc(backend_memory *m, size_t bytes) {
    m->current += bytes;
    if (m->current > m->peak)
        m->peak = m->current;
}

static inline void backend_count_release(backend_memory *m, size_t bytes) {
    m->current -= bytes < m->current ? bytes : m->current;
}

#ifdef __cplusplus
}
#endif
