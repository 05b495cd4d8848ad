/* server/job.c: members, rank assignment, join checks and the missing-ranks text. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/limits.h"
#include "server/ended_jobs.h"
#include "server/job.h"
#include "tests/check_main.h"

/* Member i: identity "peer-i", pid 1000 + i, host "host-i". */
static job_member member(uint32_t i, int32_t requested_rank) {
    job_member m;
    memset(&m, 0, sizeof(m));
    m.identity_size = (size_t)snprintf((char *)m.identity, sizeof(m.identity), "peer-%u", i);
    m.requested_rank = requested_rank;
    m.rank = requested_rank;
    m.pid = 1000 + i;
    snprintf(m.host, sizeof(m.host), "host-%u", i);
    snprintf(m.endpoint, sizeof(m.endpoint), "tcp://host-%u:%u", i, 6000 + i);
    m.join_seq = 10 + i;
    return m;
}

/* A job with one member per entry of requested[], joined in that order. */
static job *job_with(uint32_t world_size, const int32_t *requested, size_t n) {
    job *j = job_new("train", "ddp", world_size, NULL, 0, 1234);
    ck_assert_ptr_nonnull(j);
    for (size_t i = 0; i < n; i++) {
        job_member m = member((uint32_t)i, requested[i]);
        ck_assert_int_eq(job_add_member(j, &m), 0);
    }
    return j;
}

static void assert_sorted_by_rank(const job *j) {
    for (size_t i = 0; i < j->n_members; i++)
        ck_assert_int_eq(j->members[i].rank, (int32_t)i);
}

static uint32_t joiner_of(const job_member *m) {
    return m->pid - 1000;
}

/* ---- core ----------------------------------------------------------------------- */

START_TEST(test_new_job) {
    job *j = job_new("train.v2", "ps", 8, NULL, 0, 555);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(j->name, "train.v2");
    ck_assert_str_eq(j->mode, "ps");
    ck_assert_int_eq(j->state, JOB_FORMING);
    ck_assert_uint_eq(j->world_size, 8);
    ck_assert_uint_eq(j->created_ms, 555);
    ck_assert_uint_eq(j->n_members, 0);
    ck_assert_uint_eq(j->waits.n, 0);
    ck_assert_uint_eq(j->store.n_entries, 0);
    ck_assert(!job_complete(j));
    ck_assert_uint_eq(job_active_members(j), 0);
    job_free(j);
    job_free(NULL);
}
END_TEST

START_TEST(test_ranks_in_join_order) {
    const int32_t any[] = {-1, -1, -1, -1};
    job *j = job_with(4, any, 4);
    ck_assert(job_complete(j));
    job_form(j, 42);
    ck_assert_int_eq(j->state, JOB_RUNNING);
    ck_assert_uint_eq(j->generation, 42);
    assert_sorted_by_rank(j);
    for (uint32_t r = 0; r < 4; r++) {
        ck_assert_uint_eq(joiner_of(&j->members[r]), r);
        ck_assert_int_eq(j->members[r].requested_rank, -1);
    }
    job_free(j);
}
END_TEST

START_TEST(test_requested_ranks_honoured) {
    /* joins: any, 0, any, 3, any -> ranks 1, 0, 2, 3, 4 */
    const int32_t requested[] = {-1, 0, -1, 3, -1};
    const uint32_t expected_joiner[] = {1, 0, 2, 3, 4}; /* by rank */
    job *j = job_with(5, requested, 5);
    job_form(j, 1);
    assert_sorted_by_rank(j);
    for (uint32_t r = 0; r < 5; r++) {
        const job_member *m = &j->members[r];
        ck_assert_msg(joiner_of(m) == expected_joiner[r], "rank %u went to joiner %u, expected %u", r, joiner_of(m),
                      expected_joiner[r]);
        /* the whole member moved with its rank */
        char host[32];
        snprintf(host, sizeof(host), "host-%u", joiner_of(m));
        ck_assert_str_eq(m->host, host);
        ck_assert_uint_eq(m->join_seq, 10 + joiner_of(m));
        ck_assert_int_eq(m->requested_rank, requested[joiner_of(m)]);
    }
    job_free(j);
}
END_TEST

START_TEST(test_requested_ranks_fill_from_the_top) {
    /* requested ranks taken early leave the lowest free ones to the others, in join order */
    const int32_t requested[] = {-1, -1, 0, 1, -1, 6, -1, -1};
    /* free ranks for the any-joiners 0,1,4,6,7: 2,3,4,5,7 */
    const uint32_t expected_joiner[] = {2, 3, 0, 1, 4, 6, 5, 7};
    job *j = job_with(8, requested, 8);
    job_form(j, 3);
    assert_sorted_by_rank(j);
    for (uint32_t r = 0; r < 8; r++)
        ck_assert_msg(joiner_of(&j->members[r]) == expected_joiner[r], "rank %u went to joiner %u, expected %u", r,
                      joiner_of(&j->members[r]), expected_joiner[r]);
    job_free(j);
}
END_TEST

START_TEST(test_all_ranks_requested) {
    const int32_t requested[] = {2, 0, 3, 1};
    job *j = job_with(4, requested, 4);
    job_form(j, 9);
    assert_sorted_by_rank(j);
    ck_assert_uint_eq(joiner_of(&j->members[0]), 1);
    ck_assert_uint_eq(joiner_of(&j->members[1]), 3);
    ck_assert_uint_eq(joiner_of(&j->members[2]), 0);
    ck_assert_uint_eq(joiner_of(&j->members[3]), 2);
    job_free(j);
}
END_TEST

START_TEST(test_world_of_one) {
    const int32_t any[] = {-1};
    job *j = job_with(1, any, 1);
    ck_assert(job_complete(j));
    job_form(j, 1);
    ck_assert_int_eq(j->members[0].rank, 0);
    job_free(j);
}
END_TEST

START_TEST(test_missing_ranks) {
    char buf[256];
    job *j = job_new("train", "", 4, NULL, 0, 0);
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{0, 1, 2, 3}");
    job_member a = member(0, 3), b = member(1, 2);
    ck_assert_int_eq(job_add_member(j, &a), 0);
    ck_assert_int_eq(job_add_member(j, &b), 0);
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{0, 1}");
    job_member c = member(2, -1);
    ck_assert_int_eq(job_add_member(j, &c), 0); /* an any-joiner will take 0 */
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{1}");
    job_member d = member(3, -1);
    ck_assert_int_eq(job_add_member(j, &d), 0);
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{}");
    /* it plans only: nothing about the members changed */
    ck_assert_int_eq(j->members[2].rank, -1);
    ck_assert_int_eq(j->state, JOB_FORMING);
    job_free(j);
}
END_TEST

START_TEST(test_find_and_remove_member) {
    const int32_t requested[] = {-1, -1, -1, -1};
    job *j = job_with(4, requested, 4);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-0", 6), 0);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-3", 6), 3);
    /* whole identities only: no prefixes, no extensions */
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-", 5), -1);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-33", 7), -1);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"nobody", 6), -1);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"", 0), -1);

    job_remove_member(j, 1);
    ck_assert_uint_eq(j->n_members, 3);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-1", 6), -1);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-2", 6), 1); /* order kept */
    ck_assert_uint_eq(j->members[0].pid, 1000);
    ck_assert_uint_eq(j->members[1].pid, 1002);
    ck_assert_uint_eq(j->members[2].pid, 1003);
    ck_assert(!job_complete(j));
    job_remove_member(j, 2); /* the last */
    ck_assert_uint_eq(j->n_members, 2);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-3", 6), -1);
    job_remove_member(j, 0); /* the first */
    ck_assert_uint_eq(j->n_members, 1);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-2", 6), 0);

    /* the freed places can be joined again, and the rank plan follows */
    job_member again = member(7, -1);
    ck_assert_int_eq(job_add_member(j, &again), 0);
    ck_assert_int_eq(job_find_member(j, (const uint8_t *)"peer-7", 6), 1);
    char buf[64];
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{2, 3}");
    job_free(j);
}
END_TEST

START_TEST(test_binary_identities) {
    job *j = job_new("bin", "", 2, NULL, 0, 0);
    job_member a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    /* ZeroMQ generated routing ids: a 0 byte then 4 bytes */
    const uint8_t id_a[] = {0, 0x80, 0, 0, 0x41}, id_b[] = {0, 0x80, 0, 0, 0x42};
    memcpy(a.identity, id_a, sizeof(id_a));
    a.identity_size = sizeof(id_a);
    memcpy(b.identity, id_b, sizeof(id_b));
    b.identity_size = sizeof(id_b);
    a.requested_rank = b.requested_rank = -1;
    ck_assert_int_eq(job_add_member(j, &a), 0);
    ck_assert_int_eq(job_add_member(j, &b), 0);
    ck_assert_int_eq(job_find_member(j, id_b, sizeof(id_b)), 1);
    ck_assert_int_eq(job_find_member(j, id_a, sizeof(id_a)), 0);
    ck_assert_int_eq(job_find_member(j, id_a, 1), -1);
    /* the largest routing id */
    job_free(j);
    j = job_new("big-id", "", 1, NULL, 0, 0);
    memset(&a, 0, sizeof(a));
    memset(a.identity, 0xab, WIRE_MAX_IDENTITY);
    a.identity_size = WIRE_MAX_IDENTITY;
    ck_assert_int_eq(job_add_member(j, &a), 0);
    ck_assert_int_eq(job_find_member(j, a.identity, WIRE_MAX_IDENTITY), 0);
    job_free(j);
}
END_TEST

START_TEST(test_active_members) {
    const int32_t any[] = {-1, -1, -1};
    job *j = job_with(3, any, 3);
    job_form(j, 1);
    ck_assert_uint_eq(job_active_members(j), 3);
    j->members[1].left = true;
    ck_assert_uint_eq(job_active_members(j), 2);
    j->members[0].left = true;
    j->members[2].left = true;
    ck_assert_uint_eq(job_active_members(j), 0);
    j->members[2].left = false;
    ck_assert_uint_eq(job_active_members(j), 1);
    job_free(j);
}
END_TEST

START_TEST(test_check_join_accepts) {
    char reason[DDP_MAX_REASON] = "untouched";
    job *j = job_new("train", "ddp", 4, NULL, 0, 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", -1, NULL, 0, reason, sizeof(reason)), 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", 0, NULL, 0, reason, sizeof(reason)), 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", 3, NULL, 0, reason, sizeof(reason)), 0);
    job_member m = member(0, 2);
    ck_assert_int_eq(job_add_member(j, &m), 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", 1, NULL, 0, reason, sizeof(reason)), 0);
    /* any number of any-rank joiners */
    job_member any = member(1, -1);
    ck_assert_int_eq(job_add_member(j, &any), 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", -1, NULL, 0, reason, sizeof(reason)), 0);
    ck_assert_str_eq(reason, "untouched");
    job_free(j);
}
END_TEST

/* ---- limits ----------------------------------------------------------------------- */

START_TEST(test_missing_ranks_truncated) {
    char buf[256];
    memset(buf, '#', sizeof(buf));
    job *j = job_new("huge", "", DDP_MAX_WORLD_SIZE, NULL, 0, 0);
    job_missing_ranks(j, buf, 128);
    size_t n = strlen(buf);
    ck_assert_uint_lt(n, 128);
    ck_assert_msg(strncmp(buf, "{0, 1, 2, 3, ", 13) == 0, "%s", buf);
    ck_assert_msg(n >= 6 && strcmp(buf + n - 6, ", ...}") == 0, "%s", buf);
    ck_assert_int_eq(buf[128], '#'); /* nothing past the given size */
    /* every number listed is a whole, consecutive rank */
    unsigned expect = 0;
    for (const char *p = buf + 1; *p && *p != '.';) {
        char *end;
        unsigned long r = strtoul(p, &end, 10);
        ck_assert_msg(end != p, "%s", buf);
        ck_assert_uint_eq(r, expect++);
        p = end;
        if (*p == ',')
            p += 2;
    }
    ck_assert_uint_gt(expect, 10);

    /* nearly complete: the whole list, no ellipsis */
    for (uint32_t i = 0; i < DDP_MAX_WORLD_SIZE - 2; i++) {
        job_member m = member(i, (int32_t)i + 2);
        ck_assert_int_eq(job_add_member(j, &m), 0);
    }
    job_missing_ranks(j, buf, 128);
    ck_assert_str_eq(buf, "{0, 1}");
    job_free(j);
}
END_TEST

START_TEST(test_missing_ranks_small_buffers) {
    job *j = job_new("w", "", 4, NULL, 0, 0);
    char buf[32];
    for (size_t size = 1; size < sizeof(buf); size++) {
        memset(buf, '#', sizeof(buf));
        job_missing_ranks(j, buf, size);
        ck_assert_msg(memchr(buf, '\0', size) != NULL, "size %zu: not terminated", size);
        for (size_t k = size; k < sizeof(buf); k++)
            ck_assert_msg(buf[k] == '#', "size %zu: wrote byte %zu", size, k);
        ck_assert_msg(size < 2 || buf[0] == '{', "size %zu: '%s'", size, buf);
    }
    memset(buf, 0, sizeof(buf));
    job_missing_ranks(j, buf, sizeof(buf));
    ck_assert_str_eq(buf, "{0, 1, 2, 3}");
    job_free(j);
}
END_TEST

START_TEST(test_capacity_grows_to_world) {
    job *j = job_new("grow", "", 100, NULL, 0, 0);
    for (uint32_t i = 0; i < 100; i++) {
        job_member m = member(i, -1);
        ck_assert_int_eq(job_add_member(j, &m), 0);
        ck_assert_uint_ge(j->capacity, j->n_members);
        ck_assert_uint_le(j->capacity, 100);
    }
    /* every member intact after the reallocations */
    for (uint32_t i = 0; i < 100; i++)
        ck_assert_uint_eq(j->members[i].pid, 1000 + i);
    job_member m = member(100, -1);
    ck_assert_int_eq(job_add_member(j, &m), -ENOSPC);
    job_free(j);
}
END_TEST

/* ---- malformed: joins that do not fit --------------------------------------------- */

START_TEST(test_check_join_duplicate_rank) {
    char reason[DDP_MAX_REASON];
    job *j = job_new("dup", "ddp", 4, NULL, 0, 0);
    job_member m = member(5, 1);
    snprintf(m.host, sizeof(m.host), "gpu-node-17.cluster");
    m.pid = 31337;
    ck_assert_int_eq(job_add_member(j, &m), 0);
    reason[0] = '\0';
    ck_assert_int_eq(job_check_join(j, 4, "ddp", 1, NULL, 0, reason, sizeof(reason)), -EEXIST);
    ck_assert_msg(strstr(reason, "rank 1"), "%s", reason);
    ck_assert_msg(strstr(reason, "'dup'"), "%s", reason);
    ck_assert_msg(strstr(reason, "pid 31337"), "%s", reason);
    ck_assert_msg(strstr(reason, "gpu-node-17.cluster"), "%s", reason);
    ck_assert_str_eq(reason, "rank 1 of job 'dup' is already taken by pid 31337 on gpu-node-17.cluster");
    /* other ranks are still free */
    ck_assert_int_eq(job_check_join(j, 4, "ddp", 0, NULL, 0, reason, sizeof(reason)), 0);
    ck_assert_int_eq(job_check_join(j, 4, "ddp", -1, NULL, 0, reason, sizeof(reason)), 0);
    job_free(j);
}
END_TEST

START_TEST(test_check_join_world_size) {
    char reason[DDP_MAX_REASON];
    job *j = job_new("ws", "ddp", 4, NULL, 0, 0);
    reason[0] = '\0';
    ck_assert_int_eq(job_check_join(j, 3, "ddp", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    ck_assert_str_eq(reason, "world size 3 differs from job 'ws''s world size 4");
    ck_assert_int_eq(job_check_join(j, 5, "ddp", 0, NULL, 0, reason, sizeof(reason)), -EINVAL);
    ck_assert_msg(strstr(reason, "world size 5"), "%s", reason);
    job_free(j);
}
END_TEST

START_TEST(test_check_join_mode) {
    char reason[DDP_MAX_REASON];
    job *j = job_new("md", "ddp", 2, NULL, 0, 0);
    reason[0] = '\0';
    ck_assert_int_eq(job_check_join(j, 2, "ps", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    ck_assert_str_eq(reason, "mode 'ps' differs from job 'md''s mode 'ddp'");
    ck_assert_int_eq(job_check_join(j, 2, "", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    ck_assert_int_eq(job_check_join(j, 2, "ddpx", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    ck_assert_int_eq(job_check_join(j, 2, "dd", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    job_free(j);
    /* a plain process group, "" */
    j = job_new("plain", "", 2, NULL, 0, 0);
    ck_assert_int_eq(job_check_join(j, 2, "", -1, NULL, 0, reason, sizeof(reason)), 0);
    ck_assert_int_eq(job_check_join(j, 2, "ddp", -1, NULL, 0, reason, sizeof(reason)), -EINVAL);
    job_free(j);
}
END_TEST

START_TEST(test_check_join_running) {
    char reason[DDP_MAX_REASON];
    const int32_t any[] = {-1, -1};
    job *j = job_with(2, any, 2);
    job_form(j, 77);
    reason[0] = '\0';
    /* even a join that matches in every way */
    ck_assert_int_eq(job_check_join(j, 2, "ddp", -1, NULL, 0, reason, sizeof(reason)), -EBUSY);
    ck_assert_msg(strstr(reason, "already running"), "%s", reason);
    ck_assert_msg(strstr(reason, "generation 77"), "%s", reason);
    ck_assert_msg(strstr(reason, "'train'"), "%s", reason);
    /* running comes first, before world size, mode or rank */
    ck_assert_int_eq(job_check_join(j, 3, "ps", 0, NULL, 0, reason, sizeof(reason)), -EBUSY);
    job_free(j);
}
END_TEST

START_TEST(test_check_join_reason_truncated) {
    char reason[16];
    memset(reason, '#', sizeof(reason));
    job *j = job_new("a-rather-long-job-name", "ddp", 4, NULL, 0, 0);
    ck_assert_int_eq(job_check_join(j, 3, "ddp", -1, NULL, 0, reason, 10), -EINVAL);
    ck_assert_uint_eq(strlen(reason), 9);
    ck_assert_int_eq(reason[10], '#');
    job_free(j);
}
END_TEST

/* One user ending job after job forgets its own ends, never another user's: the member
 * of the other user's job, back late, is still told how its job ended. */
START_TEST(test_ended_jobs_per_owner) {
    ended_jobs e = {0};
    job *mine = job_new("mine", "ddp", 1, NULL, 0, 0);
    job_member m = member(0, 0);
    ck_assert_int_eq(job_add_member(mine, &m), 0);
    mine->owner = 1000;
    ended_jobs_add(&e, mine, -ECONNABORTED, "rank 0 died", 1);
    job_free(mine);
    for (uint32_t i = 1; i <= 2 * ENDED_JOBS_KEPT; i++) {
        job *churn = job_new("churn", "ddp", 1, NULL, 0, 0);
        m = member(i, 0);
        ck_assert_int_eq(job_add_member(churn, &m), 0);
        churn->owner = 1001;
        ended_jobs_add(&e, churn, -EPIPE, "left", 1 + i);
        job_free(churn);
    }
    ended_member *em = NULL;
    m = member(0, 0);
    ended_job *ej = ended_jobs_find(&e, m.identity, m.identity_size, 100, &em);
    ck_assert_msg(ej && strcmp(ej->job, "mine") == 0 && em->rank == 0, "the other user's end was forgotten");
    m = member(1, 0); /* the churning user's oldest went */
    ck_assert_ptr_null(ended_jobs_find(&e, m.identity, m.identity_size, 100, &em));
    m = member(2 * ENDED_JOBS_KEPT, 0);
    ck_assert_ptr_nonnull(ended_jobs_find(&e, m.identity, m.identity_size, 100, &em));
    ended_jobs_free(&e);

    /* as many users as slots, one end each: the next end takes the oldest's place, and
     * the one after it the next oldest, not the newest's */
    for (uint32_t i = 0; i < ENDED_JOBS_KEPT + 2; i++) {
        job *one = job_new("one", "ddp", 1, NULL, 0, 0);
        m = member(i, 0);
        ck_assert_int_eq(job_add_member(one, &m), 0);
        one->owner = 2000 + i;
        ended_jobs_add(&e, one, -EPIPE, "left", 10 + i);
        job_free(one);
    }
    for (uint32_t i = 0; i < ENDED_JOBS_KEPT + 2; i++) {
        m = member(i, 0);
        ck_assert_msg((ended_jobs_find(&e, m.identity, m.identity_size, 100, &em) != NULL) == (i >= 2),
                      "user %u's end %s", i, i >= 2 ? "was forgotten" : "stayed");
    }
    ended_jobs_free(&e);
}
END_TEST

/* A job of 1024 members that ended (identities of three lengths, joined out of order):
 * each is found, with its rank, by the binary search; one of none of its members is not. */
START_TEST(test_ended_job_members_found) {
    ended_jobs e = {0};
    job *big = job_new("big", "ddp", 1024, NULL, 0, 0);
    for (uint32_t i = 0; i < 1024; i++) {
        job_member m = member((i * 389) % 1024, (int32_t)i); /* "peer-5", "peer-57", "peer-573" ... */
        ck_assert_int_eq(job_add_member(big, &m), 0);
    }
    ended_jobs_add(&e, big, -EPIPE, "left", 1);
    for (uint32_t i = 0; i < 1024; i++) {
        job_member m = member((i * 389) % 1024, 0);
        ended_member *em = NULL;
        ck_assert_ptr_nonnull(ended_jobs_find(&e, m.identity, m.identity_size, 2, &em));
        ck_assert_int_eq(em->rank, (int32_t)i);
    }
    job_member stranger = member(4096, 0);
    ended_member *em = NULL;
    ck_assert_ptr_null(ended_jobs_find(&e, stranger.identity, stranger.identity_size, 2, &em));
    ck_assert_ptr_null(ended_jobs_find(&e, stranger.identity, 0, 2, &em));
    job_free(big);
    ended_jobs_free(&e);
}
END_TEST

/* A ps job rebuilt after a restart, its members back at the steps given (bucket 0 only). */
static job *ps_job_back_at(const uint64_t *steps, size_t n) {
    const uint64_t layout[1] = {3};
    job *j = job_new("ps", "ps", (uint32_t)n, layout, 1, 0);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(job_recover(j, 7, 0, steps, 1), 0);
    for (size_t i = 0; i < n; i++) {
        job_member m = member((uint32_t)i, (int32_t)i);
        m.ps_steps = malloc(sizeof(uint64_t));
        m.ps_steps[0] = steps[i];
        ck_assert_int_eq(job_add_member(j, &m), 0);
    }
    return j;
}

/* Ranks back at 5, 4, 5: rank 1 lacks the average of step 4, and rank 0 (the lowest ahead)
 * is asked for it; at 5 and 3 they cannot be, and the reason says so. */
START_TEST(test_ps_resolve) {
    char reason[256];
    const uint64_t one_behind[] = {5, 4, 5}, two_behind[] = {5, 3};
    job *j = ps_job_back_at(one_behind, 3);
    ck_assert_int_eq(job_ps_resolve(j, reason, sizeof(reason)), 0);
    ck_assert_uint_eq(j->ps.buckets[0].step, 5);
    ck_assert_int_eq(j->ps.buckets[0].average_from, 0);
    ck_assert(!ps_lacking(&j->ps, 0, 0) && ps_lacking(&j->ps, 0, 1) && !ps_lacking(&j->ps, 0, 2));
    job_free(j);
    j = ps_job_back_at(two_behind, 2);
    ck_assert_int_eq(job_ps_resolve(j, reason, sizeof(reason)), -ESTALE);
    ck_assert_msg(strstr(reason, "bucket 0: rank 1 is at step 3, another at step 5"), "%s", reason);
    job_free(j);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("job");

    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_new_job);
    tcase_add_test(core, test_ranks_in_join_order);
    tcase_add_test(core, test_requested_ranks_honoured);
    tcase_add_test(core, test_requested_ranks_fill_from_the_top);
    tcase_add_test(core, test_all_ranks_requested);
    tcase_add_test(core, test_world_of_one);
    tcase_add_test(core, test_missing_ranks);
    tcase_add_test(core, test_find_and_remove_member);
    tcase_add_test(core, test_binary_identities);
    tcase_add_test(core, test_active_members);
    tcase_add_test(core, test_check_join_accepts);
    tcase_add_test(core, test_ended_jobs_per_owner);
    tcase_add_test(core, test_ended_job_members_found);
    tcase_add_test(core, test_ps_resolve);
    suite_add_tcase(s, core);

    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 60);
    tcase_add_test(limits, test_missing_ranks_truncated);
    tcase_add_test(limits, test_missing_ranks_small_buffers);
    tcase_add_test(limits, test_capacity_grows_to_world);
    suite_add_tcase(s, limits);

    TCase *malformed = tcase_create("malformed");
    tcase_set_timeout(malformed, 60);
    tcase_add_test(malformed, test_check_join_duplicate_rank);
    tcase_add_test(malformed, test_check_join_world_size);
    tcase_add_test(malformed, test_check_join_mode);
    tcase_add_test(malformed, test_check_join_running);
    tcase_add_test(malformed, test_check_join_reason_truncated);
    suite_add_tcase(s, malformed);

    return check_main(s, argc, argv);
}
