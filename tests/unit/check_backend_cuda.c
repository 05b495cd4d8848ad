/* The CUDA backend against the CPU backend, op by op, on the same inputs: every op of
 * worker/trainer/backend.h with an explicit tolerance (exact where the math has no rounding to
 * differ in), plus memory accounting, staging copies and the fatal path. Exits 77 (skip)
 * where no GPU can be used. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/shm_segment.h"
#include "tests/check_main.h"
#include "worker/trainer/backend.h"
#include "worker/trainer/rng.h"

static backend cpu, gpu;

static void on_fatal(void *ctx, const char *what) {
    (void)ctx;
    fprintf(stderr, "fatal: %s\n", what); /* returns: the backend exits with its code */
}

/* Per test, in Check's forked child: a CUDA context does not survive fork(). */
static void setup(void) {
    char err[256];
    ck_assert_int_eq(backend_cpu_open(&cpu, 1), 0);
    int r = backend_cuda_open(&gpu, 0, on_fatal, NULL, err, sizeof(err));
    ck_assert_msg(r == 0, "backend_cuda_open: %s", err);
}

static void teardown(void) {
    backend_close(&gpu);
    backend_close(&cpu);
}

static void fill(float *x, size_t n, uint64_t seed) {
    rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = 2.0f * rng_float(&r) - 1.0f;
}

/* A host array on the GPU: allocated, uploaded, released at the end of the test. */
static void *on_gpu(const void *host, size_t bytes) {
    void *d = gpu.ops->alloc(&gpu, bytes);
    ck_assert_ptr_nonnull(d);
    if (host)
        gpu.ops->upload(&gpu, d, host, bytes);
    return d;
}

/* Downloads n floats from the GPU and checks them against the CPU's: |g - c| <= atol +
 * rtol |c|, naming the first element that is not. */
static void expect_near(const float *d, const float *want, size_t n, double atol, double rtol, const char *what) {
    float *got = malloc(n * sizeof(float));
    gpu.ops->download(&gpu, got, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        double diff = fabs((double)got[i] - want[i]);
        ck_assert_msg(diff <= atol + rtol * fabs(want[i]), "%s[%zu]: GPU %.9g, CPU %.9g (off by %.3g)", what, i, got[i],
                      want[i], diff);
    }
    free(got);
}

START_TEST(test_memory) {
    /* zero-filled, counted, and back */
    float *d = gpu.ops->alloc(&gpu, 1000 * sizeof(float));
    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(gpu.memory.current, 4000);
    float zeros[1000] = {0}, x[1000];
    expect_near(d, zeros, 1000, 0, 0, "alloc");
    fill(x, 1000, 1);
    gpu.ops->upload(&gpu, d, x, sizeof(x));
    expect_near(d, x, 1000, 0, 0, "upload");
    gpu.ops->zero(&gpu, d + 10, 10 * sizeof(float));
    memset(x + 10, 0, 10 * sizeof(float));
    expect_near(d, x, 1000, 0, 0, "zero");
    gpu.ops->release(&gpu, d, 4000);
    ck_assert_uint_eq(gpu.memory.current, 0);
    ck_assert_uint_eq(gpu.memory.peak, 4000);
    /* pinned staging is counted apart */
    float *h = gpu.ops->host_alloc(&gpu, 64);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(gpu.host.current, 64);
    ck_assert_uint_eq(gpu.memory.current, 0);
    gpu.ops->host_release(&gpu, h, 64);
    ck_assert_uint_eq(gpu.host.current, 0);
    /* the device's own figures */
    size_t used = 0, total = 0;
    ck_assert_int_eq(gpu.ops->device_memory(&gpu, &used, &total), 0);
    ck_assert_uint_gt(used, 0);
    ck_assert_uint_gt(total, used);
    ck_assert_int_eq(cpu.ops->device_memory(&cpu, &used, &total), -ENOTSUP);
}
END_TEST

/* Row-major GEMMs through column-major cuBLAS, for odd shapes and the mlp's first layer;
 * the error grows with the length of the dot products (IC for forward, B and OC for
 * backward): float rounding, nothing more. */
static void linear_case(int B, int IC, int OC) {
    size_t ni = (size_t)B * IC, nw = (size_t)OC * IC, no = (size_t)B * OC;
    float *inp = malloc(ni * 4), *weight = malloc(nw * 4), *bias = malloc(OC * 4), *dout = malloc(no * 4);
    float *out = malloc(no * 4), *dinp = malloc(ni * 4), *dweight = calloc(nw, 4), *dbias = calloc(OC, 4);
    fill(inp, ni, 1);
    fill(weight, nw, 2);
    fill(bias, OC, 3);
    fill(dout, no, 4);
    float *d_inp = on_gpu(inp, ni * 4), *d_weight = on_gpu(weight, nw * 4), *d_bias = on_gpu(bias, OC * 4);
    float *d_dout = on_gpu(dout, no * 4), *d_out = on_gpu(NULL, no * 4), *d_dinp = on_gpu(NULL, ni * 4);
    float *d_dweight = on_gpu(NULL, nw * 4), *d_dbias = on_gpu(NULL, OC * 4);
    double tol_f = 1e-6 * IC, tol_b = 1e-6 * (B > OC ? B : OC);

    cpu.ops->linear_forward(&cpu, out, inp, weight, bias, B, IC, OC);
    gpu.ops->linear_forward(&gpu, d_out, d_inp, d_weight, d_bias, B, IC, OC);
    expect_near(d_out, out, no, tol_f, 1e-5, "linear_forward out");

    cpu.ops->linear_backward(&cpu, dinp, dweight, dbias, dout, inp, weight, B, IC, OC);
    gpu.ops->linear_backward(&gpu, d_dinp, d_dweight, d_dbias, d_dout, d_inp, d_weight, B, IC, OC);
    expect_near(d_dinp, dinp, ni, tol_b, 1e-5, "linear_backward dinp");
    expect_near(d_dweight, dweight, nw, tol_b, 1e-5, "linear_backward dweight");
    expect_near(d_dbias, dbias, OC, tol_b, 1e-5, "linear_backward dbias");
    /* weight and bias gradients accumulate; dinp may be skipped */
    cpu.ops->linear_backward(&cpu, NULL, dweight, dbias, dout, inp, weight, B, IC, OC);
    gpu.ops->linear_backward(&gpu, NULL, d_dweight, d_dbias, d_dout, d_inp, d_weight, B, IC, OC);
    expect_near(d_dweight, dweight, nw, 2 * tol_b, 1e-5, "linear_backward dweight, accumulated");
    expect_near(d_dbias, dbias, OC, 2 * tol_b, 1e-5, "linear_backward dbias, accumulated");

    float *all[] = {inp, weight, bias, dout, out, dinp, dweight, dbias};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
}

START_TEST(test_linear) {
    static const int shapes[][3] = {{1, 1, 1}, {3, 5, 4}, {37, 53, 29}, {64, 784, 512}, {128, 256, 10}};
    linear_case(shapes[_i][0], shapes[_i][1], shapes[_i][2]);
}
END_TEST

START_TEST(test_relu) {
    enum { N = 1000 };
    float x[N], out[N], dout[N], dinp[N];
    fill(x, N, 5);
    fill(dout, N, 6);
    x[0] = 0.0f;
    x[1] = -0.0f;
    float *d_x = on_gpu(x, sizeof(x)), *d_dout = on_gpu(dout, sizeof(dout)), *d_dinp = on_gpu(NULL, sizeof(dinp));
    memcpy(out, x, sizeof(x));
    cpu.ops->relu_forward(&cpu, out, N);
    gpu.ops->relu_forward(&gpu, d_x, N);
    expect_near(d_x, out, N, 0, 0, "relu_forward");
    cpu.ops->relu_backward(&cpu, dinp, dout, out, N);
    gpu.ops->relu_backward(&gpu, d_dinp, d_dout, d_x, N);
    expect_near(d_dinp, dinp, N, 0, 0, "relu_backward");
    gpu.ops->relu_backward(&gpu, d_dout, d_dout, d_x, N); /* in place */
    expect_near(d_dout, dinp, N, 0, 0, "relu_backward in place");
}
END_TEST

START_TEST(test_crossentropy) {
    enum { B = 300, C = 10 };
    float logits[B * C], probs[B * C], losses[B], dlogits[B * C];
    uint8_t targets[B];
    fill(logits, B * C, 7);
    for (int i = 0; i < B * C; i++)
        logits[i] *= 20.0f;
    logits[3] = 90.0f; /* large logits must not overflow */
    for (int i = 0; i < B; i++)
        targets[i] = (uint8_t)(i * 7 % C);
    float *d_logits = on_gpu(logits, sizeof(logits)), *d_probs = on_gpu(NULL, sizeof(probs));
    float *d_losses = on_gpu(NULL, sizeof(losses)), *d_dlogits = on_gpu(NULL, sizeof(dlogits));
    uint8_t *d_targets = on_gpu(targets, sizeof(targets));
    cpu.ops->crossentropy_forward(&cpu, losses, probs, logits, targets, B, C);
    gpu.ops->crossentropy_forward(&gpu, d_losses, d_probs, d_logits, d_targets, B, C);
    expect_near(d_losses, losses, B, 1e-6, 1e-6, "crossentropy_forward losses");
    expect_near(d_probs, probs, B * C, 1e-7, 1e-6, "crossentropy_forward probs");
    cpu.ops->crossentropy_backward(&cpu, dlogits, probs, targets, 1.0f / B, B, C);
    gpu.ops->crossentropy_backward(&gpu, d_dlogits, d_probs, d_targets, 1.0f / B, B, C);
    expect_near(d_dlogits, dlogits, B * C, 1e-9, 1e-6, "crossentropy_backward");
}
END_TEST

START_TEST(test_mse) {
    enum { B = 70, C = 5 };
    float out[B * C], target[B * C], losses[B], dout[B * C];
    fill(out, B * C, 8);
    fill(target, B * C, 9);
    float *d_out = on_gpu(out, sizeof(out)), *d_target = on_gpu(target, sizeof(target));
    float *d_losses = on_gpu(NULL, sizeof(losses)), *d_dout = on_gpu(NULL, sizeof(dout));
    cpu.ops->mse_forward(&cpu, losses, out, target, B, C);
    gpu.ops->mse_forward(&gpu, d_losses, d_out, d_target, B, C);
    expect_near(d_losses, losses, B, 0, 1e-6, "mse_forward");
    cpu.ops->mse_backward(&cpu, dout, out, target, 0.25f, B, C);
    gpu.ops->mse_backward(&gpu, d_dout, d_out, d_target, 0.25f, B, C);
    expect_near(d_dout, dout, B * C, 0, 1e-6, "mse_backward");
}
END_TEST

START_TEST(test_sgd_and_accumulate) {
    enum { N = 5000 };
    float params[N], velocity[N] = {0}, grads[N];
    fill(params, N, 10);
    fill(grads, N, 11);
    float *d_params = on_gpu(params, sizeof(params)), *d_velocity = on_gpu(NULL, sizeof(velocity));
    float *d_grads = on_gpu(grads, sizeof(grads));
    for (int step = 0; step < 3; step++) { /* the first step takes v = g, then momentum */
        cpu.ops->sgd_step(&cpu, params, velocity, grads, N, 0.01f, 0.5f, step == 0);
        gpu.ops->sgd_step(&gpu, d_params, d_velocity, d_grads, N, 0.01f, 0.5f, step == 0);
    }
    expect_near(d_velocity, velocity, N, 1e-7, 1e-6, "sgd_step velocity");
    expect_near(d_params, params, N, 1e-7, 1e-6, "sgd_step params");
    cpu.ops->accumulate(&cpu, params, grads, N);
    gpu.ops->accumulate(&gpu, d_params, d_grads, N);
    expect_near(d_params, params, N, 1e-7, 1e-6, "accumulate");
}
END_TEST

START_TEST(test_count_correct) {
    enum { B = 1000, C = 10 };
    float logits[B * C];
    uint8_t targets[B];
    fill(logits, B * C, 12);
    for (int i = 0; i < B; i++)
        targets[i] = (uint8_t)(i % C);
    for (int c = 0; c < C; c++) /* a tie: the first maximum wins, on both */
        logits[c] = 1.0f;
    float *d_logits = on_gpu(logits, sizeof(logits));
    uint8_t *d_targets = on_gpu(targets, sizeof(targets));
    long want = cpu.ops->count_correct(&cpu, logits, targets, B, C);
    ck_assert_int_gt(want, 0);
    ck_assert_int_eq(gpu.ops->count_correct(&gpu, d_logits, d_targets, B, C), want);
    ck_assert_int_eq(gpu.ops->count_correct(&gpu, d_logits, d_targets, 0, C), 0);
}
END_TEST

/* A staged download lands after the work queued before it, while work queued after it
 * (on other buffers, as backward's earlier layers) goes on. */
START_TEST(test_staged_download) {
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));
    fill(x, N, 13);
    float *d = on_gpu(x, N * sizeof(float)), *other = on_gpu(x, N * sizeof(float));
    float *host = gpu.ops->host_alloc(&gpu, N * sizeof(float));
    memcpy(want, x, N * sizeof(float));
    cpu.ops->relu_forward(&cpu, want, N);
    gpu.ops->relu_forward(&gpu, d, N);
    gpu.ops->download_async(&gpu, host, d, N * sizeof(float), 3);
    for (int i = 0; i < 10; i++)
        gpu.ops->sgd_step(&gpu, other, other, other, N, 0.1f, 0.5f, 0);
    gpu.ops->wait_download(&gpu, 3);
    ck_assert_int_eq(memcmp(host, want, N * sizeof(float)), 0);
    gpu.ops->synchronize(&gpu);
    gpu.ops->host_release(&gpu, host, N * sizeof(float));
    free(x);
    free(want);
}
END_TEST

/* Shared memory as ddp_alloc makes it (a sealed memfd segment), registered: a staged
 * download lands in it, it counts as staging memory while registered, and not after. */
START_TEST(test_registered_download) {
    enum { N = 1 << 20 };
    size_t bytes = N * sizeof(float);
    int fd = -1;
    char *shared = NULL, why[128];
    ck_assert_int_eq(shm_segment_make("check-cuda", bytes, &fd), 0);
    ck_assert_msg(shm_segment_map(fd, bytes, &shared, why, sizeof(why)) == 0, "%s", why);
    close(fd);
    float *x = malloc(bytes);
    fill(x, N, 17);
    float *d = on_gpu(x, bytes);
    size_t before = gpu.host.current;
    ck_assert_int_eq(gpu.ops->host_register(&gpu, shared, bytes), 0);
    ck_assert_uint_eq(gpu.host.current, before + bytes);
    gpu.ops->download_async(&gpu, shared, d, bytes, 1);
    gpu.ops->wait_download(&gpu, 1);
    ck_assert_int_eq(memcmp(shared, x, bytes), 0);
    gpu.ops->host_unregister(&gpu, shared, bytes);
    ck_assert_uint_eq(gpu.host.current, before);
    munmap(shared, bytes);
    free(x);
}
END_TEST

/* A CUDA error ends the process with the device's exit code, after the fatal handler. */
START_TEST(test_cuda_error_exits) {
    float x = 1.0f;
    gpu.ops->upload(&gpu, (void *)(uintptr_t)16, &x, sizeof(x)); /* not device memory */
}
END_TEST

/* Whether a GPU can be used, asked in a child: CUDA must not start in the process that
 * forks the tests. */
static bool have_gpu(char *why, size_t size) {
    int fds[2];
    if (pipe(fds) < 0)
        return false;
    pid_t pid = fork();
    if (pid == 0) {
        char err[256] = "";
        int n = backend_cuda_device_count(err, sizeof(err));
        if (write(fds[1], err, strlen(err)) < 0)
            _exit(2);
        _exit(n > 0 ? 0 : 1);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], why, size - 1);
    why[got > 0 ? got : 0] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv) {
    char why[256];
    if (!have_gpu(why, sizeof(why))) {
        printf("check_backend_cuda: skipped: %s\n", why);
        return 77;
    }
    Suite *s = suite_create("backend_cuda");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_registered_download);
    tcase_add_loop_test(tc, test_linear, 0, 5);
    tcase_add_test(tc, test_relu);
    tcase_add_test(tc, test_crossentropy);
    tcase_add_test(tc, test_mse);
    tcase_add_test(tc, test_sgd_and_accumulate);
    tcase_add_test(tc, test_count_correct);
    tcase_add_test(tc, test_staged_download);
    tcase_add_exit_test(tc, test_cuda_error_exits, BACKEND_EXIT_DEVICE_ERROR);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
