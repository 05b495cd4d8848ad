/* common/dtype.c and common/reduce.c: element types, the 16-bit float conversions and the
 * reduction kernels, each checked against an independent scalar reference.
 *
 * The references for f16 and bf16 decode with ldexp and round by searching the sorted
 * magnitudes for the two neighbours of a value, so they share no code with dtype.c. Sums
 * and products of two 16-bit floats are exact (or, for bf16 sums, rounded harmlessly) in
 * double, and the kernels' f32 intermediate is wide enough that rounding twice equals
 * rounding once, so the kernels must match the correctly rounded result bit for bit.
 *
 * Loops that check many elements test with EXPECT (a plain if) rather than ck_assert,
 * which records a mark for every passing assertion. */
#include <check.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/reduce.h"
#include "tests/check_main.h"

#define EXPECT(cond, ...)                                                                                              \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            ck_abort_msg(__VA_ARGS__);                                                                                 \
    } while (0)

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof(u));
    return u;
}

/* ---- Reference 16-bit formats ---------------------------------------------------------- */

/* Magnitude of a non-negative pattern up to and including the infinity pattern, which
 * decodes as the next power of two: the step just past the largest finite value. */
static double half_mag(unsigned p) {
    unsigned e = p >> 10, m = p & 0x3ffu;
    return e == 0 ? ldexp((double)m, -24) : ldexp((double)(1024u + m), (int)e - 25);
}

static double bf16_mag(unsigned p) {
    unsigned e = p >> 7, m = p & 0x7fu;
    return e == 0 ? ldexp((double)m, -133) : ldexp((double)(128u + m), (int)e - 134);
}

typedef struct {
    double (*mag)(unsigned p);
    unsigned inf;   /* the +infinity pattern; larger magnitudes are NaN */
    unsigned quiet; /* the quiet bit of a NaN */
} fmt16;

static const fmt16 HALF = {half_mag, 0x7c00u, 0x0200u};
static const fmt16 BF16 = {bf16_mag, 0x7f80u, 0x0040u};

static bool ref_isnan(const fmt16 *f, uint16_t p) {
    return (p & 0x7fffu) > f->inf;
}

static double ref_decode(const fmt16 *f, uint16_t p) {
    unsigned mag = p & 0x7fffu;
    double v = mag > f->inf ? NAN : mag == f->inf ? INFINITY : f->mag(mag);
    return (p & 0x8000u) ? -v : v;
}

/* x (not NaN) rounded to nearest, ties to even, overflowing to infinity. */
static uint16_t ref_encode(const fmt16 *f, double x) {
    unsigned sign = signbit(x) ? 0x8000u : 0;
    double a = fabs(x);
    if (a >= f->mag(f->inf))
        return (uint16_t)(sign | f->inf);
    unsigned lo = 0, hi = f->inf; /* mag(lo) <= a < mag(hi) */
    while (hi - lo > 1) {
        unsigned mid = lo + (hi - lo) / 2;
        if (f->mag(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double half = (f->mag(lo) + f->mag(lo + 1)) / 2; /* exact: one more bit than the format */
    unsigned r = a < half ? lo : a > half ? lo + 1 : (lo & 1u) ? lo + 1 : lo;
    return (uint16_t)(sign | r);
}

/* A NaN of the format, for results whose reference is NaN. */
static uint16_t ref_nan(const fmt16 *f) {
    return (uint16_t)(f->inf | f->quiet);
}

/* ---- dtype table ------------------------------------------------------------------------ */

START_TEST(test_dtype_table) {
    static const struct {
        dtype t;
        size_t size;
        const char *name;
        bool is_float;
    } want[] = {
        {DTYPE_F32, 4, "f32", true},   {DTYPE_F64, 8, "f64", true},  {DTYPE_F16, 2, "f16", true},
        {DTYPE_BF16, 2, "bf16", true}, {DTYPE_I32, 4, "i32", false}, {DTYPE_I64, 8, "i64", false},
        {DTYPE_U8, 1, "u8", false},
    };
    ck_assert_int_eq(N_ELEMS(want), DTYPE_COUNT);
    for (size_t i = 0; i < N_ELEMS(want); i++) {
        ck_assert(dtype_valid((int)want[i].t));
        ck_assert_uint_eq(dtype_size(want[i].t), want[i].size);
        ck_assert_str_eq(dtype_name(want[i].t), want[i].name);
        ck_assert(dtype_is_float(want[i].t) == want[i].is_float);
    }
    /* The values are libddp's ddp_dtype and travel on the wire: they must not move. */
    ck_assert_int_eq(DTYPE_F32, 0);
    ck_assert_int_eq(DTYPE_BF16, 3);
    ck_assert_int_eq(DTYPE_U8, 6);
    ck_assert_int_eq(DTYPE_COUNT, 7);
}
END_TEST

START_TEST(test_op_table) {
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    ck_assert_int_eq(N_ELEMS(names), REDUCE_COUNT);
    for (int op = 0; op < REDUCE_COUNT; op++) {
        ck_assert(reduce_op_valid(op));
        ck_assert_str_eq(reduce_op_name((reduce_op)op), names[op]);
    }
    ck_assert_int_eq(REDUCE_SUM, 0);
    ck_assert_int_eq(REDUCE_AVG, 4);
}
END_TEST

START_TEST(test_supported) {
    for (int t = 0; t < DTYPE_COUNT; t++)
        for (int op = 0; op < REDUCE_COUNT; op++) {
            bool want = op != REDUCE_AVG || dtype_is_float((dtype)t);
            ck_assert_msg(reduce_supported((dtype)t, (reduce_op)op) == want, "%s %s", dtype_name((dtype)t),
                          reduce_op_name((reduce_op)op));
        }
    ck_assert(!reduce_supported(DTYPE_I32, REDUCE_AVG));
    ck_assert(!reduce_supported(DTYPE_I64, REDUCE_AVG));
    ck_assert(!reduce_supported(DTYPE_U8, REDUCE_AVG));
    ck_assert(reduce_supported(DTYPE_BF16, REDUCE_AVG));
}
END_TEST

/* ---- f16 -------------------------------------------------------------------------------- */

/* Every half decodes exactly, and converts back to the same bits; NaNs stay NaN. */
START_TEST(test_half_all_patterns) {
    for (unsigned h = 0; h <= 0xffffu; h++) {
        float f = half_to_float((uint16_t)h);
        bool neg = (h & 0x8000u) != 0;
        EXPECT(!signbit(f) == !neg, "half %04x: sign of %a", h, (double)f);
        uint16_t back = float_to_half(f);
        if (ref_isnan(&HALF, (uint16_t)h)) {
            EXPECT(isnan(f), "half %04x: %a is not NaN", h, (double)f);
            EXPECT(ref_isnan(&HALF, back), "half NaN %04x came back as %04x", h, back);
            EXPECT((back & 0x8000u) == (h & 0x8000u), "half NaN %04x: sign lost (%04x)", h, back);
            /* A quiet NaN's top payload bit survives the trip. */
            EXPECT(back & HALF.quiet, "half NaN %04x came back signalling (%04x)", h, back);
            continue;
        }
        double want = ref_decode(&HALF, (uint16_t)h);
        EXPECT(dbits((double)f) == dbits(want), "half %04x: got %a, want %a", h, (double)f, want);
        EXPECT(back == h, "half %04x -> %a -> %04x", h, (double)f, back);
        /* and once more: the trip is idempotent */
        EXPECT(float_to_half(half_to_float(back)) == h, "half %04x: second trip", h);
    }
}
END_TEST

START_TEST(test_half_specials) {
    ck_assert_uint_eq(float_to_half(0.0f), 0x0000);
    ck_assert_uint_eq(float_to_half(-0.0f), 0x8000);
    ck_assert(signbit(half_to_float(0x8000)) && half_to_float(0x8000) == 0.0f);
    ck_assert_uint_eq(float_to_half(INFINITY), 0x7c00);
    ck_assert_uint_eq(float_to_half(-INFINITY), 0xfc00);
    ck_assert(isinf(half_to_float(0x7c00)) && half_to_float(0x7c00) > 0);
    ck_assert(isinf(half_to_float(0xfc00)) && half_to_float(0xfc00) < 0);
    ck_assert_uint_eq(float_to_half(1.0f), 0x3c00);
    ck_assert_uint_eq(float_to_half(-2.0f), 0xc000);
    ck_assert_uint_eq(float_to_half(65504.0f), 0x7bff);
    ck_assert_uint_eq(float_to_half(0.333251953125f), 0x3555);
    ck_assert(half_to_float(0x3555) == 0.333251953125f);
    /* subnormals: 2^-24 is the smallest, 1023 * 2^-24 the largest, 2^-14 the smallest normal */
    ck_assert(half_to_float(0x0001) == 0x1p-24f);
    ck_assert(half_to_float(0x8001) == -0x1p-24f);
    ck_assert(half_to_float(0x03ff) == 1023 * 0x1p-24f);
    ck_assert(half_to_float(0x0400) == 0x1p-14f);
    ck_assert_uint_eq(float_to_half(0x1p-24f), 0x0001);
    ck_assert_uint_eq(float_to_half(1023 * 0x1p-24f), 0x03ff);
    ck_assert_uint_eq(float_to_half(0x1p-14f), 0x0400);
    ck_assert_uint_eq(float_to_half(-0x1p-14f), 0x8400);
    /* the largest subnormal rounds up into the smallest normal */
    ck_assert_uint_eq(float_to_half(1023.5f * 0x1p-24f), 0x0400);
    ck_assert_uint_eq(float_to_half(nextafterf(1023.5f * 0x1p-24f, 0)), 0x03ff);
    /* far below half's range: zero, with the sign kept */
    ck_assert_uint_eq(float_to_half(0x1p-26f), 0x0000);
    ck_assert_uint_eq(float_to_half(FLT_TRUE_MIN), 0x0000);
    ck_assert_uint_eq(float_to_half(-FLT_TRUE_MIN), 0x8000);
    ck_assert_uint_eq(float_to_half(FLT_MIN), 0x0000);
}
END_TEST

/* Halfway between two neighbours rounds to the even one; a float ulp either side does not. */
START_TEST(test_half_round_to_even) {
    for (unsigned p = 0; p < HALF.inf; p++) {
        unsigned even = (p & 1u) ? p + 1 : p;
        double mid = (half_mag(p) + half_mag(p + 1)) / 2;
        float m = (float)mid;
        EXPECT(dbits((double)m) == dbits(mid), "halfway %a is not a float", mid); /* exact in float */
        for (unsigned s = 0; s <= 0x8000u; s += 0x8000u) {
            float sm = s ? -m : m;
            uint16_t got = float_to_half(sm);
            EXPECT(got == (s | even), "halfway %a: got %04x, want %04x", (double)sm, got, s | even);
            got = float_to_half(nextafterf(sm, 0));
            EXPECT(got == (s | p), "below halfway %a: got %04x, want %04x", (double)sm, got, s | p);
            got = float_to_half(nextafterf(sm, s ? -INFINITY : INFINITY));
            EXPECT(got == (s | (p + 1)), "above halfway %a: got %04x, want %04x", (double)sm, got, s | (p + 1));
        }
    }
    /* A few by hand: 1 + 2^-11 is halfway between 1 and 1 + 2^-10. */
    ck_assert_uint_eq(float_to_half(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
    ck_assert_uint_eq(float_to_half(0x1p-25f), 0x0000);     /* halfway 0 and 2^-24 */
    ck_assert_uint_eq(float_to_half(3 * 0x1p-25f), 0x0002); /* halfway 2^-24 and 2^-23 */
    ck_assert_uint_eq(float_to_half(nextafterf(0x1p-25f, 1)), 0x0001);
}
END_TEST

/* 65504 is the largest half; 65520, halfway to 65536, rounds (to even) to infinity. */
START_TEST(test_half_overflow) {
    ck_assert_uint_eq(float_to_half(65520.0f), 0x7c00);
    ck_assert_uint_eq(float_to_half(-65520.0f), 0xfc00);
    ck_assert_uint_eq(float_to_half(nextafterf(65520.0f, 0)), 0x7bff);
    ck_assert_uint_eq(float_to_half(-nextafterf(65520.0f, 0)), 0xfbff);
    ck_assert_uint_eq(float_to_half(65519.0f), 0x7bff);
    ck_assert_uint_eq(float_to_half(65536.0f), 0x7c00);
    ck_assert_uint_eq(float_to_half(1e6f), 0x7c00);
    ck_assert_uint_eq(float_to_half(FLT_MAX), 0x7c00);
    ck_assert_uint_eq(float_to_half(-FLT_MAX), 0xfc00);
}
END_TEST

/* About a million float patterns spread over the whole range against the reference. */
START_TEST(test_half_sweep) {
    for (uint64_t u = 0; u <= UINT32_MAX; u += 4093) {
        float f = bitsf((uint32_t)u);
        uint16_t got = float_to_half(f);
        if (isnan(f)) {
            EXPECT(ref_isnan(&HALF, got) && (got & 0x8000u) == ((u >> 16) & 0x8000u),
                   "float %08x: %04x is not a NaN of the same sign", (unsigned)u, got);
            continue;
        }
        uint16_t want = ref_encode(&HALF, (double)f);
        EXPECT(got == want, "float %08x (%a): got %04x, want %04x", (unsigned)u, (double)f, got, want);
#ifdef __FLT16_MAX__
        _Float16 c = (_Float16)f; /* the compiler's conversion agrees with the reference */
        uint16_t cb;
        memcpy(&cb, &c, sizeof(cb));
        EXPECT(cb == want, "float %08x: _Float16 %04x, reference %04x", (unsigned)u, cb, want);
#endif
    }
}
END_TEST

/* ---- bf16 ------------------------------------------------------------------------------- */

START_TEST(test_bf16_all_patterns) {
    for (unsigned b = 0; b <= 0xffffu; b++) {
        float f = bf16_to_float((uint16_t)b);
        EXPECT(fbits(f) == (uint32_t)b << 16, "bf16 %04x: got %08x", b, fbits(f));
        uint16_t back = float_to_bf16(f);
        if (ref_isnan(&BF16, (uint16_t)b)) {
            EXPECT(isnan(f), "bf16 %04x is not NaN", b);
            EXPECT(back == (b | BF16.quiet), "bf16 NaN %04x came back as %04x, want %04x", b, back, b | BF16.quiet);
            continue;
        }
        double want = ref_decode(&BF16, (uint16_t)b);
        EXPECT(dbits((double)f) == dbits(want), "bf16 %04x: got %a, want %a", b, (double)f, want);
        EXPECT(back == b, "bf16 %04x -> %08x -> %04x", b, fbits(f), back);
    }
}
END_TEST

/* For every bf16 neighbour pair: just below, at and just above halfway, and the extremes
 * of the dropped half-word. */
START_TEST(test_bf16_round_to_even) {
    static const uint32_t lows[] = {0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    for (unsigned b = 0; b <= 0xffffu; b++) {
        if ((b & 0x7fffu) >= BF16.inf)
            continue; /* low bits under an infinity make a NaN */
        for (size_t i = 0; i < N_ELEMS(lows); i++) {
            uint32_t u = (uint32_t)b << 16 | lows[i];
            float f = bitsf(u);
            uint16_t got = float_to_bf16(f), want = ref_encode(&BF16, (double)f);
            EXPECT(got == want, "float %08x: got %04x, want %04x", u, got, want);
        }
    }
    ck_assert_uint_eq(float_to_bf16(bitsf(0x3f808000u)), 0x3f80); /* halfway, down to even */
    ck_assert_uint_eq(float_to_bf16(bitsf(0x3f818000u)), 0x3f82); /* halfway, up to even */
    ck_assert_uint_eq(float_to_bf16(bitsf(0x3f808001u)), 0x3f81);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x3f807fffu)), 0x3f80);
    ck_assert_uint_eq(float_to_bf16(bitsf(0xbf808000u)), 0xbf80);
    ck_assert_uint_eq(float_to_bf16(bitsf(0xbf818000u)), 0xbf82);
    /* the largest bf16 is 0x7f7f; from halfway past it, infinity */
    ck_assert_uint_eq(float_to_bf16(bitsf(0x7f7f7fffu)), 0x7f7f);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x7f7f8000u)), 0x7f80);
    ck_assert_uint_eq(float_to_bf16(FLT_MAX), 0x7f80);
    ck_assert_uint_eq(float_to_bf16(-FLT_MAX), 0xff80);
    ck_assert_uint_eq(float_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(float_to_bf16(-INFINITY), 0xff80);
    ck_assert_uint_eq(float_to_bf16(0.0f), 0x0000);
    ck_assert_uint_eq(float_to_bf16(-0.0f), 0x8000);
    /* subnormals round like everything else; the largest rounds up to FLT_MIN */
    ck_assert_uint_eq(float_to_bf16(FLT_TRUE_MIN), 0x0000);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x00008000u)), 0x0000);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x00018000u)), 0x0002);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x007fffffu)), 0x0080);
}
END_TEST

START_TEST(test_bf16_sweep) {
    for (uint64_t u = 0; u <= UINT32_MAX; u += 4093) {
        float f = bitsf((uint32_t)u);
        uint16_t got = float_to_bf16(f);
        if (isnan(f)) {
            EXPECT(got == (uint16_t)((u >> 16) | BF16.quiet), "float NaN %08x: got %04x", (unsigned)u, got);
            continue;
        }
        uint16_t want = ref_encode(&BF16, (double)f);
        EXPECT(got == want, "float %08x (%a): got %04x, want %04x", (unsigned)u, (double)f, got, want);
    }
}
END_TEST

/* ---- reference reduction ---------------------------------------------------------------- */

/* Are two elements the same? Bits must match, except that any NaN matches any NaN. */
static bool same_elem(dtype t, const void *x, const void *y) {
    switch (t) {
    case DTYPE_F32: {
        float a, b;
        memcpy(&a, x, 4);
        memcpy(&b, y, 4);
        return isnan(a) ? isnan(b) : fbits(a) == fbits(b);
    }
    case DTYPE_F64: {
        double a, b;
        memcpy(&a, x, 8);
        memcpy(&b, y, 8);
        return isnan(a) ? isnan(b) : dbits(a) == dbits(b);
    }
    case DTYPE_F16:
    case DTYPE_BF16: {
        const fmt16 *f = t == DTYPE_F16 ? &HALF : &BF16;
        uint16_t a, b;
        memcpy(&a, x, 2);
        memcpy(&b, y, 2);
        return ref_isnan(f, a) ? ref_isnan(f, b) : a == b;
    }
    default:
        return memcmp(x, y, dtype_size(t)) == 0;
    }
}

static void show_elem(dtype t, const void *x, char *s, size_t len) {
    switch (t) {
    case DTYPE_F32: {
        float a;
        memcpy(&a, x, 4);
        snprintf(s, len, "%a [%08x]", (double)a, fbits(a));
        return;
    }
    case DTYPE_F64: {
        double a;
        memcpy(&a, x, 8);
        snprintf(s, len, "%a [%016llx]", a, (unsigned long long)dbits(a));
        return;
    }
    case DTYPE_F16:
    case DTYPE_BF16: {
        uint16_t a;
        memcpy(&a, x, 2);
        snprintf(s, len, "%a [%04x]", ref_decode(t == DTYPE_F16 ? &HALF : &BF16, a), a);
        return;
    }
    case DTYPE_I32: {
        int32_t a;
        memcpy(&a, x, 4);
        snprintf(s, len, "%ld", (long)a);
        return;
    }
    case DTYPE_I64: {
        int64_t a;
        memcpy(&a, x, 8);
        snprintf(s, len, "%lld", (long long)a);
        return;
    }
    default:
        snprintf(s, len, "%u", (unsigned)*(const uint8_t *)x);
        return;
    }
}

/* out = a op b for one element, the obvious way. AVG reduces as SUM. MIN and MAX keep a
 * unless b compares strictly below (above) it. Integers wrap, computed unsigned. */
static void ref_elem(dtype t, reduce_op op, void *out, const void *pa, const void *pb) {
    bool keep_a = true;
    switch (t) {
    case DTYPE_F32: {
        float a, b, r;
        memcpy(&a, pa, 4);
        memcpy(&b, pb, 4);
        switch (op) {
        case REDUCE_PROD:
            r = a * b;
            break;
        case REDUCE_MIN:
            r = b < a ? b : a;
            break;
        case REDUCE_MAX:
            r = b > a ? b : a;
            break;
        default:
            r = a + b;
        }
        memcpy(out, &r, 4);
        return;
    }
    case DTYPE_F64: {
        double a, b, r;
        memcpy(&a, pa, 8);
        memcpy(&b, pb, 8);
        switch (op) {
        case REDUCE_PROD:
            r = a * b;
            break;
        case REDUCE_MIN:
            r = b < a ? b : a;
            break;
        case REDUCE_MAX:
            r = b > a ? b : a;
            break;
        default:
            r = a + b;
        }
        memcpy(out, &r, 8);
        return;
    }
    case DTYPE_F16:
    case DTYPE_BF16: {
        const fmt16 *f = t == DTYPE_F16 ? &HALF : &BF16;
        uint16_t a, b, r;
        memcpy(&a, pa, 2);
        memcpy(&b, pb, 2);
        double x = ref_decode(f, a), y = ref_decode(f, b), v;
        switch (op) {
        case REDUCE_MIN:
            keep_a = !(y < x);
            memcpy(out, keep_a ? pa : pb, 2);
            return;
        case REDUCE_MAX:
            keep_a = !(y > x);
            memcpy(out, keep_a ? pa : pb, 2);
            return;
        case REDUCE_PROD:
            v = x * y; /* exact: two 11-bit (8-bit) significands */
            break;
        default:
            v = x + y;
        }
        r = isnan(v) ? ref_nan(f) : ref_encode(f, v);
        memcpy(out, &r, 2);
        return;
    }
    case DTYPE_I32: {
        uint32_t a, b, r;
        int32_t sa, sb;
        memcpy(&a, pa, 4);
        memcpy(&b, pb, 4);
        memcpy(&sa, pa, 4);
        memcpy(&sb, pb, 4);
        switch (op) {
        case REDUCE_PROD:
            r = a * b;
            break;
        case REDUCE_MIN:
            r = sb < sa ? b : a;
            break;
        case REDUCE_MAX:
            r = sb > sa ? b : a;
            break;
        default:
            r = a + b;
        }
        memcpy(out, &r, 4);
        return;
    }
    case DTYPE_I64: {
        uint64_t a, b, r;
        int64_t sa, sb;
        memcpy(&a, pa, 8);
        memcpy(&b, pb, 8);
        memcpy(&sa, pa, 8);
        memcpy(&sb, pb, 8);
        switch (op) {
        case REDUCE_PROD:
            r = a * b;
            break;
        case REDUCE_MIN:
            r = sb < sa ? b : a;
            break;
        case REDUCE_MAX:
            r = sb > sa ? b : a;
            break;
        default:
            r = a + b;
        }
        memcpy(out, &r, 8);
        return;
    }
    default: {
        unsigned a = *(const uint8_t *)pa, b = *(const uint8_t *)pb, r;
        switch (op) {
        case REDUCE_PROD:
            r = a * b;
            break;
        case REDUCE_MIN:
            r = b < a ? b : a;
            break;
        case REDUCE_MAX:
            r = b > a ? b : a;
            break;
        default:
            r = a + b;
        }
        *(uint8_t *)out = (uint8_t)(r & 0xffu);
        return;
    }
    }
}

/* ---- test data -------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rng(void) {
    /* xorshift64*: deterministic, so a failure reproduces */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* A value that makes sums and products interesting: small multiples of 1/8 either side of
 * zero, so that results are mostly finite and MIN/MAX meet ties. */
static double moderate(void) {
    return ((double)(rng() % 65) - 32) / 8;
}

static const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 0.5, 65504.0, 1e-7, -3e38};

/* Fills element i of buf with an awkward value: a special, a moderate value or raw bits. */
static void fill_elem(dtype t, void *buf, size_t i) {
    uint64_t r = rng(), kind = r % 8;
    char *p = (char *)buf + i * dtype_size(t);
    double v = kind == 0 ? specials[(r >> 8) % N_ELEMS(specials)] : moderate();
    bool raw = kind >= 5;
    uint64_t bits = rng();
    switch (t) {
    case DTYPE_F32: {
        float f = (float)v;
        if (raw)
            memcpy(p, &bits, 4);
        else
            memcpy(p, &f, 4);
        return;
    }
    case DTYPE_F64:
        if (raw)
            memcpy(p, &bits, 8);
        else
            memcpy(p, &v, 8);
        return;
    case DTYPE_F16:
    case DTYPE_BF16: {
        const fmt16 *f = t == DTYPE_F16 ? &HALF : &BF16;
        uint16_t h = raw ? (uint16_t)bits : isnan(v) ? ref_nan(f) : ref_encode(f, v);
        memcpy(p, &h, 2);
        return;
    }
    case DTYPE_I32: {
        static const uint32_t ext[] = {0x7fffffffu, 0x80000000u, 0xffffffffu, 0, 1, 2, 0x10000u};
        uint32_t x = raw ? (uint32_t)bits : kind == 0 ? ext[(r >> 8) % N_ELEMS(ext)] : (uint32_t)(r >> 32) % 19 - 9;
        memcpy(p, &x, 4);
        return;
    }
    case DTYPE_I64: {
        static const uint64_t ext[] = {0x7fffffffffffffffull, 0x8000000000000000ull, ~0ull, 0, 1, 2, 0x100000000ull};
        uint64_t x = raw ? bits : kind == 0 ? ext[(r >> 8) % N_ELEMS(ext)] : (r >> 32) % 19 - 9;
        memcpy(p, &x, 8);
        return;
    }
    default:
        *(uint8_t *)p = raw ? (uint8_t)bits : kind == 0 ? (uint8_t)(r >> 8) % 2 * 255 : (uint8_t)((r >> 32) % 20);
        return;
    }
}

/* ---- reduce_into / reduce_pair against the reference ------------------------------------ */

static const size_t lengths[] = {0, 1, 3, 17, 1000, 4099};

/* Start offsets in elements of acc (out) and in (b): aligned, both shifted, and shifted
 * apart so that no common peel aligns both. */
static const struct { size_t a, b, out; } offsets[] = {{0, 0, 0}, {1, 1, 1}, {0, 1, 1}, {1, 0, 0}, {1, 1, 0}};

#define GUARD 2 /* elements either side of every array, which must not change */

static void check_range(dtype t, reduce_op op, const char *what, size_t n, size_t off, const char *got, const char *a,
                        const char *b, size_t off_a, size_t off_b) {
    size_t es = dtype_size(t);
    char sg[80], sw[80], sa[80], sb[80];
    unsigned char want[8];
    for (size_t i = 0; i < n; i++) {
        const char *pa = a + (off_a + i) * es, *pb = b + (off_b + i) * es, *pg = got + (off + i) * es;
        ref_elem(t, op, want, pa, pb);
        if (!same_elem(t, pg, want)) {
            show_elem(t, pg, sg, sizeof(sg));
            show_elem(t, want, sw, sizeof(sw));
            show_elem(t, pa, sa, sizeof(sa));
            show_elem(t, pb, sb, sizeof(sb));
            ck_abort_msg("%s %s %s n=%zu [%zu]: %s op %s = %s, want %s", what, dtype_name(t), reduce_op_name(op), n, i,
                         sa, sb, sg, sw);
        }
    }
}

/* The elements of buf outside [off, off + n) still equal those of orig. */
static void check_guards(dtype t, const char *what, size_t n, size_t off, const char *buf, const char *orig,
                         size_t total) {
    size_t es = dtype_size(t);
    EXPECT(memcmp(buf, orig, off * es) == 0, "%s %s n=%zu: wrote before the start", what, dtype_name(t), n);
    EXPECT(memcmp(buf + (off + n) * es, orig + (off + n) * es, (total - off - n) * es) == 0,
           "%s %s n=%zu: wrote past the end", what, dtype_name(t), n);
}

/* One (dtype, op) per loop iteration. */
START_TEST(test_reduce_vs_reference) {
    dtype t = (dtype)(_i / REDUCE_COUNT);
    reduce_op op = (reduce_op)(_i % REDUCE_COUNT);
    size_t es = dtype_size(t);
    for (size_t li = 0; li < N_ELEMS(lengths); li++)
        for (size_t oi = 0; oi < N_ELEMS(offsets); oi++) {
            size_t n = lengths[li], total = n + 1 + GUARD;
            rng_state = 0x9e3779b97f4a7c15ull ^ ((uint64_t)_i << 40 | li << 8 | oi);
            char *a = malloc(total * es), *b = malloc(total * es), *a0 = malloc(total * es), *b0 = malloc(total * es),
                 *out = malloc(total * es), *out0 = malloc(total * es);
            ck_assert(a && b && a0 && b0 && out && out0);
            for (size_t i = 0; i < total; i++) {
                fill_elem(t, a, i);
                fill_elem(t, b, i);
                fill_elem(t, out, i);
            }
            memcpy(a0, a, total * es);
            memcpy(b0, b, total * es);
            memcpy(out0, out, total * es);
            size_t oa = offsets[oi].a, ob = offsets[oi].b, oo = offsets[oi].out;

            /* out = a op b, out apart from both */
            reduce_pair(out + oo * es, a + oa * es, b + ob * es, n, t, op);
            check_range(t, op, "reduce_pair", n, oo, out, a0, b0, oa, ob);
            check_guards(t, "reduce_pair out", n, oo, out, out0, total);
            EXPECT(memcmp(a, a0, total * es) == 0 && memcmp(b, b0, total * es) == 0, "reduce_pair wrote an input");

            /* out = a op b with out == a */
            reduce_pair(a + oa * es, a + oa * es, b + ob * es, n, t, op);
            check_range(t, op, "reduce_pair (out == a)", n, oa, a, a0, b0, oa, ob);
            check_guards(t, "reduce_pair (out == a)", n, oa, a, a0, total);
            EXPECT(memcmp(b, b0, total * es) == 0, "reduce_pair (out == a) wrote b");

            /* out = a op b with out == b: reduce.h promises only out == a, but the ring
             * (work == own) and the chain's root reduce this way, so pin it down. */
            memcpy(a, a0, total * es);
            reduce_pair(b + ob * es, a + oa * es, b + ob * es, n, t, op);
            check_range(t, op, "reduce_pair (out == b)", n, ob, b, a0, b0, oa, ob);
            check_guards(t, "reduce_pair (out == b)", n, ob, b, b0, total);
            EXPECT(memcmp(a, a0, total * es) == 0, "reduce_pair (out == b) wrote a");
            memcpy(b, b0, total * es);

            /* acc op= in */
            memcpy(a, a0, total * es);
            reduce_into(a + oa * es, b + ob * es, n, t, op);
            check_range(t, op, "reduce_into", n, oa, a, a0, b0, oa, ob);
            check_guards(t, "reduce_into", n, oa, a, a0, total);
            EXPECT(memcmp(b, b0, total * es) == 0, "reduce_into wrote in");

            /* Folding the same input in again, as a collective folds one rank after another. */
            memcpy(out, a, total * es);
            reduce_into(a + oa * es, b + ob * es, n, t, op);
            check_range(t, op, "reduce_into (second)", n, oa, a, out, b0, oa, ob);

            free(a);
            free(b);
            free(a0);
            free(b0);
            free(out);
            free(out0);
        }
}
END_TEST

/* ---- MIN and MAX of floats: signed zeros and NaN ---------------------------------------- */

/* Stores v as element i of a float buffer of type t. */
static void put(dtype t, void *buf, size_t i, double v) {
    switch (t) {
    case DTYPE_F32: {
        float f = (float)v;
        memcpy((char *)buf + i * 4, &f, 4);
        return;
    }
    case DTYPE_F64:
        memcpy((char *)buf + i * 8, &v, 8);
        return;
    default: {
        const fmt16 *f = t == DTYPE_F16 ? &HALF : &BF16;
        uint16_t h = isnan(v) ? ref_nan(f) : ref_encode(f, v);
        memcpy((char *)buf + i * 2, &h, 2);
        return;
    }
    }
}

static const dtype float_types[] = {DTYPE_F32, DTYPE_F64, DTYPE_F16, DTYPE_BF16};

/* Each case: acc, in, and which one MIN and MAX keep (0 for acc, 1 for in). */
static const struct {
    double acc, in;
    int min_keeps, max_keeps;
} minmax_cases[] = {
    {0.0, -0.0, 0, 0}, /* zeros compare equal: acc stays, with its sign */
    {-0.0, 0.0, 0, 0},
    {NAN, 1.0, 0, 0}, /* NaN compares false: the accumulated NaN stays */
    {1.0, NAN, 0, 0}, /* and an incoming NaN is ignored */
    {NAN, NAN, 0, 0},
    {1.0, 2.0, 0, 1},
    {2.0, 1.0, 1, 0},
    {-INFINITY, INFINITY, 0, 1},
    {INFINITY, -INFINITY, 1, 0},
    {-1.5, -1.5, 0, 0},
    {-0.0, -1.0, 1, 0},
    {0.0, 0.001, 0, 1},
};

START_TEST(test_minmax_float_semantics) {
    /* The pattern repeats over 7 * n_cases + 3 elements so the vector loop meets it too. */
    size_t nc = N_ELEMS(minmax_cases), n = 7 * nc + 3;
    for (size_t ti = 0; ti < N_ELEMS(float_types); ti++) {
        dtype t = float_types[ti];
        size_t es = dtype_size(t);
        char *acc = malloc(n * es), *in = malloc(n * es), *got = malloc(n * es);
        ck_assert(acc && in && got);
        for (size_t i = 0; i < n; i++) {
            put(t, acc, i, minmax_cases[i % nc].acc);
            put(t, in, i, minmax_cases[i % nc].in);
        }
        for (int op = REDUCE_MIN; op <= REDUCE_MAX; op++) {
            for (int via_pair = 0; via_pair < 2; via_pair++) {
                if (via_pair) {
                    reduce_pair(got, acc, in, n, t, (reduce_op)op);
                } else {
                    memcpy(got, acc, n * es);
                    reduce_into(got, in, n, t, (reduce_op)op);
                }
                for (size_t i = 0; i < n; i++) {
                    int keeps = op == REDUCE_MIN ? minmax_cases[i % nc].min_keeps : minmax_cases[i % nc].max_keeps;
                    const char *want = (keeps ? in : acc) + i * es;
                    /* exact bits: the kept operand, sign of zero and NaN payload included */
                    EXPECT(memcmp(got + i * es, want, es) == 0, "%s %s %s: case %zu keeps the wrong operand",
                           via_pair ? "reduce_pair" : "reduce_into", dtype_name(t), reduce_op_name((reduce_op)op),
                           i % nc);
                }
            }
        }
        free(acc);
        free(in);
        free(got);
    }
}
END_TEST

/* ---- reduce_finish ---------------------------------------------------------------------- */

START_TEST(test_finish_avg_f32_f64) {
    float f[] = {3.0f, -6.0f, 1.0f, 0.0f, -0.0f, INFINITY, NAN, 1e-45f};
    float fw[] = {1.0f, -2.0f, 1.0f / 3.0f, 0.0f, -0.0f, INFINITY, NAN, 0.0f};
    reduce_finish(f, N_ELEMS(f), DTYPE_F32, REDUCE_AVG, 3);
    for (size_t i = 0; i < N_ELEMS(f); i++)
        ck_assert_msg(same_elem(DTYPE_F32, &f[i], &fw[i]), "f32 [%zu]: %a, want %a", i, (double)f[i], (double)fw[i]);

    double d[] = {4.0, -6.0, 1.0, 0.0, -0.0, -INFINITY, NAN, DBL_MAX};
    double dw[] = {1.0, -1.5, 0.25, 0.0, -0.0, -INFINITY, NAN, DBL_MAX / 4};
    reduce_finish(d, N_ELEMS(d), DTYPE_F64, REDUCE_AVG, 4);
    for (size_t i = 0; i < N_ELEMS(d); i++)
        ck_assert_msg(same_elem(DTYPE_F64, &d[i], &dw[i]), "f64 [%zu]: %a, want %a", i, d[i], dw[i]);

    /* a long buffer, at an odd offset, against the obvious loop */
    size_t n = 4099;
    float *x = malloc((n + 2) * sizeof(float)), *w = malloc((n + 2) * sizeof(float));
    ck_assert(x && w);
    rng_state = 42;
    for (size_t i = 0; i < n + 2; i++)
        fill_elem(DTYPE_F32, x, i);
    memcpy(w, x, (n + 2) * sizeof(float));
    for (size_t i = 1; i <= n; i++)
        w[i] /= 7.0f;
    reduce_finish(x + 1, n, DTYPE_F32, REDUCE_AVG, 7);
    for (size_t i = 0; i < n + 2; i++)
        EXPECT(same_elem(DTYPE_F32, &x[i], &w[i]), "f32 x 4099 [%zu]: %a, want %a", i, (double)x[i], (double)w[i]);
    free(x);
    free(w);
}
END_TEST

/* Every f16 and bf16 value divided by a few divisors, against the correctly rounded quotient. */
START_TEST(test_finish_avg_16bit_all) {
    static const int divisors[] = {1, 2, 3, 7, 8, 1000};
    uint16_t *buf = malloc(65536 * sizeof(uint16_t));
    ck_assert_ptr_nonnull(buf);
    for (int k = 0; k < 2; k++) {
        dtype t = k ? DTYPE_BF16 : DTYPE_F16;
        const fmt16 *f = k ? &BF16 : &HALF;
        for (size_t di = 0; di < N_ELEMS(divisors); di++) {
            for (unsigned h = 0; h <= 0xffffu; h++)
                buf[h] = (uint16_t)h;
            reduce_finish(buf, 65536, t, REDUCE_AVG, divisors[di]);
            for (unsigned h = 0; h <= 0xffffu; h++) {
                double q = ref_decode(f, (uint16_t)h) / divisors[di];
                uint16_t want = isnan(q) ? ref_nan(f) : ref_encode(f, q);
                EXPECT(same_elem(t, &buf[h], &want), "%s %04x / %d: got %04x, want %04x", dtype_name(t), h,
                       divisors[di], buf[h], want);
            }
        }
    }
    free(buf);
}
END_TEST

/* Only AVG finishes, and only floats are divided. */
START_TEST(test_finish_other_ops_untouched) {
    for (int t = 0; t < DTYPE_COUNT; t++)
        for (int op = 0; op < REDUCE_COUNT; op++) {
            if (op == REDUCE_AVG && dtype_is_float((dtype)t))
                continue;
            size_t es = dtype_size((dtype)t), n = 33;
            char *x = malloc(n * es), *x0 = malloc(n * es);
            ck_assert(x && x0);
            rng_state = 7 + (uint64_t)t;
            for (size_t i = 0; i < n; i++)
                fill_elem((dtype)t, x, i);
            memcpy(x0, x, n * es);
            reduce_finish(x, n, (dtype)t, (reduce_op)op, 3);
            ck_assert_msg(memcmp(x, x0, n * es) == 0, "reduce_finish changed %s %s", dtype_name((dtype)t),
                          reduce_op_name((reduce_op)op));
            free(x);
            free(x0);
        }
    /* n = 0 touches nothing */
    float g = 6.0f;
    reduce_finish(&g, 0, DTYPE_F32, REDUCE_AVG, 3);
    ck_assert(g == 6.0f);
    /* divisor 1, as a world of one uses it, changes nothing (not even -0 or a NaN's sign) */
    float h[] = {-0.0f, 5.0f, -NAN};
    uint32_t h0[3] = {fbits(h[0]), fbits(h[1]), fbits(h[2])};
    reduce_finish(h, 3, DTYPE_F32, REDUCE_AVG, 1);
    ck_assert_uint_eq(fbits(h[0]), h0[0]);
    ck_assert_uint_eq(fbits(h[1]), h0[1]);
    ck_assert(isnan(h[2]) && signbit(h[2]));
}
END_TEST

/* ---- limits: integer wrap-around -------------------------------------------------------- */

/* Runs reduce_into and reduce_pair on a repeating (acc, in) pattern long enough for the
 * vector loop and checks every element against want. */
static void check_int_pattern(dtype t, reduce_op op, const void *acc, const void *in, const void *want, size_t nc) {
    size_t es = dtype_size(t), n = 9 * nc + 5;
    char *x = malloc(n * es), *y = malloc(n * es), *o = malloc(n * es);
    ck_assert(x && y && o);
    for (size_t i = 0; i < n; i++) {
        memcpy(x + i * es, (const char *)acc + i % nc * es, es);
        memcpy(y + i * es, (const char *)in + i % nc * es, es);
    }
    reduce_pair(o, x, y, n, t, op);
    reduce_into(x, y, n, t, op);
    char sg[80], sw[80];
    for (size_t i = 0; i < n; i++) {
        const char *w = (const char *)want + i % nc * es;
        for (int k = 0; k < 2; k++) {
            const char *g = (k ? o : x) + i * es;
            if (memcmp(g, w, es) != 0) {
                show_elem(t, g, sg, sizeof(sg));
                show_elem(t, w, sw, sizeof(sw));
                ck_abort_msg("%s %s %s case %zu: got %s, want %s", k ? "reduce_pair" : "reduce_into", dtype_name(t),
                             reduce_op_name(op), i % nc, sg, sw);
            }
        }
    }
    free(x);
    free(y);
    free(o);
}

START_TEST(test_wrap_i32) {
    const int32_t a[] = {INT32_MAX, INT32_MIN, -1, INT32_MAX, INT32_MIN, 0x10000, 46341, 7};
    const int32_t b[] = {1, -1, INT32_MIN, INT32_MAX, INT32_MIN, 0x10000, 46341, -3};
    const int32_t sum[] = {INT32_MIN, INT32_MAX, INT32_MAX, -2, 0, 0x20000, 92682, 4};
    /* products modulo 2^32: INT32_MIN * -1 is INT32_MIN, 46341^2 = 2^31 + 4633 */
    const int32_t prod[] = {INT32_MAX, INT32_MIN, INT32_MIN, 1, 0, 0, INT32_MIN + 4633, -21};
    const int32_t mn[] = {1, INT32_MIN, INT32_MIN, INT32_MAX, INT32_MIN, 0x10000, 46341, -3};
    const int32_t mx[] = {INT32_MAX, -1, -1, INT32_MAX, INT32_MIN, 0x10000, 46341, 7};
    ck_assert_int_eq(N_ELEMS(a), N_ELEMS(sum));
    check_int_pattern(DTYPE_I32, REDUCE_SUM, a, b, sum, N_ELEMS(a));
    check_int_pattern(DTYPE_I32, REDUCE_PROD, a, b, prod, N_ELEMS(a));
    check_int_pattern(DTYPE_I32, REDUCE_MIN, a, b, mn, N_ELEMS(a));
    check_int_pattern(DTYPE_I32, REDUCE_MAX, a, b, mx, N_ELEMS(a));
}
END_TEST

START_TEST(test_wrap_i64) {
    const int64_t a[] = {INT64_MAX, INT64_MIN, -1, INT64_MAX, INT64_MIN, INT64_C(0x100000000), INT64_C(3037000500), 7};
    const int64_t b[] = {1, -1, INT64_MIN, INT64_MAX, INT64_MIN, INT64_C(0x100000000), INT64_C(3037000500), -3};
    const int64_t sum[] = {INT64_MIN, INT64_MAX, INT64_MAX, -2, 0, INT64_C(0x200000000), INT64_C(6074001000), 4};
    /* 3037000500^2 = 9223372037000250000 = 2^63 + 145474192 */
    const int64_t prod[] = {INT64_MAX, INT64_MIN, INT64_MIN, 1, 0, 0, INT64_MIN + INT64_C(145474192), -21};
    const int64_t mn[] = {1, INT64_MIN, INT64_MIN, INT64_MAX, INT64_MIN, INT64_C(0x100000000), INT64_C(3037000500), -3};
    const int64_t mx[] = {INT64_MAX, -1, -1, INT64_MAX, INT64_MIN, INT64_C(0x100000000), INT64_C(3037000500), 7};
    check_int_pattern(DTYPE_I64, REDUCE_SUM, a, b, sum, N_ELEMS(a));
    check_int_pattern(DTYPE_I64, REDUCE_PROD, a, b, prod, N_ELEMS(a));
    check_int_pattern(DTYPE_I64, REDUCE_MIN, a, b, mn, N_ELEMS(a));
    check_int_pattern(DTYPE_I64, REDUCE_MAX, a, b, mx, N_ELEMS(a));
}
END_TEST

START_TEST(test_wrap_u8) {
    const uint8_t a[] = {255, 200, 255, 16, 15, 0, 128, 1};
    const uint8_t b[] = {1, 100, 255, 16, 17, 255, 2, 1};
    const uint8_t sum[] = {0, 44, 254, 32, 32, 255, 130, 2};
    const uint8_t prod[] = {255, 32, 1, 0, 255, 0, 0, 1}; /* 200 * 100 = 20000 = 78 * 256 + 32 */
    const uint8_t mn[] = {1, 100, 255, 16, 15, 0, 2, 1};
    const uint8_t mx[] = {255, 200, 255, 16, 17, 255, 128, 1};
    check_int_pattern(DTYPE_U8, REDUCE_SUM, a, b, sum, N_ELEMS(a));
    check_int_pattern(DTYPE_U8, REDUCE_PROD, a, b, prod, N_ELEMS(a));
    check_int_pattern(DTYPE_U8, REDUCE_MIN, a, b, mn, N_ELEMS(a));
    check_int_pattern(DTYPE_U8, REDUCE_MAX, a, b, mx, N_ELEMS(a));
}
END_TEST

/* Sums that leave the 16-bit ranges: to infinity, not to garbage; and inf - inf is NaN. */
START_TEST(test_16bit_overflow_in_kernels) {
    uint16_t a[] = {0x7bff, 0x7bff, 0xfbff, 0x7c00, 0x3c00, 0x0001};
    uint16_t b[] = {0x7bff, 0x0001, 0xfbff, 0xfc00, 0x0001, 0x8001};
    /* 65504 + 65504 = inf; 65504 + 2^-24 = 65504; -inf; NaN; 1 + 2^-24 = 1; 2^-24 - 2^-24 = +0 */
    uint16_t want[] = {0x7c00, 0x7bff, 0xfc00, 0x7e00, 0x3c00, 0x0000};
    reduce_into(a, b, N_ELEMS(a), DTYPE_F16, REDUCE_SUM);
    for (size_t i = 0; i < N_ELEMS(a); i++)
        ck_assert_msg(same_elem(DTYPE_F16, &a[i], &want[i]), "f16 [%zu]: %04x, want %04x", i, a[i], want[i]);
    /* 256 * 256 = 65536 overflows half */
    uint16_t p[] = {0x5c00, 0x5bff};
    uint16_t q[] = {0x5c00, 0x5c00};
    reduce_into(p, q, 2, DTYPE_F16, REDUCE_PROD);
    ck_assert_uint_eq(p[0], 0x7c00);
    ck_assert_uint_eq(p[1], 0x7bff); /* 255.875 * 256 = 65504 exactly */
    /* bf16: the largest finite doubled is infinity */
    uint16_t c[] = {0x7f7f, 0xff7f}, d[] = {0x7f7f, 0xff7f};
    reduce_into(c, d, 2, DTYPE_BF16, REDUCE_SUM);
    ck_assert_uint_eq(c[0], 0x7f80);
    ck_assert_uint_eq(c[1], 0xff80);
}
END_TEST

/* ---- malformed -------------------------------------------------------------------------- */

START_TEST(test_invalid_values) {
    static const int bad_types[] = {-1, DTYPE_COUNT, 100, INT_MAX, INT_MIN};
    static const int bad_ops[] = {-1, REDUCE_COUNT, 100, INT_MAX, INT_MIN};
    for (size_t i = 0; i < N_ELEMS(bad_types); i++) {
        ck_assert(!dtype_valid(bad_types[i]));
        for (int op = 0; op < REDUCE_COUNT; op++)
            ck_assert(!reduce_supported((dtype)bad_types[i], (reduce_op)op));
    }
    for (size_t i = 0; i < N_ELEMS(bad_ops); i++) {
        ck_assert(!reduce_op_valid(bad_ops[i]));
        for (int t = 0; t < DTYPE_COUNT; t++)
            ck_assert(!reduce_supported((dtype)t, (reduce_op)bad_ops[i]));
    }
    ck_assert_str_eq(dtype_name((dtype)DTYPE_COUNT), "unknown");
    ck_assert_str_eq(dtype_name((dtype)100), "unknown");
    ck_assert_str_eq(reduce_op_name((reduce_op)REDUCE_COUNT), "unknown");
    ck_assert_str_eq(reduce_op_name((reduce_op)100), "unknown");
}
END_TEST

/* An unknown dtype reduces nothing and finishes nothing. */
START_TEST(test_invalid_dtype_is_noop) {
    uint64_t acc[4] = {1, 2, 3, 4}, in[4] = {5, 6, 7, 8}, out[4] = {9, 9, 9, 9};
    const uint64_t acc0[4] = {1, 2, 3, 4}, in0[4] = {5, 6, 7, 8}, out0[4] = {9, 9, 9, 9};
    for (int op = 0; op < REDUCE_COUNT; op++) {
        reduce_into(acc, in, 4, (dtype)DTYPE_COUNT, (reduce_op)op);
        reduce_pair(out, acc, in, 4, (dtype)100, (reduce_op)op);
        reduce_finish(acc, 4, (dtype)DTYPE_COUNT, (reduce_op)op, 2);
    }
    ck_assert_mem_eq(acc, acc0, sizeof(acc));
    ck_assert_mem_eq(in, in0, sizeof(in));
    ck_assert_mem_eq(out, out0, sizeof(out));
}
END_TEST

/* NaNs of every shape stay NaN through the conversions: a signalling NaN whose payload
 * lives only in the low bits must not truncate to infinity. */
START_TEST(test_nan_payloads) {
    static const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7f801fffu, 0x7fc00000u, 0xffc00000u,
                                    0x7fffffffu, 0xffffffffu, 0x7f810000u, 0x7f80ffffu, 0x7fa00000u};
    for (size_t i = 0; i < N_ELEMS(nans); i++) {
        float f = bitsf(nans[i]);
        ck_assert(isnan(f));
        bool neg = (nans[i] >> 31) != 0;
        uint16_t h = float_to_half(f), b = float_to_bf16(f);
        ck_assert_msg(ref_isnan(&HALF, h) && (h & HALF.quiet), "float %08x -> half %04x", nans[i], h);
        ck_assert_msg(((h & 0x8000u) != 0) == neg, "float %08x -> half %04x: sign", nans[i], h);
        ck_assert_msg(ref_isnan(&BF16, b) && (b & BF16.quiet), "float %08x -> bf16 %04x", nans[i], b);
        ck_assert_msg(((b & 0x8000u) != 0) == neg, "float %08x -> bf16 %04x: sign", nans[i], b);
        ck_assert(isnan(half_to_float(h)) && isnan(bf16_to_float(b)));
    }
    ck_assert_uint_eq(float_to_bf16(bitsf(0x7f800001u)), 0x7fc0);
    ck_assert_uint_eq(float_to_bf16(bitsf(0x7f810000u)), 0x7fc1); /* payload kept, quieted */
    ck_assert_uint_eq(float_to_bf16(bitsf(0x7fffffffu)), 0x7fff); /* no carry out of the NaN */
    ck_assert_uint_eq(float_to_bf16(bitsf(0xffffffffu)), 0xffff);
    /* half signalling NaNs widen to NaN floats */
    ck_assert(isnan(half_to_float(0x7c01)));
    ck_assert(isnan(half_to_float(0xfd00)) && signbit(half_to_float(0xfd00)));
    /* NaN in the 16-bit kernels' SUM and PROD gives a NaN, whatever the other operand */
    uint16_t a[] = {0x7c01, 0x3c00, 0x7e00, 0x7c00}, b[] = {0x3c00, 0xfe00, 0x7d00, 0x0000};
    uint16_t c[4];
    reduce_pair(c, a, b, 4, DTYPE_F16, REDUCE_SUM);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(ref_isnan(&HALF, c[i]), "f16 sum [%d] = %04x", i, c[i]);
    reduce_pair(c, a, b, 4, DTYPE_F16, REDUCE_PROD);
    for (int i = 0; i < 4; i++) /* inf * 0 is NaN too */
        ck_assert_msg(ref_isnan(&HALF, c[i]), "f16 prod [%d] = %04x", i, c[i]);
    uint16_t x[] = {0x7f81, 0x3f80}, y[] = {0x3f80, 0xffc0}, z[2];
    reduce_pair(z, x, y, 2, DTYPE_BF16, REDUCE_SUM);
    ck_assert(ref_isnan(&BF16, z[0]) && ref_isnan(&BF16, z[1]));
}
END_TEST

/* n = 0 reads and writes nothing: pointers just past the end of a buffer are fine. */
START_TEST(test_zero_length) {
    for (int t = 0; t < DTYPE_COUNT; t++)
        for (int op = 0; op < REDUCE_COUNT; op++) {
            size_t es = dtype_size((dtype)t);
            char *p = malloc(es), *q = malloc(es);
            ck_assert(p && q);
            reduce_into(p + es, q + es, 0, (dtype)t, (reduce_op)op);
            reduce_pair(p + es, p + es, q + es, 0, (dtype)t, (reduce_op)op);
            reduce_finish(p + es, 0, (dtype)t, (reduce_op)op, 2);
            free(p);
            free(q);
        }
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("reduce");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed");
    TCase *all[] = {core, limits, bad};
    for (int i = 0; i < 3; i++) {
        tcase_set_timeout(all[i], 120); /* the sweeps take seconds under the sanitizers */
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_dtype_table);
    tcase_add_test(core, test_op_table);
    tcase_add_test(core, test_supported);
    tcase_add_test(core, test_half_all_patterns);
    tcase_add_test(core, test_half_specials);
    tcase_add_test(core, test_half_round_to_even);
    tcase_add_test(core, test_bf16_all_patterns);
    tcase_add_test(core, test_bf16_round_to_even);
    tcase_add_loop_test(core, test_reduce_vs_reference, 0, DTYPE_COUNT * REDUCE_COUNT);
    tcase_add_test(core, test_minmax_float_semantics);
    tcase_add_test(core, test_finish_avg_f32_f64);
    tcase_add_test(core, test_finish_avg_16bit_all);
    tcase_add_test(core, test_finish_other_ops_untouched);
    tcase_add_test(limits, test_half_overflow);
    tcase_add_test(limits, test_half_sweep);
    tcase_add_test(limits, test_bf16_sweep);
    tcase_add_test(limits, test_wrap_i32);
    tcase_add_test(limits, test_wrap_i64);
    tcase_add_test(limits, test_wrap_u8);
    tcase_add_test(limits, test_16bit_overflow_in_kernels);
    tcase_add_test(bad, test_invalid_values);
    tcase_add_test(bad, test_invalid_dtype_is_noop);
    tcase_add_test(bad, test_nan_payloads);
    tcase_add_test(bad, test_zero_length);
    return check_main(s, argc, argv);
}
