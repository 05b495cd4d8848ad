#include "common/shm_flag.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long futex(_Atomic uint32_t *word, int op, uint32_t value, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)word, op, value, timeout, NULL, 0);
}

void shm_flag_wake(shm_flag f) {
    futex(f.word, FUTEX_WAKE, INT_MAX, NULL);
}

void shm_flag_sleep(shm_flag f, uint64_t target, uint64_t ms) {
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    atomic_fetch_add(f.sleepers, 1);
    uint32_t seen = atomic_load(f.word);
    if (atomic_load(f.value) < target) /* no wake can be lost: the setter checks sleepers after */
        futex(f.word, FUTEX_WAIT, seen, &ts);
    atomic_fetch_sub(f.sleepers, 1);
}
