#include "server/generation_file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/atomic_file.h"
#include "common/limits.h"

static int generation_path(const char *dir, char *path, size_t size) {
    return (size_t)snprintf(path, size, "%s/generation", dir) < size ? 0 : -ENAMETOOLONG;
}

int generation_load(const char *dir, uint64_t *ret, char *err, size_t err_size) {
    char path[4096], text[32] = "";
    int r = generation_path(dir, path, sizeof(path));
    if (r < 0) {
        snprintf(err, err_size, "--state-dir %.64s...: too long", dir);
        return r;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        *ret = 0;
        if (errno == ENOENT)
            return 0;
        r = -errno;
        snprintf(err, err_size, "%s: cannot read it: %s", path, strerror(errno));
        return r;
    }
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || text[0] < '0' || text[0] > '9' || (*end && strcmp(end, "\n") != 0) ||
        v > DDP_MAX_GENERATION) {
        snprintf(err, err_size, "%s: '%.20s' is not a generation number (remove it to start again from 1)", path, text);
        return -EINVAL;
    }
    *ret = v;
    return 0;
}

int generation_save(const char *dir, uint64_t generation, char *err, size_t err_size) {
    char path[4096], text[32];
    int r = generation_path(dir, path, sizeof(path));
    if (r < 0) {
        snprintf(err, err_size, "--state-dir %.64s...: too long", dir);
        return r;
    }
    atomic_file f;
    if ((r = atomic_file_open(&f, path, 0644, "--state-dir", err, err_size)) < 0)
        return r;
    int len = snprintf(text, sizeof(text), "%" PRIu64 "\n", generation);
    if (write(f.fd, text, (size_t)len) != len) {
        r = errno ? -errno : -EIO;
        snprintf(err, err_size, "%s: cannot write it: %s", path, strerror(-r));
        atomic_file_abort(&f);
        return r;
    }
    return atomic_file_commit(&f, "--state-dir", err, err_size);
}
