/* The end of a job, as the control thread learns it (an Abort from ddpd, ddpd lost, an
 * interrupt) or as this rank decides it (ddp_abort): raised once, read by every wait that
 * must give up with it, on any thread. And the ranks that have left the job (ddpd's
 * heartbeats say which): a wait on one of them is over, though the job goes on. */
#pragma once
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/limits.h"

typedef struct {
    int fd;                         /* an eventfd, readable once code and text are set: for poll() */
    atomic_flag raised;             /* taken by the one raise that counts */
    _Atomic int code;               /* the negative code that ended the job; 0 while it runs */
    char text[DDP_MAX_REASON + 64]; /* why, naming the rank */
    _Atomic uint64_t at_ms;         /* when (clock_now_ms), for the watchdog */
    _Atomic int told;               /* the caller's thread has since been in libddp: it knows */

    /* A stop asked of the program (its ddpd did not come back): the job still runs, so that
     * the ranks can stop together at a step and keep a checkpoint */
    atomic_flag stop_taken;
    _Atomic int stop_asked;
    char stop_text[DDP_MAX_REASON + 64];

    /* by rank: 1 once ddpd says it left */
    _Atomic unsigned char left[DDP_MAX_WORLD_SIZE];
} job_end;

/* The code that ended the job, or 0. */
static inline int job_end_code(const job_end *e) {
    return atomic_load(&((job_end *)e)->code);
}

/* Records the end once, whichever thread comes first (later calls change nothing), and
 * wakes every poll on fd. */
static inline void job_end_raise(job_end *e, int code, const char *text) {
    if (atomic_flag_test_and_set(&e->raised))
        return;
    snprintf(e->text, sizeof(e->text), "%s", text);
    atomic_store(&e->at_ms, clock_now_ms());
    atomic_store(&e->code, code); /* after the text: a reader that sees the code sees why */
    uint64_t one = 1;
    ssize_t w = write(e->fd, &one, sizeof(one));
    (void)w;
}

/* Asks the program to stop, once (later calls change nothing). */
static inline void job_end_ask_stop(job_end *e, const char *text) {
    if (atomic_flag_test_and_set(&e->stop_taken))
        return;
    snprintf(e->stop_text, sizeof(e->stop_text), "%s", text);
    atomic_store(&e->stop_asked, 1); /* after the text */
}

/* The caller's thread is in libddp: if the job has ended, the call it is in returns the end
 * (or the next one will), so the watchdog need not end the process. */
static inline void job_end_told(job_end *e) {
    if (atomic_load(&e->code))
        atomic_store(&e->told, 1);
}
