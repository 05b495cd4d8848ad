/* worker/trainer/dataset.c: a directory of four IDX files, checked and normalised with the training
 * statistics; Debian's Fashion-MNIST when it is installed. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "idx_files.h"
#include "tests/check_main.h"
#include "worker/trainer/dataset.h"

static char tmp_root[64];
static char err[1024];
static dataset d;

#define TRAIN_IMAGES "train-images-idx3-ubyte"
#define TRAIN_LABELS "train-labels-idx1-ubyte"
#define TEST_IMAGES "t10k-images-idx3-ubyte"
#define TEST_LABELS "t10k-labels-idx1-ubyte"

/* A fresh directory for one test. */
static const char *make_dir(const char *name) {
    static char dir[128];
    snprintf(dir, sizeof(dir), "%s/%s", tmp_root, name);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    return dir;
}

/* dir/name (plus ".gz", gzip'd, when gz): an IDX file of n_dims sizes and their bytes. */
static void write_idx_in(const char *dir, const char *name, bool gz, uint32_t magic, unsigned n_dims,
                         const uint32_t *dims, const uint8_t *payload) {
    size_t payload_size = 1;
    for (unsigned i = 0; i < n_dims; i++)
        payload_size *= dims[i];
    char path[256];
    snprintf(path, sizeof(path), "%s/%s%s", dir, name, gz ? ".gz" : "");
    write_idx(path, magic, n_dims, dims, payload, payload_size, gz);
}

static void write_images(const char *dir, const char *name, bool gz, uint32_t n, uint32_t rows, uint32_t cols,
                         const uint8_t *pixels) {
    write_idx_in(dir, name, gz, 0x00000803, 3, (uint32_t[]){n, rows, cols}, pixels);
}

static void write_labels(const char *dir, const char *name, bool gz, uint32_t n, const uint8_t *labels) {
    write_idx_in(dir, name, gz, 0x00000801, 1, (uint32_t[]){n}, labels);
}

/* A small valid dataset: 4 training and 2 test images of 2x3. */
static const uint8_t train_pixels[4 * 6] = {0,  255, 17, 34, 200, 1, 99, 98,  97, 3,   250, 128,
                                            64, 32,  16, 8,  4,   2, 1,  100, 0,  255, 255, 77};
static const uint8_t train_labels[4] = {3, 0, 9, 5};
static const uint8_t test_pixels[2 * 6] = {255, 0, 0, 0, 127, 128, 5, 6, 7, 8, 9, 10};
static const uint8_t test_labels[2] = {1, 9};

static void write_valid(const char *dir, bool gz) {
    write_images(dir, TRAIN_IMAGES, gz, 4, 2, 3, train_pixels);
    write_labels(dir, TRAIN_LABELS, !gz, 4, train_labels); /* a mix of plain and gzip'd */
    write_images(dir, TEST_IMAGES, !gz, 2, 2, 3, test_pixels);
    write_labels(dir, TEST_LABELS, gz, 2, test_labels);
}

static void teardown(void) {
    dataset_free(&d);
}

/* A failed load leaves nothing behind. */
static void assert_empty(void) {
    ck_assert_ptr_null(d.train.pixels);
    ck_assert_ptr_null(d.train.y);
    ck_assert_ptr_null(d.test.pixels);
    ck_assert_ptr_null(d.test.y);
    ck_assert_uint_eq(d.train.n, 0);
}

/* core */

/* Half the pixels 0, half 255: mean and std are exactly 0.5, and x is exactly -1 or 1. */
START_TEST(test_exact_statistics) {
    const char *dir = make_dir("exact");
    uint8_t pixels[4 * 4], labels[4] = {0, 1, 2, 3};
    for (int i = 0; i < 16; i++)
        pixels[i] = i % 2 ? 255 : 0;
    write_images(dir, TRAIN_IMAGES, true, 4, 2, 2, pixels);
    write_labels(dir, TRAIN_LABELS, true, 4, labels);
    write_images(dir, TEST_IMAGES, true, 4, 2, 2, pixels);
    write_labels(dir, TEST_LABELS, true, 4, labels);
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_double_eq(d.mean, 0.5);
    ck_assert_double_eq(d.std, 0.5);
    float train_x[16], test_x[16];
    dataset_rows(&d.train, 0, 4, train_x);
    dataset_rows(&d.test, 0, 4, test_x);
    for (int i = 0; i < 16; i++) {
        ck_assert_float_eq(train_x[i], pixels[i] ? 1.0f : -1.0f);
        ck_assert_float_eq(test_x[i], pixels[i] ? 1.0f : -1.0f);
    }
    /* the pixels are kept as bytes, a quarter of floats: the same rows, taken one at a time */
    ck_assert_mem_eq(d.train.pixels, pixels, 16);
    float row[4];
    dataset_rows(&d.train, 3, 1, row);
    ck_assert_mem_eq(row, train_x + 12, sizeof(row));
}
END_TEST

START_TEST(test_load_synthetic) {
    const char *dir = make_dir("synthetic");
    write_valid(dir, true);
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(d.train.n, 4);
    ck_assert_uint_eq(d.test.n, 2);
    ck_assert_uint_eq(d.train.dim, 6);
    ck_assert_uint_eq(d.test.dim, 6);
    ck_assert_uint_eq(d.rows, 2);
    ck_assert_uint_eq(d.cols, 3);
    ck_assert_uint_eq(d.n_classes, 10);
    ck_assert_mem_eq(d.train.y, train_labels, 4);
    ck_assert_mem_eq(d.test.y, test_labels, 2);

    /* The reference: two passes over p/255, population variance. */
    double sum = 0, squares = 0;
    for (int i = 0; i < 24; i++)
        sum += train_pixels[i] / 255.0;
    double mean = sum / 24;
    for (int i = 0; i < 24; i++)
        squares += (train_pixels[i] / 255.0 - mean) * (train_pixels[i] / 255.0 - mean);
    double std = sqrt(squares / 24);
    ck_assert_double_eq_tol(d.mean, mean, 1e-14);
    ck_assert_double_eq_tol(d.std, std, 1e-14);

    /* Both splits with the training statistics. */
    float train_x[24], test_x[12];
    dataset_rows(&d.train, 0, 4, train_x);
    dataset_rows(&d.test, 0, 2, test_x);
    for (int i = 0; i < 24; i++)
        ck_assert_float_eq_tol(train_x[i], (train_pixels[i] / 255.0 - mean) / std, 1e-6);
    for (int i = 0; i < 12; i++)
        ck_assert_float_eq_tol(test_x[i], (test_pixels[i] / 255.0 - mean) / std, 1e-6);

    /* So the normalised training set has mean 0 and std 1. */
    double x_sum = 0, x_squares = 0;
    for (int i = 0; i < 24; i++) {
        x_sum += train_x[i];
        x_squares += (double)train_x[i] * train_x[i];
    }
    ck_assert_double_eq_tol(x_sum / 24, 0.0, 1e-6);
    ck_assert_double_eq_tol(sqrt(x_squares / 24), 1.0, 1e-6);
}
END_TEST

START_TEST(test_plain_files) {
    const char *dir = make_dir("plain");
    write_images(dir, TRAIN_IMAGES, false, 4, 2, 3, train_pixels);
    write_labels(dir, TRAIN_LABELS, false, 4, train_labels);
    write_images(dir, TEST_IMAGES, false, 2, 2, 3, test_pixels);
    write_labels(dir, TEST_LABELS, false, 2, test_labels);
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_mem_eq(d.test.y, test_labels, 2);
}
END_TEST

/* With both name and name.gz, the .gz is read. */
START_TEST(test_prefers_gz) {
    const char *dir = make_dir("both");
    write_valid(dir, true);
    write_valid(dir, false); /* each file now both plain and gzip'd */
    const uint8_t other[4] = {7, 7, 7, 7};
    write_labels(dir, TRAIN_LABELS, false, 4, other);
    write_labels(dir, TRAIN_LABELS, true, 4, train_labels);
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_mem_eq(d.train.y, train_labels, 4);
    dataset_free(&d);

    /* And the plain one is in fact read when alone. */
    char path[256];
    snprintf(path, sizeof(path), "%s/%s.gz", dir, TRAIN_LABELS);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_mem_eq(d.train.y, other, 4);
}
END_TEST

START_TEST(test_pixel_stats) {
    double mean, std;
    dataset_pixel_stats((const uint8_t[]){0, 51, 102}, 3, &mean, &std);
    ck_assert_double_eq_tol(mean, 0.2, 1e-15);
    ck_assert_double_eq_tol(std, sqrt(0.08 / 3), 1e-15);
    dataset_pixel_stats((const uint8_t[]){9}, 1, &mean, &std);
    ck_assert_double_eq_tol(mean, 9 / 255.0, 1e-15);
    ck_assert_double_eq(std, 0.0);
}
END_TEST

/* Debian's dataset-fashion-mnist: the statistics are PyTorch's tutorial constants. */
START_TEST(test_fashion_mnist) {
    ck_assert_msg(dataset_load(DATASET_DEFAULT_DIR, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(d.train.n, 60000);
    ck_assert_uint_eq(d.test.n, 10000);
    ck_assert_uint_eq(d.rows, 28);
    ck_assert_uint_eq(d.cols, 28);
    ck_assert_uint_eq(d.train.dim, 784);
    ck_assert_double_eq_tol(d.mean, 0.2860, 5e-5);
    ck_assert_double_eq_tol(d.std, 0.3530, 5e-5);
    fprintf(stderr, "fashion-mnist: mean %.6f std %.6f\n", d.mean, d.std);
    /* Ten balanced classes: 6000 and 1000 of each. */
    size_t train_count[10] = {0}, test_count[10] = {0};
    for (size_t i = 0; i < d.train.n; i++)
        train_count[d.train.y[i]]++;
    for (size_t i = 0; i < d.test.n; i++)
        test_count[d.test.y[i]]++;
    for (int c = 0; c < 10; c++) {
        ck_assert_uint_eq(train_count[c], 6000);
        ck_assert_uint_eq(test_count[c], 1000);
    }
}
END_TEST

/* limits */

/* One image of one pixel per split is a dataset, if its pixels differ. */
START_TEST(test_smallest) {
    const char *dir = make_dir("smallest");
    write_images(dir, TRAIN_IMAGES, false, 2, 1, 1, (const uint8_t[]){0, 255});
    write_labels(dir, TRAIN_LABELS, false, 2, (const uint8_t[]){0, 9});
    write_images(dir, TEST_IMAGES, false, 1, 1, 1, (const uint8_t[]){51});
    write_labels(dir, TEST_LABELS, false, 1, (const uint8_t[]){4});
    ck_assert_msg(dataset_load(dir, 0, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(d.train.dim, 1);
    float x;
    dataset_rows(&d.test, 0, 1, &x);
    ck_assert_float_eq_tol(x, (0.2 - 0.5) / 0.5, 1e-6);
}
END_TEST

/* A model that takes other images: refused by name before any data is read. */
START_TEST(test_wanted_pixels) {
    const char *dir = make_dir("wanted");
    write_valid(dir, true);
    ck_assert_int_eq(dataset_load(dir, 784, &d, err, sizeof(err)), -EDOM);
    ck_assert_msg(strstr(err, TRAIN_IMAGES) && strstr(err, "2x3 images (6 pixels each), not the 784 pixels wanted"),
                  "%s", err);
    assert_empty();
    ck_assert_int_eq(dataset_load(dir, 2000000, &d, err, sizeof(err)), -EDOM);
    ck_assert_msg(dataset_load(dir, 6, &d, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(d.train.dim, 6);
}
END_TEST

START_TEST(test_constant_pixels) {
    const char *dir = make_dir("constant");
    uint8_t sevens[6] = {7, 7, 7, 7, 7, 7};
    write_images(dir, TRAIN_IMAGES, false, 1, 2, 3, sevens);
    write_labels(dir, TRAIN_LABELS, false, 1, (const uint8_t[]){0});
    write_images(dir, TEST_IMAGES, false, 2, 2, 3, test_pixels);
    write_labels(dir, TEST_LABELS, false, 2, test_labels);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, TRAIN_IMAGES) && strstr(err, "every training pixel is 7: std is 0"), "%s", err);
    assert_empty();
}
END_TEST

/* malformed */

START_TEST(test_missing_file) {
    const char *dir = make_dir("missing");
    write_valid(dir, true);
    char path[256];
    snprintf(path, sizeof(path), "%s/%s.gz", dir, TEST_LABELS);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -ENOENT);
    char expected[512];
    snprintf(expected, sizeof(expected), "dataset %s: found neither %s.gz nor %s", dir, TEST_LABELS, TEST_LABELS);
    ck_assert_str_eq(err, expected);
    assert_empty();
}
END_TEST

START_TEST(test_missing_dir) {
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/no-such-dir", tmp_root);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, dir) && strstr(err, strerror(ENOENT)), "%s", err);
    char file[256];
    snprintf(file, sizeof(file), "%s/a-file", make_dir("not-dir"));
    fclose(fopen(file, "w"));
    ck_assert_int_eq(dataset_load(file, 0, &d, err, sizeof(err)), -ENOTDIR);
    ck_assert_msg(strstr(err, file) && strstr(err, "not a directory"), "%s", err);
    ck_assert_int_eq(dataset_load("", 0, &d, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(test_train_count_mismatch) {
    const char *dir = make_dir("train-mismatch");
    write_valid(dir, true);
    write_labels(dir, TRAIN_LABELS, true, 3, train_labels);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    char expected[512];
    snprintf(expected, sizeof(expected), "training split: %s/%s.gz holds 4 images but %s/%s.gz holds 3 labels", dir,
             TRAIN_IMAGES, dir, TRAIN_LABELS);
    ck_assert_str_eq(err, expected);
    assert_empty();
}
END_TEST

/* An images file whose header says a million images, of which it holds four (as 4 MB of
 * gzip'd zeros can say 4 GB): refused by its count against the labels' before a byte of
 * it is inflated, rather than read until it runs out (or memory does). */
START_TEST(test_count_before_payload) {
    const char *dir = make_dir("count-first");
    write_valid(dir, true);
    char path[256], expected[512];
    snprintf(path, sizeof(path), "%s/%s.gz", dir, TRAIN_IMAGES);
    write_idx(path, 0x00000803, 3, (uint32_t[]){1000000, 2, 3}, train_pixels, sizeof(train_pixels), true);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    snprintf(expected, sizeof(expected), "training split: %s/%s.gz holds 1000000 images but %s/%s", dir, TRAIN_IMAGES,
             dir, TRAIN_LABELS);
    ck_assert_msg(strncmp(err, expected, strlen(expected)) == 0 && strstr(err, " holds 4 labels"), "%s", err);
    assert_empty();
}
END_TEST

START_TEST(test_test_count_mismatch) {
    const char *dir = make_dir("test-mismatch");
    write_valid(dir, false);
    write_images(dir, TEST_IMAGES, true, 1, 2, 3, test_pixels);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    char expected[512];
    snprintf(expected, sizeof(expected), "test split: %s/%s.gz holds 1 images but %s/%s holds 2 labels", dir,
             TEST_IMAGES, dir, TEST_LABELS);
    ck_assert_str_eq(err, expected);
    assert_empty();
}
END_TEST

START_TEST(test_size_mismatch) {
    const char *dir = make_dir("size-mismatch");
    write_valid(dir, true);
    write_images(dir, TEST_IMAGES, false, 2, 3, 2, test_pixels); /* the plain one is read when no .gz */
    char gz_path[256];
    snprintf(gz_path, sizeof(gz_path), "%s/%s.gz", dir, TEST_IMAGES);
    unlink(gz_path);
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, "holds 3x2 images but") && strstr(err, "holds 2x3") && strstr(err, TEST_IMAGES) &&
                      strstr(err, TRAIN_IMAGES),
                  "%s", err);
    assert_empty();
}
END_TEST

START_TEST(test_bad_label) {
    const char *dir = make_dir("bad-label");
    write_valid(dir, true);
    write_labels(dir, TEST_LABELS, true, 2, (const uint8_t[]){1, 10});
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, TEST_LABELS) && strstr(err, "label 10 at index 1 is out of range [0, 10)"), "%s", err);
    assert_empty();
}
END_TEST

START_TEST(test_corrupt_file) {
    const char *dir = make_dir("corrupt");
    write_valid(dir, true);
    write_labels(dir, TRAIN_IMAGES, true, 4, train_labels); /* labels where images belong */
    ck_assert_int_eq(dataset_load(dir, 0, &d, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, TRAIN_IMAGES) && strstr(err, "bad magic"), "%s", err);
    assert_empty();
}
END_TEST

int main(int argc, char **argv) {
    /* The real dataset's case is CTest's test of its own: skipped, visibly, without it. */
    struct stat st;
    if (check_selected(argc, argv, "fashion-mnist") && stat(DATASET_DEFAULT_DIR, &st) != 0)
        return check_skip("fashion-mnist", DATASET_DEFAULT_DIR " is not installed (Debian's dataset-fashion-mnist)");
    snprintf(tmp_root, sizeof(tmp_root), "/tmp/check_dataset_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("dataset");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed"),
          *real = tcase_create("fashion-mnist");
    TCase *all[] = {core, limits, bad, real};
    for (int i = 0; i < 4; i++) {
        tcase_add_checked_fixture(all[i], NULL, teardown);
        tcase_set_timeout(all[i], 120);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_exact_statistics);
    tcase_add_test(core, test_load_synthetic);
    tcase_add_test(core, test_plain_files);
    tcase_add_test(core, test_prefers_gz);
    tcase_add_test(core, test_pixel_stats);
    tcase_add_test(real, test_fashion_mnist);
    tcase_add_test(limits, test_smallest);
    tcase_add_test(limits, test_constant_pixels);
    tcase_add_test(limits, test_wanted_pixels);
    tcase_add_test(bad, test_missing_file);
    tcase_add_test(bad, test_missing_dir);
    tcase_add_test(bad, test_train_count_mismatch);
    tcase_add_test(bad, test_count_before_payload);
    tcase_add_test(bad, test_test_count_mismatch);
    tcase_add_test(bad, test_size_mismatch);
    tcase_add_test(bad, test_bad_label);
    tcase_add_test(bad, test_corrupt_file);
    int code = check_main(s, argc, argv);
    remove_tree(tmp_root);
    return code;
}
