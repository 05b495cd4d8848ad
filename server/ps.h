/* Parameter-server reduction for a job in ps mode: every rank pushes each gradient bucket
 * once a step; when all have, ddpd averages them in rank order 0, 1, ..., n-1 (the same
 * bits whatever order they arrived in) and every rank gets the average back. The layout
 * (elements per bucket) is what the members declared at join; a push that does not match
 * it is refused. A push comes as a payload frame, or, from a rank on this host that has
 * handed ddpd its push segment (ps_shm.h), as a pointer to that bucket in the segment;
 * the averages are written to one block, the job's shared average segment when there is
 * one, where such ranks read them. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

typedef struct {
    uint64_t count, offset; /* elements (f32); where the bucket starts in the layout */
    uint64_t step;          /* the step being gathered */
    zmq_msg_t *pushed;      /* (world) each rank's payload, held until all are in */
    const float **inputs;   /* (world) each rank's push: its payload or its shared memory */
    float **copies;         /* (world) a payload that came unaligned, aligned */
    bool *arrived, *framed; /* (world) pushed; pushed as a payload (pushed[r] is open) */
    uint32_t n_arrived;
    /* After a restart: the ddpd before sent the average of step - 1 to some ranks and died
     * before the others had it. lacking: a rank that waits for it; lost: its push of step - 1
     * comes again, and is dropped; average_from: the rank asked to give it back (-1: none). */
    bool *lacking, *lost;
    int32_t average_from;
} ps_bucket;

typedef struct {
    uint32_t world;
    size_t n_buckets;
    ps_bucket *buckets;
    uint64_t total; /* elements of all buckets */
    float *average; /* (total) the averages: the job's shared segment, else own_average */
    float *own_average;
} ps_state;

int ps_init(ps_state *ps, const uint64_t *counts, size_t n_buckets, uint32_t world);
void ps_free(ps_state *ps);
/* The averages go to block (total floats, the job's shared average segment) from now on. */
void ps_set_average(ps_state *ps, float *block);

/* Takes rank's push of bucket at step: a payload (moved out of *payload), or with payload
 * NULL, from the rank's shared push segment (all buckets, in the layout). Returns 1 when the bucket
 * is complete (its average at ps_average(ps, bucket)), 0 while others are missing (or when
 * it is a push that ps_mark_behind said comes again: dropped), or a negative error with err
 * saying what was wrong with the push. */
int ps_push(ps_state *ps, uint32_t rank, uint64_t step, uint32_t bucket, zmq_msg_t *payload, const float *segment,
            char *err, size_t err_size);
const float *ps_average(const ps_state *ps, uint32_t bucket);

/* After a restart, rank is a step behind in bucket: it lacks the average of the step before
 * the bucket's, which from (a rank that had it) is to give back. */
void ps_mark_behind(ps_state *ps, uint32_t bucket, uint32_t rank, int32_t from);
/* Whether any bucket waits for an average to be given back. */
bool ps_awaits_average(const ps_state *ps);
/* from gives back bucket's average of step (the payload): 1 when it was the one awaited (it
 * is at ps_average, for the ranks ps_lacking names), or a negative error, err saying why. */
int ps_give_back(ps_state *ps, uint32_t from, uint64_t step, uint32_t bucket, const zmq_msg_t *payload, char *err,
                 size_t err_size);
/* Whether rank lacks bucket's average given back; it is then told, and no longer lacks it. */
bool ps_lacking(ps_state *ps, uint32_t bucket, uint32_t rank);

/* ps_reduce.c: out = the average of in[0..world-1], count elements, summed in rank order;
 * large buckets split over a few threads (the bits do not change: each element is still
 * summed in rank order). */
void ps_reduce_average(float *out, const float *const *in, uint32_t world, uint64_t count);
/* Stops the reduction's threads (ddpd's exit). */
void ps_reduce_shutdown(void);
