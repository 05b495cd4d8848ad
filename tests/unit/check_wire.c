/* common/wire.c: framing, decoding and validation of control messages, over a real
 * ZeroMQ ROUTER/DEALER pair on inproc://. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/error.h"
#include "common/limits.h"
#include "common/wire.h"
#include "tests/check_main.h"

#define ENDPOINT "inproc://check-wire"
#define DEALER_ID "worker-7"
#define RECV_TIMEOUT_MS 5000 /* a lost message fails the test instead of hanging it */

static void *ctx, *router, *dealer;

static void set_int(void *socket, int option, int value) {
    ck_assert_int_eq(zmq_setsockopt(socket, option, &value, sizeof(value)), 0);
}

static void setup(void) {
    ctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(ctx);
    router = zmq_socket(ctx, ZMQ_ROUTER);
    dealer = zmq_socket(ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(router);
    ck_assert_ptr_nonnull(dealer);
    set_int(router, ZMQ_LINGER, 0);
    set_int(dealer, ZMQ_LINGER, 0);
    set_int(router, ZMQ_RCVTIMEO, RECV_TIMEOUT_MS);
    set_int(dealer, ZMQ_RCVTIMEO, RECV_TIMEOUT_MS);
    ck_assert_int_eq(zmq_setsockopt(dealer, ZMQ_ROUTING_ID, DEALER_ID, strlen(DEALER_ID)), 0);
    ck_assert_int_eq(zmq_bind(router, ENDPOINT), 0);
    ck_assert_int_eq(zmq_connect(dealer, ENDPOINT), 0);
}

static void teardown(void) {
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

/* ---- helpers ------------------------------------------------------------------------ */

static void assert_identity(const wire_msg *msg) {
    ck_assert_uint_eq(msg->identity_size, strlen(DEALER_ID));
    ck_assert_mem_eq(msg->identity, DEALER_ID, strlen(DEALER_ID));
}

static void assert_header(const wire_msg *msg, Ddp__MsgType type, Ddp__Envelope__BodyCase body, const char *job,
                          int32_t rank, uint64_t generation, uint64_t seq) {
    ck_assert_ptr_nonnull(msg->env);
    ck_assert_uint_eq(msg->env->version, DDP_PROTOCOL_VERSION);
    ck_assert_int_eq(msg->env->type, type);
    ck_assert_int_eq(msg->env->body_case, body);
    ck_assert_str_eq(msg->env->job, job);
    ck_assert_int_eq(msg->env->rank, rank);
    ck_assert_uint_eq(msg->env->generation, generation);
    ck_assert_uint_eq(msg->env->seq, seq);
    ck_assert_uint_eq(msg->n_payload, 0);
}

/* Sends env from the DEALER and receives it on the ROUTER; returns wire_recv's result. */
static int send_recv(const Ddp__Envelope *env, wire_msg *msg) {
    ck_assert_int_eq(wire_send(dealer, NULL, 0, env, NULL, 0), 0);
    return wire_recv(router, true, 0, msg);
}

/* Sends env and asserts it arrives intact and valid. */
static void roundtrip(const Ddp__Envelope *env, wire_msg *msg) {
    int r = send_recv(env, msg);
    ck_assert_msg(r == 0, "wire_recv: %d (%s): %s", r, error_string(r), msg->error);
    ck_assert_str_eq(msg->error, "");
    assert_identity(msg);
}

/* Sends env and asserts wire_recv refuses it with expected and an explanation. */
static void expect_refused(const Ddp__Envelope *env, int expected) {
    wire_msg msg;
    int r = send_recv(env, &msg);
    ck_assert_msg(r == expected, "expected %d (%s), got %d (%s): '%s'", expected, error_string(expected), r,
                  error_string(r), msg.error);
    ck_assert_msg(msg.error[0] != '\0', "no explanation for %d", r);
    wire_msg_close(&msg);
}

static void expect_accepted(const Ddp__Envelope *env) {
    wire_msg msg;
    roundtrip(env, &msg);
    wire_msg_close(&msg);
}

/* A valid message still goes through both ways after whatever came before. */
static void assert_socket_still_works(void) {
    Ddp__Heartbeat hb = DDP__HEARTBEAT__INIT;
    hb.interval_ms = 500;
    hb.liveness = 3;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, "after", 1, 2, 4242);
    env.heartbeat = &hb;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__HEARTBEAT, DDP__ENVELOPE__BODY_HEARTBEAT, "after", 1, 2, 4242);
    ck_assert_uint_eq(msg.env->heartbeat->interval_ms, 500);

    /* and back, ROUTER to DEALER */
    env.seq = 4343;
    ck_assert_int_eq(wire_send(router, msg.identity, msg.identity_size, &env, NULL, 0), 0);
    wire_msg_close(&msg);
    wire_msg back;
    ck_assert_int_eq(wire_recv(dealer, false, 0, &back), 0);
    ck_assert_uint_eq(back.identity_size, 0);
    ck_assert_uint_eq(back.env->seq, 4343);
    wire_msg_close(&back);
}

/* A string of n copies of c (freed by the caller). */
static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    ck_assert_ptr_nonnull(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

/* ---- core: every type round-trips -------------------------------------------------- */

START_TEST(test_join_roundtrip) {
    Ddp__Join body = DDP__JOIN__INIT;
    body.world_size = 4;
    body.rank = 2;
    body.mode = "ddp";
    body.pid = 123456;
    body.host = "node-1.example.org";
    body.data_endpoint = "tcp://10.0.0.1:5555";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, "train.v2_x-1", -1, 0, 7);
    env.join = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__JOIN, DDP__ENVELOPE__BODY_JOIN, "train.v2_x-1", -1, 0, 7);
    ck_assert_uint_eq(msg.env->join->world_size, 4);
    ck_assert_int_eq(msg.env->join->rank, 2);
    ck_assert_str_eq(msg.env->join->mode, "ddp");
    ck_assert_uint_eq(msg.env->join->pid, 123456);
    ck_assert_str_eq(msg.env->join->host, "node-1.example.org");
    ck_assert_str_eq(msg.env->join->data_endpoint, "tcp://10.0.0.1:5555");
    wire_msg_close(&msg);
    ck_assert_ptr_null(msg.env);
}
END_TEST

START_TEST(test_welcome_roundtrip) {
    char *endpoints[] = {"tcp://a:1", "tcp://b:2", "", "ipc:///tmp/d"};
    char *hosts[] = {"a", "b", "c.example.org", "d"};
    uint32_t pids[] = {1, 2, 4194304, 4};
    char *keys[] = {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "", ""};
    Ddp__Welcome body = DDP__WELCOME__INIT;
    body.rank = 3;
    body.world_size = 4;
    body.generation = 0x1122334455667788ull;
    body.n_endpoints = body.n_hosts = body.n_pids = body.n_data_keys = 4;
    body.endpoints = endpoints;
    body.data_keys = keys;
    body.hosts = hosts;
    body.pids = pids;
    body.heartbeat_ms = 250;
    body.liveness = 4;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__WELCOME, "job", 3, 0x1122334455667788ull, UINT64_MAX);
    env.welcome = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__WELCOME, DDP__ENVELOPE__BODY_WELCOME, "job", 3, 0x1122334455667788ull,
                  UINT64_MAX);
    const Ddp__Welcome *w = msg.env->welcome;
    ck_assert_uint_eq(w->rank, 3);
    ck_assert_uint_eq(w->world_size, 4);
    ck_assert_uint_eq(w->generation, 0x1122334455667788ull);
    ck_assert_uint_eq(w->n_endpoints, 4);
    for (size_t i = 0; i < 4; i++) {
        ck_assert_str_eq(w->endpoints[i], endpoints[i]);
        ck_assert_str_eq(w->hosts[i], hosts[i]);
        ck_assert_uint_eq(w->pids[i], pids[i]);
        ck_assert_str_eq(w->data_keys[i], keys[i]);
    }
    ck_assert_uint_eq(w->heartbeat_ms, 250);
    ck_assert_uint_eq(w->liveness, 4);
    wire_msg_close(&msg);
}
END_TEST

/* The direction ddpd uses: ROUTER to a known DEALER, received without an identity. */
START_TEST(test_router_to_dealer) {
    Ddp__Leave leave = DDP__LEAVE__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__LEAVE, "job", 0, 1, 1);
    env.leave = &leave;
    wire_msg hello;
    roundtrip(&env, &hello); /* the ROUTER learns the DEALER's routing id */

    Ddp__Reject body = DDP__REJECT__INIT;
    body.code = -EEXIST;
    body.reason = "rank 0 is taken";
    Ddp__Envelope reply;
    wire_envelope_init(&reply, DDP__MSG_TYPE__REJECT, "job", -1, 0, 1);
    reply.reject = &body;
    ck_assert_int_eq(wire_send(router, hello.identity, hello.identity_size, &reply, NULL, 0), 0);
    wire_msg_close(&hello);
    wire_msg msg;
    ck_assert_int_eq(wire_recv(dealer, false, 0, &msg), 0);
    ck_assert_uint_eq(msg.identity_size, 0);
    assert_header(&msg, DDP__MSG_TYPE__REJECT, DDP__ENVELOPE__BODY_REJECT, "job", -1, 0, 1);
    ck_assert_int_eq(msg.env->reject->code, -EEXIST);
    ck_assert_str_eq(msg.env->reject->reason, "rank 0 is taken");
    wire_msg_close(&msg);
}
END_TEST

/* With ZMQ_ROUTER_MANDATORY, as ddpd sets it, an unknown peer is an error. */
START_TEST(test_send_to_unknown_peer) {
    set_int(router, ZMQ_ROUTER_MANDATORY, 1);
    Ddp__Leave leave = DDP__LEAVE__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__LEAVE, "job", 0, 1, 1);
    env.leave = &leave;
    ck_assert_int_eq(wire_send(router, (const uint8_t *)"nobody", 6, &env, NULL, 0), -EHOSTUNREACH);
    /* The DEALER got nothing, and the ROUTER still sends to a known peer. */
    int rc = zmq_recv(dealer, NULL, 0, ZMQ_DONTWAIT);
    int e = errno;
    ck_assert_int_eq(rc, -1);
    ck_assert_int_eq(e, EAGAIN);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_reject_roundtrip) {
    Ddp__Reject body = DDP__REJECT__INIT;
    body.code = -EPROTONOSUPPORT;
    body.reason = "protocol version 2, this side speaks 1";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__REJECT, "", -1, 0, 11);
    env.reject = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__REJECT, DDP__ENVELOPE__BODY_REJECT, "", -1, 0, 11);
    ck_assert_int_eq(msg.env->reject->code, -EPROTONOSUPPORT);
    ck_assert_str_eq(msg.env->reject->reason, "protocol version 2, this side speaks 1");
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_heartbeat_roundtrip) {
    Ddp__Heartbeat body = DDP__HEARTBEAT__INIT;
    body.interval_ms = DDP_MIN_HEARTBEAT_MS;
    body.liveness = DDP_MAX_LIVENESS;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, "", 1023, 5, 0);
    env.heartbeat = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__HEARTBEAT, DDP__ENVELOPE__BODY_HEARTBEAT, "", 1023, 5, 0);
    ck_assert_uint_eq(msg.env->heartbeat->interval_ms, DDP_MIN_HEARTBEAT_MS);
    ck_assert_uint_eq(msg.env->heartbeat->liveness, DDP_MAX_LIVENESS);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_barrier_roundtrip) {
    Ddp__Barrier body = DDP__BARRIER__INIT;
    body.round = 1234567890123ull;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, "j", 0, 3, 99);
    env.barrier = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__BARRIER, DDP__ENVELOPE__BODY_BARRIER, "j", 0, 3, 99);
    ck_assert_uint_eq(msg.env->barrier->round, 1234567890123ull);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_store_set_roundtrip) {
    static const uint8_t value[] = {0, 1, 2, 0, 0xff, 0x80, 'x'};
    Ddp__StoreSet body = DDP__STORE_SET__INIT;
    body.key = "master/addr:port";
    body.value.data = (uint8_t *)value;
    body.value.len = sizeof(value);
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_SET, "job", 2, 1, 5);
    env.store_set = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STORE_SET, DDP__ENVELOPE__BODY_STORE_SET, "job", 2, 1, 5);
    ck_assert_str_eq(msg.env->store_set->key, "master/addr:port");
    ck_assert_uint_eq(msg.env->store_set->value.len, sizeof(value));
    ck_assert_mem_eq(msg.env->store_set->value.data, value, sizeof(value));
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_store_get_roundtrip) {
    Ddp__StoreGet body = DDP__STORE_GET__INIT;
    body.key = "k 1";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, "job", 0, 1, 6);
    env.store_get = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STORE_GET, DDP__ENVELOPE__BODY_STORE_GET, "job", 0, 1, 6);
    ck_assert_str_eq(msg.env->store_get->key, "k 1");
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_store_wait_roundtrip) {
    char *keys[] = {"a", "bb", "ccc"};
    Ddp__StoreWait body = DDP__STORE_WAIT__INIT;
    body.keys = keys;
    body.n_keys = 3;
    body.timeout_ms = 1500;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, "job", 1, 1, 8);
    env.store_wait = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STORE_WAIT, DDP__ENVELOPE__BODY_STORE_WAIT, "job", 1, 1, 8);
    ck_assert_uint_eq(msg.env->store_wait->n_keys, 3);
    for (size_t i = 0; i < 3; i++)
        ck_assert_str_eq(msg.env->store_wait->keys[i], keys[i]);
    ck_assert_uint_eq(msg.env->store_wait->timeout_ms, 1500);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_store_value_roundtrip) {
    static const uint8_t value[] = {9, 8, 7};
    Ddp__StoreValue body = DDP__STORE_VALUE__INIT;
    body.key = "k";
    body.found = true;
    body.value.data = (uint8_t *)value;
    body.value.len = sizeof(value);
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_VALUE, "job", -1, 1, 8);
    env.store_value = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STORE_VALUE, DDP__ENVELOPE__BODY_STORE_VALUE, "job", -1, 1, 8);
    ck_assert_str_eq(msg.env->store_value->key, "k");
    ck_assert(msg.env->store_value->found);
    ck_assert_uint_eq(msg.env->store_value->value.len, 3);
    ck_assert_mem_eq(msg.env->store_value->value.data, value, 3);
    wire_msg_close(&msg);

    /* not found: an empty value */
    body.found = false;
    body.value.len = 0;
    body.value.data = NULL;
    roundtrip(&env, &msg);
    ck_assert(!msg.env->store_value->found);
    ck_assert_uint_eq(msg.env->store_value->value.len, 0);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_abort_roundtrip) {
    Ddp__Abort body = DDP__ABORT__INIT;
    body.rank = 2;
    body.pid = 777;
    body.host = "gpu-node-3";
    body.reason = "rank 2 (pid 777 on gpu-node-3) died: silent for 1500 ms";
    body.code = -ECONNABORTED;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ABORT, "job", -1, 4, 0);
    env.abort = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__ABORT, DDP__ENVELOPE__BODY_ABORT, "job", -1, 4, 0);
    ck_assert_int_eq(msg.env->abort->rank, 2);
    ck_assert_uint_eq(msg.env->abort->pid, 777);
    ck_assert_str_eq(msg.env->abort->host, "gpu-node-3");
    ck_assert_str_eq(msg.env->abort->reason, "rank 2 (pid 777 on gpu-node-3) died: silent for 1500 ms");
    ck_assert_int_eq(msg.env->abort->code, -ECONNABORTED);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_leave_roundtrip) {
    Ddp__Leave body = DDP__LEAVE__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__LEAVE, "job", 3, 2, 10);
    env.leave = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__LEAVE, DDP__ENVELOPE__BODY_LEAVE, "job", 3, 2, 10);
    ck_assert_ptr_nonnull(msg.env->leave);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_status_request_roundtrip) {
    Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, NULL, -1, 0, 1);
    ck_assert_str_eq(env.job, "");
    env.status_request = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STATUS_REQUEST, DDP__ENVELOPE__BODY_STATUS_REQUEST, "", -1, 0, 1);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_status_reply_roundtrip) {
    Ddp__MemberStatus m[2] = {DDP__MEMBER_STATUS__INIT, DDP__MEMBER_STATUS__INIT};
    m[0].rank = 0;
    m[0].pid = 10;
    m[0].host = "h0";
    m[0].last_heard_ms = 12;
    m[0].endpoint = "tcp://h0:1";
    m[1].rank = -1;
    m[1].pid = 11;
    m[1].host = "h1";
    m[1].last_heard_ms = 0;
    m[1].endpoint = "";
    Ddp__MemberStatus *mp[] = {&m[0], &m[1]};
    Ddp__JobStatus jobs[2] = {DDP__JOB_STATUS__INIT, DDP__JOB_STATUS__INIT};
    jobs[0].name = "alpha";
    jobs[0].state = "forming";
    jobs[0].mode = "ddp";
    jobs[0].world_size = 3;
    jobs[0].age_ms = 1000;
    jobs[0].members = mp;
    jobs[0].n_members = 2;
    jobs[1].name = "beta";
    jobs[1].state = "running";
    jobs[1].world_size = 1;
    jobs[1].generation = 7;
    Ddp__JobStatus *jp[] = {&jobs[0], &jobs[1]};
    Ddp__StatusReply body = DDP__STATUS_REPLY__INIT;
    body.version = "0.1.0";
    body.uptime_ms = 60000;
    body.jobs = jp;
    body.n_jobs = 2;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REPLY, "", -1, 0, 1);
    env.status_reply = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__STATUS_REPLY, DDP__ENVELOPE__BODY_STATUS_REPLY, "", -1, 0, 1);
    const Ddp__StatusReply *s = msg.env->status_reply;
    ck_assert_str_eq(s->version, "0.1.0");
    ck_assert_uint_eq(s->uptime_ms, 60000);
    ck_assert_uint_eq(s->n_jobs, 2);
    ck_assert_str_eq(s->jobs[0]->name, "alpha");
    ck_assert_str_eq(s->jobs[0]->state, "forming");
    ck_assert_str_eq(s->jobs[0]->mode, "ddp");
    ck_assert_uint_eq(s->jobs[0]->world_size, 3);
    ck_assert_uint_eq(s->jobs[0]->age_ms, 1000);
    ck_assert_uint_eq(s->jobs[0]->n_members, 2);
    ck_assert_int_eq(s->jobs[0]->members[0]->rank, 0);
    ck_assert_uint_eq(s->jobs[0]->members[0]->pid, 10);
    ck_assert_str_eq(s->jobs[0]->members[0]->host, "h0");
    ck_assert_uint_eq(s->jobs[0]->members[0]->last_heard_ms, 12);
    ck_assert_str_eq(s->jobs[0]->members[0]->endpoint, "tcp://h0:1");
    ck_assert_int_eq(s->jobs[0]->members[1]->rank, -1);
    ck_assert_str_eq(s->jobs[0]->members[1]->endpoint, "");
    ck_assert_str_eq(s->jobs[1]->name, "beta");
    ck_assert_str_eq(s->jobs[1]->state, "running");
    ck_assert_uint_eq(s->jobs[1]->generation, 7);
    ck_assert_uint_eq(s->jobs[1]->n_members, 0);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_error_roundtrip) {
    Ddp__Error body = DDP__ERROR__INIT;
    body.code = -ENOSPC;
    body.message = "store of job 'x' is full";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ERROR, "x", -1, 1, 12);
    env.error = &body;
    wire_msg msg;
    roundtrip(&env, &msg);
    assert_header(&msg, DDP__MSG_TYPE__ERROR, DDP__ENVELOPE__BODY_ERROR, "x", -1, 1, 12);
    ck_assert_int_eq(msg.env->error->code, -ENOSPC);
    ck_assert_str_eq(msg.env->error->message, "store of job 'x' is full");
    wire_msg_close(&msg);
}
END_TEST

/* Messages queue up and arrive in order, each with its own fields. */
START_TEST(test_several_in_order) {
    Ddp__Barrier b = DDP__BARRIER__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, "job", 0, 1, 0);
    env.barrier = &b;
    for (uint64_t i = 0; i < 50; i++) {
        env.seq = i;
        b.round = 1000 + i;
        ck_assert_int_eq(wire_send(dealer, NULL, 0, &env, NULL, 0), 0);
    }
    for (uint64_t i = 0; i < 50; i++) {
        wire_msg msg;
        ck_assert_int_eq(wire_recv(router, true, 0, &msg), 0);
        ck_assert_uint_eq(msg.env->seq, i);
        ck_assert_uint_eq(msg.env->barrier->round, 1000 + i);
        wire_msg_close(&msg);
    }
    /* and nothing more: -EAGAIN without blocking */
    wire_msg msg;
    ck_assert_int_eq(wire_recv(router, true, ZMQ_DONTWAIT, &msg), -EAGAIN);
    ck_assert_ptr_null(msg.env);
    wire_msg_close(&msg);
}
END_TEST

START_TEST(test_envelope_init) {
    Ddp__Envelope env;
    memset(&env, 0xa5, sizeof(env));
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, "j", 5, 6, 7);
    ck_assert_uint_eq(env.version, DDP_PROTOCOL_VERSION);
    ck_assert_int_eq(env.type, DDP__MSG_TYPE__STORE_WAIT);
    ck_assert_int_eq(env.body_case, DDP__ENVELOPE__BODY_STORE_WAIT);
    ck_assert_str_eq(env.job, "j");
    ck_assert_int_eq(env.rank, 5);
    ck_assert_uint_eq(env.generation, 6);
    ck_assert_uint_eq(env.seq, 7);
    /* an unknown type gets no body */
    wire_envelope_init(&env, (Ddp__MsgType)99, NULL, -1, 0, 0);
    ck_assert_int_eq(env.body_case, DDP__ENVELOPE__BODY__NOT_SET);
    ck_assert_str_eq(env.job, "");
}
END_TEST

START_TEST(test_type_names) {
    static const char *const names[] = {
        [DDP__MSG_TYPE__JOIN] = "join",
        [DDP__MSG_TYPE__WELCOME] = "welcome",
        [DDP__MSG_TYPE__REJECT] = "reject",
        [DDP__MSG_TYPE__HEARTBEAT] = "heartbeat",
        [DDP__MSG_TYPE__BARRIER] = "barrier",
        [DDP__MSG_TYPE__STORE_SET] = "store-set",
        [DDP__MSG_TYPE__STORE_GET] = "store-get",
        [DDP__MSG_TYPE__STORE_WAIT] = "store-wait",
        [DDP__MSG_TYPE__STORE_VALUE] = "store-value",
        [DDP__MSG_TYPE__ABORT] = "abort",
        [DDP__MSG_TYPE__LEAVE] = "leave",
        [DDP__MSG_TYPE__STATUS_REQUEST] = "status-request",
        [DDP__MSG_TYPE__STATUS_REPLY] = "status-reply",
        [DDP__MSG_TYPE__ERROR] = "error",
        [DDP__MSG_TYPE__GRAD_PUSH] = "grad-push",
        [DDP__MSG_TYPE__GRAD_AVG] = "grad-avg",
    };
    for (int t = DDP__MSG_TYPE__JOIN; t <= DDP__MSG_TYPE__GRAD_AVG; t++)
        ck_assert_str_eq(wire_type_name(t), names[t]);
    ck_assert_str_eq(wire_type_name(DDP__MSG_TYPE__MSG_UNSPECIFIED), "unknown");
    ck_assert_str_eq(wire_type_name(DDP__MSG_TYPE__GRAD_AVG + 1), "unknown");
    ck_assert_str_eq(wire_type_name(-1), "unknown");
    ck_assert_str_eq(wire_type_name(99), "unknown");
    ck_assert_str_eq(wire_type_name(INT32_MIN), "unknown");
}
END_TEST

START_TEST(test_name_valid) {
    ck_assert(wire_name_valid("a", DDP_MAX_JOB_NAME));
    ck_assert(wire_name_valid("Train.v2_run-01", DDP_MAX_JOB_NAME));
    ck_assert(wire_name_valid("...", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("my job", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("a/b", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("../etc", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("tab\t", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("caf\xc3\xa9", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("semi;colon", DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid("quote'", DDP_MAX_JOB_NAME));
    ck_assert(wire_name_valid("abc", 3));
    ck_assert(!wire_name_valid("abcd", 3));
    ck_assert(!wire_name_valid("ab!", 3));
    char *at = repeat('n', DDP_MAX_JOB_NAME), *over = repeat('n', DDP_MAX_JOB_NAME + 1);
    ck_assert(wire_name_valid(at, DDP_MAX_JOB_NAME));
    ck_assert(!wire_name_valid(over, DDP_MAX_JOB_NAME));
    free(at);
    free(over);
}
END_TEST

/* ---- limits ------------------------------------------------------------------------- */

static void barrier_env(Ddp__Envelope *env, Ddp__Barrier *b, const char *job) {
    ddp__barrier__init(b);
    wire_envelope_init(env, DDP__MSG_TYPE__BARRIER, job, 0, 1, 2);
    env->barrier = b;
}

START_TEST(test_job_name_limit) {
    char *at = repeat('j', DDP_MAX_JOB_NAME), *over = repeat('j', DDP_MAX_JOB_NAME + 1);
    Ddp__Barrier b;
    Ddp__Envelope env;
    barrier_env(&env, &b, at);
    wire_msg msg;
    roundtrip(&env, &msg);
    ck_assert_str_eq(msg.env->job, at);
    wire_msg_close(&msg);
    barrier_env(&env, &b, over);
    expect_refused(&env, -EPROTO);
    free(at);
    free(over);
    assert_socket_still_works();
}
END_TEST

static void join_env(Ddp__Envelope *env, Ddp__Join *j, uint32_t world_size, int32_t rank) {
    ddp__join__init(j);
    j->world_size = world_size;
    j->rank = rank;
    j->mode = "ddp";
    j->pid = 1;
    j->host = "h";
    wire_envelope_init(env, DDP__MSG_TYPE__JOIN, "job", -1, 0, 1);
    env->join = j;
}

START_TEST(test_world_size_limit) {
    Ddp__Join j;
    Ddp__Envelope env;
    join_env(&env, &j, 1, 0);
    expect_accepted(&env);
    join_env(&env, &j, DDP_MAX_WORLD_SIZE, DDP_MAX_WORLD_SIZE - 1);
    expect_accepted(&env);
    join_env(&env, &j, DDP_MAX_WORLD_SIZE, -1);
    expect_accepted(&env);
    join_env(&env, &j, 0, -1);
    expect_refused(&env, -EPROTO);
    join_env(&env, &j, DDP_MAX_WORLD_SIZE + 1, -1);
    expect_refused(&env, -EPROTO);
    join_env(&env, &j, UINT32_MAX, -1);
    expect_refused(&env, -EPROTO);
    assert_socket_still_works();
}
END_TEST

/* A Welcome for the largest world, every endpoint as long as allowed, goes through. */
START_TEST(test_welcome_largest_world) {
    static char *endpoints[DDP_MAX_WORLD_SIZE + 1], *hosts[DDP_MAX_WORLD_SIZE + 1];
    static uint32_t pids[DDP_MAX_WORLD_SIZE + 1];
    for (size_t i = 0; i <= DDP_MAX_WORLD_SIZE; i++) {
        endpoints[i] = repeat('e', DDP_MAX_ENDPOINT);
        hosts[i] = repeat('h', DDP_MAX_HOST);
        pids[i] = UINT32_MAX;
    }
    Ddp__Welcome w = DDP__WELCOME__INIT;
    w.rank = DDP_MAX_WORLD_SIZE - 1;
    w.world_size = DDP_MAX_WORLD_SIZE;
    w.endpoints = endpoints;
    w.hosts = hosts;
    w.pids = pids;
    static char *keys[DDP_MAX_WORLD_SIZE + 1];
    for (size_t i = 0; i <= DDP_MAX_WORLD_SIZE; i++)
        keys[i] = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    w.data_keys = keys;
    w.n_endpoints = w.n_hosts = w.n_pids = w.n_data_keys = DDP_MAX_WORLD_SIZE;
    w.heartbeat_ms = DDP_MAX_HEARTBEAT_MS;
    w.liveness = DDP_MAX_LIVENESS;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__WELCOME, "job", -1, UINT64_MAX, UINT64_MAX);
    env.welcome = &w;
    wire_msg msg;
    roundtrip(&env, &msg);
    ck_assert_uint_eq(msg.env->welcome->n_endpoints, DDP_MAX_WORLD_SIZE);
    ck_assert_str_eq(msg.env->welcome->endpoints[DDP_MAX_WORLD_SIZE - 1], endpoints[0]);
    wire_msg_close(&msg);

    /* one more member: refused */
    w.world_size = DDP_MAX_WORLD_SIZE + 1;
    w.n_endpoints = w.n_hosts = w.n_pids = w.n_data_keys = DDP_MAX_WORLD_SIZE + 1;
    expect_refused(&env, -EPROTO);
    /* one endpoint a byte too long: refused */
    w.world_size = DDP_MAX_WORLD_SIZE;
    w.n_endpoints = w.n_hosts = w.n_pids = w.n_data_keys = DDP_MAX_WORLD_SIZE;
    keys[3] = "not a key"; /* a data key that is not one: refused */
    expect_refused(&env, -EPROTO);
    keys[3] = keys[0];
    free(endpoints[7]);
    endpoints[7] = repeat('e', DDP_MAX_ENDPOINT + 1);
    expect_refused(&env, -EPROTO);
    for (size_t i = 0; i <= DDP_MAX_WORLD_SIZE; i++) {
        free(endpoints[i]);
        free(hosts[i]);
    }
    assert_socket_still_works();
}
END_TEST

START_TEST(test_text_field_limits) {
    char *host_at = repeat('h', DDP_MAX_HOST), *host_over = repeat('h', DDP_MAX_HOST + 1);
    char *ep_at = repeat('e', DDP_MAX_ENDPOINT), *ep_over = repeat('e', DDP_MAX_ENDPOINT + 1);
    char *mode_at = repeat('m', DDP_MAX_MODE), *mode_over = repeat('m', DDP_MAX_MODE + 1);
    char *reason_at = repeat('r', DDP_MAX_REASON), *reason_over = repeat('r', DDP_MAX_REASON + 1);
    char *key_at = repeat('k', DDP_MAX_STORE_KEY), *key_over = repeat('k', DDP_MAX_STORE_KEY + 1);

    Ddp__Join j;
    Ddp__Envelope env;
    join_env(&env, &j, 2, 1);
    j.host = host_at;
    j.data_endpoint = ep_at;
    j.mode = mode_at;
    expect_accepted(&env);
    j.host = host_over;
    expect_refused(&env, -EPROTO);
    j.host = host_at;
    j.data_endpoint = ep_over;
    expect_refused(&env, -EPROTO);
    j.data_endpoint = ep_at;
    j.mode = mode_over;
    expect_refused(&env, -EPROTO);

    Ddp__Reject rej = DDP__REJECT__INIT;
    rej.code = -EINVAL;
    rej.reason = reason_at;
    wire_envelope_init(&env, DDP__MSG_TYPE__REJECT, "", -1, 0, 1);
    env.reject = &rej;
    expect_accepted(&env);
    rej.reason = reason_over;
    expect_refused(&env, -EPROTO);

    Ddp__StoreGet get = DDP__STORE_GET__INIT;
    get.key = key_at;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, "job", 0, 1, 1);
    env.store_get = &get;
    expect_accepted(&env);
    get.key = key_over;
    expect_refused(&env, -EPROTO);

    free(host_at);
    free(host_over);
    free(ep_at);
    free(ep_over);
    free(mode_at);
    free(mode_over);
    free(reason_at);
    free(reason_over);
    free(key_at);
    free(key_over);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_rank_limit) {
    Ddp__Barrier b;
    Ddp__Envelope env;
    barrier_env(&env, &b, "job");
    env.rank = -1;
    expect_accepted(&env);
    env.rank = DDP_MAX_WORLD_SIZE - 1;
    expect_accepted(&env);
    env.rank = DDP_MAX_WORLD_SIZE;
    expect_refused(&env, -EPROTO);
    env.rank = -2;
    expect_refused(&env, -EPROTO);
    env.rank = INT32_MIN;
    expect_refused(&env, -EPROTO);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_heartbeat_limits) {
    Ddp__Heartbeat hb = DDP__HEARTBEAT__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, "", -1, 0, 0);
    env.heartbeat = &hb;
    static const struct {
        uint32_t interval, liveness;
        int expected;
    } cases[] = {
        {DDP_MIN_HEARTBEAT_MS, 1, 0},           {DDP_MAX_HEARTBEAT_MS, DDP_MAX_LIVENESS, 0},
        {DDP_MIN_HEARTBEAT_MS - 1, 1, -EPROTO}, {DDP_MAX_HEARTBEAT_MS + 1, 1, -EPROTO},
        {DDP_DEFAULT_HEARTBEAT_MS, 0, -EPROTO}, {DDP_DEFAULT_HEARTBEAT_MS, DDP_MAX_LIVENESS + 1, -EPROTO},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        hb.interval_ms = cases[i].interval;
        hb.liveness = cases[i].liveness;
        if (cases[i].expected == 0)
            expect_accepted(&env);
        else
            expect_refused(&env, cases[i].expected);
    }
    assert_socket_still_works();
}
END_TEST

static void store_set_env(Ddp__Envelope *env, Ddp__StoreSet *s, uint8_t *value, size_t size) {
    ddp__store_set__init(s);
    s->key = "k";
    s->value.data = value;
    s->value.len = size;
    wire_envelope_init(env, DDP__MSG_TYPE__STORE_SET, "job", 0, 1, 3);
    env->store_set = s;
}

START_TEST(test_store_value_limit) {
    uint8_t *value = malloc(DDP_MAX_STORE_VALUE + 1);
    ck_assert_ptr_nonnull(value);
    for (size_t i = 0; i <= DDP_MAX_STORE_VALUE; i++)
        value[i] = (uint8_t)(i * 31 + 7);
    Ddp__StoreSet s;
    Ddp__Envelope env;
    store_set_env(&env, &s, value, DDP_MAX_STORE_VALUE);
    wire_msg msg;
    roundtrip(&env, &msg);
    ck_assert_uint_eq(msg.env->store_set->value.len, DDP_MAX_STORE_VALUE);
    ck_assert_mem_eq(msg.env->store_set->value.data, value, DDP_MAX_STORE_VALUE);
    wire_msg_close(&msg);
    store_set_env(&env, &s, value, DDP_MAX_STORE_VALUE + 1);
    expect_refused(&env, -EPROTO);

    /* the reply carrying the value, the same */
    Ddp__StoreValue v = DDP__STORE_VALUE__INIT;
    v.key = "k";
    v.found = true;
    v.value.data = value;
    v.value.len = DDP_MAX_STORE_VALUE;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_VALUE, "job", -1, 1, 3);
    env.store_value = &v;
    expect_accepted(&env);
    v.value.len = DDP_MAX_STORE_VALUE + 1;
    expect_refused(&env, -EPROTO);
    free(value);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_store_wait_limits) {
    char *keys[DDP_MAX_STORE_WAIT_KEYS + 1];
    char names[DDP_MAX_STORE_WAIT_KEYS + 1][8];
    for (size_t i = 0; i <= DDP_MAX_STORE_WAIT_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "k%zu", i);
        keys[i] = names[i];
    }
    Ddp__StoreWait w = DDP__STORE_WAIT__INIT;
    w.keys = keys;
    w.n_keys = DDP_MAX_STORE_WAIT_KEYS;
    w.timeout_ms = DDP_MAX_TIMEOUT_MS;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, "job", 0, 1, 4);
    env.store_wait = &w;
    wire_msg msg;
    roundtrip(&env, &msg);
    ck_assert_uint_eq(msg.env->store_wait->n_keys, DDP_MAX_STORE_WAIT_KEYS);
    ck_assert_str_eq(msg.env->store_wait->keys[DDP_MAX_STORE_WAIT_KEYS - 1], names[DDP_MAX_STORE_WAIT_KEYS - 1]);
    wire_msg_close(&msg);
    w.n_keys = DDP_MAX_STORE_WAIT_KEYS + 1;
    expect_refused(&env, -EPROTO);
    w.n_keys = 0;
    expect_refused(&env, -EPROTO);
    w.n_keys = 1;
    w.timeout_ms = DDP_MAX_TIMEOUT_MS + 1;
    expect_refused(&env, -EPROTO);
    w.timeout_ms = 0;
    expect_accepted(&env);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_status_reply_job_limit) {
    static Ddp__JobStatus jobs[DDP_MAX_JOBS + 1];
    static Ddp__JobStatus *jp[DDP_MAX_JOBS + 1];
    static char names[DDP_MAX_JOBS + 1][16];
    for (size_t i = 0; i <= DDP_MAX_JOBS; i++) {
        ddp__job_status__init(&jobs[i]);
        snprintf(names[i], sizeof(names[i]), "job-%zu", i);
        jobs[i].name = names[i];
        jobs[i].state = "forming";
        jobs[i].world_size = 1;
        jp[i] = &jobs[i];
    }
    Ddp__StatusReply s = DDP__STATUS_REPLY__INIT;
    s.version = "0.1.0";
    s.jobs = jp;
    s.n_jobs = DDP_MAX_JOBS;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REPLY, "", -1, 0, 1);
    env.status_reply = &s;
    expect_accepted(&env);
    s.n_jobs = DDP_MAX_JOBS + 1;
    expect_refused(&env, -EPROTO);
    assert_socket_still_works();
}
END_TEST

static void send_envelope_and_payload(size_t n_frames) {
    Ddp__Barrier b;
    Ddp__Envelope env;
    barrier_env(&env, &b, "job");
    env.seq = 77;
    zmq_msg_t frame;
    ck_assert_int_eq(wire_pack(&env, &frame), 0);
    int size = (int)zmq_msg_size(&frame);
    ck_assert_int_eq(zmq_msg_send(&frame, dealer, n_frames ? ZMQ_SNDMORE : 0), size);
    for (size_t i = 0; i < n_frames; i++) {
        char data[16];
        int n = snprintf(data, sizeof(data), "payload-%zu", i);
        ck_assert_int_eq(zmq_send(dealer, data, (size_t)n, i + 1 < n_frames ? ZMQ_SNDMORE : 0), n);
    }
}

START_TEST(test_payload_frames_limit) {
    /* DDP_MAX_PAYLOAD_FRAMES: received, then refused because no type takes a payload yet */
    wire_frame frames[DDP_MAX_PAYLOAD_FRAMES + 1];
    char data[DDP_MAX_PAYLOAD_FRAMES + 1][16];
    for (size_t i = 0; i <= DDP_MAX_PAYLOAD_FRAMES; i++) {
        int n = snprintf(data[i], sizeof(data[i]), "payload-%zu", i);
        frames[i] = (wire_frame){data[i], (size_t)n};
    }
    Ddp__Barrier b;
    Ddp__Envelope env;
    barrier_env(&env, &b, "job");
    ck_assert_int_eq(wire_send(dealer, NULL, 0, &env, frames, DDP_MAX_PAYLOAD_FRAMES), 0);
    wire_msg msg;
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EPROTO);
    ck_assert_msg(strstr(msg.error, "payload"), "%s", msg.error);
    assert_identity(&msg);
    ck_assert_ptr_nonnull(msg.env);
    ck_assert_uint_eq(msg.n_payload, DDP_MAX_PAYLOAD_FRAMES);
    for (size_t i = 0; i < DDP_MAX_PAYLOAD_FRAMES; i++) {
        ck_assert_uint_eq(zmq_msg_size(&msg.payload[i]), frames[i].size);
        ck_assert_mem_eq(zmq_msg_data(&msg.payload[i]), frames[i].data, frames[i].size);
    }
    wire_msg_close(&msg);
    ck_assert_uint_eq(msg.n_payload, 0);
    ck_assert_ptr_null(msg.env);

    /* wire_send refuses one frame more, and sends nothing */
    ck_assert_int_eq(wire_send(dealer, NULL, 0, &env, frames, DDP_MAX_PAYLOAD_FRAMES + 1), -EMSGSIZE);
    ck_assert_int_eq(wire_recv(router, true, ZMQ_DONTWAIT, &msg), -EAGAIN);
    wire_msg_close(&msg);

    /* one frame more from a peer that does not use wire_send: -EMSGSIZE, the rest dropped */
    send_envelope_and_payload(DDP_MAX_PAYLOAD_FRAMES + 1);
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EMSGSIZE);
    ck_assert_msg(msg.error[0], "no explanation");
    ck_assert_ptr_null(msg.env);
    ck_assert_uint_eq(msg.n_payload, 0);
    wire_msg_close(&msg);
    /* many more */
    send_envelope_and_payload(100);
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EMSGSIZE);
    wire_msg_close(&msg);
    /* nothing of those is left over: the next message is the next one sent */
    assert_socket_still_works();
}
END_TEST

static size_t varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A valid barrier envelope padded with an unknown field to exactly size bytes. */
static uint8_t *padded_envelope(size_t size) {
    Ddp__Barrier b;
    Ddp__Envelope env;
    barrier_env(&env, &b, "job");
    env.seq = 31337;
    size_t base = ddp__envelope__get_packed_size(&env);
    uint8_t *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    ddp__envelope__pack(&env, buf);
    uint8_t tag[10], len[10];
    size_t tag_size = varint(tag, (1000u << 3) | 2u); /* field 1000, length-delimited */
    for (size_t len_size = 1; len_size <= 5; len_size++) {
        size_t pad = size - base - tag_size - len_size;
        if (varint(len, pad) != len_size)
            continue;
        memcpy(buf + base, tag, tag_size);
        memcpy(buf + base + tag_size, len, len_size);
        memset(buf + base + tag_size + len_size, 'p', pad);
        return buf;
    }
    ck_abort_msg("cannot pad to %zu bytes", size);
    return NULL;
}

START_TEST(test_envelope_size_limit) {
    /* exactly DDP_MAX_ENVELOPE_BYTES arrives and decodes */
    uint8_t *at = padded_envelope(DDP_MAX_ENVELOPE_BYTES);
    ck_assert_int_eq(zmq_send(dealer, at, DDP_MAX_ENVELOPE_BYTES, 0), (int)DDP_MAX_ENVELOPE_BYTES);
    wire_msg msg;
    int r = wire_recv(router, true, 0, &msg);
    ck_assert_msg(r == 0, "%d: %s", r, msg.error);
    ck_assert_uint_eq(msg.env->seq, 31337);
    wire_msg_close(&msg);
    free(at);

    /* one byte more is refused before decoding */
    uint8_t *over = padded_envelope(DDP_MAX_ENVELOPE_BYTES + 1);
    ck_assert_int_eq(zmq_send(dealer, over, DDP_MAX_ENVELOPE_BYTES + 1, 0), (int)DDP_MAX_ENVELOPE_BYTES + 1);
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EMSGSIZE);
    ck_assert_msg(strstr(msg.error, "exceeds"), "%s", msg.error);
    ck_assert_ptr_null(msg.env);
    wire_msg_close(&msg);
    /* also with payload frames behind it: all of it is dropped */
    ck_assert_int_eq(zmq_send(dealer, over, DDP_MAX_ENVELOPE_BYTES + 1, ZMQ_SNDMORE), (int)DDP_MAX_ENVELOPE_BYTES + 1);
    ck_assert_int_eq(zmq_send(dealer, "p1", 2, ZMQ_SNDMORE), 2);
    ck_assert_int_eq(zmq_send(dealer, "p2", 2, 0), 2);
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EMSGSIZE);
    ck_assert_uint_eq(msg.n_payload, 0);
    wire_msg_close(&msg);
    free(over);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_send_envelope_limit) {
    /* wire_send checks the packed size, not the fields: find the store-set value that packs
     * to exactly DDP_MAX_ENVELOPE_BYTES */
    uint8_t *value = calloc(1, DDP_MAX_ENVELOPE_BYTES);
    ck_assert_ptr_nonnull(value);
    Ddp__StoreSet s;
    Ddp__Envelope env;
    store_set_env(&env, &s, value, DDP_MAX_ENVELOPE_BYTES - 64);
    for (int i = 0; i < 8; i++) {
        size_t packed = ddp__envelope__get_packed_size(&env);
        if (packed == DDP_MAX_ENVELOPE_BYTES)
            break;
        s.value.len = s.value.len + DDP_MAX_ENVELOPE_BYTES - packed;
    }
    ck_assert_uint_eq(ddp__envelope__get_packed_size(&env), DDP_MAX_ENVELOPE_BYTES);
    ck_assert_int_eq(wire_send(dealer, NULL, 0, &env, NULL, 0), 0);
    wire_msg msg;
    /* it arrives whole, and is then refused for its value, not its size */
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EPROTO);
    ck_assert_ptr_nonnull(msg.env);
    ck_assert_uint_eq(msg.env->store_set->value.len, s.value.len);
    wire_msg_close(&msg);

    s.value.len++;
    ck_assert_int_eq(wire_send(dealer, NULL, 0, &env, NULL, 0), -EMSGSIZE);
    zmq_msg_t frame;
    ck_assert_int_eq(wire_pack(&env, &frame), -EMSGSIZE);
    ck_assert_int_eq(wire_send(router, (const uint8_t *)DEALER_ID, strlen(DEALER_ID), &env, NULL, 0), -EMSGSIZE);
    /* nothing went out either way */
    ck_assert_int_eq(wire_recv(router, true, ZMQ_DONTWAIT, &msg), -EAGAIN);
    wire_msg_close(&msg);
    ck_assert_int_eq(wire_recv(dealer, false, ZMQ_DONTWAIT, &msg), -EAGAIN);
    wire_msg_close(&msg);
    free(value);
    assert_socket_still_works();
}
END_TEST

/* ---- malformed: hostile input through the socket ------------------------------------ */

/* Storage for one envelope and every body it may point at. */
typedef struct {
    Ddp__Envelope env;
    Ddp__Join join;
    Ddp__Welcome welcome;
    Ddp__Reject reject;
    Ddp__Heartbeat heartbeat;
    Ddp__Barrier barrier;
    Ddp__StoreSet store_set;
    Ddp__StoreWait store_wait;
    Ddp__Abort abort;
    Ddp__Error error;
    Ddp__StatusReply status;
    Ddp__JobStatus job;
    Ddp__JobStatus *jobs[1];
    char *endpoints[4];
} parts;

static void build_join(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__JOIN, "train", -1, 0, 1);
    ddp__join__init(&p->join);
    p->join.world_size = 4;
    p->join.rank = -1;
    p->join.mode = "ddp";
    p->join.pid = 4242;
    p->join.host = "node-1";
    p->join.data_endpoint = "tcp://127.0.0.1:6000";
    p->join.data_key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    p->env.join = &p->join;
}
static void build_welcome(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__WELCOME, "train", -1, 1, 1);
    ddp__welcome__init(&p->welcome);
    static char *endpoints[] = {"tcp://a:1", "tcp://b:1", "tcp://c:1", "tcp://d:1"}, *hosts[] = {"a", "b", "c", "d"};
    static uint32_t pids[] = {10, 11, 12, 13};
    static char *keys[] = {"Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID",
                           "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID", "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID"};
    p->welcome.rank = 1;
    p->welcome.world_size = 4;
    p->welcome.endpoints = endpoints;
    p->welcome.hosts = hosts;
    p->welcome.pids = pids;
    p->welcome.data_keys = keys;
    p->welcome.n_endpoints = p->welcome.n_hosts = p->welcome.n_pids = p->welcome.n_data_keys = 4;
    p->welcome.heartbeat_ms = DDP_DEFAULT_HEARTBEAT_MS;
    p->welcome.liveness = DDP_DEFAULT_LIVENESS;
    p->env.welcome = &p->welcome;
}
static void build_reject(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__REJECT, "train", -1, 0, 1);
    ddp__reject__init(&p->reject);
    p->reject.code = -EEXIST;
    p->reject.reason = "rank taken";
    p->env.reject = &p->reject;
}
static void build_heartbeat(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__HEARTBEAT, "train", 0, 1, 1);
    ddp__heartbeat__init(&p->heartbeat);
    p->heartbeat.interval_ms = DDP_DEFAULT_HEARTBEAT_MS;
    p->heartbeat.liveness = DDP_DEFAULT_LIVENESS;
    p->env.heartbeat = &p->heartbeat;
}
static void build_barrier(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__BARRIER, "train", 0, 1, 1);
    ddp__barrier__init(&p->barrier);
    p->env.barrier = &p->barrier;
}
static void build_abort(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__ABORT, "train", -1, 1, 1);
    ddp__abort__init(&p->abort);
    p->abort.rank = 1;
    p->abort.pid = 9;
    p->abort.host = "node-2";
    p->abort.reason = "died";
    p->abort.code = -ECONNABORTED;
    p->env.abort = &p->abort;
}
static void build_store_set(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__STORE_SET, "train", 0, 1, 1);
    ddp__store_set__init(&p->store_set);
    p->store_set.key = "addr";
    p->env.store_set = &p->store_set;
}

/* Each breaks one thing of a valid message. */
static void bad_version(parts *p) {
    build_join(p);
    p->env.version = DDP_PROTOCOL_VERSION + 1;
}
static void bad_version_zero(parts *p) {
    build_barrier(p);
    p->env.version = 0;
}
static void bad_type_99(parts *p) {
    build_barrier(p);
    p->env.type = (Ddp__MsgType)99;
}
static void bad_type_unspecified(parts *p) {
    build_barrier(p);
    p->env.type = DDP__MSG_TYPE__MSG_UNSPECIFIED;
}
static void bad_type_body_mismatch(parts *p) {
    build_barrier(p);
    p->env.type = DDP__MSG_TYPE__JOIN; /* a JOIN carrying a barrier body */
}
static void bad_no_body(parts *p) {
    build_join(p);
    p->env.body_case = DDP__ENVELOPE__BODY__NOT_SET;
}
static void bad_job_space(parts *p) {
    build_join(p);
    p->env.job = "my job";
}
static void bad_job_slash(parts *p) {
    build_join(p);
    p->env.job = "../etc/passwd";
}
static void bad_job_empty(parts *p) {
    build_barrier(p);
    p->env.job = "";
}
static void bad_job_on_heartbeat(parts *p) {
    build_heartbeat(p); /* a job is optional here, but when named it must be valid */
    p->env.job = "a;b";
}
static void bad_rank_minus_2(parts *p) {
    build_barrier(p);
    p->env.rank = -2;
}
static void bad_rank_5000(parts *p) {
    build_barrier(p);
    p->env.rank = 5000;
}
static void bad_join_rank_eq_world(parts *p) {
    build_join(p);
    p->join.rank = 4;
}
static void bad_join_rank_minus_2(parts *p) {
    build_join(p);
    p->join.rank = -2;
}
static void bad_join_world_0(parts *p) {
    build_join(p);
    p->join.world_size = 0;
}
static void bad_join_mode(parts *p) {
    build_join(p);
    p->join.mode = "dd p";
}
static void bad_join_host_nonprintable(parts *p) {
    build_join(p);
    p->join.host = "node\x01";
}
static void bad_join_host_del(parts *p) {
    build_join(p);
    p->join.host = "node\x7f";
}
static void bad_join_host_utf8(parts *p) {
    build_join(p);
    p->join.host = "n\xc3\xb8"
                   "de";
}
static void bad_join_host_empty(parts *p) {
    build_join(p);
    p->join.host = "";
}
static void bad_join_endpoint_newline(parts *p) {
    build_join(p);
    p->join.data_endpoint = "tcp://a:1\nrm -rf";
}
static void bad_welcome_endpoints(parts *p) {
    build_welcome(p);
    p->welcome.n_endpoints = 3;
}
static void bad_welcome_rank(parts *p) {
    build_welcome(p);
    p->welcome.rank = 4;
}
static void bad_welcome_heartbeat(parts *p) {
    build_welcome(p);
    p->welcome.heartbeat_ms = 0;
}
static void bad_welcome_liveness(parts *p) {
    build_welcome(p);
    p->welcome.liveness = 0;
}
static void bad_reject_code_0(parts *p) {
    build_reject(p);
    p->reject.code = 0;
}
static void bad_reject_code_positive(parts *p) {
    build_reject(p);
    p->reject.code = EEXIST;
}
static void bad_reject_no_reason(parts *p) {
    build_reject(p);
    p->reject.reason = "";
}
static void bad_heartbeat_interval_0(parts *p) {
    build_heartbeat(p);
    p->heartbeat.interval_ms = 0;
}
static void bad_abort_code_0(parts *p) {
    build_abort(p);
    p->abort.code = 0;
}
static void bad_abort_rank(parts *p) {
    build_abort(p);
    p->abort.rank = DDP_MAX_WORLD_SIZE;
}
static void bad_abort_host(parts *p) {
    build_abort(p);
    p->abort.host = "x\x1b[31m";
}
static void bad_store_key_empty(parts *p) {
    build_store_set(p);
    p->store_set.key = "";
}
static void bad_store_key_control(parts *p) {
    build_store_set(p);
    p->store_set.key = "a\tb";
}
static void bad_store_wait_no_keys(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__STORE_WAIT, "train", 0, 1, 1);
    ddp__store_wait__init(&p->store_wait);
    p->env.store_wait = &p->store_wait;
}
static void bad_error_code_0(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__ERROR, "", -1, 0, 1);
    ddp__error__init(&p->error);
    p->error.message = "x";
    p->env.error = &p->error;
}
static void build_status(parts *p) {
    wire_envelope_init(&p->env, DDP__MSG_TYPE__STATUS_REPLY, "", -1, 0, 1);
    ddp__status_reply__init(&p->status);
    ddp__job_status__init(&p->job);
    p->status.version = "0.1.0";
    p->job.name = "train";
    p->job.state = "running";
    p->job.world_size = 2;
    p->jobs[0] = &p->job;
    p->status.jobs = p->jobs;
    p->status.n_jobs = 1;
    p->env.status_reply = &p->status;
}
static void bad_welcome_pids(parts *p) {
    build_welcome(p);
    p->welcome.n_pids = 3;
}
static void bad_welcome_host(parts *p) {
    build_welcome(p);
    static char *hosts[] = {"a", "b\x1b", "c", "d"};
    p->welcome.hosts = hosts;
}
static void bad_status_job_name(parts *p) {
    build_status(p);
    p->job.name = "bad name";
}
static void bad_status_version(parts *p) {
    build_status(p);
    p->status.version = "\x07\x1b]0;title\x07";
}
static void bad_status_state(parts *p) {
    build_status(p);
    p->job.state = "\x1b[2Jowned";
}
static void bad_status_mode(parts *p) {
    build_status(p);
    p->job.mode = "not a mode!";
}
static void bad_status_world(parts *p) {
    build_status(p);
    p->job.world_size = 0;
}

#define RAW(s) .raw = (const uint8_t *)(s), .raw_size = sizeof(s) - 1

typedef struct {
    const char *name;
    void (*build)(parts *p); /* the envelope to send */
    const uint8_t *raw;      /* or these bytes as the envelope frame */
    size_t raw_size;
    size_t cut;         /* bytes cut off the end of the packed envelope */
    bool identity_only; /* a message that is nothing but a routing id */
    int expected;
    bool env_kept; /* msg.env still set, so a reply is possible */
} hostile;

static const hostile hostile_inputs[] = {
    {"random bytes",
     RAW("\x8f\x3a\xd2\x71\x0c\xee\x45\x99\x13\xb7\x60\x2d\xfa\x08\x5e\xc1"
         "\x77\x94\x2b\xd0\x6a\x1f\xe3\x58\xac\x31\x86\xbd\x4f\x02\x9e\x67"),
     .expected = -EBADMSG},
    {"overlong varint", RAW("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"), .expected = -EBADMSG},
    {"an HTTP request", RAW("GET / HTTP/1.1\r\nHost: ddpd\r\n\r\n"), .expected = -EBADMSG},
    {"string length beyond the frame", RAW("\x08\x01\x1a\x7fjob"), .expected = -EBADMSG},
    {"truncated join, 1 byte short", .build = build_join, .cut = 1, .expected = -EBADMSG},
    {"truncated join, 5 bytes short", .build = build_join, .cut = 5, .expected = -EBADMSG},
    {"truncated welcome, 3 bytes short", .build = build_welcome, .cut = 3, .expected = -EBADMSG},
    {"empty envelope frame", RAW(""), .expected = -EBADMSG},
    {"version only, no type", RAW("\x08\x01"), .expected = -EPROTO, .env_kept = true},
    {"wrong version", .build = bad_version, .expected = -EPROTONOSUPPORT, .env_kept = true},
    {"version 0", .build = bad_version_zero, .expected = -EPROTONOSUPPORT, .env_kept = true},
    {"unknown type 99", .build = bad_type_99, .expected = -EPROTO, .env_kept = true},
    {"type unspecified", .build = bad_type_unspecified, .expected = -EPROTO, .env_kept = true},
    {"join type with a barrier body", .build = bad_type_body_mismatch, .expected = -EPROTO, .env_kept = true},
    {"join without a body", .build = bad_no_body, .expected = -EPROTO, .env_kept = true},
    {"job name with a space", .build = bad_job_space, .expected = -EPROTO, .env_kept = true},
    {"job name with '/'", .build = bad_job_slash, .expected = -EPROTO, .env_kept = true},
    {"empty job name on a barrier", .build = bad_job_empty, .expected = -EPROTO, .env_kept = true},
    {"invalid job name on a heartbeat", .build = bad_job_on_heartbeat, .expected = -EPROTO, .env_kept = true},
    {"rank -2", .build = bad_rank_minus_2, .expected = -EPROTO, .env_kept = true},
    {"rank 5000", .build = bad_rank_5000, .expected = -EPROTO, .env_kept = true},
    {"join rank == world size", .build = bad_join_rank_eq_world, .expected = -EPROTO, .env_kept = true},
    {"join rank -2", .build = bad_join_rank_minus_2, .expected = -EPROTO, .env_kept = true},
    {"join world size 0", .build = bad_join_world_0, .expected = -EPROTO, .env_kept = true},
    {"join mode with a space", .build = bad_join_mode, .expected = -EPROTO, .env_kept = true},
    {"join host with \\x01", .build = bad_join_host_nonprintable, .expected = -EPROTO, .env_kept = true},
    {"join host with DEL", .build = bad_join_host_del, .expected = -EPROTO, .env_kept = true},
    {"join host in UTF-8", .build = bad_join_host_utf8, .expected = -EPROTO, .env_kept = true},
    {"join host empty", .build = bad_join_host_empty, .expected = -EPROTO, .env_kept = true},
    {"join endpoint with a newline", .build = bad_join_endpoint_newline, .expected = -EPROTO, .env_kept = true},
    {"welcome with 3 endpoints for 4", .build = bad_welcome_endpoints, .expected = -EPROTO, .env_kept = true},
    {"welcome rank == world size", .build = bad_welcome_rank, .expected = -EPROTO, .env_kept = true},
    {"welcome heartbeat 0", .build = bad_welcome_heartbeat, .expected = -EPROTO, .env_kept = true},
    {"welcome liveness 0", .build = bad_welcome_liveness, .expected = -EPROTO, .env_kept = true},
    {"welcome with 3 pids for 4", .build = bad_welcome_pids, .expected = -EPROTO, .env_kept = true},
    {"welcome with an escape in a host", .build = bad_welcome_host, .expected = -EPROTO, .env_kept = true},
    {"reject code 0", .build = bad_reject_code_0, .expected = -EPROTO, .env_kept = true},
    {"reject code positive", .build = bad_reject_code_positive, .expected = -EPROTO, .env_kept = true},
    {"reject without reason", .build = bad_reject_no_reason, .expected = -EPROTO, .env_kept = true},
    {"heartbeat interval 0", .build = bad_heartbeat_interval_0, .expected = -EPROTO, .env_kept = true},
    {"abort code 0", .build = bad_abort_code_0, .expected = -EPROTO, .env_kept = true},
    {"abort rank out of range", .build = bad_abort_rank, .expected = -EPROTO, .env_kept = true},
    {"abort host with an escape", .build = bad_abort_host, .expected = -EPROTO, .env_kept = true},
    {"store key empty", .build = bad_store_key_empty, .expected = -EPROTO, .env_kept = true},
    {"store key with a tab", .build = bad_store_key_control, .expected = -EPROTO, .env_kept = true},
    {"store wait without keys", .build = bad_store_wait_no_keys, .expected = -EPROTO, .env_kept = true},
    {"error code 0", .build = bad_error_code_0, .expected = -EPROTO, .env_kept = true},
    {"status with an invalid job name", .build = bad_status_job_name, .expected = -EPROTO, .env_kept = true},
    {"status with escapes in the version", .build = bad_status_version, .expected = -EPROTO, .env_kept = true},
    {"status with an unknown job state", .build = bad_status_state, .expected = -EPROTO, .env_kept = true},
    {"status with an invalid mode", .build = bad_status_mode, .expected = -EPROTO, .env_kept = true},
    {"status with world size 0", .build = bad_status_world, .expected = -EPROTO, .env_kept = true},
    {"identity frame only", .identity_only = true, .expected = -EBADMSG},
};
#define N_HOSTILE ((int)(sizeof(hostile_inputs) / sizeof(hostile_inputs[0])))

START_TEST(test_hostile_input) {
    const hostile *h = &hostile_inputs[_i];
    wire_msg msg;
    int r;
    if (h->identity_only) {
        /* A ROUTER never delivers a lone routing id; a socket read as a ROUTER that
         * delivers a single frame is the same case for wire_recv. */
        assert_socket_still_works();
        ck_assert_int_eq(zmq_send(router, DEALER_ID, strlen(DEALER_ID), ZMQ_SNDMORE), (int)strlen(DEALER_ID));
        ck_assert_int_eq(zmq_send(router, "id", 2, 0), 2);
        r = wire_recv(dealer, true, 0, &msg);
        ck_assert_uint_eq(msg.identity_size, 2);
        ck_assert_mem_eq(msg.identity, "id", 2);
    } else if (h->build) {
        parts p;
        memset(&p, 0, sizeof(p));
        h->build(&p);
        zmq_msg_t frame;
        ck_assert_int_eq(wire_pack(&p.env, &frame), 0);
        ck_assert_uint_gt(zmq_msg_size(&frame), h->cut);
        size_t size = zmq_msg_size(&frame) - h->cut;
        ck_assert_int_eq(zmq_send(dealer, zmq_msg_data(&frame), size, 0), (int)size);
        zmq_msg_close(&frame);
        r = wire_recv(router, true, 0, &msg);
        assert_identity(&msg);
    } else {
        ck_assert_int_eq(zmq_send(dealer, h->raw, h->raw_size, 0), (int)h->raw_size);
        r = wire_recv(router, true, 0, &msg);
        assert_identity(&msg);
    }
    ck_assert_msg(r == h->expected, "%s: expected %d (%s), got %d (%s): '%s'", h->name, h->expected,
                  error_string(h->expected), r, error_string(r), msg.error);
    ck_assert_msg(msg.error[0] != '\0', "%s: no explanation", h->name);
    ck_assert_msg(strlen(msg.error) < sizeof(msg.error), "%s", h->name);
    if (h->env_kept) {
        ck_assert_msg(msg.env != NULL, "%s: the envelope was not kept", h->name);
        if (h->build)
            ck_assert_uint_eq(msg.env->seq, 1); /* enough to address a reply */
    } else {
        ck_assert_msg(msg.env == NULL, "%s: an envelope from undecodable input", h->name);
    }
    ck_assert_uint_eq(msg.n_payload, 0);
    wire_msg_close(&msg);
    ck_assert_ptr_null(msg.env);
    assert_socket_still_works();
}
END_TEST

/* The same hostile envelopes, each also as DDP_MAX_PAYLOAD_FRAMES + 1 frames: size first. */
START_TEST(test_hostile_with_too_many_frames) {
    ck_assert_int_eq(zmq_send(dealer, "\x8f\x3a\xd2", 3, ZMQ_SNDMORE), 3);
    for (int i = 0; i < DDP_MAX_PAYLOAD_FRAMES + 1; i++)
        ck_assert_int_eq(zmq_send(dealer, "x", 1, i < DDP_MAX_PAYLOAD_FRAMES ? ZMQ_SNDMORE : 0), 1);
    wire_msg msg;
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EMSGSIZE);
    ck_assert_ptr_null(msg.env);
    wire_msg_close(&msg);
    /* undecodable with a payload within the limit: -EBADMSG, the payload released */
    ck_assert_int_eq(zmq_send(dealer, "\x8f\x3a\xd2", 3, ZMQ_SNDMORE), 3);
    ck_assert_int_eq(zmq_send(dealer, "x", 1, 0), 1);
    ck_assert_int_eq(wire_recv(router, true, 0, &msg), -EBADMSG);
    ck_assert_ptr_null(msg.env);
    ck_assert_uint_eq(msg.n_payload, 0);
    wire_msg_close(&msg);
    assert_socket_still_works();
}
END_TEST

START_TEST(test_validate_direct) {
    char err[160];
    parts p;
    memset(&p, 0, sizeof(p));

    build_barrier(&p);
    err[0] = '\0';
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(wire_validate(&p.env, 1, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "payload"), "%s", err);

    build_join(&p);
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    p.join.world_size = DDP_MAX_WORLD_SIZE + 1;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "world size"), "%s", err);

    build_join(&p);
    p.env.version = 7;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTONOSUPPORT);
    ck_assert_msg(strstr(err, "7"), "%s", err);

    build_barrier(&p);
    p.env.type = DDP__MSG_TYPE__STORE_GET;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "store-get"), "%s", err);

    build_abort(&p);
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    p.abort.reason = "";
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);

    build_welcome(&p);
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    p.welcome.world_size = 0;
    p.welcome.n_endpoints = 0;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    build_welcome(&p); /* the ps socket's name: printable, at most 40 bytes */
    p.welcome.ps_socket = "ddpd-ps-0123456789abcdef0123456789abcdef";
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    p.welcome.ps_socket = "ddpd-ps-0123456789abcdef0123456789abcdef0";
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    p.welcome.ps_socket = "ddpd\nps";
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);

    /* ps pushes and averages: one payload frame, or none when in shared memory */
    Ddp__GradPush push = DDP__GRAD_PUSH__INIT;
    wire_envelope_init(&p.env, DDP__MSG_TYPE__GRAD_PUSH, "job", 0, 1, 3);
    p.env.grad_push = &push;
    ck_assert_int_eq(wire_validate(&p.env, 1, err, sizeof(err)), 0);
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    push.shared = true;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(wire_validate(&p.env, 1, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "grad-push message with 1 payload frames, not 0"), "%s", err);
    Ddp__GradAvg avg = DDP__GRAD_AVG__INIT;
    avg.shared = true;
    wire_envelope_init(&p.env, DDP__MSG_TYPE__GRAD_AVG, "job", -1, 1, 0);
    p.env.grad_avg = &avg;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    ck_assert_int_eq(wire_validate(&p.env, 1, err, sizeof(err)), -EPROTO);

    /* the ranks that left, in ddpd's heartbeats: below the largest world */
    build_heartbeat(&p);
    uint32_t left[2] = {3, DDP_MAX_WORLD_SIZE - 1};
    p.heartbeat.left = left;
    p.heartbeat.n_left = 2;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), 0);
    left[1] = DDP_MAX_WORLD_SIZE;
    ck_assert_int_eq(wire_validate(&p.env, 0, err, sizeof(err)), -EPROTO);
    ck_assert_msg(strstr(err, "heartbeat: rank 1024 out of range"), "%s", err);

    /* a small buffer is filled, truncated, and nothing past it is touched */
    char small[12];
    memset(small, '#', sizeof(small));
    build_join(&p);
    p.env.job = "no good";
    ck_assert_int_eq(wire_validate(&p.env, 0, small, 8), -EPROTO);
    ck_assert_uint_eq(strlen(small), 7);
    ck_assert_int_eq(small[8], '#');
    ck_assert_int_eq(small[11], '#');
}
END_TEST

/* The kernel's credentials of an ipc:// peer, as ZeroMQ's Peer-Address spells them. */
START_TEST(test_peer_credentials) {
    static const struct {
        const char *peer;
        int r;
        uint32_t uid, pid;
    } cases[] = {
        {"localhost:0:0:4242", 0, 0, 4242},  {"localhost:1000:100:7", 0, 1000, 7},
        {"127.0.0.1", -ENOENT, 0, 0},        {"", -ENOENT, 0, 0},
        {"x:0:0:", -ENOENT, 0, 0},           {"x:a:0:1", -ENOENT, 0, 0},
        {"x:4294967296:0:1", -ENOENT, 0, 0}, {":0:1", -ENOENT, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        wire_msg msg = {0};
        snprintf(msg.peer, sizeof(msg.peer), "%s", cases[i].peer);
        uint32_t uid = 99, pid = 99;
        ck_assert_msg(wire_peer_credentials(&msg, &uid, &pid) == cases[i].r, "'%s'", cases[i].peer);
        if (cases[i].r == 0) {
            ck_assert_uint_eq(uid, cases[i].uid);
            ck_assert_uint_eq(pid, cases[i].pid);
        }
    }
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("wire");

    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60);
    tcase_add_checked_fixture(core, setup, teardown);
    tcase_add_test(core, test_join_roundtrip);
    tcase_add_test(core, test_welcome_roundtrip);
    tcase_add_test(core, test_router_to_dealer);
    tcase_add_test(core, test_send_to_unknown_peer);
    tcase_add_test(core, test_reject_roundtrip);
    tcase_add_test(core, test_heartbeat_roundtrip);
    tcase_add_test(core, test_barrier_roundtrip);
    tcase_add_test(core, test_store_set_roundtrip);
    tcase_add_test(core, test_store_get_roundtrip);
    tcase_add_test(core, test_store_wait_roundtrip);
    tcase_add_test(core, test_store_value_roundtrip);
    tcase_add_test(core, test_abort_roundtrip);
    tcase_add_test(core, test_leave_roundtrip);
    tcase_add_test(core, test_status_request_roundtrip);
    tcase_add_test(core, test_status_reply_roundtrip);
    tcase_add_test(core, test_error_roundtrip);
    tcase_add_test(core, test_several_in_order);
    tcase_add_test(core, test_envelope_init);
    tcase_add_test(core, test_type_names);
    tcase_add_test(core, test_name_valid);
    suite_add_tcase(s, core);

    TCase *limits = tcase_create("limits");
    tcase_set_timeout(limits, 60);
    tcase_add_checked_fixture(limits, setup, teardown);
    tcase_add_test(limits, test_job_name_limit);
    tcase_add_test(limits, test_world_size_limit);
    tcase_add_test(limits, test_welcome_largest_world);
    tcase_add_test(limits, test_text_field_limits);
    tcase_add_test(limits, test_rank_limit);
    tcase_add_test(limits, test_heartbeat_limits);
    tcase_add_test(limits, test_store_value_limit);
    tcase_add_test(limits, test_store_wait_limits);
    tcase_add_test(limits, test_status_reply_job_limit);
    tcase_add_test(limits, test_payload_frames_limit);
    tcase_add_test(limits, test_envelope_size_limit);
    tcase_add_test(limits, test_send_envelope_limit);
    suite_add_tcase(s, limits);

    TCase *malformed = tcase_create("malformed");
    tcase_set_timeout(malformed, 60);
    tcase_add_checked_fixture(malformed, setup, teardown);
    tcase_add_loop_test(malformed, test_hostile_input, 0, N_HOSTILE);
    tcase_add_test(malformed, test_hostile_with_too_many_frames);
    tcase_add_test(malformed, test_validate_direct);
    tcase_add_test(malformed, test_peer_credentials);
    suite_add_tcase(s, malformed);

    return check_main(s, argc, argv);
}
