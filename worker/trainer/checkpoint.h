/* Checkpoints: what a job needs to continue bit-for-bit as if it had never stopped: the
 * parameters, the optimizer's velocity, and where training was (step, epoch, position in
 * the epoch; the samplers' order follows from the seed and the epoch).
 *
 * File: a fixed little-endian header, the settings training goes on with (sampler, SGD's
 * lr and momentum: version 2; version 1 files lack them and are read too), what data it
 * trained on (the training samples and a fingerprint: version 3), then params and
 * velocity as float32, then a CRC-32 (zlib) of everything before it. Written to a temporary file, fsync'd and renamed
 * over the old one, so a crash leaves the previous checkpoint or the new one, never half. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char model[64];
    uint64_t n_params;
    uint64_t step, epoch, step_in_epoch;
    uint64_t seed;
    uint32_t world_size, global_batch;
    uint32_t has_velocity;
    bool has_settings; /* read: the file records the three below (version 2) */
    char sampler[16];
    double lr, momentum;
    bool has_data; /* read: the file records the two below (version 3) */
    uint64_t train_samples, data_fingerprint;
} checkpoint_info;

/* params and velocity are host arrays of info->n_params (velocity may be NULL). On failure
 * *ret_replaced (may be NULL) says whether the new checkpoint is in place all the same (only
 * its directory's sync failed: it may not survive a power loss) or the old one stays. */
int checkpoint_write(const char *path, const checkpoint_info *info, const float *params, const float *velocity,
                     bool *ret_replaced, char *err, size_t err_size);
/* Reads a checkpoint whose model and size must match expect->model and expect->n_params
 * (-EINVAL when they do not). Refuses a corrupt file (bad magic, size, checksum: -EBADMSG)
 * with a message naming it. */
int checkpoint_read(const char *path, const checkpoint_info *expect, checkpoint_info *ret_info, float *params,
                    float *velocity, char *err, size_t err_size);
