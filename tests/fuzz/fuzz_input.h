/* What the fuzz targets share: the input as a file (an anonymous memfd, named through
 * /proc/self/fd, a regular file as the readers require), and a cursor over the input for
 * targets that take it apart into several messages. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data to a new memfd and puts its path in path; returns the fd (close it after)
 * or -1. */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t path_size) {
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, path_size, "/proc/self/fd/%d", fd);
    return fd;
}

typedef struct {
    const uint8_t *data;
    size_t size;
} fuzz_cursor;

static inline uint8_t fuzz_byte(fuzz_cursor *c) {
    if (!c->size)
        return 0;
    c->size--;
    return *c->data++;
}

/* The next n bytes (fewer at the end); *ret points into the input. */
static inline size_t fuzz_bytes(fuzz_cursor *c, size_t n, const uint8_t **ret) {
    if (n > c->size)
        n = c->size;
    *ret = c->data;
    c->data += n;
    c->size -= n;
    return n;
}
