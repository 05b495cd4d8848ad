/* worker/trainer/idx.c: IDX images and labels, plain or gzip'd, and every way a file can be wrong. */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/limits.h"
#include "idx_files.h"
#include "tests/check_main.h"
#include "worker/trainer/idx.h"

static char tmp_dir[64];
static char err[1024];

static void tmp_path(char *path, size_t size, const char *name) {
    snprintf(path, size, "%s/%s", tmp_dir, name);
}

static uint8_t *read_whole(const char *path, size_t *ret_size) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc((size_t)size + 1);
    ck_assert_uint_eq(fread(data, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    *ret_size = (size_t)size;
    return data;
}

/* Bytes that do not repeat soon, so deflate cannot shrink them to nothing. */
static void fill_noise(uint8_t *p, size_t n, uint32_t seed) {
    uint32_t x = seed ? seed : 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* core */

static void check_images_round_trip(bool gz) {
    enum { N = 3, ROWS = 2, COLS = 4 };
    uint8_t pixels[N * ROWS * COLS];
    for (size_t i = 0; i < sizeof(pixels); i++)
        pixels[i] = (uint8_t)(i * 37 + 11);
    char path[128];
    tmp_path(path, sizeof(path), gz ? "images.gz" : "images");
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){N, ROWS, COLS}, pixels, sizeof(pixels), gz);

    idx_images images;
    ck_assert_msg(idx_read_images(path, 0, &images, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(images.n, N);
    ck_assert_uint_eq(images.rows, ROWS);
    ck_assert_uint_eq(images.cols, COLS);
    ck_assert_mem_eq(images.pixels, pixels, sizeof(pixels));
    idx_images_free(&images);
    ck_assert_ptr_null(images.pixels);
    ck_assert_uint_eq(images.n, 0);
}

START_TEST(test_images_plain) {
    check_images_round_trip(false);
}
END_TEST

START_TEST(test_images_gzip) {
    check_images_round_trip(true);
}
END_TEST

START_TEST(test_labels_plain_and_gzip) {
    uint8_t labels[25];
    for (size_t i = 0; i < sizeof(labels); i++)
        labels[i] = (uint8_t)(i * 7 % 10);
    for (int gz = 0; gz <= 1; gz++) {
        char path[128];
        tmp_path(path, sizeof(path), gz ? "labels.gz" : "labels");
        write_idx(path, IDX_MAGIC_LABELS, 1, (uint32_t[]){sizeof(labels)}, labels, sizeof(labels), gz);
        idx_labels l;
        ck_assert_msg(idx_read_labels(path, 10, &l, err, sizeof(err)) == 0, "%s", err);
        ck_assert_uint_eq(l.n, sizeof(labels));
        ck_assert_mem_eq(l.labels, labels, sizeof(labels));
        idx_labels_free(&l);
    }
}
END_TEST

/* The content decides, never the name. */
START_TEST(test_names_do_not_matter) {
    uint8_t labels[4] = {1, 0, 2, 1};
    char gz_no_suffix[128], plain_with_suffix[128];
    tmp_path(gz_no_suffix, sizeof(gz_no_suffix), "gzip-without-suffix");
    tmp_path(plain_with_suffix, sizeof(plain_with_suffix), "plain-with-suffix.gz");
    write_idx(gz_no_suffix, IDX_MAGIC_LABELS, 1, (uint32_t[]){4}, labels, 4, true);
    write_idx(plain_with_suffix, IDX_MAGIC_LABELS, 1, (uint32_t[]){4}, labels, 4, false);

    /* Make sure the first really is compressed: it starts with gzip's magic. */
    size_t size;
    uint8_t *raw = read_whole(gz_no_suffix, &size);
    ck_assert(size > 2 && raw[0] == 0x1f && raw[1] == 0x8b);
    free(raw);

    const char *paths[] = {gz_no_suffix, plain_with_suffix};
    for (int i = 0; i < 2; i++) {
        idx_labels l;
        ck_assert_msg(idx_read_labels(paths[i], 3, &l, err, sizeof(err)) == 0, "%s", err);
        ck_assert_uint_eq(l.n, 4);
        ck_assert_mem_eq(l.labels, labels, 4);
        idx_labels_free(&l);
    }
}
END_TEST

/* Several gzip members, as `cat a.gz b.gz` or an appending writer make, are one stream. */
START_TEST(test_gzip_members) {
    enum { N = 5, ROWS = 3, COLS = 3 };
    uint8_t pixels[N * ROWS * COLS];
    fill_noise(pixels, sizeof(pixels), 9);
    size_t size;
    uint8_t *file = make_idx(IDX_MAGIC_IMAGES, 3, (uint32_t[]){N, ROWS, COLS}, pixels, sizeof(pixels), &size);
    char path[128];
    tmp_path(path, sizeof(path), "members.gz");
    const size_t cuts[] = {0, 2, 7, 16, 30, size}; /* members of 2, 5, 9, 14 and the rest */
    for (size_t m = 0; m + 1 < sizeof(cuts) / sizeof(cuts[0]); m++) {
        gzFile g = gzopen(path, m == 0 ? "wb" : "ab"); /* "ab" starts a new member */
        ck_assert_ptr_nonnull(g);
        ck_assert_int_eq(gzwrite(g, file + cuts[m], (unsigned)(cuts[m + 1] - cuts[m])), (int)(cuts[m + 1] - cuts[m]));
        ck_assert_int_eq(gzclose(g), Z_OK);
    }
    free(file);
    idx_images images;
    ck_assert_msg(idx_read_images(path, 0, &images, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(images.n, N);
    ck_assert_mem_eq(images.pixels, pixels, sizeof(pixels));
    idx_images_free(&images);
}
END_TEST

START_TEST(test_missing_file) {
    char path[128];
    tmp_path(path, sizeof(path), "no-such-file");
    idx_images images = {.n = 99};
    ck_assert_int_eq(idx_read_images(path, 0, &images, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, path) && strstr(err, strerror(ENOENT)), "%s", err);
    ck_assert_uint_eq(images.n, 0);
    ck_assert_ptr_null(images.pixels);
    idx_labels labels;
    ck_assert_int_eq(idx_read_labels(path, 10, &labels, err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, path) && strstr(err, strerror(ENOENT)), "%s", err);
}
END_TEST

START_TEST(test_directory) {
    idx_images images;
    ck_assert_int_eq(idx_read_images(tmp_dir, 0, &images, err, sizeof(err)), -EISDIR);
    ck_assert_msg(strstr(err, tmp_dir) && strstr(err, "directory"), "%s", err);
}
END_TEST

/* A FIFO (or any file that is not a regular one) is refused at once: reading it would wait
 * for a writer that never comes. */
START_TEST(test_fifo) {
    char path[256];
    snprintf(path, sizeof(path), "%s/fifo-images-idx3-ubyte", tmp_dir);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    idx_images images;
    ck_assert_int_eq(idx_read_images(path, 0, &images, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, path) && strstr(err, "not a regular file"), "%s", err);
    unlink(path);
}
END_TEST

/* A read that fails: /proc/self/mem at offset 0, unmapped in every process. */
START_TEST(test_read_error) {
    if (access("/proc/self/mem", R_OK) != 0)
        return; /* no procfs here: nothing to read from */
    idx_images images;
    ck_assert_int_eq(idx_read_images("/proc/self/mem", 0, &images, err, sizeof(err)), -EIO);
    ck_assert_msg(strstr(err, "/proc/self/mem: read error after 0 of the 16 bytes of header: ") &&
                      strstr(err, strerror(EIO)),
                  "%s", err);
    ck_assert_ptr_null(images.pixels);
}
END_TEST

START_TEST(test_bad_class_count) {
    char path[128];
    tmp_path(path, sizeof(path), "labels-classes");
    write_idx(path, IDX_MAGIC_LABELS, 1, (uint32_t[]){2}, (uint8_t[]){0, 0}, 2, false);
    idx_labels l;
    ck_assert_int_eq(idx_read_labels(path, 0, &l, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "0 classes"), "%s", err);
    ck_assert_int_eq(idx_read_labels(path, 257, &l, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(idx_read_labels(path, 256, &l, err, sizeof(err)), 0);
    idx_labels_free(&l);
    ck_assert_int_eq(idx_read_labels(path, 1, &l, err, sizeof(err)), 0);
    idx_labels_free(&l);
}
END_TEST

/* limits */

/* The largest image and the most labels the limits allow are read. */
START_TEST(test_largest_allowed) {
    char path[128];
    tmp_path(path, sizeof(path), "largest-image");
    size_t pixels = DDP_MAX_IDX_ITEM_PIXELS;
    uint8_t *payload = malloc(pixels);
    fill_noise(payload, pixels, 7);
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){1, 1000, 1000}, payload, pixels, true);
    idx_images images;
    ck_assert_msg(idx_read_images(path, 0, &images, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(images.rows * images.cols, DDP_MAX_IDX_ITEM_PIXELS);
    ck_assert_mem_eq(images.pixels, payload, pixels);
    idx_images_free(&images);
    free(payload);

    tmp_path(path, sizeof(path), "most-labels");
    size_t n = DDP_MAX_IDX_ITEMS;
    payload = malloc(n);
    for (size_t i = 0; i < n; i++)
        payload[i] = (uint8_t)(i % 10);
    write_idx(path, IDX_MAGIC_LABELS, 1, (uint32_t[]){(uint32_t)n}, payload, n, false);
    idx_labels labels;
    ck_assert_msg(idx_read_labels(path, 10, &labels, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(labels.n, DDP_MAX_IDX_ITEMS);
    ck_assert_mem_eq(labels.labels, payload, n);
    idx_labels_free(&labels);
    free(payload);
}
END_TEST

/* Larger than the first allocation: the buffer grows, and a short file is still caught. */
START_TEST(test_large_file_grows_and_truncation) {
    enum { N = 280, SIDE = 256 };
    size_t size = (size_t)N * SIDE * SIDE; /* 18 MB, more than the 16 MiB first allocation */
    uint8_t *payload = malloc(size);
    fill_noise(payload, size, 3);
    char path[128];
    tmp_path(path, sizeof(path), "large");
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){N, SIDE, SIDE}, payload, size, false);
    idx_images images;
    ck_assert_msg(idx_read_images(path, 0, &images, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(images.n, N);
    ck_assert_int_eq(memcmp(images.pixels, payload, size), 0);
    idx_images_free(&images);

    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){N, SIDE, SIDE}, payload, size - 1, false);
    ck_assert_int_eq(idx_read_images(path, 0, &images, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, "the header promises 18350080 bytes of pixels, the file holds 18350079"), "%s", err);
    ck_assert_ptr_null(images.pixels);
    free(payload);
}
END_TEST

/* A header within the limits that promises gigabytes costs only what the file holds. */
START_TEST(test_lying_header) {
    char path[128];
    tmp_path(path, sizeof(path), "lying");
    uint8_t payload[10] = {0};
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){4294, 1000, 1000}, payload, sizeof(payload), true);
    idx_images images;
    ck_assert_int_eq(idx_read_images(path, 0, &images, err, sizeof(err)), -EBADMSG);
    ck_assert_msg(strstr(err, "the header promises 4294000000 bytes of pixels, the file holds 10"), "%s", err);
}
END_TEST

/* Images of another size than the caller wants are refused from the header: a file whose
 * header promises 60000 32x32 images and holds none says so, not that it is truncated. */
START_TEST(test_wanted_pixels) {
    char path[128];
    tmp_path(path, sizeof(path), "wanted");
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){60000, 32, 32}, NULL, 0, true);
    idx_images images;
    ck_assert_int_eq(idx_read_images(path, 784, &images, err, sizeof(err)), -EDOM);
    ck_assert_msg(strstr(err, "header: 32x32 images (1024 pixels each), not the 784 pixels wanted"), "%s", err);
    ck_assert_ptr_null(images.pixels);
    uint8_t payload[2 * 3 * 4];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)i;
    write_idx(path, IDX_MAGIC_IMAGES, 3, (uint32_t[]){2, 3, 4}, payload, sizeof(payload), false);
    ck_assert_msg(idx_read_images(path, 12, &images, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(images.n, 2);
    idx_images_free(&images);
}
END_TEST

/* malformed: every hostile file is refused with -EBADMSG and a message naming it. */

typedef enum {
    DAMAGE_NONE,
    DAMAGE_GZ_BLOCK,             /* the first deflate block's header: an invalid block type */
    DAMAGE_GZ_CRC,               /* a bit of the trailer's CRC-32 */
    DAMAGE_GZ_TRAILER,           /* the trailer's last 4 bytes cut off */
    DAMAGE_GZ_HALF,              /* the compressed file cut in half */
    DAMAGE_GZ_GARBAGE,           /* a gzip header with an unknown compression method */
    DAMAGE_GZ_APPEND_TEXT,       /* text after the gzip stream */
    DAMAGE_GZ_APPEND_ZERO,       /* zero padding after it */
    DAMAGE_GZ_APPEND_MAGIC_BYTE, /* the first byte of a gzip magic, alone */
} damage;

#define PAYLOAD_AS_PROMISED ((size_t)-1)

typedef struct {
    const char *name;
    bool labels; /* read as labels of 10 classes, else as images */
    bool gz;
    uint32_t magic;
    unsigned n_dims; /* sizes written after the magic */
    uint32_t dims[3];
    size_t payload;   /* bytes after the header; PAYLOAD_AS_PROMISED: what dims say */
    size_t keep;      /* when not 0: keep only this many bytes of the file (1 + bytes kept) */
    int bad_label_at; /* labels: payload[bad_label_at] = bad_label when bad_label != 0 */
    uint8_t bad_label;
    damage damage;
    const char *expected;
} hostile_case;

/* clang-format off */
static const hostile_case hostile[] = {
    {"empty", false, false, 0, 0, {0}, 0, 1, 0, 0, DAMAGE_NONE, "empty file: expected an IDX header of 16 bytes"},
    {"empty-gz", true, true, 0, 0, {0}, 0, 1, 0, 0, DAMAGE_NONE, "empty file: expected an IDX header of 8 bytes"},
    {"short-magic", false, false, IDX_MAGIC_IMAGES, 0, {0}, 0, 1 + 2, 0, 0, DAMAGE_NONE,
     "truncated header: expected 16 bytes, got 2"},
    {"short-dims", false, false, IDX_MAGIC_IMAGES, 2, {2, 2}, 0, 0, 0, 0, DAMAGE_NONE,
     "truncated header: expected 16 bytes, got 12"},
    {"short-dims-gz", true, true, IDX_MAGIC_LABELS, 0, {0}, 0, 0, 0, 0, DAMAGE_NONE,
     "truncated header: expected 8 bytes, got 4"},
    {"short-data", false, false, IDX_MAGIC_IMAGES, 3, {2, 2, 2}, 7, 0, 0, 0, DAMAGE_NONE,
     "truncated: the header promises 8 bytes of pixels, the file holds 7"},
    {"short-data-gz", false, true, IDX_MAGIC_IMAGES, 3, {2, 2, 2}, 0, 0, 0, 0, DAMAGE_NONE,
     "truncated: the header promises 8 bytes of pixels, the file holds 0"},
    {"short-labels", true, false, IDX_MAGIC_LABELS, 1, {5}, 3, 0, 0, 0, DAMAGE_NONE,
     "truncated: the header promises 5 bytes of labels, the file holds 3"},
    {"not-idx", false, false, 0x12345678, 3, {1, 1, 1}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_NONE,
     "bad magic: expected 0x00000803 (unsigned byte images, 3 dimensions), got 0x12345678: not an IDX file"},
    {"text", true, false, 0x68656c6c, 1, {1}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_NONE,
     "bad magic: expected 0x00000801 (unsigned byte labels, 1 dimension), got 0x68656c6c: not an IDX file"},
    {"labels-as-images", false, false, IDX_MAGIC_LABELS, 1, {4}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_NONE,
     "got 0x00000801: 1 dimension, IDX images have 3 (a labels file?)"},
    {"images-as-labels", true, false, IDX_MAGIC_IMAGES, 3, {1, 1, 1}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_NONE,
     "got 0x00000803: 3 dimensions, IDX labels have 1 (an images file?)"},
    {"float-type", false, false, 0x00000d03, 3, {1, 1, 1}, 4, 0, 0, 0, DAMAGE_NONE,
     "got 0x00000d03: element type 0x0d is not unsigned byte (0x08)"},
    {"signed-byte-type", true, false, 0x00000901, 1, {1}, 1, 0, 0, 0, DAMAGE_NONE,
     "element type 0x09 is not unsigned byte (0x08)"},
    {"zero-dims", false, false, 0x00000800, 0, {0}, 0, 0, 0, 0, DAMAGE_NONE,
     "got 0x00000800: 0 dimensions, IDX images have 3"},
    {"four-dims", false, false, 0x00000804, 3, {1, 1, 1}, 0, 0, 0, 0, DAMAGE_NONE,
     "got 0x00000804: 4 dimensions, IDX images have 3"},
    {"zero-count", false, false, IDX_MAGIC_IMAGES, 3, {0, 28, 28}, 0, 0, 0, 0, DAMAGE_NONE, "header: image count is 0"},
    {"zero-rows", false, false, IDX_MAGIC_IMAGES, 3, {1, 0, 28}, 0, 0, 0, 0, DAMAGE_NONE, "header: rows is 0"},
    {"zero-cols", false, true, IDX_MAGIC_IMAGES, 3, {1, 28, 0}, 0, 0, 0, 0, DAMAGE_NONE, "header: cols is 0"},
    {"zero-labels", true, false, IDX_MAGIC_LABELS, 1, {0}, 0, 0, 0, 0, DAMAGE_NONE, "header: label count is 0"},
    {"huge-count", false, false, IDX_MAGIC_IMAGES, 3, {0xffffffffu, 28, 28}, 0, 0, 0, 0, DAMAGE_NONE,
     "header: image count 4294967295 exceeds the limit of 10000000"},
    {"one-too-many", true, false, IDX_MAGIC_LABELS, 1, {DDP_MAX_IDX_ITEMS + 1}, 0, 0, 0, 0, DAMAGE_NONE,
     "header: label count 10000001 exceeds the limit of 10000000"},
    {"huge-image", false, false, IDX_MAGIC_IMAGES, 3, {1, 65536, 65536}, 0, 0, 0, 0, DAMAGE_NONE,
     "header: 65536x65536 images (4294967296 pixels each) exceed the limit of 1000000 pixels"},
    {"one-pixel-too-many", false, false, IDX_MAGIC_IMAGES, 3, {1, 1000, 1001}, 0, 0, 0, 0, DAMAGE_NONE,
     "header: 1000x1001 images (1001000 pixels each) exceed the limit of 1000000 pixels"},
    {"huge-total", false, false, IDX_MAGIC_IMAGES, 3, {4295, 1000, 1000}, 0, 0, 0, 0, DAMAGE_NONE,
     "header: 4295000000 bytes of pixels exceed the limit of 4294967296"},
    {"trailing", false, false, IDX_MAGIC_IMAGES, 3, {1, 2, 2}, 7, 0, 0, 0, DAMAGE_NONE,
     "3 trailing bytes after the 4 bytes of pixels the header promises"},
    {"trailing-gz", true, true, IDX_MAGIC_LABELS, 1, {2}, 3, 0, 0, 0, DAMAGE_NONE,
     "1 trailing bytes after the 2 bytes of labels the header promises"},
    {"trailing-lots", true, false, IDX_MAGIC_LABELS, 1, {1}, 100001, 0, 0, 0, DAMAGE_NONE,
     "at least 65536 trailing bytes after the 1 bytes of labels"},
    {"label-10", true, false, IDX_MAGIC_LABELS, 1, {4}, PAYLOAD_AS_PROMISED, 0, 2, 10, DAMAGE_NONE,
     "label 10 at index 2 is out of range [0, 10)"},
    {"label-255-gz", true, true, IDX_MAGIC_LABELS, 1, {300}, PAYLOAD_AS_PROMISED, 0, 299, 255, DAMAGE_NONE,
     "label 255 at index 299 is out of range [0, 10)"},
    {"gz-bad-block", false, true, IDX_MAGIC_IMAGES, 3, {4, 8, 8}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_BLOCK,
     "corrupt gzip data after 0 of the 16 bytes of header: invalid block type"},
    {"gz-bad-crc", false, true, IDX_MAGIC_IMAGES, 3, {4, 8, 8}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_CRC,
     "corrupt gzip data after 256 of the 256 bytes of pixels: incorrect data check"},
    {"gz-no-length", true, true, IDX_MAGIC_LABELS, 1, {64}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_TRAILER,
     "truncated gzip stream: unexpected end of file after 64 of the 64 bytes of labels"},
    /* Larger than the input buffer: the damage is met after several refills. */
    {"gz-bad-crc-large", false, true, IDX_MAGIC_IMAGES, 3, {3, 100, 1000}, PAYLOAD_AS_PROMISED, 0, 0, 0,
     DAMAGE_GZ_CRC, "corrupt gzip data after 300000 of the 300000 bytes of pixels: incorrect data check"},
    {"gz-no-length-large", false, true, IDX_MAGIC_IMAGES, 3, {3, 100, 1000}, PAYLOAD_AS_PROMISED, 0, 0, 0,
     DAMAGE_GZ_TRAILER, "truncated gzip stream: unexpected end of file after 300000 of the 300000 bytes of pixels"},
    {"gz-half", false, true, IDX_MAGIC_IMAGES, 3, {10, 20, 20}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_HALF,
     "truncated gzip stream: unexpected end of file after "},
    {"gz-bad-method", false, true, IDX_MAGIC_IMAGES, 3, {1, 2, 2}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_GARBAGE,
     "corrupt gzip data after 0 of the 16 bytes of header: unknown compression method"},
    {"gz-garbage-after", true, true, IDX_MAGIC_LABELS, 1, {3}, PAYLOAD_AS_PROMISED, 0, 0, 0, DAMAGE_GZ_APPEND_TEXT,
     "bytes that are not gzip data after the gzip stream (after 3 of the 3 bytes of labels)"},
    {"gz-zeros-after", false, true, IDX_MAGIC_IMAGES, 3, {1, 2, 2}, PAYLOAD_AS_PROMISED, 0, 0, 0,
     DAMAGE_GZ_APPEND_ZERO, "bytes that are not gzip data after the gzip stream (after 4 of the 4 bytes of pixels)"},
    {"gz-lone-byte-after", true, true, IDX_MAGIC_LABELS, 1, {3}, PAYLOAD_AS_PROMISED, 0, 0, 0,
     DAMAGE_GZ_APPEND_MAGIC_BYTE, "bytes that are not gzip data after the gzip stream"},
    {"one-byte", false, false, 0, 0, {0}, 0, 1 + 1, 0, 0, DAMAGE_NONE, "truncated header: expected 16 bytes, got 1"},
};
/* clang-format on */

static void apply_damage(const char *path, damage d) {
    size_t size;
    uint8_t *data = read_whole(path, &size);
    data = realloc(data, size + 16);
    ck_assert(size > 18 && data[0] == 0x1f && data[1] == 0x8b && (data[3] & 0x08) == 0); /* no file name */
    switch (d) {
    case DAMAGE_GZ_BLOCK:
        data[10] = 0xff; /* BFINAL 1, BTYPE 11: reserved */
        break;
    case DAMAGE_GZ_CRC:
        data[size - 8] ^= 0x01;
        break;
    case DAMAGE_GZ_TRAILER:
        size -= 4;
        break;
    case DAMAGE_GZ_HALF:
        size /= 2;
        break;
    case DAMAGE_GZ_GARBAGE:
        data[2] = 7; /* CM: only 8, deflate, exists */
        break;
    case DAMAGE_GZ_APPEND_TEXT:
        memcpy(data + size, "garbage", 7);
        size += 7;
        break;
    case DAMAGE_GZ_APPEND_ZERO:
        memset(data + size, 0, 16);
        size += 16;
        break;
    case DAMAGE_GZ_APPEND_MAGIC_BYTE:
        data[size++] = 0x1f;
        break;
    case DAMAGE_NONE:
        break;
    }
    write_file(path, data, size, false);
    free(data);
}

START_TEST(test_hostile) {
    const hostile_case *c = &hostile[_i];
    size_t promised = 1;
    for (unsigned d = 0; d < c->n_dims && d < 3; d++)
        promised *= c->dims[d];
    size_t payload_size = c->payload == PAYLOAD_AS_PROMISED ? promised : c->payload;
    uint8_t *payload = calloc(payload_size + 1, 1);
    if (c->labels)
        for (size_t i = 0; i < payload_size; i++)
            payload[i] = (uint8_t)(i % 10);
    else
        fill_noise(payload, payload_size, 5);
    if (c->bad_label)
        payload[c->bad_label_at] = c->bad_label;

    size_t size;
    uint8_t *file = make_idx(c->magic, c->n_dims, c->dims, payload, payload_size, &size);
    if (c->keep)
        size = c->keep - 1;
    char path[128];
    tmp_path(path, sizeof(path), c->name);
    write_file(path, file, size, c->gz);
    if (c->damage != DAMAGE_NONE)
        apply_damage(path, c->damage);
    free(file);
    free(payload);

    int r;
    void *data;
    if (c->labels) {
        idx_labels l;
        r = idx_read_labels(path, 10, &l, err, sizeof(err));
        data = l.labels;
    } else {
        idx_images images;
        r = idx_read_images(path, 0, &images, err, sizeof(err));
        data = images.pixels;
    }
    ck_assert_msg(r == -EBADMSG, "%s: returned %d (%s), expected -EBADMSG", c->name, r, err);
    ck_assert_msg(strstr(err, c->expected), "%s: expected '%s' in '%s'", c->name, c->expected, err);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "%s: the message does not start with the path: %s", c->name,
                  err);
    ck_assert_ptr_null(data);
}
END_TEST

int main(int argc, char **argv) {
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/check_idx_XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("idx");
    TCase *core = tcase_create("core"), *limits = tcase_create("limits"), *bad = tcase_create("malformed");
    TCase *all[] = {core, limits, bad};
    for (int i = 0; i < 3; i++) {
        tcase_set_timeout(all[i], 60);
        suite_add_tcase(s, all[i]);
    }
    tcase_add_test(core, test_images_plain);
    tcase_add_test(core, test_images_gzip);
    tcase_add_test(core, test_labels_plain_and_gzip);
    tcase_add_test(core, test_names_do_not_matter);
    tcase_add_test(core, test_gzip_members);
    tcase_add_test(core, test_missing_file);
    tcase_add_test(core, test_directory);
    tcase_add_test(core, test_fifo);
    tcase_add_test(core, test_read_error);
    tcase_add_test(core, test_bad_class_count);
    tcase_add_test(limits, test_largest_allowed);
    tcase_add_test(limits, test_large_file_grows_and_truncation);
    tcase_add_test(limits, test_lying_header);
    tcase_add_test(limits, test_wanted_pixels);
    tcase_add_loop_test(bad, test_hostile, 0, (int)(sizeof(hostile) / sizeof(hostile[0])));
    int code = check_main(s, argc, argv);
    remove_tree(tmp_dir);
    return code;
}
