/* IDX files on disk for the unit tests; see idx_files.h. */
#include "idx_files.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

void write_file(const char *path, const void *data, size_t size, bool gz) {
    if (gz) {
        gzFile g = gzopen(path, "wb");
        ck_assert_ptr_nonnull(g);
        if (size)
            ck_assert_int_eq(gzwrite(g, data, (unsigned)size), (int)size);
        ck_assert_int_eq(gzclose(g), Z_OK);
        return;
    }
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, size, f), size);
    ck_assert_int_eq(fclose(f), 0);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint8_t *make_idx(uint32_t magic, unsigned n_dims, const uint32_t *dims, const uint8_t *payload, size_t payload_size,
                  size_t *ret_size) {
    size_t size = 4 + 4 * (size_t)n_dims + payload_size;
    uint8_t *buf = malloc(size + 1);
    ck_assert_ptr_nonnull(buf);
    put_be32(buf, magic);
    for (unsigned d = 0; d < n_dims; d++)
        put_be32(buf + 4 + 4 * d, dims[d]);
    if (payload_size)
        memcpy(buf + 4 + 4 * n_dims, payload, payload_size);
    *ret_size = size;
    return buf;
}

void write_idx(const char *path, uint32_t magic, unsigned n_dims, const uint32_t *dims, const uint8_t *payload,
               size_t payload_size, bool gz) {
    size_t size;
    uint8_t *buf = make_idx(magic, n_dims, dims, payload, payload_size, &size);
    write_file(path, buf, size, gz);
    free(buf);
}

void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(path);
        else
            unlink(path);
    }
    closedir(d);
    rmdir(dir);
}
