/* ddpd's helper threads (NSS lookups, the metrics file), which may wait on what the loop
 * must not: each starts with every signal blocked (signals are the loop's, and none should
 * interrupt a helper's system calls), and waits with deadlines on the monotonic clock. */
#pragma once
#include <pthread.h>
#include <time.h>

int helper_thread_start(pthread_t *ret, void *(*main)(void *), void *arg);
/* A condition whose timed waits take monotonic deadlines. */
void helper_cond_init(pthread_cond_t *cond);
/* The monotonic time ms from now, for pthread_cond_timedwait on such a condition. */
struct timespec helper_deadline(long ms);
