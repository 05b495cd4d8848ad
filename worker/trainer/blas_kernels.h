/* Which of OpenBLAS's kernels the CPU backend runs.
 *
 * OpenBLAS picks its kernels by the CPU's model number, once, as the library loads. A
 * model newer than the library (Emerald Rapids, model 207, under Debian 12's OpenBLAS
 * 0.3.21) gets the generic "Prescott" kernels, SSE3 only: the mlp trains 4x slower than
 * on the AVX-512 ones. Later OpenBLAS releases then choose by the CPU's features; so does
 * ddp-worker, by starting itself again with OPENBLAS_CORETYPE naming the kernels the
 * features run (the only way to choose: the library reads it only as it loads). A user's
 * own OPENBLAS_CORETYPE always stands. */
#pragma once

enum {
    BLAS_CPU_AVX2_FMA = 1 << 0,    /* Haswell's kernels */
    BLAS_CPU_AVX512 = 1 << 1,      /* F, BW, DQ and VL: SkylakeX's */
    BLAS_CPU_AVX512_BF16 = 1 << 2, /* Cooperlake's */
};

/* OpenBLAS's name for the kernels in use. */
const char *blas_kernels_in_use(void);
/* This CPU's features that the kernels need (the flags above, as the OS enables them). */
unsigned blas_cpu_features(void);
/* The kernels to name in OPENBLAS_CORETYPE when OpenBLAS chose `chosen` on a CPU with
 * `features`; NULL when its choice stands (a model it knows). */
const char *blas_kernels_better(const char *chosen, unsigned features);
/* First thing in main: when OpenBLAS fell back to its generic kernels on a CPU that runs
 * better ones and OPENBLAS_CORETYPE is unset, exec this program again (same pid, same
 * argv) with it set. Returns only where it did not: 0, or -errno when the exec failed
 * (training then runs, slower, on the generic kernels; the caller says so). */
int blas_kernels_restart_if_generic(char *const argv[], const char **ret_better);
