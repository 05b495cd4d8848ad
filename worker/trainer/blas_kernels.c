/* OpenBLAS's kernels chosen by the CPU's features where it does not know the model
 * (blas_kernels.h says why). */
#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/trainer/blas_kernels.h"

/* What OpenBLAS's DYNAMIC_ARCH build falls back to for a CPU model it does not know. */
#define BLAS_GENERIC_KERNELS "Prescott"

const char *blas_kernels_in_use(void) {
    return openblas_get_corename();
}

unsigned blas_cpu_features(void) {
    unsigned f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init(); /* libgcc's CPU model: checks the OS saves the AVX state too */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        f |= BLAS_CPU_AVX2_FMA;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        f |= BLAS_CPU_AVX512;
    if ((f & BLAS_CPU_AVX512) && __builtin_cpu_supports("avx512bf16"))
        f |= BLAS_CPU_AVX512_BF16;
#endif
    return f;
}

const char *blas_kernels_better(const char *chosen, unsigned features) {
    /* No CPU with AVX2 is a Prescott: that name on one means "model unknown". Any other
     * choice is OpenBLAS's own for a model it knows (AMD's Zen kernels, say), and stands. */
    if (!chosen || strcmp(chosen, BLAS_GENERIC_KERNELS) != 0)
        return NULL;
    if (features & BLAS_CPU_AVX512_BF16)
        return "Cooperlake";
    if (features & BLAS_CPU_AVX512)
        return "SkylakeX";
    if (features & BLAS_CPU_AVX2_FMA)
        return "Haswell";
    return NULL;
}

int blas_kernels_restart_if_generic(char *const argv[], const char **ret_better) {
    *ret_better = NULL;
    if (getenv("OPENBLAS_CORETYPE")) /* the user's choice, or ours after the exec */
        return 0;
    const char *better = blas_kernels_better(blas_kernels_in_use(), blas_cpu_features());
    if (!better)
        return 0;
    *ret_better = better;
    if (setenv("OPENBLAS_CORETYPE", better, 1) < 0)
        return -errno;
    execv("/proc/self/exe", argv);
    int err = errno;
    unsetenv("OPENBLAS_CORETYPE"); /* what runs is still the generic kernels: say so */
    return -err;
}
