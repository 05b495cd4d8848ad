/* The parameter server's average, on a few threads when the bucket is large: the bucket
 * goes in pieces that ddpd's loop thread and its helpers claim one at a time (a helper
 * that wakes late finds fewer left; one that wakes after the end, none), each piece summed
 * in rank order, so the bits are those of one thread. While it reduces, the loop answers
 * nothing else: README, "ps". */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "common/clock.h"
#include "common/reduce.h"
#include "server/ps.h"

#define PS_PARALLEL_MIN (256u << 10) /* elements (1 MiB): below, a hand-off costs more than it saves */
#define PS_MAX_THREADS 4
#define PS_PIECE (32u << 10) /* elements (128 KiB) a thread claims at a time */
#define PS_CHUNK 4096        /* elements (16 KiB): summed and divided while they are in L1 */
#define PS_SPIN_US 200       /* the loop thread waits this long for a helper's last piece before sleeping */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t helpers[PS_MAX_THREADS - 1];
    int threads; /* the loop thread and its helpers; 0 until the first large bucket, 1: none */
    bool stopping;
    uint64_t round; /* bumped for each bucket, under lock */
    /* the round's pieces: claimed is (round << 32 | the next piece), so that a helper
     * still holding an old round's work claims nothing of a new one */
    _Atomic uint64_t claimed;
    _Atomic uint32_t finished; /* pieces done this round */
    uint32_t pieces;
    float *out;
    const float *const *in;
    uint32_t world;
    uint64_t count;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Elements [lo, hi): the average, summed in rank order, a chunk at a time. */
static void reduce_range(float *out, const float *const *in, uint32_t world, uint64_t lo, uint64_t hi) {
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

/* Claims and reduces pieces of round until none is left; true if this thread finished the
 * round's last one. */
static bool reduce_pieces(uint64_t round, float *out, const float *const *in, uint32_t world, uint64_t count,
                          uint32_t pieces) {
    bool last = false;
    for (;;) {
        uint64_t c = atomic_load(&pool.claimed);
        if (c >> 32 != (round & 0xffffffffu) || (uint32_t)c >= pieces)
            return last;
        if (!atomic_compare_exchange_weak(&pool.claimed, &c, c + 1))
            continue;
        uint64_t lo = (uint64_t)(uint32_t)c * PS_PIECE, hi = lo + PS_PIECE < count ? lo + PS_PIECE : count;
        reduce_range(out, in, world, lo, hi);
        last = atomic_fetch_add(&pool.finished, 1) + 1 == pieces;
    }
}

static void *helper_main(void *arg) {
    (void)arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.round == seen && !pool.stopping)
            pthread_cond_wait(&pool.work, &pool.lock);
        if (pool.stopping)
            break;
        seen = pool.round;
        float *out = pool.out;
        const float *const *in = pool.in;
        uint32_t world = pool.world, pieces = pool.pieces;
        uint64_t count = pool.count;
        pthread_mutex_unlock(&pool.lock);
        bool last = reduce_pieces(seen, out, in, world, count, pieces);
        pthread_mutex_lock(&pool.lock);
        if (last)
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
        if (pthread_create(&pool.helpers[k - 1], NULL, helper_main, NULL) != 0)
            break; /* fewer helpers: still right, only slower */
        pool.threads++;
    }
}

void ps_reduce_average(float *out, const float *const *in, uint32_t world, uint64_t count) {
    if (count >= PS_PARALLEL_MIN && pool.threads == 0)
        pool_start();
    if (count < PS_PARALLEL_MIN || pool.threads < 2) {
        reduce_range(out, in, world, 0, count);
        return;
    }
    uint32_t pieces = (uint32_t)((count + PS_PIECE - 1) / PS_PIECE);
    pthread_mutex_lock(&pool.lock);
    uint64_t round = ++pool.round;
    pool.out = out;
    pool.in = in;
    pool.world = world;
    pool.count = count;
    pool.pieces = pieces;
    atomic_store(&pool.finished, 0);
    atomic_store(&pool.claimed, (round & 0xffffffffu) << 32);
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    if (reduce_pieces(round, out, in, world, count, pieces))
        return;
    uint64_t spin_until = clock_now_us() + PS_SPIN_US; /* a helper is on its last piece */
    while (atomic_load(&pool.finished) < pieces && clock_now_us() < spin_until)
        ;
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.finished) < pieces)
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
