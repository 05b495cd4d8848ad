#include "common/reduce.h"

#include <stdint.h>

static const char *const op_names[REDUCE_COUNT] = {"sum", "prod", "min", "max", "avg"};

bool reduce_op_valid(int op) {
    return op >= 0 && op < REDUCE_COUNT;
}

const char *reduce_op_name(reduce_op op) {
    return reduce_op_valid((int)op) ? op_names[op] : "unknown";
}

bool reduce_supported(dtype t, reduce_op op) {
    return dtype_valid((int)t) && reduce_op_valid((int)op) && (op != REDUCE_AVG || dtype_is_float(t));
}

#define OP_SUM(a, b) ((a) + (b))
#define OP_PROD(a, b) ((a) * (b))
#define OP_MIN(a, b) ((b) < (a) ? (b) : (a))
#define OP_MAX(a, b) ((b) > (a) ? (b) : (a))

/* Two loops per (type, op): acc op= in with restrict (the hot path, vectorised), and
 * out = a op b where out may be a or b (each element is read before it is written). */
#define KERNELS(T, name, OP)                                                                 \
    static void into_##name(T *restrict acc, const T *restrict in, size_t n) {              \
        for (size_t i = 0; i < n; i++)                                                       \
            acc[i] = (T)OP(acc[i], in[i]);                                                   \
    }                                                                                        \
    static void pair_##name(T *out, const T *a, const T *b, size_t n) {                      \
        for (size_t i = 0; i < n; i++)                                                       \
            out[i] = (T)OP(a[i], b[i]);                                                      \
    }

/* Signed sums and products wrap: computed on the unsigned type of the same width. */
KERNELS(float, f32_sum, OP_SUM)
KERNELS(float, f32_prod, OP_PROD)
KERNELS(float, f32_min, OP_MIN)
KERNELS(float, f32_max, OP_MAX)
KERNELS(double, f64_sum, OP_SUM)
KERNELS(double, f64_prod, OP_PROD)
KERNELS(double, f64_min, OP_MIN)
KERNELS(double, f64_max, OP_MAX)
KERNELS(uint32_t, i32_sum, OP_SUM)
KERNELS(uint32_t, i32_prod, OP_PROD)
KERNELS(int32_t, i32_min, OP_MIN)
KERNELS(int32_t, i32_max, OP_MAX)
KERNELS(uint64_t, i64_sum, OP_SUM)
KERNELS(uint64_t, i64_prod, OP_PROD)
KERNELS(int64_t, i64_min, OP_MIN)
KERNELS(int64_t, i64_max, OP_MAX)
KERNELS(uint8_t, u8_sum, OP_SUM)
KERNELS(uint8_t, u8_min, OP_MIN)
KERNELS(uint8_t, u8_max, OP_MAX)

/* u8 products: promote to unsigned so 255 * 255 stays defined before truncation. */
#define OP_PROD_U8(a, b) ((unsigned)(a) * (unsigned)(b))
KERNELS(uint8_t, u8_prod, OP_PROD_U8)

/* The 16-bit floats: widen, combine in f32, round back. MIN and MAX pick an operand and
 * keep its exact bits. */
#define KERNELS16(name, TO_F, FROM_F)                                                        \
    static void pair_##name(uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n,   \
                            reduce_op op) {                                                  \
        for (size_t i = 0; i < n; i++) {                                                     \
            float x = TO_F(a[i]), y = TO_F(b[i]);                                            \
            switch (op) {                                                                    \
            case REDUCE_MIN:                                                                 \
                out[i] = y < x ? b[i] : a[i];                                                \
                break;                                                                       \
            case REDUCE_MAX:                                                                 \
                out[i] = y > x ? b[i] : a[i];                                                \
                break;                                                                       \
            case REDUCE_PROD:                                                                \
                out[i] = FROM_F(x * y);                                                      \
                break;                                                                       \
            default:                                                                         \
                out[i] = FROM_F(x + y);                                                      \
            }                                                                                \
        }                                                                                    \
    }
KERNELS16(f16, half_to_float, float_to_half)
KERNELS16(bf16, bf16_to_float, float_to_bf16)

#define DISPATCH(PREFIX, T, ...)                                                             \
    switch (op) {                                                                            \
    case REDUCE_SUM:                                                                         \
    case REDUCE_AVG:                                                                         \
        PREFIX##_##T##_sum(__VA_ARGS__);                                                     \
        return;                                                                              \
    case REDUCE_PROD:                                                                        \
        PREFIX##_##T##_prod(__VA_ARGS__);                                                    \
        return;                                                                              \
    case REDUCE_MIN:                                                                         \
        PREFIX##_##T##_min(__VA_ARGS__);                                                     \
        return;                                                                              \
    case REDUCE_MAX:                                                                         \
        PREFIX##_##T##_max(__VA_ARGS__);                                                     \
        return;                                                                              \
    default:                                                                                 \
        return;                                                                              \
    }

void reduce_into(void *acc, const void *in, size_t n, dtype t, reduce_op op) {
    switch (t) {
    case DTYPE_F32:
        DISPATCH(into, f32, acc, in, n)
    case DTYPE_F64:
        DISPATCH(into, f64, acc, in, n)
    case DTYPE_I32:
        DISPATCH(into, i32, acc, in, n)
    case DTYPE_I64:
        DISPATCH(into, i64, acc, in, n)
    case DTYPE_U8:
        DISPATCH(into, u8, acc, in, n)
    case DTYPE_F16:
        pair_f16(acc, acc, in, n, op);
        return;
    case DTYPE_BF16:
        pair_bf16(acc, acc, in, n, op);
        return;
    default:
        return;
    }
}

void reduce_pair(void *out, const void *a, const void *b, size_t n, dtype t, reduce_op op) {
    switch (t) {
    case DTYPE_F32:
        DISPATCH(pair, f32, out, a, b, n)
    case DTYPE_F64:
        DISPATCH(pair, f64, out, a, b, n)
    case DTYPE_I32:
        DISPATCH(pair, i32, out, a, b, n)
    case DTYPE_I64:
        DISPATCH(pair, i64, out, a, b, n)
    case DTYPE_U8:
        DISPATCH(pair, u8, out, a, b, n)
    case DTYPE_F16:
        pair_f16(out, a, b, n, op);
        return;
    case DTYPE_BF16:
        pair_bf16(out, a, b, n, op);
        return;
    default:
        return;
    }
}

void reduce_finish(void *buf, size_t n, dtype t, reduce_op op, int divisor) {
    if (op != REDUCE_AVG)
        return;
    switch (t) {
    case DTYPE_F32: {
        float *x = buf, d = (float)divisor;
        for (size_t i = 0; i < n; i++)
            x[i] /= d;
        return;
    }
    case DTYPE_F64: {
        double *x = buf, d = (double)divisor;
        for (size_t i = 0; i < n; i++)
            x[i] /= d;
        return;
    }
    case DTYPE_F16: {
        uint16_t *x = buf;
        for (size_t i = 0; i < n; i++)
            x[i] = float_to_half(half_to_float(x[i]) / (float)divisor);
        return;
    }
    case DTYPE_BF16: {
        uint16_t *x = buf;
        for (size_t i = 0; i < n; i++)
            x[i] = float_to_bf16(bf16_to_float(x[i]) / (float)divisor);
        return;
    }
    default:
        return;
    }
}
