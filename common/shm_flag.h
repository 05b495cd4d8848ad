/* A counter in shared memory that one process raises and others wait on: the value, its
 * low half as a futex word, and how many sleep on it (the raiser makes a system call only
 * when someone does). Shared by the ranks' collectives (worker/libddp/shm.c) and by ddpd,
 * which raises the ps averages' counters (server/ps_shm.h). */
#pragma once
#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Atomic uint64_t *value;
    _Atomic uint32_t *word, *sleepers;
} shm_flag;

/* Wakes f's sleepers (a system call). */
void shm_flag_wake(shm_flag f);
/* Raises f to value (release), waking its sleepers: inline, since every phase of every
 * collective over shared memory raises one. */
static inline void shm_flag_set(shm_flag f, uint64_t value) {
    atomic_store(f.value, value); /* release: what it vouches for is visible first */
    atomic_store(f.word, (uint32_t)value);
    if (atomic_load(f.sleepers))
        shm_flag_wake(f);
}
/* Sleeps on f's futex for at most ms, unless it has reached target (a wake, a signal or
 * a spurious return end it sooner). */
void shm_flag_sleep(shm_flag f, uint64_t target, uint64_t ms);
