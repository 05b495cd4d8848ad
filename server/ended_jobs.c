#include "server/ended_jobs.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ended_job_clear(ended_job *ej) {
    free(ej->members);
    *ej = (ended_job){0};
}

/* Members in identity order (length, then bytes), for a binary search: a message from a
 * stranger looks through every kept end, 32 of up to 1024 members each. */
static int identity_cmp(const uint8_t *a, size_t a_size, const uint8_t *b, size_t b_size) {
    if (a_size != b_size)
        return a_size < b_size ? -1 : 1;
    return memcmp(a, b, a_size);
}

static int member_cmp(const void *a, const void *b) {
    const ended_member *x = a, *y = b;
    return identity_cmp(x->identity, x->identity_size, y->identity, y->identity_size);
}

static bool kept(const ended_job *ej, uint64_t now_ms) {
    return ej->members && now_ms - ej->ended_ms <= ENDED_JOBS_KEEP_MS;
}

/* The slot for the next end, of owner: a free one, else the oldest end of the owner that
 * holds the most (the new one counted for its owner; between owners that hold as many,
 * the one whose oldest end is older). */
static ended_job *ended_jobs_slot(ended_jobs *e, int64_t owner, uint64_t now_ms) {
    size_t most = 0;
    ended_job *slot = NULL;
    for (size_t k = 0; k < ENDED_JOBS_KEPT; k++) {
        ended_job *ej = &e->jobs[k];
        if (!kept(ej, now_ms))
            return ej;
        size_t same = ej->owner == owner; /* the end to come */
        ended_job *oldest = ej;
        for (size_t i = 0; i < ENDED_JOBS_KEPT; i++)
            if (e->jobs[i].owner == ej->owner) {
                same++;
                if (e->jobs[i].ended_ms < oldest->ended_ms)
                    oldest = &e->jobs[i];
            }
        if (same > most || (same == most && oldest->ended_ms < slot->ended_ms)) {
            most = same;
            slot = oldest;
        }
    }
    return slot;
}

void ended_jobs_add(ended_jobs *e, const job *j, int code, const char *reason, uint64_t now_ms) {
    if (!j->n_members) /* nobody to tell: it takes no one's place */
        return;
    ended_job *ej = ended_jobs_slot(e, j->owner, now_ms);
    ended_job_clear(ej);
    if (!(ej->members = calloc(j->n_members, sizeof(*ej->members))))
        return;
    ej->owner = j->owner;
    snprintf(ej->job, sizeof(ej->job), "%s", j->name);
    snprintf(ej->reason, sizeof(ej->reason), "%s", reason);
    ej->generation = j->generation;
    ej->ended_ms = now_ms;
    ej->code = code;
    ej->n_members = j->n_members;
    for (size_t i = 0; i < j->n_members; i++) {
        memcpy(ej->members[i].identity, j->members[i].identity, j->members[i].identity_size);
        ej->members[i].identity_size = j->members[i].identity_size;
        ej->members[i].rank = j->members[i].rank;
    }
    qsort(ej->members, ej->n_members, sizeof(*ej->members), member_cmp);
}

ended_job *ended_jobs_find(ended_jobs *e, const uint8_t *identity, size_t identity_size, uint64_t now_ms,
                           ended_member **ret_member) {
    for (size_t k = 0; k < ENDED_JOBS_KEPT; k++) {
        ended_job *ej = &e->jobs[k];
        if (!kept(ej, now_ms))
            continue;
        size_t lo = 0, hi = ej->n_members;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = identity_cmp(ej->members[mid].identity, ej->members[mid].identity_size, identity, identity_size);
            if (c == 0) {
                *ret_member = &ej->members[mid];
                return ej;
            }
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    return NULL;
}

void ended_jobs_free(ended_jobs *e) {
    for (size_t k = 0; k < ENDED_JOBS_KEPT; k++)
        ended_job_clear(&e->jobs[k]);
}
