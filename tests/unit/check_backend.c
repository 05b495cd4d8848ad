/* The CPU backend's ops, checked against finite differences (every layer and loss), and
 * the optimizer and accounting against their definitions. The CUDA backend is tested
 * against these same ops. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/check_main.h"
#include "worker/trainer/backend.h"
#include "worker/trainer/blas_kernels.h"
#include "worker/trainer/model.h"
#include "worker/trainer/rng.h"

static backend b;

static void setup(void) {
    ck_assert_int_eq(backend_cpu_open(&b, 1), 0);
}

static void teardown(void) {
    backend_close(&b);
}

static void fill(float *x, size_t n, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * rng_float(&r) - 1.0f;
}

/* A scalar function of the op's output: L = sum(out * w), so dL/dout = w. */
static double dot(const float *a, const float *w, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * w[i];
    return s;
}

/* Central difference of L with respect to x[i], in double around a float. */
#define EPS 1e-2f

static void expect_close(double analytic, double numeric, const char *what, size_t i) {
    double tol = 2e-3 * fmax(1.0, fabs(numeric));
    ck_assert_msg(fabs(analytic - numeric) <= tol, "%s[%zu]: analytic %.6f, numeric %.6f", what, i, analytic, numeric);
}

START_TEST(test_linear_gradients) {
    enum { B = 3, IC = 5, OC = 4 };
    float inp[B * IC], weight[OC * IC], bias[OC], out[B * OC], w[B * OC];
    float dinp[B * IC], dweight[OC * IC] = {0}, dbias[OC] = {0};
    fill(inp, B * IC, 1);
    fill(weight, OC * IC, 2);
    fill(bias, OC, 3);
    fill(w, B * OC, 4);
    b.ops->linear_forward(&b, out, inp, weight, bias, B, IC, OC);
    /* forward against its definition */
    for (int i = 0; i < B; i++)
        for (int o = 0; o < OC; o++) {
            double want = bias[o];
            for (int k = 0; k < IC; k++)
                want += (double)inp[i * IC + k] * weight[o * IC + k];
            ck_assert_msg(fabs(out[i * OC + o] - want) < 1e-5, "out[%d,%d]", i, o);
        }
    b.ops->linear_backward(&b, dinp, dweight, dbias, w, inp, weight, B, IC, OC);
    float *params[] = {inp, weight, bias}, *grads[] = {dinp, dweight, dbias};
    size_t sizes[] = {B * IC, OC * IC, OC};
    const char *names[] = {"dinp", "dweight", "dbias"};
    for (int p = 0; p < 3; p++)
        for (size_t i = 0; i < sizes[p]; i++) {
            float keep = params[p][i];
            params[p][i] = keep + EPS;
            b.ops->linear_forward(&b, out, inp, weight, bias, B, IC, OC);
            double up = dot(out, w, B * OC);
            params[p][i] = keep - EPS;
            b.ops->linear_forward(&b, out, inp, weight, bias, B, IC, OC);
            double down = dot(out, w, B * OC);
            params[p][i] = keep;
            expect_close(grads[p][i], (up - down) / (2 * EPS), names[p], i);
        }
    /* weight and bias gradients accumulate: a second backward doubles them */
    float before = dweight[0], before_b = dbias[0];
    b.ops->linear_backward(&b, NULL, dweight, dbias, w, inp, weight, B, IC, OC);
    ck_assert_float_eq_tol(dweight[0], 2 * before, 1e-5);
    ck_assert_float_eq_tol(dbias[0], 2 * before_b, 1e-5);
}
END_TEST

START_TEST(test_relu) {
    float x[6] = {-2, -0.5f, 0, 0.5f, 2, -0.0f}, out[6], dout[6] = {1, 2, 3, 4, 5, 6}, dinp[6];
    memcpy(out, x, sizeof(x));
    b.ops->relu_forward(&b, out, 6);
    float want[6] = {0, 0, 0, 0.5f, 2, 0};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(out[i], want[i]);
    b.ops->relu_backward(&b, dinp, dout, out, 6);
    float dwant[6] = {0, 0, 0, 4, 5, 0};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(dinp[i], dwant[i]);
    b.ops->relu_backward(&b, dout, dout, out, 6); /* in place */
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(dout[i], dwant[i]);
}
END_TEST

START_TEST(test_crossentropy_gradients) {
    enum { B = 4, C = 6 };
    float logits[B * C], probs[B * C], losses[B], dlogits[B * C];
    uint8_t targets[B] = {0, 5, 2, 3};
    fill(logits, B * C, 7);
    logits[1] = 80.0f; /* large logits must not overflow: the max is subtracted */
    float scale = 1.0f / B;
    b.ops->crossentropy_forward(&b, losses, probs, logits, targets, B, C);
    b.ops->crossentropy_backward(&b, dlogits, probs, targets, scale, B, C);
    for (int i = 0; i < B; i++) {
        double sum = 0;
        for (int c = 0; c < C; c++)
            sum += probs[i * C + c];
        ck_assert_msg(fabs(sum - 1) < 1e-5 && isfinite(losses[i]), "row %d: probabilities sum to %f", i, sum);
    }
    for (size_t i = 0; i < B * C; i++) {
        if (i == 1)
            continue; /* finite differences at a logit of 80 are all rounding */
        float keep = logits[i];
        double l[2];
        for (int s = 0; s < 2; s++) {
            logits[i] = keep + (s ? -EPS : EPS);
            b.ops->crossentropy_forward(&b, losses, probs, logits, targets, B, C);
            l[s] = 0;
            for (int k = 0; k < B; k++)
                l[s] += losses[k] * scale;
        }
        logits[i] = keep;
        expect_close(dlogits[i], (l[0] - l[1]) / (2 * EPS), "dlogits", i);
    }
}
END_TEST

START_TEST(test_mse_gradients) {
    enum { B = 3, C = 5 };
    float out[B * C], target[B * C], losses[B], dout[B * C];
    fill(out, B * C, 9);
    fill(target, B * C, 10);
    float scale = 1.0f / B;
    b.ops->mse_backward(&b, dout, out, target, scale, B, C);
    for (size_t i = 0; i < B * C; i++) {
        float keep = out[i];
        double l[2];
        for (int s = 0; s < 2; s++) {
            out[i] = keep + (s ? -EPS : EPS);
            b.ops->mse_forward(&b, losses, out, target, B, C);
            l[s] = 0;
            for (int k = 0; k < B; k++)
                l[s] += losses[k] * scale;
        }
        out[i] = keep;
        expect_close(dout[i], (l[0] - l[1]) / (2 * EPS), "dout", i);
    }
}
END_TEST

/* The whole model's backward against finite differences of its loss. */
START_TEST(test_model_gradients) {
    model_spec spec;
    char err[256];
    ck_assert_int_eq(model_spec_parse("6-5-4-3", &spec, err, sizeof(err)), 0);
    model m;
    enum { B = 4 };
    ck_assert_int_eq(model_open(&m, &spec, &b, B, true), 0);
    model_init_params(&spec, m.params, 42);
    fill(m.acts[0], B * 6, 11);
    float input[B * 6];
    memcpy(input, m.acts[0], sizeof(input));
    uint8_t targets[B] = {0, 1, 2, 1};
    float dlogits[B * 3];
    model_forward(&m, B);
    b.ops->crossentropy_forward(&b, m.losses, m.probs, m.acts[3], targets, B, 3);
    b.ops->crossentropy_backward(&b, dlogits, m.probs, targets, 1.0f / B, B, 3);
    b.ops->zero(&b, m.grads, spec.n_params * sizeof(float));
    model_backward(&m, dlogits, B, NULL, NULL);
    /* A smaller step than the single ops': a ReLU kink must not fall inside it. */
    const float eps = 1e-3f;
    for (size_t i = 0; i < spec.n_params; i++) {
        float keep = m.params[i];
        double l[2];
        for (int s = 0; s < 2; s++) {
            m.params[i] = keep + (s ? -eps : eps);
            memcpy(m.acts[0], input, sizeof(input));
            model_forward(&m, B);
            b.ops->crossentropy_forward(&b, m.losses, m.probs, m.acts[3], targets, B, 3);
            l[s] = 0;
            for (int k = 0; k < B; k++)
                l[s] += m.losses[k] / B;
        }
        m.params[i] = keep;
        expect_close(m.grads[i], (l[0] - l[1]) / (2 * eps), "grads", i);
    }
    model_close(&m);
    ck_assert_uint_eq(b.memory.current, 0);
}
END_TEST

static int calls[MODEL_MAX_LAYERS], n_calls;
static void note_layer(void *ctx, int layer) {
    (void)ctx;
    calls[n_calls++] = layer;
}

START_TEST(test_backward_reports_layers_last_first) {
    model_spec spec;
    char err[256];
    ck_assert_int_eq(model_spec_parse("8-7-6-5-4", &spec, err, sizeof(err)), 0);
    model m;
    ck_assert_int_eq(model_open(&m, &spec, &b, 2, false), 0);
    float dout[2 * 4] = {0};
    n_calls = 0;
    model_forward(&m, 2);
    model_backward(&m, dout, 2, note_layer, NULL);
    ck_assert_int_eq(n_calls, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(calls[i], 3 - i);
    /* a bucket of layers 1..2 is one contiguous range */
    size_t off, count;
    model_layer_range(&spec, 1, 2, &off, &count);
    ck_assert_uint_eq(off, spec.weight_offset[1]);
    ck_assert_uint_eq(count, (size_t)(6 * 7 + 6) + (5 * 6 + 5)); /* layer 1 (7->6) and layer 2 (6->5) */
    model_close(&m);
}
END_TEST

START_TEST(test_sgd_matches_torch) {
    /* torch.optim.SGD(momentum=m): v = g on the first step, then v = m v + g; p -= lr v */
    float p[2] = {1, -1}, v[2] = {0}, g1[2] = {0.5f, -0.25f}, g2[2] = {0.1f, 0.2f};
    b.ops->sgd_step(&b, p, v, g1, 2, 0.1f, 0.9f, 1);
    ck_assert_float_eq_tol(p[0], 1 - 0.1f * 0.5f, 1e-7);
    ck_assert_float_eq_tol(v[1], -0.25f, 1e-7);
    b.ops->sgd_step(&b, p, v, g2, 2, 0.1f, 0.9f, 0);
    ck_assert_float_eq_tol(v[0], 0.9f * 0.5f + 0.1f, 1e-7);
    ck_assert_float_eq_tol(p[0], 1 - 0.05f - 0.1f * (0.9f * 0.5f + 0.1f), 1e-6);
}
END_TEST

START_TEST(test_accounting) {
    ck_assert_uint_eq(b.memory.current, 0);
    void *a = b.ops->alloc(&b, 1000), *c = b.ops->alloc(&b, 24);
    ck_assert_uint_eq(b.memory.current, 1024);
    b.ops->release(&b, a, 1000);
    ck_assert_uint_eq(b.memory.current, 24);
    ck_assert_uint_eq(b.memory.peak, 1024);
    b.ops->release(&b, c, 24);
    ck_assert_uint_eq(b.memory.current, 0);
    float logits[6] = {0.1f, 0.9f, 0.0f, 2.0f, 1.0f, 3.0f};
    uint8_t targets[2] = {1, 0};
    ck_assert_int_eq(b.ops->count_correct(&b, logits, targets, 2, 3), 1);
}
END_TEST

START_TEST(test_model_names) {
    model_spec s;
    char err[256];
    ck_assert_int_eq(model_spec_parse("linear", &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(s.n_params, 784 * 10 + 10);
    ck_assert_int_eq(model_spec_parse("mlp", &s, err, sizeof(err)), 0);
    ck_assert_uint_eq(s.n_params, 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
    ck_assert_int_eq(model_spec_parse("toy", &s, err, sizeof(err)), 0);
    ck_assert_int_eq(s.loss, LOSS_MSE);
    const char *bad[] = {
        "resnet", "784", "784-", "784-0-10", "-5", "10-x", "1-2-3-4-5-6-7-8-9-10-11-12-13-14-15-16-17-18"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_msg(model_spec_parse(bad[i], &s, err, sizeof(err)) == -EINVAL, "%s accepted", bad[i]);
        ck_assert_msg(strlen(err) > 10, "%s: no message", bad[i]);
    }
}
END_TEST

/* OpenBLAS's generic kernels on a CPU that runs better ones are replaced by the best the
 * features run; any choice for a model OpenBLAS knows stands. */
START_TEST(test_blas_kernels_by_features) {
    const unsigned avx2 = BLAS_CPU_AVX2_FMA, avx512 = avx2 | BLAS_CPU_AVX512, bf16 = avx512 | BLAS_CPU_AVX512_BF16;
    ck_assert_str_eq(blas_kernels_better("Prescott", bf16), "Cooperlake");
    ck_assert_str_eq(blas_kernels_better("Prescott", avx512), "SkylakeX");
    ck_assert_str_eq(blas_kernels_better("Prescott", avx2), "Haswell");
    ck_assert_ptr_null(blas_kernels_better("Prescott", 0)); /* an SSE3 CPU: generic is right */
    const char *known[] = {"SkylakeX", "Cooperlake", "Haswell", "Zen", "Sandybridge"};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        ck_assert_msg(!blas_kernels_better(known[i], bf16), "%s replaced", known[i]);
    ck_assert_ptr_null(blas_kernels_better(NULL, bf16));
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("backend");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits");
    TCase *all[] = {core, limits};
    for (int i = 0; i < 2; i++) {
        tcase_add_checked_fixture(all[i], setup, teardown);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_linear_gradients);
    tcase_add_test(core, test_relu);
    tcase_add_test(core, test_crossentropy_gradients);
    tcase_add_test(core, test_mse_gradients);
    tcase_add_test(core, test_model_gradients);
    tcase_add_test(core, test_backward_reports_layers_last_first);
    tcase_add_test(core, test_sgd_matches_torch);
    tcase_add_test(limits, test_accounting);
    tcase_add_test(limits, test_model_names);
    tcase_add_test(limits, test_blas_kernels_by_features);
    return check_main(s, argc, argv);
}
