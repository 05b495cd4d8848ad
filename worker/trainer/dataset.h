/* The training data: an MNIST-style directory of four IDX files, loaded, checked and
 * normalised to floats.
 *
 * The directory holds train-images-idx3-ubyte, train-labels-idx1-ubyte,
 * t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain or gzip'd with a ".gz"
 * suffix (the .gz wins when both are there). Each split's image and label counts must
 * match, and both splits must have the same image size.
 *
 * Pixels become x = (p/255 - mean) / std, with mean and std (population) of p/255 over
 * every training pixel, computed in double; the test split uses the training statistics.
 * For Fashion-MNIST they come out at 0.2860 and 0.3530, PyTorch's tutorial constants.
 * The pixels stay bytes in memory, a quarter of floats: a row is made floats (one table
 * lookup a pixel, the same bits every time) when a batch takes it (dataset_rows). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define DATASET_DEFAULT_DIR "/usr/share/datasets/fashion-mnist" /* Debian's dataset-fashion-mnist */
#define DATASET_N_CLASSES 10u

typedef struct {
    size_t n, dim;
    uint8_t *pixels;       /* (n, dim) image bytes, made floats through normalised; or NULL, and: */
    float *x;              /* (n, dim) inputs that are floats already (the toy data) */
    float normalised[256]; /* a pixel's value as input */
    uint8_t *y;            /* (n) class labels */
    float *targets;        /* (n, outputs) regression targets (the toy data), else NULL */
} dataset_split;

typedef struct {
    dataset_split train, test;
    size_t rows, cols; /* dim = rows * cols */
    double mean, std;  /* of the training pixels p/255, before normalisation */
    unsigned n_classes;
} dataset;

/* Returns 0, or a negative error with err naming the file and what is wrong: -ENOENT
 * (a file missing: err lists the names looked for), -EBADMSG (a malformed file, counts or
 * sizes that do not match, training pixels all equal), -EDOM (images without the
 * image_pixels asked for, 0: any; said from the header, before the data is read), those
 * of idx_read_*(). On failure *ret is left zeroed. */
int dataset_load(const char *dir, size_t image_pixels, dataset *ret, char *err, size_t err_size);
void dataset_free(dataset *d);
/* A digest of the training split (its labels, count and pixels' mean): other data, to the
 * ranks that compare theirs and to a checkpoint that records what it trained on. */
uint64_t dataset_fingerprint(const dataset *d);
/* Rows first .. first + count - 1 of d as floats, into out (count * dim). */
void dataset_rows(const dataset_split *d, size_t first, size_t count, float *out);
/* The DDP tutorial's ToyModel data: standard normal inputs (inputs wide) and regression
 * targets (outputs wide), n_train and n_test rows, the same for the same seed on every
 * rank. -ENOMEM, or 0. */
int dataset_toy(dataset *ret, size_t n_train, size_t n_test, int inputs, int outputs, uint64_t seed);

/* Training statistics of p/255 over n bytes: mean and population std, in double. */
void dataset_pixel_stats(const uint8_t *pixels, size_t n, double *ret_mean, double *ret_std);
