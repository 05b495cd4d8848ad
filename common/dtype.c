#include "common/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
    bool is_float;
} dtypes[DTYPE_COUNT] = {
    [DTYPE_F32] = {"f32", 4, true}, [DTYPE_F64] = {"f64", 8, true}, [DTYPE_F16] = {"f16", 2, true},
    [DTYPE_BF16] = {"bf16", 2, true}, [DTYPE_I32] = {"i32", 4, false}, [DTYPE_I64] = {"i64", 8, false},
    [DTYPE_U8] = {"u8", 1, false},
};

bool dtype_valid(int t) {
    return t >= 0 && t < DTYPE_COUNT;
}

size_t dtype_size(dtype t) {
    return dtypes[t].size;
}

const char *dtype_name(dtype t) {
    return dtype_valid((int)t) ? dtypes[t].name : "unknown";
}

bool dtype_is_float(dtype t) {
    return dtypes[t].is_float;
}

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) /* inf or NaN */
        return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return bits_float(sign);
        /* subnormal: mant * 2^-24, exact in binary32 */
        float f = (float)mant * 0x1p-24f;
        return sign ? -f : f;
    }
    return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_half(float f) {
    uint32_t u = float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or NaN; keep NaN quiet and non-zero */
        return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
    if (abs >= 0x477ff000u) /* rounds to beyond the largest half */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float a = bits_float(abs);
        /* a * 2^24 rounded to an integer, to nearest even (the default rounding mode) */
        float scaled = a * 0x1p24f;
        uint32_t m = (uint32_t)scaled;
        float frac = scaled - (float)m;
        if (frac > 0.5f || (frac == 0.5f && (m & 1u)))
            m++;
        return (uint16_t)(sign | m);
    }
    /* normal: drop 13 mantissa bits, rounding to nearest even */
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float bf16_to_float(uint16_t b) {
    return bits_float((uint32_t)b << 16);
}

uint16_t float_to_bf16(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
