#include "worker/trainer/dataset.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/limits.h"
#include "worker/trainer/idx.h"
#include "worker/trainer/rng.h"

typedef struct {
    const char *split;       /* "training", "test": in messages */
    const char *images_name; /* without ".gz" */
    const char *labels_name;
} dataset_split_files;

static const dataset_split_files dataset_train_files = {"training", "train-images-idx3-ubyte",
                                                        "train-labels-idx1-ubyte"};
static const dataset_split_files dataset_test_files = {"test", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

/* path = dir/name.gz if that exists, else dir/name; -ENOENT naming both if neither does. */
static int dataset_find(const char *dir, const char *name, char *path, size_t path_size, char *err, size_t err_size) {
    int len = snprintf(path, path_size, "%s/%s.gz", dir, name);
    if (len < 0 || (size_t)len >= path_size) {
        snprintf(err, err_size, "dataset %s: the path of %s is too long", dir, name);
        return -ENAMETOOLONG;
    }
    struct stat st;
    for (int gz = 1; gz >= 0; gz--) {
        if (!gz)
            path[len - 3] = '\0';
        if (stat(path, &st) == 0)
            return 0;
        if (errno != ENOENT) {
            int e = errno;
            snprintf(err, err_size, "%s: %s", path, strerror(e));
            return -e;
        }
    }
    snprintf(err, err_size, "dataset %s: found neither %s.gz nor %s", dir, name, name);
    return -ENOENT;
}

/* One split's images and labels, their counts matched; paths kept for later messages. */
static int dataset_read_split(const char *dir, const dataset_split_files *files, uint32_t image_pixels,
                              idx_images *images, idx_labels *labels, char *images_path, char *err, size_t err_size) {
    char labels_path[PATH_MAX];
    int r = dataset_find(dir, files->images_name, images_path, PATH_MAX, err, err_size);
    if (r < 0)
        return r;
    r = dataset_find(dir, files->labels_name, labels_path, sizeof(labels_path), err, err_size);
    if (r < 0)
        return r;
    /* the labels first, the smaller file: the images' header must say as many before any of
     * their bytes are inflated (4 MB of gzip'd zeros can say 4 GB) */
    r = idx_read_labels(labels_path, DATASET_N_CLASSES, labels, err, err_size);
    if (r < 0)
        return r;
    r = idx_read_images_of(images_path, image_pixels, labels->n, images, err, err_size);
    if (r < 0 && r != -ERANGE)
        return r;
    if (r == -ERANGE || images->n != labels->n) {
        snprintf(err, err_size, "%s split: %s holds %u images but %s holds %u labels", files->split, images_path,
                 images->n, labels_path, labels->n);
        return -EBADMSG;
    }
    return 0;
}

uint64_t dataset_fingerprint(const dataset *d) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    uint64_t n = d->train.n, mean;
    memcpy(&mean, &d->mean, sizeof(mean));
    const uint8_t *parts[3] = {(const uint8_t *)&n, (const uint8_t *)&mean, d->train.y};
    size_t sizes[3] = {sizeof(n), sizeof(mean), d->train.y ? d->train.n : 0};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizes[k]; i++)
            h = (h ^ parts[k][i]) * 1099511628211ull;
    return h;
}

void dataset_pixel_stats(const uint8_t *pixels, size_t n, double *ret_mean, double *ret_std) {
    /* A histogram makes the sums exact and the variance a two-pass one over 256 values. */
    uint64_t count[256] = {0};
    for (size_t i = 0; i < n; i++)
        count[pixels[i]]++;
    double sum = 0, mean = 0, squares = 0;
    for (unsigned v = 0; v < 256; v++)
        sum += (double)count[v] * v;
    if (n > 0)
        mean = sum / (double)n;
    for (unsigned v = 0; v < 256; v++)
        squares += (double)count[v] * (v - mean) * (v - mean);
    *ret_mean = mean / 255.0;
    *ret_std = n > 0 ? sqrt(squares / (double)n) / 255.0 : 0.0;
}

/* Takes the pixels and the labels, with the table that makes a pixel a float. */
static void dataset_fill_split(dataset_split *split, idx_images *images, idx_labels *labels,
                               const float normalised[256]) {
    *split = (dataset_split){
        .n = images->n, .dim = (size_t)images->rows * images->cols, .pixels = images->pixels, .y = labels->labels};
    memcpy(split->normalised, normalised, sizeof(split->normalised));
    images->pixels = NULL;
    labels->labels = NULL;
}

void dataset_rows(const dataset_split *d, size_t first, size_t count, float *out) {
    size_t k = count * d->dim;
    if (!d->pixels) {
        memcpy(out, d->x + first * d->dim, k * sizeof(float));
        return;
    }
    const uint8_t *p = d->pixels + first * d->dim;
    for (size_t i = 0; i < k; i++)
        out[i] = d->normalised[p[i]];
}

int dataset_load(const char *dir, size_t image_pixels, dataset *ret, char *err, size_t err_size) {
    memset(ret, 0, sizeof(*ret));
    if (!dir || !*dir) {
        snprintf(err, err_size, "no dataset directory given");
        return -EINVAL;
    }
    if (image_pixels > DDP_MAX_IDX_ITEM_PIXELS) {
        snprintf(err, err_size, "dataset %s: images of %zu pixels asked for, more than any IDX file here may hold (%u)",
                 dir, image_pixels, DDP_MAX_IDX_ITEM_PIXELS);
        return -EDOM;
    }
    struct stat st;
    if (stat(dir, &st) < 0) {
        int e = errno;
        snprintf(err, err_size, "dataset directory %s: %s", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "dataset directory %s: not a directory", dir);
        return -ENOTDIR;
    }

    idx_images train_images = {0}, test_images = {0};
    idx_labels train_labels = {0}, test_labels = {0};
    char train_path[PATH_MAX], test_path[PATH_MAX];
    int r = dataset_read_split(dir, &dataset_train_files, (uint32_t)image_pixels, &train_images, &train_labels,
                               train_path, err, err_size);
    if (r < 0)
        goto done;
    r = dataset_read_split(dir, &dataset_test_files, (uint32_t)image_pixels, &test_images, &test_labels, test_path, err,
                           err_size);
    if (r < 0)
        goto done;
    if (test_images.rows != train_images.rows || test_images.cols != train_images.cols) {
        snprintf(err, err_size, "%s holds %ux%u images but %s holds %ux%u", test_path, test_images.rows,
                 test_images.cols, train_path, train_images.rows, train_images.cols);
        r = -EBADMSG;
        goto done;
    }

    dataset_pixel_stats(train_images.pixels, (size_t)train_images.n * train_images.rows * train_images.cols, &ret->mean,
                        &ret->std);
    if (!(ret->std > 0)) {
        snprintf(err, err_size, "%s: every training pixel is %u: std is 0, nothing to normalise by", train_path,
                 train_images.pixels[0]);
        r = -EBADMSG;
        goto done;
    }
    /* One table for both splits: each byte value maps to one float, computed in double. */
    float normalised[256];
    for (unsigned v = 0; v < 256; v++)
        normalised[v] = (float)((v / 255.0 - ret->mean) / ret->std);

    dataset_fill_split(&ret->train, &train_images, &train_labels, normalised);
    dataset_fill_split(&ret->test, &test_images, &test_labels, normalised);
    ret->rows = train_images.rows;
    ret->cols = train_images.cols;
    ret->n_classes = DATASET_N_CLASSES;
done:
    idx_images_free(&train_images);
    idx_images_free(&test_images);
    idx_labels_free(&train_labels);
    idx_labels_free(&test_labels);
    if (r < 0)
        dataset_free(ret);
    return r;
}

void dataset_free(dataset *d) {
    if (!d)
        return;
    free(d->train.pixels);
    free(d->train.x);
    free(d->train.y);
    free(d->train.targets);
    free(d->test.pixels);
    free(d->test.x);
    free(d->test.y);
    free(d->test.targets);
    memset(d, 0, sizeof(*d));
}

/* Standard normal by Box-Muller. */
static float normal(rng *r) {
    float u = rng_float(r), v = rng_float(r);
    return sqrtf(-2.0f * logf(u > 0 ? u : 1e-7f)) * cosf(6.2831853f * v);
}

static int toy_split(dataset_split *s, size_t n, int in, int out, rng *r) {
    s->n = n;
    s->dim = (size_t)in;
    s->x = malloc(n * (size_t)in * sizeof(float));
    s->y = calloc(n, 1);
    s->targets = malloc(n * (size_t)out * sizeof(float));
    if (!s->x || !s->y || !s->targets)
        return -ENOMEM;
    for (size_t i = 0; i < n * (size_t)in; i++)
        s->x[i] = normal(r);
    for (size_t i = 0; i < n * (size_t)out; i++)
        s->targets[i] = normal(r);
    return 0;
}

int dataset_toy(dataset *ret, size_t n_train, size_t n_test, int inputs, int outputs, uint64_t seed) {
    memset(ret, 0, sizeof(*ret));
    rng r;
    rng_seed(&r, seed);
    int e = toy_split(&ret->train, n_train, inputs, outputs, &r);
    if (e == 0)
        e = toy_split(&ret->test, n_test, inputs, outputs, &r);
    ret->n_classes = (unsigned)outputs;
    if (e < 0)
        dataset_free(ret);
    return e;
}
