/* Reduction kernels for every op and dtype: the arithmetic of the collectives, kept apart
 * from the communication. f16 and bf16 reduce in f32 and round once per step. Loops are
 * plain and restrict-qualified so the compiler vectorises them. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "common/dtype.h"

/* The values equal libddp's ddp_op. AVG reduces as SUM; reduce_finish() divides. */
typedef enum { REDUCE_SUM = 0, REDUCE_PROD = 1, REDUCE_MIN = 2, REDUCE_MAX = 3, REDUCE_AVG = 4, REDUCE_COUNT } reduce_op;

bool reduce_op_valid(int op);
/* AVG needs a float type, as in NCCL. */
bool reduce_supported(dtype t, reduce_op op);
const char *reduce_op_name(reduce_op op); /* "sum", ... */

/* acc[i] = acc[i] op in[i] for n elements. Integers wrap on overflow. MIN and MAX keep
 * acc[i] unless in[i] compares strictly below (above) it. */
void reduce_into(void *acc, const void *in, size_t n, dtype t, reduce_op op);
/* out[i] = a[i] op b[i]. out may be a, or b. */
void reduce_pair(void *out, const void *a, const void *b, size_t n, dtype t, reduce_op op);
/* For AVG: buf[i] /= divisor (floats). Other ops: nothing. */
void reduce_finish(void *buf, size_t n, dtype t, reduce_op op, int divisor);
