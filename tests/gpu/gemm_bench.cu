/* gemm-bench: cuBLAS SGEMM throughput on GPU 0 against the card's FP32 peak, for
 * tests/gpu/run.sh. Square N x N x N products, FP32 as the CUDA backend runs them (no
 * TF32), timed with CUDA events after warm-ups; prints one line per size:
 *   gemm n=8192 ms=... tflops=... peak_tflops=... fraction=...
 * The peak is SMs x FP32 lanes per SM x 2 (a fused multiply-add) x the boost clock. */
#include <cstdio>
#include <cstdlib>

#include "cuda/check.h"

/* FP32 lanes per SM by compute capability (the CUDA programming guide's table). */
static int fp32_lanes(int major, int minor) {
    if (major == 7)
        return 64;
    if (major == 8)
        return minor == 0 ? 64 : 128;
    return 128; /* 8.9, 9.x (Hopper), 10.x and 12.x (Blackwell) */
}

int main(int argc, char **argv) {
    int sizes[] = {1024, 4096, 8192};
    int repeats = argc > 1 ? atoi(argv[1]) : 10;
    int sms = 0, clock_khz = 0, major = 0, minor = 0;
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CUDA_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    double peak = (double)sms * fp32_lanes(major, minor) * 2.0 * clock_khz * 1e3 / 1e12;
    cublasHandle_t h;
    CUBLAS_TRY(cublasCreate(&h));
    CUBLAS_TRY(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    for (int n : sizes) {
        size_t bytes = (size_t)n * n * sizeof(float);
        float *a, *b, *c;
        CUDA_TRY(cudaMalloc(&a, bytes));
        CUDA_TRY(cudaMalloc(&b, bytes));
        CUDA_TRY(cudaMalloc(&c, bytes));
        CUDA_TRY(cudaMemset(a, 0x3c, bytes)); /* about 0.01: finite, not zero */
        CUDA_TRY(cudaMemset(b, 0x3c, bytes));
        const float one = 1.0f, zero = 0.0f;
        for (int i = 0; i < 3; i++)
            CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
        cudaEvent_t start, stop;
        CUDA_TRY(cudaEventCreate(&start));
        CUDA_TRY(cudaEventCreate(&stop));
        CUDA_TRY(cudaEventRecord(start));
        for (int i = 0; i < repeats; i++)
            CUBLAS_TRY(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
        CUDA_TRY(cudaEventRecord(stop));
        CUDA_TRY(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_TRY(cudaEventElapsedTime(&ms, start, stop));
        ms /= (float)repeats;
        double tflops = 2.0 * n * n * (double)n / (ms * 1e-3) / 1e12;
        printf("gemm n=%d ms=%.3f tflops=%.1f peak_tflops=%.1f fraction=%.2f\n", n, ms, tflops, peak, tflops / peak);
        CUDA_TRY(cudaEventDestroy(start));
        CUDA_TRY(cudaEventDestroy(stop));
        CUDA_TRY(cudaFree(a));
        CUDA_TRY(cudaFree(b));
        CUDA_TRY(cudaFree(c));
    }
    CUBLAS_TRY(cublasDestroy(h));
    return 0;
}
