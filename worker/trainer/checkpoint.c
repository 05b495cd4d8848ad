#include "worker/trainer/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "common/atomic_file.h"

#define CHECKPOINT_MAGIC "DDPCKPT1"
#define CHECKPOINT_FLAG "--checkpoint" /* the only path a checkpoint is written to */

typedef struct {
    char magic[8];
    uint32_t version;
    uint32_t has_velocity;
    char model[64];
    uint64_t n_params, step, epoch, step_in_epoch, seed;
    uint32_t world_size, global_batch;
} checkpoint_header;

/* Version 2 adds, after the header, the settings that decide what training does next. */
typedef struct {
    char sampler[16];
    double lr, momentum;
} checkpoint_settings;

/* Version 3 adds, after them, what data the run trained on. */
typedef struct {
    uint64_t train_samples, data_fingerprint;
} checkpoint_data;

_Static_assert(sizeof(checkpoint_header) == 128 && sizeof(checkpoint_settings) == 32 && sizeof(checkpoint_data) == 16,
               "the file's layout");

/* Writes n bytes and folds them into crc. */
static int write_all(int fd, const void *p, size_t n, uLong *crc) {
    for (const char *c = p; n > 0;) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : n;
        ssize_t w = write(fd, c, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        *crc = crc32(*crc, (const Bytef *)c, (uInt)w);
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int checkpoint_write(const char *path, const checkpoint_info *info, const float *params, const float *velocity,
                     bool *ret_replaced, char *err, size_t err_size) {
    atomic_file f;
    if (ret_replaced)
        *ret_replaced = false;
    /* Only the owner reads it: parameters are the user's work. */
    int r = atomic_file_open(&f, path, 0600, CHECKPOINT_FLAG, err, err_size);
    if (r < 0)
        return r;
    checkpoint_header h = {.version = 3,
                           .has_velocity = velocity != NULL,
                           .n_params = info->n_params,
                           .step = info->step,
                           .epoch = info->epoch,
                           .step_in_epoch = info->step_in_epoch,
                           .seed = info->seed,
                           .world_size = info->world_size,
                           .global_batch = info->global_batch};
    memcpy(h.magic, CHECKPOINT_MAGIC, 8);
    snprintf(h.model, sizeof(h.model), "%s", info->model);
    checkpoint_settings settings = {.lr = info->lr, .momentum = info->momentum};
    snprintf(settings.sampler, sizeof(settings.sampler), "%s", info->sampler);
    checkpoint_data data = {.train_samples = info->train_samples, .data_fingerprint = info->data_fingerprint};
    uLong crc = crc32(0L, Z_NULL, 0);
    size_t bytes = info->n_params * sizeof(float);
    r = write_all(f.fd, &h, sizeof(h), &crc);
    if (r == 0)
        r = write_all(f.fd, &settings, sizeof(settings), &crc);
    if (r == 0)
        r = write_all(f.fd, &data, sizeof(data), &crc);
    if (r == 0)
        r = write_all(f.fd, params, bytes, &crc);
    if (r == 0 && velocity)
        r = write_all(f.fd, velocity, bytes, &crc);
    uint32_t crc32_le = (uint32_t)crc;
    uLong ignored = 0;
    if (r == 0)
        r = write_all(f.fd, &crc32_le, sizeof(crc32_le), &ignored);
    if (r < 0) {
        snprintf(err, err_size, "%s %s: cannot write the checkpoint: %s", CHECKPOINT_FLAG, path, strerror(-r));
        atomic_file_abort(&f);
        return r;
    }
    r = atomic_file_commit(&f, CHECKPOINT_FLAG, err, err_size);
    if (ret_replaced)
        *ret_replaced = f.replaced;
    return r;
}

int checkpoint_read(const char *path, const checkpoint_info *expect, checkpoint_info *ret_info, float *params,
                    float *velocity, char *err, size_t err_size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int r = -errno;
        snprintf(err, err_size, "%s: cannot open the checkpoint: %s", path, strerror(-r));
        return r;
    }
    checkpoint_header h;
    checkpoint_settings settings = {0};
    checkpoint_data data = {0};
    int r = 0;
    uLong crc = crc32(0L, Z_NULL, 0);
    if (fread(&h, sizeof(h), 1, f) != 1 || memcmp(h.magic, CHECKPOINT_MAGIC, 8) != 0 || h.version < 1 ||
        h.version > 3) {
        snprintf(err, err_size, "%s: not a ddp-worker checkpoint (bad magic or version)", path);
        r = -EBADMSG;
        goto out;
    }
    if ((h.version >= 2 && fread(&settings, sizeof(settings), 1, f) != 1) ||
        (h.version >= 3 && fread(&data, sizeof(data), 1, f) != 1)) {
        snprintf(err, err_size, "%s: truncated: the checkpoint ends inside its settings", path);
        r = -EBADMSG;
        goto out;
    }
    h.model[sizeof(h.model) - 1] = '\0';
    if (strcmp(h.model, expect->model) != 0 || h.n_params != expect->n_params) {
        snprintf(err, err_size, "%s: a checkpoint of model '%s' (%llu parameters), not '%s' (%llu)", path, h.model,
                 (unsigned long long)h.n_params, expect->model, (unsigned long long)expect->n_params);
        r = -EINVAL;
        goto out;
    }
    crc = crc32(crc, (const Bytef *)&h, sizeof(h));
    if (h.version >= 2)
        crc = crc32(crc, (const Bytef *)&settings, sizeof(settings));
    if (h.version >= 3)
        crc = crc32(crc, (const Bytef *)&data, sizeof(data));
    size_t bytes = h.n_params * sizeof(float);
    float *dst[2] = {params, velocity};
    for (int k = 0; k < (h.has_velocity ? 2 : 1); k++) {
        float *into = dst[k];
        float *scratch = NULL;
        if (!into && !(into = scratch = malloc(bytes ? bytes : 1))) {
            r = -ENOMEM;
            goto out;
        }
        if (fread(into, 1, bytes, f) != bytes) {
            snprintf(err, err_size, "%s: truncated: the checkpoint ends inside its %s", path,
                     k ? "velocity" : "parameters");
            free(scratch);
            r = -EBADMSG;
            goto out;
        }
        for (size_t done = 0; done < bytes;) { /* uInt is 32 bits: fold in slices */
            size_t chunk = bytes - done > (1u << 30) ? (1u << 30) : bytes - done;
            crc = crc32(crc, (const Bytef *)into + done, (uInt)chunk);
            done += chunk;
        }
        free(scratch);
    }
    uint32_t stored;
    int extra;
    if (fread(&stored, sizeof(stored), 1, f) != 1 || (extra = fgetc(f)) != EOF) {
        snprintf(err, err_size, "%s: the checkpoint is %s", path, ferror(f) ? "unreadable" : "truncated or too long");
        r = -EBADMSG;
        goto out;
    }
    if (stored != (uint32_t)crc) {
        snprintf(err, err_size, "%s: checksum mismatch (stored %08x, computed %08x): the checkpoint is corrupt", path,
                 stored, (unsigned)crc);
        r = -EBADMSG;
        goto out;
    }
    *ret_info = (checkpoint_info){.n_params = h.n_params,
                                  .step = h.step,
                                  .epoch = h.epoch,
                                  .step_in_epoch = h.step_in_epoch,
                                  .seed = h.seed,
                                  .world_size = h.world_size,
                                  .global_batch = h.global_batch,
                                  .has_velocity = h.has_velocity,
                                  .has_settings = h.version >= 2,
                                  .lr = settings.lr,
                                  .momentum = settings.momentum,
                                  .has_data = h.version >= 3,
                                  .train_samples = data.train_samples,
                                  .data_fingerprint = data.data_fingerprint};
    snprintf(ret_info->model, sizeof(ret_info->model), "%s", h.model);
    settings.sampler[sizeof(settings.sampler) - 1] = '\0';
    snprintf(ret_info->sampler, sizeof(ret_info->sampler), "%s", settings.sampler);
out:
    fclose(f);
    return r;
}
