/* common/limits.h: the limits agree with each other, and the code that enforces each one
 * (server/store.c, server/job.c) holds it at the boundary. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/limits.h"
#include "common/wire.h"
#include "server/job.h"
#include "common/store.h"
#include "tests/check_main.h"

#define DEATH_NOTICE_MS 3000 /* the promise: a dead member is named to the others within 3 s */

static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* An envelope header with every field as large as it can be. */
static void largest_header(Ddp__Envelope *env, Ddp__MsgType type, const char *job_name) {
    wire_envelope_init(env, type, job_name, INT32_MIN, UINT64_MAX, UINT64_MAX);
}

/* ---- core: the limits agree --------------------------------------------------------- */

START_TEST(test_welcome_for_largest_world_fits) {
    char *job_name = repeat('j', DDP_MAX_JOB_NAME);
    char **endpoints = calloc(DDP_MAX_WORLD_SIZE, sizeof(*endpoints));
    char **hosts = calloc(DDP_MAX_WORLD_SIZE, sizeof(*hosts));
    uint32_t *pids = calloc(DDP_MAX_WORLD_SIZE, sizeof(*pids));
    ck_assert_ptr_nonnull(endpoints);
    ck_assert_ptr_nonnull(hosts);
    ck_assert_ptr_nonnull(pids);
    for (size_t i = 0; i < DDP_MAX_WORLD_SIZE; i++) {
        endpoints[i] = repeat('e', DDP_MAX_ENDPOINT);
        hosts[i] = repeat('h', DDP_MAX_HOST);
        pids[i] = UINT32_MAX;
    }
    Ddp__Welcome w = DDP__WELCOME__INIT;
    w.rank = DDP_MAX_WORLD_SIZE - 1;
    w.world_size = DDP_MAX_WORLD_SIZE;
    w.generation = UINT64_MAX;
    w.endpoints = endpoints;
    w.hosts = hosts;
    w.pids = pids;
    static char *keys[DDP_MAX_WORLD_SIZE];
    for (size_t i = 0; i < DDP_MAX_WORLD_SIZE; i++)
        keys[i] = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"; /* every rank on TCP: a CURVE key each */
    w.data_keys = keys;
    w.n_endpoints = w.n_hosts = w.n_pids = w.n_data_keys = DDP_MAX_WORLD_SIZE;
    w.heartbeat_ms = DDP_MAX_HEARTBEAT_MS;
    w.liveness = DDP_MAX_LIVENESS;
    Ddp__Envelope env;
    largest_header(&env, DDP__MSG_TYPE__WELCOME, job_name);
    env.welcome = &w;
    size_t size = ddp__envelope__get_packed_size(&env);
    ck_assert_msg(size <= DDP_MAX_ENVELOPE_BYTES, "largest Welcome packs to %zu bytes, limit %u", size,
                  (unsigned)DDP_MAX_ENVELOPE_BYTES);
    /* and every field of it passes validation (with a rank wire_validate accepts) */
    env.rank = -1;
    char err[160];
    ck_assert_msg(wire_validate(&env, 0, err, sizeof(err)) == 0, "%s", err);
    zmq_msg_t frame;
    ck_assert_int_eq(wire_pack(&env, &frame), 0);
    ck_assert_uint_eq(zmq_msg_size(&frame), ddp__envelope__get_packed_size(&env));
    zmq_msg_close(&frame);
    for (size_t i = 0; i < DDP_MAX_WORLD_SIZE; i++) {
        free(endpoints[i]);
        free(hosts[i]);
    }
    free(endpoints);
    free(hosts);
    free(pids);
    free(job_name);
}
END_TEST

START_TEST(test_store_messages_fit) {
    char *job_name = repeat('j', DDP_MAX_JOB_NAME);
    char *key = repeat('k', DDP_MAX_STORE_KEY);
    uint8_t *value = calloc(1, DDP_MAX_STORE_VALUE);
    ck_assert_ptr_nonnull(value);
    char err[160];

    Ddp__StoreSet set = DDP__STORE_SET__INIT;
    set.key = key;
    set.value.data = value;
    set.value.len = DDP_MAX_STORE_VALUE;
    Ddp__Envelope env;
    largest_header(&env, DDP__MSG_TYPE__STORE_SET, job_name);
    env.store_set = &set;
    size_t size = ddp__envelope__get_packed_size(&env);
    ck_assert_msg(size <= DDP_MAX_ENVELOPE_BYTES, "largest store-set: %zu bytes", size);
    env.rank = -1;
    ck_assert_msg(wire_validate(&env, 0, err, sizeof(err)) == 0, "%s", err);

    Ddp__StoreValue val = DDP__STORE_VALUE__INIT;
    val.key = key;
    val.found = true;
    val.value.data = value;
    val.value.len = DDP_MAX_STORE_VALUE;
    largest_header(&env, DDP__MSG_TYPE__STORE_VALUE, job_name);
    env.store_value = &val;
    size = ddp__envelope__get_packed_size(&env);
    ck_assert_msg(size <= DDP_MAX_ENVELOPE_BYTES, "largest store-value: %zu bytes", size);

    char **keys = calloc(DDP_MAX_STORE_WAIT_KEYS, sizeof(*keys));
    ck_assert_ptr_nonnull(keys);
    for (size_t i = 0; i < DDP_MAX_STORE_WAIT_KEYS; i++)
        keys[i] = key;
    Ddp__StoreWait wait = DDP__STORE_WAIT__INIT;
    wait.keys = keys;
    wait.n_keys = DDP_MAX_STORE_WAIT_KEYS;
    wait.timeout_ms = DDP_MAX_TIMEOUT_MS;
    largest_header(&env, DDP__MSG_TYPE__STORE_WAIT, job_name);
    env.store_wait = &wait;
    size = ddp__envelope__get_packed_size(&env);
    ck_assert_msg(size <= DDP_MAX_ENVELOPE_BYTES, "largest store-wait: %zu bytes", size);

    /* one value, with its key, fits a job's store */
    ck_assert_uint_le((uint64_t)DDP_MAX_STORE_VALUE + DDP_MAX_STORE_KEY, DDP_MAX_STORE_BYTES);
    free(keys);
    free(value);
    free(key);
    free(job_name);
}
END_TEST

START_TEST(test_text_messages_fit) {
    char *job_name = repeat('j', DDP_MAX_JOB_NAME);
    char *host = repeat('h', DDP_MAX_HOST);
    char *reason = repeat('r', DDP_MAX_REASON);
    char *endpoint = repeat('e', DDP_MAX_ENDPOINT);
    char *mode = repeat('m', DDP_MAX_MODE);
    Ddp__Envelope env;

    Ddp__Join join = DDP__JOIN__INIT;
    join.world_size = DDP_MAX_WORLD_SIZE;
    join.rank = DDP_MAX_WORLD_SIZE - 1;
    join.mode = mode;
    join.pid = UINT32_MAX;
    join.host = host;
    join.data_endpoint = endpoint;
    largest_header(&env, DDP__MSG_TYPE__JOIN, job_name);
    env.join = &join;
    ck_assert_uint_le(ddp__envelope__get_packed_size(&env), DDP_MAX_ENVELOPE_BYTES);

    Ddp__Abort abort_body = DDP__ABORT__INIT;
    abort_body.rank = INT32_MIN;
    abort_body.pid = UINT32_MAX;
    abort_body.host = host;
    abort_body.reason = reason;
    abort_body.code = INT32_MIN;
    largest_header(&env, DDP__MSG_TYPE__ABORT, job_name);
    env.abort = &abort_body;
    ck_assert_uint_le(ddp__envelope__get_packed_size(&env), DDP_MAX_ENVELOPE_BYTES);

    /* the server formats reasons into char[DDP_MAX_REASON]: what fits there is valid */
    char formatted[DDP_MAX_REASON];
    snprintf(formatted, sizeof(formatted), "%s", reason);
    Ddp__Reject reject = DDP__REJECT__INIT;
    reject.code = -EINVAL;
    reject.reason = formatted;
    wire_envelope_init(&env, DDP__MSG_TYPE__REJECT, job_name, -1, 0, 0);
    env.reject = &reject;
    char err[160];
    ck_assert_msg(wire_validate(&env, 0, err, sizeof(err)) == 0, "%s", err);

    free(mode);
    free(endpoint);
    free(reason);
    free(host);
    free(job_name);
}
END_TEST

/* ddpd answers a status request with one StatusReply for all it tracks: at most
 * DDP_MAX_PEERS members over all jobs, with hosts and endpoints as long as a Join may carry. */
START_TEST(test_status_reply_for_all_peers_fits) {
    enum { N_JOBS = (DDP_MAX_PEERS + DDP_MAX_WORLD_SIZE - 1) / DDP_MAX_WORLD_SIZE };
    char *host = repeat('h', DDP_MAX_HOST);
    char *endpoint = repeat('e', DDP_MAX_ENDPOINT);
    char *mode = repeat('m', DDP_MAX_MODE);
    char names[N_JOBS][DDP_MAX_JOB_NAME + 1];
    Ddp__MemberStatus *members = calloc(DDP_MAX_PEERS, sizeof(*members));
    Ddp__MemberStatus **member_ptrs = calloc(DDP_MAX_PEERS, sizeof(*member_ptrs));
    Ddp__JobStatus jobs[N_JOBS];
    Ddp__JobStatus *job_ptrs[N_JOBS];
    ck_assert_ptr_nonnull(members);
    ck_assert_ptr_nonnull(member_ptrs);
    for (size_t i = 0; i < DDP_MAX_PEERS; i++) {
        ddp__member_status__init(&members[i]);
        members[i].rank = -1; /* forming: no rank yet */
        members[i].pid = UINT32_MAX;
        members[i].host = host;
        members[i].endpoint = endpoint;
        members[i].last_heard_ms = 100;
        member_ptrs[i] = &members[i];
    }
    size_t placed = 0;
    for (size_t i = 0; i < N_JOBS; i++) {
        ddp__job_status__init(&jobs[i]);
        memset(names[i], 'a' + (int)i, DDP_MAX_JOB_NAME);
        names[i][DDP_MAX_JOB_NAME] = '\0';
        jobs[i].name = names[i];
        jobs[i].state = "forming";
        jobs[i].mode = mode;
        jobs[i].world_size = DDP_MAX_WORLD_SIZE;
        jobs[i].age_ms = 1000;
        jobs[i].members = &member_ptrs[placed];
        jobs[i].n_members = DDP_MAX_PEERS - placed < DDP_MAX_WORLD_SIZE ? DDP_MAX_PEERS - placed : DDP_MAX_WORLD_SIZE;
        placed += jobs[i].n_members;
        job_ptrs[i] = &jobs[i];
    }
    ck_assert_uint_eq(placed, DDP_MAX_PEERS);
    Ddp__StatusReply body = DDP__STATUS_REPLY__INIT;
    body.version = DDP_VERSION;
    body.uptime_ms = 1000;
    body.jobs = job_ptrs;
    body.n_jobs = N_JOBS;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REPLY, "", -1, 0, 1);
    env.status_reply = &body;
    char err[160];
    ck_assert_msg(wire_validate(&env, 0, err, sizeof(err)) == 0, "%s", err);
    size_t size = ddp__envelope__get_packed_size(&env);
    free(member_ptrs);
    free(members);
    free(mode);
    free(endpoint);
    free(host);
    ck_assert_msg(size <= DDP_MAX_ENVELOPE_BYTES,
                  "a status reply for %d members packs to %zu bytes, over DDP_MAX_ENVELOPE_BYTES (%u): "
                  "wire_send refuses it with -EMSGSIZE and the requester gets no answer",
                  DDP_MAX_PEERS, size, (unsigned)DDP_MAX_ENVELOPE_BYTES);
}
END_TEST

START_TEST(test_framing_limits_agree) {
    /* an envelope at its limit passes the control socket's ZMQ_MAXMSGSIZE */
    ck_assert_int_le((long long)DDP_MAX_ENVELOPE_BYTES, DDP_MAX_CONTROL_MSG_BYTES);
    ck_assert_int_le(DDP_MAX_CONTROL_MSG_BYTES, DDP_MAX_DATA_MSG_BYTES);
    /* a store value travels inside an envelope */
    ck_assert_uint_lt(DDP_MAX_STORE_VALUE, DDP_MAX_ENVELOPE_BYTES);
    ck_assert_int_ge(DDP_MAX_PAYLOAD_FRAMES, 1);
    ck_assert_uint_eq(sizeof(((wire_msg *)0)->payload) / sizeof(zmq_msg_t), DDP_MAX_PAYLOAD_FRAMES);
    ck_assert_int_eq(WIRE_MAX_IDENTITY, 255);
    ck_assert_uint_eq(sizeof(((wire_msg *)0)->identity), WIRE_MAX_IDENTITY);
    ck_assert_uint_ge(DDP_PROTOCOL_VERSION, 1);
}
END_TEST

START_TEST(test_timing_limits_agree) {
    ck_assert_int_le(DDP_MIN_HEARTBEAT_MS, DDP_DEFAULT_HEARTBEAT_MS);
    ck_assert_int_le(DDP_DEFAULT_HEARTBEAT_MS, DDP_MAX_HEARTBEAT_MS);
    ck_assert_int_ge(DDP_MIN_HEARTBEAT_MS, 1);
    ck_assert_int_ge(DDP_DEFAULT_LIVENESS, 1);
    ck_assert_int_le(DDP_DEFAULT_LIVENESS, DDP_MAX_LIVENESS);
    /* the 3 s death notice: silence for liveness intervals makes a member dead... */
    ck_assert_int_lt(DDP_DEFAULT_LIVENESS * DDP_DEFAULT_HEARTBEAT_MS, DEATH_NOTICE_MS);
    /* ...and it still holds with one more interval of slack for the ticks and the notice */
    ck_assert_int_le((DDP_DEFAULT_LIVENESS + 1) * DDP_DEFAULT_HEARTBEAT_MS, DEATH_NOTICE_MS);
    /* the longest silence ddpd can be told to tolerate still fits the uint32 fields */
    ck_assert_uint_le((uint64_t)DDP_MAX_HEARTBEAT_MS * DDP_MAX_LIVENESS, UINT32_MAX);
    ck_assert_uint_le((uint64_t)DDP_MAX_TIMEOUT_MS, UINT32_MAX); /* StoreWait.timeout_ms */
    ck_assert_int_le(DDP_DEFAULT_TIMEOUT_MS, DDP_MAX_TIMEOUT_MS);
    ck_assert_int_le(DDP_DEFAULT_JOIN_TIMEOUT_MS, DDP_MAX_TIMEOUT_MS);
    ck_assert_int_le(DDP_DEFAULT_CONNECT_TIMEOUT_MS, DDP_MAX_TIMEOUT_MS);
    ck_assert_int_gt(DDP_DEFAULT_TIMEOUT_MS, 0);
}
END_TEST

START_TEST(test_buffers_match_limits) {
    job *j = NULL;
    ck_assert_uint_eq(sizeof(j->name), DDP_MAX_JOB_NAME + 1);
    ck_assert_uint_eq(sizeof(j->mode), DDP_MAX_MODE + 1);
    job_member *m = NULL;
    ck_assert_uint_eq(sizeof(m->host), DDP_MAX_HOST + 1);
    ck_assert_uint_eq(sizeof(m->endpoint), DDP_MAX_ENDPOINT + 1);
    ck_assert_uint_eq(sizeof(m->identity), WIRE_MAX_IDENTITY);
    ck_assert_int_le(DDP_MAX_WORLD_SIZE, INT32_MAX);
    ck_assert_int_le(DDP_MAX_WORLD_SIZE, DDP_MAX_PEERS);         /* a full world can connect */
    ck_assert_int_ge(DDP_MAX_STORE_KEYS, DDP_MAX_WORLD_SIZE);    /* every rank can publish a key */
    ck_assert_int_ge(DDP_MAX_STORE_WAITERS, DDP_MAX_WORLD_SIZE); /* every rank can wait */
    ck_assert_int_le(DDP_MAX_JOB_NAME, DDP_MAX_CONFIG_STRING);
}
END_TEST

/* ---- limits: store.c -------------------------------------------------------------- */

START_TEST(test_store_value_size) {
    store s = {0};
    uint8_t *value = malloc(DDP_MAX_STORE_VALUE + 1);
    ck_assert_ptr_nonnull(value);
    for (size_t i = 0; i <= DDP_MAX_STORE_VALUE; i++)
        value[i] = (uint8_t)(i ^ (i >> 8));
    ck_assert_int_eq(store_set(&s, "big", value, DDP_MAX_STORE_VALUE), 0);
    ck_assert_uint_eq(s.bytes, 3 + DDP_MAX_STORE_VALUE);
    const store_entry *e = store_get(&s, "big");
    ck_assert_ptr_nonnull(e);
    ck_assert_uint_eq(e->size, DDP_MAX_STORE_VALUE);
    ck_assert_mem_eq(e->value, value, DDP_MAX_STORE_VALUE);

    ck_assert_int_eq(store_set(&s, "bigger", value, DDP_MAX_STORE_VALUE + 1), -EMSGSIZE);
    ck_assert_ptr_null(store_get(&s, "bigger"));
    /* a refused replacement leaves the old value */
    ck_assert_int_eq(store_set(&s, "big", value, DDP_MAX_STORE_VALUE + 1), -EMSGSIZE);
    e = store_get(&s, "big");
    ck_assert_uint_eq(e->size, DDP_MAX_STORE_VALUE);
    ck_assert_mem_eq(e->value, value, DDP_MAX_STORE_VALUE);
    ck_assert_uint_eq(s.n_entries, 1);
    ck_assert_uint_eq(s.bytes, 3 + DDP_MAX_STORE_VALUE);
    store_clear(&s);
    ck_assert_uint_eq(s.n_entries, 0);
    ck_assert_uint_eq(s.bytes, 0);
    ck_assert_ptr_null(store_get(&s, "big"));
    free(value);
}
END_TEST

START_TEST(test_store_key_count) {
    store s = {0};
    char key[32];
    for (int i = 0; i < DDP_MAX_STORE_KEYS; i++) {
        snprintf(key, sizeof(key), "rank-%d", i);
        uint8_t v = (uint8_t)i;
        ck_assert_int_eq(store_set(&s, key, &v, 1), 0);
    }
    ck_assert_uint_eq(s.n_entries, DDP_MAX_STORE_KEYS);
    size_t bytes = s.bytes;
    ck_assert_int_eq(store_set(&s, "one-more", NULL, 0), -ENOSPC);
    ck_assert_ptr_null(store_get(&s, "one-more"));
    ck_assert_uint_eq(s.n_entries, DDP_MAX_STORE_KEYS);
    ck_assert_uint_eq(s.bytes, bytes);
    /* a full store still takes new values for the keys it has */
    uint8_t v = 0xee;
    ck_assert_int_eq(store_set(&s, "rank-4095", &v, 1), 0);
    ck_assert_uint_eq(store_get(&s, "rank-4095")->value[0], 0xee);
    ck_assert_uint_eq(store_get(&s, "rank-17")->value[0], 17);
    ck_assert_uint_eq(s.bytes, bytes);
    store_clear(&s);
    /* and after clearing, anything goes again */
    ck_assert_int_eq(store_set(&s, "one-more", NULL, 0), 0);
    store_clear(&s);
}
END_TEST

START_TEST(test_store_total_bytes) {
    store s = {0};
    uint8_t *value = calloc(1, DDP_MAX_STORE_VALUE);
    ck_assert_ptr_nonnull(value);
    char key[16];
    size_t expected = 0;
    size_t n_full = DDP_MAX_STORE_BYTES / (DDP_MAX_STORE_VALUE + 3);
    for (size_t i = 0; i < n_full; i++) {
        snprintf(key, sizeof(key), "k%02zu", i);
        ck_assert_int_eq(store_set(&s, key, value, DDP_MAX_STORE_VALUE), 0);
        expected += 3 + DDP_MAX_STORE_VALUE;
    }
    ck_assert_uint_eq(s.bytes, expected);
    /* fill it to exactly DDP_MAX_STORE_BYTES */
    size_t rest = DDP_MAX_STORE_BYTES - expected - 4;
    ck_assert_uint_le(rest, DDP_MAX_STORE_VALUE);
    ck_assert_int_eq(store_set(&s, "last", value, rest), 0);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_BYTES);
    /* one byte more, as a new key or a longer value: -ENOSPC, nothing changed */
    ck_assert_int_eq(store_set(&s, "x", NULL, 0), -ENOSPC);
    ck_assert_ptr_null(store_get(&s, "x"));
    ck_assert_int_eq(store_set(&s, "last", value, rest + 1), -ENOSPC);
    ck_assert_uint_eq(store_get(&s, "last")->size, rest);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_BYTES);
    /* replacing with the same size or less is fine, and frees room */
    ck_assert_int_eq(store_set(&s, "last", value, rest), 0);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_BYTES);
    ck_assert_int_eq(store_set(&s, "last", value, rest - 10), 0);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_BYTES - 10);
    ck_assert_int_eq(store_set(&s, "x", value, 9), 0);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_BYTES);
    ck_assert_int_eq(store_set(&s, "y", NULL, 0), -ENOSPC);
    store_clear(&s);
    free(value);
}
END_TEST

START_TEST(test_store_replace_accounting) {
    store s = {0};
    const uint8_t ten[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    ck_assert_int_eq(store_set(&s, "k", ten, 10), 0);
    ck_assert_uint_eq(s.bytes, 1 + 10);
    ck_assert_int_eq(store_set(&s, "other", ten, 2), 0);
    ck_assert_uint_eq(s.bytes, 11 + 5 + 2);
    ck_assert_int_eq(store_set(&s, "k", ten + 7, 3), 0);
    ck_assert_uint_eq(s.bytes, 1 + 3 + 7);
    ck_assert_uint_eq(s.n_entries, 2);
    const store_entry *e = store_get(&s, "k");
    ck_assert_uint_eq(e->size, 3);
    ck_assert_mem_eq(e->value, ten + 7, 3);
    ck_assert_int_eq(store_set(&s, "k", NULL, 0), 0);
    ck_assert_uint_eq(s.bytes, 1 + 0 + 7);
    ck_assert_uint_eq(store_get(&s, "k")->size, 0);
    ck_assert_int_eq(store_set(&s, "k", ten, 10), 0);
    ck_assert_uint_eq(s.bytes, 11 + 7);
    ck_assert_mem_eq(store_get(&s, "k")->value, ten, 10);
    ck_assert_mem_eq(store_get(&s, "other")->value, ten, 2);
    store_clear(&s);
}
END_TEST

START_TEST(test_store_key_length) {
    store s = {0};
    char *at = repeat('k', DDP_MAX_STORE_KEY), *over = repeat('k', DDP_MAX_STORE_KEY + 1);
    ck_assert_int_eq(store_set(&s, at, (const uint8_t *)"v", 1), 0);
    ck_assert_uint_eq(s.bytes, DDP_MAX_STORE_KEY + 1);
    ck_assert_int_eq(store_set(&s, over, (const uint8_t *)"v", 1), -EINVAL);
    ck_assert_ptr_null(store_get(&s, over));
    ck_assert_uint_eq(s.n_entries, 1);
    store_clear(&s);
    free(at);
    free(over);
}
END_TEST

/* ---- limits: job.c ----------------------------------------------------------------- */

static job_member member(uint32_t i, int32_t rank) {
    job_member m;
    memset(&m, 0, sizeof(m));
    m.identity_size = (size_t)snprintf((char *)m.identity, sizeof(m.identity), "peer-%u", i);
    m.requested_rank = rank;
    m.rank = rank;
    m.pid = 1000 + i;
    snprintf(m.host, sizeof(m.host), "host-%u", i);
    return m;
}

START_TEST(test_job_members_beyond_world) {
    job *j = job_new("small", "ddp", 3, NULL, 0, 0);
    ck_assert_ptr_nonnull(j);
    for (uint32_t i = 0; i < 3; i++) {
        job_member m = member(i, -1);
        ck_assert_int_eq(job_add_member(j, &m), 0);
    }
    ck_assert(job_complete(j));
    job_member extra = member(3, -1);
    ck_assert_int_eq(job_add_member(j, &extra), -ENOSPC);
    ck_assert_uint_eq(j->n_members, 3);
    ck_assert_int_eq(job_find_member(j, extra.identity, extra.identity_size), -1);
    job_free(j);

    j = job_new("large", "", DDP_MAX_WORLD_SIZE, NULL, 0, 0);
    ck_assert_ptr_nonnull(j);
    for (uint32_t i = 0; i < DDP_MAX_WORLD_SIZE; i++) {
        job_member m = member(i, (int32_t)(DDP_MAX_WORLD_SIZE - 1 - i));
        ck_assert_int_eq(job_add_member(j, &m), 0);
    }
    ck_assert(job_complete(j));
    extra = member(DDP_MAX_WORLD_SIZE, -1);
    ck_assert_int_eq(job_add_member(j, &extra), -ENOSPC);
    ck_assert_uint_le(j->capacity, DDP_MAX_WORLD_SIZE);
    job_form(j, 1);
    for (uint32_t r = 0; r < DDP_MAX_WORLD_SIZE; r++)
        ck_assert_int_eq(j->members[r].rank, (int32_t)r);
    ck_assert_uint_eq(j->members[0].pid, 1000 + DDP_MAX_WORLD_SIZE - 1);
    job_free(j);

    /* world size 1: room for exactly one */
    j = job_new("one", "", 1, NULL, 0, 0);
    job_member m0 = member(0, -1), m1 = member(1, -1);
    ck_assert_int_eq(job_add_member(j, &m0), 0);
    ck_assert_int_eq(job_add_member(j, &m1), -ENOSPC);
    ck_assert_uint_eq(j->capacity, 1);
    job_free(j);
}
END_TEST

/* A waiter on one key, as ddpd makes it. */
static store_waiter *waiter(uint64_t seq, const char *key) {
    store_waiter *w = calloc(1, sizeof(*w));
    ck_assert_ptr_nonnull(w);
    w->seq = seq;
    w->n_keys = 1;
    w->keys = malloc(sizeof(char *));
    ck_assert_ptr_nonnull(w->keys);
    w->keys[0] = strdup(key);
    return w;
}

START_TEST(test_job_waiters_limit) {
    job *j = job_new("waits", "", 2, NULL, 0, 0);
    ck_assert_ptr_nonnull(j);
    bool ready;
    for (size_t i = 0; i < DDP_MAX_STORE_WAITERS; i++)
        ck_assert_int_eq(store_waits_add(&j->waits, &j->store, waiter(i, "key"), &ready), 0);
    ck_assert_uint_eq(j->waits.n, DDP_MAX_STORE_WAITERS);
    store_waiter *extra = waiter(99999, "key");
    ck_assert_int_eq(store_waits_add(&j->waits, &j->store, extra, &ready), -ENOSPC);
    ck_assert_uint_eq(j->waits.n, DDP_MAX_STORE_WAITERS);
    ck_assert_uint_eq(j->waits.tail->seq, DDP_MAX_STORE_WAITERS - 1);
    /* removing one makes room for one */
    store_waiter *first = j->waits.head;
    store_waits_remove(&j->waits, &j->store, first);
    store_waiter_free(first);
    ck_assert_uint_eq(j->waits.head->seq, 1);
    ck_assert_int_eq(store_waits_add(&j->waits, &j->store, extra, &ready), 0);
    ck_assert_uint_eq(j->waits.tail->seq, 99999);
    store_waiter *more = waiter(100000, "key");
    ck_assert_int_eq(store_waits_add(&j->waits, &j->store, more, &ready), -ENOSPC);
    store_waiter_free(more);
    job_free(j); /* frees every waiter and its keys */
}
END_TEST

/* ---- malformed: what the store refuses --------------------------------------------- */

START_TEST(test_store_empty_key) {
    store s = {0};
    ck_assert_int_eq(store_set(&s, "", (const uint8_t *)"v", 1), -EINVAL);
    ck_assert_uint_eq(s.n_entries, 0);
    ck_assert_uint_eq(s.bytes, 0);
    ck_assert_ptr_null(store_get(&s, ""));
    /* the key's check comes first, even for an oversized value */
    ck_assert_int_eq(store_set(&s, "", NULL, DDP_MAX_STORE_VALUE + 1), -EINVAL);
    store_clear(&s);
}
END_TEST

START_TEST(test_store_binary_values) {
    store s = {0};
    const uint8_t v[] = {0, 0, 0xff, 0};
    ck_assert_int_eq(store_set(&s, "bin", v, sizeof(v)), 0);
    const store_entry *e = store_get(&s, "bin");
    ck_assert_uint_eq(e->size, sizeof(v));
    ck_assert_mem_eq(e->value, v, sizeof(v));
    /* keys are whole strings: no prefix matches */
    ck_assert_ptr_null(store_get(&s, "bi"));
    ck_assert_ptr_null(store_get(&s, "binary"));
    store_clear(&s);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("limits");

    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, test_welcome_for_largest_world_fits);
    tcase_add_test(core, test_store_messages_fit);
    tcase_add_test(core, test_text_messages_fit);
    tcase_add_test(core, test_status_reply_for_all_peers_fits);
    tcase_add_test(core, test_framing_limits_agree);
    tcase_add_test(core, test_timing_limits_agree);
    tcase_add_test(core, test_buffers_match_limits);
    suite_add_tcase(s, core);

    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 60);
    tcase_add_test(limits, test_store_value_size);
    tcase_add_test(limits, test_store_key_count);
    tcase_add_test(limits, test_store_total_bytes);
    tcase_add_test(limits, test_store_replace_accounting);
    tcase_add_test(limits, test_store_key_length);
    tcase_add_test(limits, test_job_members_beyond_world);
    tcase_add_test(limits, test_job_waiters_limit);
    suite_add_tcase(s, limits);

    TCase *malformed = tcase_create("malformed");
    tcase_set_timeout(malformed, 60);
    tcase_add_test(malformed, test_store_empty_key);
    tcase_add_test(malformed, test_store_binary_values);
    suite_add_tcase(s, malformed);

    return check_main(s, argc, argv);
}
