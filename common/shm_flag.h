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

/* Raises f to value (release), waking its sleepers. */
void shm_flag_set(shm_flag f, uint64_t value);
/* Sleeps on f's futex for at most ms, unless it has reached target (a wake, a signal or
 * a spurious return end it sooner). */
void shm_flag_sleep(shm_flag f, uint64_t target, uint64_t ms);
