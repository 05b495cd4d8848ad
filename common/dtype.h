/* Element types of tensors on the wire. The values equal libddp's ddp_dtype. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    DTYPE_F32 = 0,
    DTYPE_F64 = 1,
    DTYPE_F16 = 2,  /* IEEE 754 binary16 */
    DTYPE_BF16 = 3, /* bfloat16: the top half of a binary32 */
    DTYPE_I32 = 4,
    DTYPE_I64 = 5,
    DTYPE_U8 = 6,
    DTYPE_COUNT
} dtype;

bool dtype_valid(int t);
size_t dtype_size(dtype t);
const char *dtype_name(dtype t); /* "f32", ... */
bool dtype_is_float(dtype t);

/* Conversions for the 16-bit floats, rounding to nearest even; NaN stays NaN. */
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
