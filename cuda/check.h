/* CUDA_TRY and CUBLAS_TRY: every CUDA and cuBLAS call of the backend goes through one,
 * which on failure names the call, the file and the line, tells the backend's fatal
 * handler (ddp-worker's aborts the job, so ddpd tells the other ranks) and ends the
 * process with BACKEND_EXIT_DEVICE_ERROR. A device error leaves the context unusable:
 * there is nothing to recover, as in llm.c's cudaCheck. */
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "worker/trainer/backend.h"

/* Where failures are reported: set when a backend opens. */
void cuda_set_fatal(backend_fatal_fn fatal, void *ctx);
[[noreturn]] void cuda_fail(const char *call, const char *error, const char *file, int line);

static inline void cuda_check(cudaError_t e, const char *call, const char *file, int line) {
    if (e != cudaSuccess)
        cuda_fail(call, cudaGetErrorString(e), file, line);
}

static inline void cublas_check(cublasStatus_t s, const char *call, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        cuda_fail(call, cublasGetStatusString(s), file, line);
}

#define CUDA_TRY(call) cuda_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_TRY(call) cublas_check((call), #call, __FILE__, __LINE__)
/* After a kernel launch: a bad launch configuration shows up here, a fault later. */
#define CUDA_LAUNCHED() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
