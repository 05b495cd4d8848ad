/* server/reply_budget.c: replies charged to their connection until ZeroMQ lets them go, over
 * a real ROUTER and two DEALERs that read only when told (inproc: a frame is let go when
 * the DEALER reads it). */
#include <check.h>
#include <errno.h>
#include <string.h>
#include <zmq.h>

#include "server/reply_budget.h"
#include "tests/check_main.h"

enum { VALUE = 600, DEALERS = 3 }; /* a reply of about this */
static void *ctx, *router, *dealer[DEALERS];
static const uint8_t ids[DEALERS][2] = {{'a', 0}, {'b', 0}, {'c', 0}};
static reply_budgets b;

static void setup(void) {
    ctx = zmq_ctx_new();
    router = zmq_socket(ctx, ZMQ_ROUTER);
    int on = 1;
    ck_assert_int_eq(zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &on, sizeof(on)), 0);
    ck_assert_int_eq(zmq_bind(router, "inproc://replies"), 0);
    for (int i = 0; i < DEALERS; i++) {
        dealer[i] = zmq_socket(ctx, ZMQ_DEALER);
        ck_assert_int_eq(zmq_setsockopt(dealer[i], ZMQ_ROUTING_ID, ids[i], 2), 0);
        ck_assert_int_eq(zmq_connect(dealer[i], "inproc://replies"), 0);
        ck_assert_int_eq(zmq_send(dealer[i], "hi", 2, 0), 2); /* the ROUTER learns its id */
        char buf[8];
        ck_assert_int_eq(zmq_recv(router, buf, sizeof(buf), 0), 2);
        ck_assert_int_eq(zmq_recv(router, buf, sizeof(buf), 0), 2);
    }
    /* 10 replies a connection, but 1000 bytes (under 2) in all */
    reply_budgets_init(&b, 10 * VALUE, 1000);
}

static void teardown(void) {
    for (int i = 0; i < DEALERS; i++)
        zmq_close(dealer[i]);
    zmq_close(router);
    zmq_ctx_term(ctx);
    reply_budgets_free(&b);
}

static int send_reply(int to, size_t extra, size_t *ret_queued) {
    static uint8_t value[VALUE];
    Ddp__StoreValue body = DDP__STORE_VALUE__INIT;
    body.key = (char *)"k";
    body.found = true;
    body.value = (ProtobufCBinaryData){sizeof(value), value};
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_VALUE, "job", -1, 1, 1);
    env.store_value = &body;
    return reply_budgets_send(&b, router, ids[to], 2, &env, NULL, 0, extra, ret_queued);
}

static void read_one(int from) {
    char buf[2 * VALUE];
    ck_assert_int_gt(zmq_recv(dealer[from], buf, sizeof(buf), ZMQ_DONTWAIT), VALUE);
}

/* Past the total, only a connection that holds nothing gets more; reading gives back. */
START_TEST(test_total) {
    size_t queued = 1;
    ck_assert_int_eq(send_reply(0, 0, &queued), 0);
    ck_assert_uint_eq(queued, 0);
    size_t one = reply_budgets_queued(&b, ids[0], 2);
    ck_assert_uint_gt(one, VALUE);
    ck_assert_int_eq(send_reply(0, 0, &queued), -ENOBUFS); /* it holds one, and two pass the total */
    ck_assert_uint_eq(queued, one);
    ck_assert_int_eq(send_reply(1, 0, &queued), 0); /* it holds none: its reply goes */
    ck_assert_int_eq(send_reply(1, 0, &queued), -ENOBUFS);
    read_one(0);
    ck_assert_uint_eq(reply_budgets_queued(&b, ids[0], 2), 0);
    ck_assert_int_eq(send_reply(0, 0, &queued), 0);
    read_one(0);
    read_one(1);
    ck_assert_uint_eq(atomic_load(&b.total), 0);
    reply_budgets_sweep(&b, 0);
    ck_assert_uint_eq(b.by_identity.size, 0);
}
END_TEST

/* Past the total, a user's connections share it equally with the other users that hold
 * replies: one user's many connections (a and b) cannot starve another's (c). */
START_TEST(test_users_share) {
    b.total_bytes = 5 * VALUE; /* about 4.6 replies of VALUE and their envelopes */
    const char *users[DEALERS] = {"uid 1000", "uid 1000", "uid 1001"};
    for (int i = 0; i < DEALERS; i++)
        ck_assert_int_eq(reply_budgets_note_user(&b, ids[i], 2, users[i], 1000), 0);
    int sent[DEALERS] = {0};
    for (int round = 0; round < 4; round++) /* user 1000 goes past the total */
        for (int i = 0; i < 2; i++)
            sent[i] += send_reply(i, 0, NULL) == 0;
    ck_assert_int_eq(sent[0] + sent[1], 4); /* the fifth would pass the total */
    ck_assert_int_eq(send_reply(2, 0, NULL), 0); /* c holds none */
    ck_assert_int_eq(send_reply(2, 0, NULL), 0); /* user 1001 holds under half the total */
    ck_assert_int_eq(send_reply(2, 0, NULL), -ENOBUFS);
    ck_assert_int_eq(send_reply(0, 0, NULL), -ENOBUFS); /* user 1000 holds over half */
    for (int i = 0; i < DEALERS; i++)
        while (zmq_recv(dealer[i], (char[2 * VALUE]){0}, 2 * VALUE, ZMQ_DONTWAIT) > 0)
            ;
    ck_assert_uint_eq(atomic_load(&b.total), 0);
    /* a connection noted a moment ago stays known, with its user; then it goes */
    reply_budgets_sweep(&b, 1000 + REPLY_NOTE_KEEP_MS);
    ck_assert_uint_eq(b.by_identity.size, 3);
    ck_assert_uint_eq(b.by_user.size, 2);
    reply_budgets_sweep(&b, 1001 + REPLY_NOTE_KEEP_MS);
    ck_assert_uint_eq(b.by_identity.size, 0);
    ck_assert_uint_eq(b.by_user.size, 0);
}
END_TEST

/* A connection's own limit, raised by extra while it holds anything. */
START_TEST(test_connection) {
    b.total_bytes = 1u << 30;
    int sent = 0;
    while (send_reply(0, 0, NULL) == 0)
        sent++;
    ck_assert_int_eq(sent, 9); /* ten replies' worth of bytes, less their envelopes */
    ck_assert_int_eq(send_reply(0, 5 * VALUE, NULL), 0);
    ck_assert_int_eq(send_reply(0, 0, NULL), 0); /* raised while it holds anything */
    for (int i = 0; i < sent + 2; i++)
        read_one(0);
    reply_budgets_sweep(&b, 0); /* forgotten with the raise */
    ck_assert_uint_eq(b.by_identity.size, 0);
    sent = 0;
    while (send_reply(0, 0, NULL) == 0)
        sent++;
    ck_assert_int_eq(sent, 9);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("reply_budget");
    TCase *tc = tcase_create("reply_budget");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_total);
    tcase_add_test(tc, test_users_share);
    tcase_add_test(tc, test_connection);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
