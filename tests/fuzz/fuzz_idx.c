/* The IDX reader (Fashion-MNIST's files, gzip'd or plain) on any bytes: as images and as
 * labels. It must refuse what is not one, by name, and never read or allocate past what
 * the file holds. */
#include "tests/fuzz/fuzz_input.h"
#include "worker/trainer/idx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_file(data, size, path, sizeof(path));
    if (fd < 0)
        return 0;
    idx_images images = {0};
    if (idx_read_images(path, 0, &images, err, sizeof(err)) == 0 && images.n) /* touch what it gave */
        images.pixels[(size_t)images.n * images.rows * images.cols - 1] ^= 1;
    idx_images_free(&images);
    idx_labels labels = {0};
    if (idx_read_labels(path, 10, &labels, err, sizeof(err)) == 0 && labels.n && labels.labels[labels.n - 1] >= 10)
        __builtin_trap(); /* a label out of range got through */
    idx_labels_free(&labels);
    close(fd);
    return 0;
}
