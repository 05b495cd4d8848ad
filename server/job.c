#include "server/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

job *job_new(const char *name, const char *mode, uint32_t world_size, const uint64_t *ps_layout, size_t n_ps_layout,
             uint64_t now_ms) {
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    if (n_ps_layout) {
        if (!(j->ps_layout = malloc(n_ps_layout * sizeof(uint64_t)))) {
            free(j);
            return NULL;
        }
        memcpy(j->ps_layout, ps_layout, n_ps_layout * sizeof(uint64_t));
        j->n_ps_layout = n_ps_layout;
    }
    snprintf(j->name, sizeof(j->name), "%s", name);
    snprintf(j->mode, sizeof(j->mode), "%s", mode);
    j->state = JOB_FORMING;
    j->world_size = world_size;
    j->owner = -1;
    j->shm = PS_SHM_NONE;
    j->created_ms = now_ms;
    j->progress_logged_ms = now_ms;
    return j;
}

void job_free(job *j) {
    if (!j)
        return;
    for (size_t i = 0; i < j->n_members; i++)
        free(j->members[i].ps_steps);
    store_waits_clear(&j->waits);
    store_clear(&j->store);
    ps_shm_close(&j->shm);
    ps_free(&j->ps);
    free(j->ps_layout);
    free(j->members);
    free(j);
}

static int job_member_rank_cmp(const void *a, const void *b) {
    const job_member *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int job_check_join(const job *j, uint32_t world_size, const char *mode, int32_t rank, const uint64_t *ps_layout,
                   size_t n_ps_layout, char *reason, size_t reason_size) {
    if (j->state != JOB_FORMING) {
        snprintf(reason, reason_size, "job '%s' is already running (generation %llu, world size %u)", j->name,
                 (unsigned long long)j->generation, j->world_size);
        return -EBUSY;
    }
    if (world_size != j->world_size) {
        snprintf(reason, reason_size, "world size %u differs from job '%s''s world size %u", world_size, j->name,
                 j->world_size);
        return -EINVAL;
    }
    if (strcmp(mode, j->mode) != 0) {
        snprintf(reason, reason_size, "mode '%s' differs from job '%s''s mode '%s'", mode, j->name, j->mode);
        return -EINVAL;
    }
    if (n_ps_layout != j->n_ps_layout ||
        (n_ps_layout && memcmp(ps_layout, j->ps_layout, n_ps_layout * sizeof(uint64_t)) != 0)) {
        snprintf(reason, reason_size,
                 "gradient buckets (%zu) differ from job '%s''s (%zu): another model or bucket size?", n_ps_layout,
                 j->name, j->n_ps_layout);
        return -EINVAL;
    }
    if (rank >= 0)
        for (size_t i = 0; i < j->n_members; i++)
            if (j->members[i].requested_rank == rank) {
                snprintf(reason, reason_size, "rank %d of job '%s' is already taken by pid %u on %s", rank, j->name,
                         j->members[i].pid, j->members[i].host);
                return -EEXIST;
            }
    return 0;
}

int job_check_rejoin(const job *j, uint64_t generation, uint32_t world_size, const char *mode, int32_t rank,
                     const uint64_t *ps_layout, size_t n_ps_layout, char *reason, size_t reason_size) {
    if (!j->recovering || j->generation != generation) {
        snprintf(reason, reason_size,
                 "job '%s' here is %s (generation %llu): this rank's generation %llu did not outlive ddpd's restart",
                 j->name, j->state == JOB_FORMING ? "forming" : "running", (unsigned long long)j->generation,
                 (unsigned long long)generation);
        return -ESTALE;
    }
    if (world_size != j->world_size || strcmp(mode, j->mode) != 0 || n_ps_layout != j->n_ps_layout ||
        (n_ps_layout && memcmp(ps_layout, j->ps_layout, n_ps_layout * sizeof(uint64_t)) != 0)) {
        snprintf(reason, reason_size, "world size %u, mode '%s' and buckets differ from job '%s''s (%u, '%s')",
                 world_size, mode, j->name, j->world_size, j->mode);
        return -EINVAL;
    }
    for (size_t i = 0; i < j->n_members; i++)
        if (j->members[i].rank == rank) {
            snprintf(reason, reason_size, "rank %d of job '%s' is back already, as pid %u on %s", rank, j->name,
                     j->members[i].pid, j->members[i].host);
            return -EEXIST;
        }
    return 0;
}

int job_recover(job *j, uint64_t generation, uint64_t barrier_round, const uint64_t *ps_steps, size_t n_ps_steps) {
    j->state = JOB_RUNNING;
    j->generation = generation;
    j->barrier_round = barrier_round;
    j->recovering = true;
    if (!j->n_ps_layout)
        return 0;
    TRY(ps_init(&j->ps, j->ps_layout, j->n_ps_layout, j->world_size));
    for (size_t b = 0; b < n_ps_steps && b < j->n_ps_layout; b++)
        j->ps.buckets[b].step = ps_steps[b];
    return 0;
}

int job_ps_resolve(job *j, char *reason, size_t reason_size) {
    for (size_t b = 0; b < j->ps.n_buckets; b++) {
        uint64_t ahead = 0;
        int32_t from = -1; /* the lowest rank ahead: it has the average the ranks behind lack */
        for (size_t i = 0; i < j->n_members; i++)
            ahead = j->members[i].ps_steps && j->members[i].ps_steps[b] > ahead ? j->members[i].ps_steps[b] : ahead;
        for (size_t i = 0; i < j->n_members; i++) {
            const job_member *m = &j->members[i];
            uint64_t at = m->ps_steps ? m->ps_steps[b] : ahead;
            if (at + 1 < ahead) { /* a step apart at most: no average comes before every rank pushed */
                snprintf(reason, reason_size,
                         "bucket %zu: rank %d is at step %llu, another at step %llu: the averages between went with "
                         "the ddpd that restarted",
                         b, m->rank, (unsigned long long)at, (unsigned long long)ahead);
                return -ESTALE;
            }
            if (at == ahead && m->ps_steps && (from < 0 || m->rank < from))
                from = m->rank;
        }
        j->ps.buckets[b].step = ahead;
        for (size_t i = 0; i < j->n_members; i++) /* sent to some ranks, not to these, when ddpd went */
            if (j->members[i].ps_steps && j->members[i].ps_steps[b] + 1 == ahead)
                ps_mark_behind(&j->ps, (uint32_t)b, (uint32_t)j->members[i].rank, from);
    }
    return 0;
}

void job_recovered(job *j) {
    qsort(j->members, j->n_members, sizeof(job_member), job_member_rank_cmp);
    for (size_t i = 0; i < j->n_members; i++) {
        free(j->members[i].ps_steps);
        j->members[i].ps_steps = NULL;
    }
    j->recovering = false;
}

int job_add_member(job *j, const job_member *m) {
    if (j->n_members >= j->world_size)
        return -ENOSPC;
    if (j->n_members == j->capacity) {
        /* Grow as members arrive: a join that names a huge world costs nothing up front. */
        size_t cap = j->capacity ? 2 * j->capacity : 4;
        if (cap > j->world_size)
            cap = j->world_size;
        job_member *grown = realloc(j->members, cap * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        j->members = grown;
        j->capacity = cap;
    }
    j->members[j->n_members++] = *m;
    return 0;
}

void job_remove_member(job *j, size_t index) {
    memmove(&j->members[index], &j->members[index + 1], (j->n_members - index - 1) * sizeof(job_member));
    j->n_members--;
}

ssize_t job_find_member(const job *j, const uint8_t *identity, size_t identity_size) {
    for (size_t i = 0; i < j->n_members; i++)
        if (j->members[i].identity_size == identity_size &&
            memcmp(j->members[i].identity, identity, identity_size) == 0)
            return (ssize_t)i;
    return -1;
}

bool job_complete(const job *j) {
    return j->n_members == j->world_size;
}

/* Marks taken[] with requested ranks, then gives the others the lowest free ranks in join
 * order; fills rank_of[i] for members[i]. */
static void job_plan_ranks(const job *j, bool *taken, int32_t *rank_of) {
    for (size_t i = 0; i < j->n_members; i++)
        if (j->members[i].requested_rank >= 0)
            taken[j->members[i].requested_rank] = true;
    uint32_t next = 0;
    for (size_t i = 0; i < j->n_members; i++) {
        if (j->members[i].requested_rank >= 0) {
            rank_of[i] = j->members[i].requested_rank;
            continue;
        }
        while (next < j->world_size && taken[next])
            next++;
        rank_of[i] = (int32_t)next;
        if (next < j->world_size)
            taken[next] = true;
    }
}

int job_form(job *j, uint64_t generation) {
    bool taken[DDP_MAX_WORLD_SIZE] = {false};
    int32_t rank_of[DDP_MAX_WORLD_SIZE];
    job_plan_ranks(j, taken, rank_of);
    for (size_t i = 0; i < j->n_members; i++)
        j->members[i].rank = rank_of[i];
    qsort(j->members, j->n_members, sizeof(job_member), job_member_rank_cmp);
    j->state = JOB_RUNNING;
    j->generation = generation;
    return j->n_ps_layout ? ps_init(&j->ps, j->ps_layout, j->n_ps_layout, j->world_size) : 0;
}

void job_missing_ranks(const job *j, char *buf, size_t size) {
    bool taken[DDP_MAX_WORLD_SIZE] = {false};
    int32_t rank_of[DDP_MAX_WORLD_SIZE];
    job_plan_ranks(j, taken, rank_of);
    int n = snprintf(buf, size, "{");
    bool first = true;
    for (uint32_t r = 0; r < j->world_size && n > 0 && (size_t)n < size; r++) {
        if (taken[r])
            continue;
        if ((size_t)n + 16 >= size) {
            n += snprintf(buf + n, size - (size_t)n, ", ...");
            break;
        }
        n += snprintf(buf + n, size - (size_t)n, first ? "%u" : ", %u", r);
        first = false;
    }
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "}");
}

size_t job_active_members(const job *j) {
    size_t n = 0;
    for (size_t i = 0; i < j->n_members; i++)
        n += !j->members[i].left;
    return n;
}
