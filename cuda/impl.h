/* The CUDA backend's state behind backend.impl, shared by its files: backend_cuda.cu (the
 * ops) and peer_nccl.cu (the device-side all-reduce). */
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "worker/trainer/backend.h"

struct cuda_impl {
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    cudaEvent_t queued;                     /* the compute stream's work so far */
    cudaEvent_t staged[BACKEND_MAX_STAGES]; /* each stage's copy to the host */
    unsigned long long *correct;            /* count_correct's counter, on the device */
    /* peer_nccl.cu: the communicator (an ncclComm_t) and its stream; NULL until joined */
    void *peer;
    cudaStream_t peer_stream; /* made at the join; kept after an abandon, for close */
    cudaEvent_t peer_ready;
    int peer_timeout_ms;
};

/* Makes b's device current (a process may drive more than one) and returns its state. */
cuda_impl *cuda_enter(backend *b);

/* peer_nccl.cu; cuda_peer_close is a no-op in a build without NCCL or before a join. */
void cuda_peer_close(cuda_impl *c);
int cuda_peer_id(backend *b, void *id, size_t size, char *err, size_t err_size);
int cuda_peer_join(backend *b, const void *id, size_t size, int rank, int world, int timeout_ms,
                   int (*should_stop)(void *ctx), void *ctx, char *err, size_t err_size);
int cuda_peer_all_reduce_avg(backend *b, float *buf, size_t n, char *err, size_t err_size);
int cuda_peer_wait(backend *b, int timeout_ms, int (*should_stop)(void *ctx), void *ctx, char *err, size_t err_size);
