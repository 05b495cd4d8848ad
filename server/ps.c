#include "server/ps.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ps_init(ps_state *ps, const uint64_t *counts, size_t n_buckets, uint32_t world) {
    *ps = (ps_state){.world = world, .n_buckets = n_buckets};
    ps->buckets = calloc(n_buckets ? n_buckets : 1, sizeof(ps_bucket));
    if (!ps->buckets)
        return -ENOMEM;
    for (size_t i = 0; i < n_buckets; i++) {
        ps_bucket *b = &ps->buckets[i];
        b->count = counts[i];
        b->offset = ps->total;
        ps->total += counts[i];
        b->pushed = calloc(world, sizeof(zmq_msg_t));
        b->inputs = calloc(world, sizeof(float *));
        b->copies = calloc(world, sizeof(float *));
        b->arrived = calloc(world, sizeof(bool));
        b->framed = calloc(world, sizeof(bool));
        b->lacking = calloc(world, sizeof(bool));
        b->lost = calloc(world, sizeof(bool));
        b->average_from = -1;
        if (!b->pushed || !b->inputs || !b->copies || !b->arrived || !b->framed || !b->lacking || !b->lost) {
            ps_free(ps);
            return -ENOMEM;
        }
    }
    if (!(ps->own_average = malloc((ps->total ? ps->total : 1) * sizeof(float)))) {
        ps_free(ps);
        return -ENOMEM;
    }
    ps->average = ps->own_average;
    return 0;
}

static void ps_bucket_clear(ps_bucket *b, uint32_t world) {
    for (uint32_t r = 0; r < world; r++) {
        if (b->framed[r])
            zmq_msg_close(&b->pushed[r]);
        free(b->copies[r]);
        b->copies[r] = NULL;
        b->inputs[r] = NULL;
        b->arrived[r] = b->framed[r] = false;
    }
    b->n_arrived = 0;
}

void ps_free(ps_state *ps) {
    for (size_t i = 0; ps->buckets && i < ps->n_buckets; i++) {
        ps_bucket *b = &ps->buckets[i];
        if (b->pushed && b->inputs && b->copies && b->arrived && b->framed)
            ps_bucket_clear(b, ps->world);
        free(b->pushed);
        free((void *)b->inputs);
        free(b->copies);
        free(b->arrived);
        free(b->framed);
        free(b->lacking);
        free(b->lost);
    }
    free(ps->buckets);
    free(ps->own_average);
    *ps = (ps_state){0};
}

void ps_set_average(ps_state *ps, float *block) {
    ps->average = block;
}

const float *ps_average(const ps_state *ps, uint32_t bucket) {
    return ps->average + ps->buckets[bucket].offset;
}

int ps_push(ps_state *ps, uint32_t rank, uint64_t step, uint32_t bucket, zmq_msg_t *payload, const float *segment,
            char *err, size_t err_size) {
    if (bucket >= ps->n_buckets) {
        snprintf(err, err_size, "bucket %u: the job's layout has %zu buckets", bucket, ps->n_buckets);
        return -EINVAL;
    }
    ps_bucket *b = &ps->buckets[bucket];
    size_t bytes = b->count * sizeof(float);
    if (payload && zmq_msg_size(payload) != bytes) {
        snprintf(err, err_size, "bucket %u: %zu bytes where the layout says %llu f32 elements", bucket,
                 zmq_msg_size(payload), (unsigned long long)b->count);
        return -EMSGSIZE;
    }
    if (b->lost[rank] && step + 1 == b->step) { /* its average went with the ddpd before: given back instead */
        b->lost[rank] = false;
        return 0;
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
    if (payload) {
        zmq_msg_init(&b->pushed[rank]);
        zmq_msg_move(&b->pushed[rank], payload);
        b->framed[rank] = true;
        const void *data = zmq_msg_data(&b->pushed[rank]);
        if ((uintptr_t)data % sizeof(float)) { /* a received frame may sit at any offset */
            if (!(b->copies[rank] = malloc(bytes ? bytes : 1))) {
                ps_bucket_clear(b, ps->world);
                snprintf(err, err_size, "out of memory for bucket %u", bucket);
                return -ENOMEM;
            }
            memcpy(b->copies[rank], data, bytes);
            data = b->copies[rank];
        }
        b->inputs[rank] = data;
    } else {
        b->inputs[rank] = segment + b->offset;
    }
    b->arrived[rank] = true;
    b->lost[rank] = false; /* a step on: that push is not coming again */
    if (++b->n_arrived < ps->world)
        return 0;
    ps_reduce_average(ps->average + b->offset, b->inputs, ps->world, b->count);
    ps_bucket_clear(b, ps->world);
    b->step++;
    return 1;
}

void ps_mark_behind(ps_state *ps, uint32_t bucket, uint32_t rank, int32_t from) {
    ps_bucket *b = &ps->buckets[bucket];
    b->lacking[rank] = b->lost[rank] = true;
    b->average_from = from;
}

bool ps_awaits_average(const ps_state *ps) {
    for (size_t i = 0; i < ps->n_buckets; i++)
        if (ps->buckets[i].average_from >= 0)
            return true;
    return false;
}

int ps_give_back(ps_state *ps, uint32_t from, uint64_t step, uint32_t bucket, const zmq_msg_t *payload, char *err,
                 size_t err_size) {
    if (bucket >= ps->n_buckets) {
        snprintf(err, err_size, "bucket %u: the job's layout has %zu buckets", bucket, ps->n_buckets);
        return -EINVAL;
    }
    ps_bucket *b = &ps->buckets[bucket];
    size_t bytes = b->count * sizeof(float);
    if (b->average_from != (int32_t)from || step + 1 != b->step) {
        snprintf(err, err_size, "bucket %u: rank %u gave back an average of step %llu, which ddpd did not ask of it",
                 bucket, from, (unsigned long long)step);
        return -EPROTO;
    }
    if (!payload || zmq_msg_size(payload) != bytes) {
        snprintf(err, err_size, "bucket %u: an average of %zu bytes where the layout says %llu f32 elements", bucket,
                 payload ? zmq_msg_size(payload) : 0, (unsigned long long)b->count);
        return -EMSGSIZE;
    }
    memcpy(ps->average + b->offset, zmq_msg_data((zmq_msg_t *)payload), bytes);
    b->average_from = -1;
    return 1;
}

bool ps_lacking(ps_state *ps, uint32_t bucket, uint32_t rank) {
    bool *lacking = &ps->buckets[bucket].lacking[rank];
    bool was = *lacking;
    *lacking = false;
    return was;
}
