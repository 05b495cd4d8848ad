/* IDX files, the format of MNIST and Fashion-MNIST: a big-endian header (magic 0x0000TTDD,
 * TT the element type, DD the number of dimensions, then DD 32-bit sizes) and the elements,
 * row-major. Only unsigned bytes (TT = 0x08) are read: images with 3 dimensions (n, rows,
 * cols), labels with 1 (n).
 *
 * A file may be gzip'd (one member or several, inflated with zlib) or plain; the content
 * decides, never the name. Everything is checked: the magic, every dimension against
 * DDP_MAX_IDX_*, the file holding exactly the bytes the header promises (and nothing after
 * its gzip stream), and the labels against the number of classes. A header never makes us
 * allocate more than the file turns out to hold.
 *
 * Errors: -ENOENT, -EACCES, ... (the file cannot be opened; err has the path and strerror),
 * -EBADMSG (a bad header, truncated or trailing data, a label out of range, a corrupt or
 * truncated gzip stream; err names the file and what is wrong, with zlib's text for gzip),
 * -EIO (a read error), -ENOMEM, -EINVAL (bad arguments). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* unsigned bytes, 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* unsigned bytes, 1 dimension */

typedef struct {
    uint32_t n, rows, cols;
    uint8_t *pixels; /* (n, rows*cols) */
} idx_images;

typedef struct {
    uint32_t n;
    uint8_t *labels; /* (n) */
} idx_labels;

/* On failure *ret is left zeroed: idx_*_free() on it is harmless. want_pixels (0: any):
 * the rows * cols each image must have, checked against the header before the payload is
 * read (a file of other images is not inflated only to be refused): -EDOM if not. */
int idx_read_images(const char *path, uint32_t want_pixels, idx_images *ret, char *err, size_t err_size);
/* The same, the header's image count also checked against want_n (0: any) before the
 * payload is read: -ERANGE if not, ret->n then the count it says (nothing else read). */
int idx_read_images_of(const char *path, uint32_t want_pixels, uint32_t want_n, idx_images *ret, char *err,
                       size_t err_size);
/* Every label must lie in [0, n_classes); n_classes in [1, 256]. */
int idx_read_labels(const char *path, unsigned n_classes, idx_labels *ret, char *err, size_t err_size);

void idx_images_free(idx_images *images);
void idx_labels_free(idx_labels *labels);
