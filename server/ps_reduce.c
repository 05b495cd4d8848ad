/* The parameter server's average, on a few threads when the bucket is large: ddpd's loop
 * thread takes the first slice and waits for the helpers' (each slice summed in rank
 * order, so the bits are those of one thread). While it reduces, the loop answers nothing
 * else: README, "ps". */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <string.h>

#include "common/reduce.h"
#include "server/ps.h"

#define PS_PARALLEL_MIN (256u << 10) /* elements (1 MiB): below, a hand-off costs more than it saves */
#define PS_MAX_THREADS 4

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t helpers[PS_MAX_THREADS - 1];
    int threads; /* the loop thread and its helpers; 0 until the first large bucket, 1: none */
    bool stopping;
    uint64_t round; /* bumped for each piece of work */
    int pending;    /* helpers still at it */
    float *out;
    const float *const *in;
    uint32_t world;
    uint64_t count;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

#define PS_CHUNK 4096 /* elements (16 KiB): summed and divided while they are in L1, one pass over memory */

/* Slice part of parts: the average of its elements, summed in rank order. */
static void reduce_slice(float *out, const float *const *in, uint32_t world, uint64_t count, int part, int parts) {
    uint64_t lo = count * (uint64_t)part / (uint64_t)parts, hi = count * (uint64_t)(part + 1) / (uint64_t)parts;
    for (uint64_t at = lo; at < hi; at += PS_CHUNK) {
        size_t n = hi - at < PS_CHUNK ? (size_t)(hi - at) : PS_CHUNK;
        /* the first two in one pass (a copy, then a sum over it, would go over out twice) */
        if (world == 1)
            memcpy(out + at, in[0] + at, n * sizeof(float));
        else
            reduce_pair(out + at, in[0] + at, in[1] + at, n, DTYPE_F32, REDUCE_SUM);
        for (uint32_t r = 2; r < world; r++)
            reduce_into(out + at, in[r] + at, n, DTYPE_F32, REDUCE_SUM);
        reduce_finish(out + at, n, DTYPE_F32, REDUCE_AVG, (int)world);
    }
}

static void *helper_main(void *arg) {
    int part = (int)(intptr_t)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.round == seen && !pool.stopping)
            pthread_cond_wait(&pool.work, &pool.lock);
        if (pool.stopping)
            break;
        seen = pool.round;
        pthread_mutex_unlock(&pool.lock);
        reduce_slice(pool.out, pool.in, pool.world, pool.count, part, pool.threads);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* The helpers, once: as many threads in all as CPUs to run them, at most PS_MAX_THREADS. */
static void pool_start(void) {
    cpu_set_t cpus;
    int want = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    want = want > PS_MAX_THREADS ? PS_MAX_THREADS : want < 1 ? 1 : want;
    pool.threads = 1;
    for (int k = 1; k < want; k++) {
        if (pthread_create(&pool.helpers[k - 1], NULL, helper_main, (void *)(intptr_t)k) != 0)
            break; /* fewer helpers: still right, only slower */
        pool.threads++;
    }
}

void ps_reduce_average(float *out, const float *const *in, uint32_t world, uint64_t count) {
    if (count >= PS_PARALLEL_MIN && pool.threads == 0)
        pool_start();
    if (count < PS_PARALLEL_MIN || pool.threads < 2) {
        reduce_slice(out, in, world, count, 0, 1);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    pool.out = out;
    pool.in = in;
    pool.world = world;
    pool.count = count;
    pool.pending = pool.threads - 1;
    pool.round++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    reduce_slice(out, in, world, count, 0, pool.threads);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
}

void ps_reduce_shutdown(void) {
    pthread_mutex_lock(&pool.lock);
    pool.stopping = true;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    for (int k = 1; k < pool.threads; k++)
        pthread_join(pool.helpers[k - 1], NULL);
    pool.threads = 0;
    pool.stopping = false;
}
