/* Parameter-server reduction for a job in ps mode: every rank pushes each gradient bucket
 * once a step; when all have, ddpd averages them in rank order 0, 1, ..., n-1 (the same
 * bits whatever order they arrived in) and every rank gets the average back. The layout
 * (elements per bucket) is what the members declared at join; a push that does not match
 * it is refused. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct {
    uint64_t count;    /* elements (f32) */
    uint64_t step;     /* the step being gathered */
    zmq_msg_t *pushed; /* (world) each rank's push, held until all are in */
    bool *arrived;     /* (world) */
    uint32_t n_arrived;
} ps_bucket;

typedef struct {
    uint32_t world;
    size_t n_buckets;
    ps_bucket *buckets;
} ps_state;

int ps_init(ps_state *ps, const uint64_t *counts, size_t n_buckets, uint32_t world);
void ps_free(ps_state *ps);

/* Takes rank's push of bucket at step (the payload is moved out of *payload). Returns 1
 * with *ret_average set (the caller closes it) when the bucket is complete, 0 while others
 * are missing, or a negative error with err saying what was wrong with the push. */
int ps_push(ps_state *ps, uint32_t rank, uint64_t step, uint32_t bucket, zmq_msg_t *payload, zmq_msg_t *ret_average,
            char *err, size_t err_size);
