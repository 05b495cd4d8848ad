/* ddpd's parameter-server reduction: payload pushes and shared-memory pushes mixed in one
 * bucket, the average in rank order, bit for bit the same on the threads as on one;
 * pushes that do not fit refused, saying why; an average given back after a restart. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/reduce.h"
#include "server/ps.h"
#include "tests/check_main.h"

#define LARGE ((1u << 20) + 3) /* elements: above PS_PARALLEL_MIN, an odd split */

/* Rank r's gradient i: values whose sum depends on the order of the additions. */
static float grad(int r, uint64_t i) {
    return (float)((double)((i * 2654435761u + (uint64_t)r * 97) % 1000) / 7.0 + (r == 1 ? 1e7 : 0));
}

static float *serial_average(int world, uint64_t n) {
    float *avg = malloc(n * sizeof(float)), *in = malloc(n * sizeof(float));
    for (uint64_t i = 0; i < n; i++)
        avg[i] = grad(0, i);
    for (int r = 1; r < world; r++) {
        for (uint64_t i = 0; i < n; i++)
            in[i] = grad(r, i);
        reduce_into(avg, in, n, DTYPE_F32, REDUCE_SUM);
    }
    reduce_finish(avg, n, DTYPE_F32, REDUCE_AVG, world);
    free(in);
    return avg;
}

START_TEST(test_threads_keep_the_bits) {
    int world = 3;
    float *in[3];
    for (int r = 0; r < world; r++) {
        in[r] = malloc(LARGE * sizeof(float));
        for (uint64_t i = 0; i < LARGE; i++)
            in[r][i] = grad(r, i);
    }
    float *out = malloc(LARGE * sizeof(float)), *want = serial_average(world, LARGE);
    ps_reduce_average(out, (const float *const *)in, (uint32_t)world, LARGE);
    ck_assert_msg(memcmp(out, want, LARGE * sizeof(float)) == 0, "the threads summed in another order");
    ps_reduce_shutdown();
    for (int r = 0; r < world; r++)
        free(in[r]);
    free(out);
    free(want);
}
END_TEST

/* Two buckets; rank 0 pushes frames, rank 1 from its segment (both buckets, in order). */
START_TEST(test_mixed_pushes) {
    const uint64_t counts[2] = {5, LARGE};
    ps_state ps;
    ck_assert_int_eq(ps_init(&ps, counts, 2, 2), 0);
    float *segment = malloc((counts[0] + counts[1]) * sizeof(float));
    for (uint64_t i = 0; i < counts[0] + counts[1]; i++)
        segment[i] = grad(1, i < counts[0] ? i : i - counts[0]);
    char err[256];
    for (uint64_t step = 0; step < 2; step++)
        for (uint32_t b = 0; b < 2; b++) {
            zmq_msg_t frame;
            zmq_msg_init_size(&frame, counts[b] * sizeof(float));
            for (uint64_t i = 0; i < counts[b]; i++)
                ((float *)zmq_msg_data(&frame))[i] = grad(0, i);
            ck_assert_int_eq(ps_push(&ps, 1, step, b, NULL, segment, err, sizeof(err)), 0);
            ck_assert_int_eq(ps_push(&ps, 0, step, b, &frame, NULL, err, sizeof(err)), 1);
            zmq_msg_close(&frame);
            float *want = serial_average(2, counts[b]);
            ck_assert_msg(memcmp(ps_average(&ps, b), want, counts[b] * sizeof(float)) == 0, "bucket %u step %llu", b,
                          (unsigned long long)step);
            free(want);
        }
    /* refused: a bucket the layout has not, a wrong size, another step, twice */
    zmq_msg_t frame;
    zmq_msg_init_size(&frame, 4 * sizeof(float));
    ck_assert_int_eq(ps_push(&ps, 0, 2, 7, &frame, NULL, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "the job's layout has 2 buckets"), "%s", err);
    ck_assert_int_eq(ps_push(&ps, 0, 2, 0, &frame, NULL, err, sizeof(err)), -EMSGSIZE);
    ck_assert_int_eq(ps_push(&ps, 0, 5, 1, NULL, segment, err, sizeof(err)), -EPROTO);
    ck_assert_int_eq(ps_push(&ps, 1, 2, 1, NULL, segment, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_push(&ps, 1, 2, 1, NULL, segment, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "twice"), "%s", err);
    zmq_msg_close(&frame);
    ps_free(&ps);
    ps_reduce_shutdown();
    free(segment);
}
END_TEST

static void frame_of(zmq_msg_t *frame, const float *values, size_t n) {
    zmq_msg_init_size(frame, n * sizeof(float));
    memcpy(zmq_msg_data(frame), values, n * sizeof(float));
}

/* After a restart rank 1 lacks bucket 0's average of step 4, which rank 0 is asked to give
 * back: one from another rank, of another step or size, or a second, is refused; rank 1's
 * push of step 4, sent again, is dropped once; then step 5 averages as ever. */
START_TEST(test_given_back) {
    const uint64_t counts[1] = {3};
    const float average[3] = {1, 2, 3}, x0[3] = {2, 4, 6}, x1[3] = {4, 6, 8};
    ps_state ps;
    ck_assert_int_eq(ps_init(&ps, counts, 1, 2), 0);
    ps.buckets[0].step = 5;
    ck_assert(!ps_awaits_average(&ps));
    ps_mark_behind(&ps, 0, 1, 0);
    ck_assert(ps_awaits_average(&ps));
    char err[256];
    zmq_msg_t frame, small;
    frame_of(&frame, average, 3);
    frame_of(&small, average, 2);
    ck_assert_int_eq(ps_give_back(&ps, 1, 4, 0, &frame, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "rank 1 gave back an average of step 4, which ddpd did not ask of it"), "%s", err);
    ck_assert_int_eq(ps_give_back(&ps, 0, 5, 0, &frame, err, sizeof(err)), -EPROTO);
    ck_assert_int_eq(ps_give_back(&ps, 0, 4, 0, &small, err, sizeof(err)), -EMSGSIZE);
    ck_assert_int_eq(ps_give_back(&ps, 0, 4, 1, &frame, err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(ps_give_back(&ps, 0, 4, 0, &frame, err, sizeof(err)), 1);
    ck_assert(memcmp(ps_average(&ps, 0), average, sizeof(average)) == 0);
    ck_assert(!ps_awaits_average(&ps));
    ck_assert(!ps_lacking(&ps, 0, 0));
    ck_assert(ps_lacking(&ps, 0, 1)); /* told once */
    ck_assert(!ps_lacking(&ps, 0, 1));
    ck_assert_int_eq(ps_give_back(&ps, 0, 4, 0, &frame, err, sizeof(err)), -EPROTO);
    zmq_msg_close(&frame);
    zmq_msg_close(&small);

    zmq_msg_t again;
    frame_of(&again, x1, 3);
    ck_assert_int_eq(ps_push(&ps, 0, 4, 0, &again, NULL, err, sizeof(err)), -EPROTO); /* rank 0 had its average */
    ck_assert_int_eq(ps_push(&ps, 1, 4, 0, &again, NULL, err, sizeof(err)), 0);       /* dropped */
    ck_assert_int_eq(ps.buckets[0].n_arrived, 0);
    ck_assert_int_eq(ps_push(&ps, 1, 4, 0, &again, NULL, err, sizeof(err)), -EPROTO); /* once */
    ck_assert_msg(strstr(err, "a push for step 4 while the job is at step 5"), "%s", err);
    zmq_msg_close(&again);
    zmq_msg_t p0, p1;
    frame_of(&p0, x0, 3);
    frame_of(&p1, x1, 3);
    ck_assert_int_eq(ps_push(&ps, 0, 5, 0, &p0, NULL, err, sizeof(err)), 0);
    ck_assert_int_eq(ps_push(&ps, 1, 5, 0, &p1, NULL, err, sizeof(err)), 1);
    const float want[3] = {3, 5, 7};
    ck_assert(memcmp(ps_average(&ps, 0), want, sizeof(want)) == 0);
    zmq_msg_close(&p0);
    zmq_msg_close(&p1);
    ps_free(&ps);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("ps");
    TCase *tc = tcase_create("ps");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_threads_keep_the_bits);
    tcase_add_test(tc, test_mixed_pushes);
    tcase_add_test(tc, test_given_back);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
