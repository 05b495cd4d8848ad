#include "server/ps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/reduce.h"

int ps_init(ps_state *ps, const uint64_t *counts, size_t n_buckets, uint32_t world) {
    *ps = (ps_state){.world = world, .n_buckets = n_buckets};
    ps->buckets = calloc(n_buckets ? n_buckets : 1, sizeof(ps_bucket));
    if (!ps->buckets)
        return -ENOMEM;
    for (size_t i = 0; i < n_buckets; i++) {
        ps_bucket *b = &ps->buckets[i];
        b->count = counts[i];
        b->pushed = calloc(world, sizeof(zmq_msg_t));
        b->arrived = calloc(world, sizeof(bool));
        if (!b->pushed || !b->arrived) {
            ps_free(ps);
            return -ENOMEM;
        }
    }
    return 0;
}

static void ps_bucket_clear(ps_bucket *b, uint32_t world) {
    for (uint32_t r = 0; r < world; r++)
        if (b->arrived[r]) {
            zmq_msg_close(&b->pushed[r]);
            b->arrived[r] = false;
        }
    b->n_arrived = 0;
}

void ps_free(ps_state *ps) {
    for (size_t i = 0; ps->buckets && i < ps->n_buckets; i++) {
        ps_bucket *b = &ps->buckets[i];
        if (b->pushed && b->arrived)
            ps_bucket_clear(b, ps->world);
        free(b->pushed);
        free(b->arrived);
    }
    free(ps->buckets);
    *ps = (ps_state){0};
}

int ps_push(ps_state *ps, uint32_t rank, uint64_t step, uint32_t bucket, zmq_msg_t *payload, zmq_msg_t *ret_average,
            char *err, size_t err_size) {
    if (bucket >= ps->n_buckets) {
        snprintf(err, err_size, "bucket %u: the job's layout has %zu buckets", bucket, ps->n_buckets);
        return -EINVAL;
    }
    ps_bucket *b = &ps->buckets[bucket];
    size_t bytes = zmq_msg_size(payload);
    if (bytes != b->count * sizeof(float)) {
        snprintf(err, err_size, "bucket %u: %zu bytes where the layout says %llu f32 elements", bucket, bytes,
                 (unsigned long long)b->count);
        return -EMSGSIZE;
    }
    if (step != b->step) {
        snprintf(err, err_size, "bucket %u: a push for step %llu while the job is at step %llu", bucket,
                 (unsigned long long)step, (unsigned long long)b->step);
        return -EPROTO;
    }
    if (b->arrived[rank]) {
        snprintf(err, err_size, "bucket %u: rank %u pushed step %llu twice", bucket, rank, (unsigned long long)step);
        return -EPROTO;
    }
    zmq_msg_init(&b->pushed[rank]);
    zmq_msg_move(&b->pushed[rank], payload);
    b->arrived[rank] = true;
    if (++b->n_arrived < ps->world)
        return 0;

    /* Everyone is in: sum in rank order, then divide. */
    if (zmq_msg_init_size(ret_average, bytes) < 0) {
        ps_bucket_clear(b, ps->world);
        snprintf(err, err_size, "out of memory for bucket %u", bucket);
        return -ENOMEM;
    }
    float *avg = zmq_msg_data(ret_average);
    memcpy(avg, zmq_msg_data(&b->pushed[0]), bytes);
    for (uint32_t r = 1; r < ps->world; r++) {
        /* a received frame may sit at any offset: reduce from an aligned copy where needed */
        const void *in = zmq_msg_data(&b->pushed[r]);
        float *aligned = NULL;
        if ((uintptr_t)in % sizeof(float)) {
            if (!(aligned = malloc(bytes))) {
                zmq_msg_close(ret_average);
                ps_bucket_clear(b, ps->world);
                snprintf(err, err_size, "out of memory for bucket %u", bucket);
                return -ENOMEM;
            }
            memcpy(aligned, in, bytes);
            in = aligned;
        }
        reduce_into(avg, in, b->count, DTYPE_F32, REDUCE_SUM);
        free(aligned);
    }
    reduce_finish(avg, b->count, DTYPE_F32, REDUCE_AVG, (int)ps->world);
    ps_bucket_clear(b, ps->world);
    b->step++;
    return 1;
}
