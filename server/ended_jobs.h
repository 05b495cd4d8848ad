/* The jobs that ended lately, and who was in them. A member that was stopped, starved or
 * cut off while its job ended comes back to a ddpd that no longer knows it: instead of
 * silence (which it would take for a lost coordinator), ddpd tells it how its job ended. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/job.h"

#define ENDED_JOBS_KEPT 32                /* the last this many ends (see ended_jobs_add) */
#define ENDED_JOBS_KEEP_MS (3600u * 1000) /* for at most an hour */

typedef struct {
    uint8_t identity[WIRE_MAX_IDENTITY];
    size_t identity_size;
    int32_t rank;
    bool came_back; /* it has been told (ddpd logs that once) */
} ended_member;

typedef struct {
    char job[DDP_MAX_JOB_NAME + 1];
    int64_t owner;
    uint64_t generation;
    uint64_t ended_ms;
    int code;
    char reason[DDP_MAX_REASON];
    ended_member *members; /* NULL: an empty slot */
    size_t n_members;
} ended_job;

typedef struct {
    ended_job jobs[ENDED_JOBS_KEPT];
} ended_jobs;

/* Remembers that j ended now, with code and reason. When every slot holds an end of the
 * last hour, the oldest end of the owner that holds the most goes: a user who ends job
 * after job forgets its own, never another user's. A failed allocation only means a late
 * member hears less. */
void ended_jobs_add(ended_jobs *e, const job *j, int code, const char *reason, uint64_t now_ms);
/* The end of the job a connection was a member of, and the member; NULL if none is
 * remembered (or it is older than ENDED_JOBS_KEEP_MS). */
ended_job *ended_jobs_find(ended_jobs *e, const uint8_t *identity, size_t identity_size, uint64_t now_ms,
                           ended_member **ret_member);
void ended_jobs_free(ended_jobs *e);
