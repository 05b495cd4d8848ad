/* The data plane's guard (worker/libddp/data_guard.c) on a real ZeroMQ data plane over
 * TCP: only a CURVE key that a rank advertised gets in, as that rank; a frame that names
 * another rank is dropped; a stranger's key and a plain client are refused and counted;
 * a rank that connects before this one knows the job waits, then gets in. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "tests/check_main.h"
#include "worker/libddp/comm.h"

#define WORLD 3
#define GENERATION 5

typedef struct {
    comm c;
    job_end end;
    char error[512], endpoint[256], key[CURVE_KEY_Z85];
    char *endpoints[WORLD], *keys[WORLD];
    uint32_t pids[WORLD];
    bool here[WORLD];
    curve_keypair ranks[WORLD]; /* the peers' key pairs (rank 0's is the plane's own) */
    comm_peers peers;
} plane;

static void *ctx; /* the clients', made in each test (Check may fork it) */

/* Rank 0's data plane, listening on loopback TCP; started (the job known) unless asked not to. */
static void plane_open(plane *p, bool start) {
    memset(p, 0, sizeof(*p));
    ctx = zmq_ctx_new();
    p->end = (job_end){.fd = eventfd(0, EFD_CLOEXEC)};
    p->c = (comm){.timeout_ms = 2000, .end = &p->end, .error = p->error, .error_size = sizeof(p->error)};
    ck_assert_int_eq(comm_zmq_open(&p->c), 0);
    ck_assert_msg(comm_listen(&p->c, "tcp://127.0.0.1:*", p->endpoint, sizeof(p->endpoint), p->key) == 0, "%s",
                  p->error);
    ck_assert_msg(curve_key_valid(p->key), "over TCP the plane has a CURVE key: '%s'", p->key);
    for (int r = 0; r < WORLD; r++) {
        if (r > 0)
            ck_assert_int_eq(zmq_curve_keypair(p->ranks[r].public_key, p->ranks[r].secret_key), 0);
        p->endpoints[r] = p->endpoint;
        p->keys[r] = r ? p->ranks[r].public_key : p->key;
        p->here[r] = false; /* other hosts: TCP */
    }
    p->peers = (comm_peers){.rank = 0,
                            .world = WORLD,
                            .generation = GENERATION,
                            .endpoints = p->endpoints,
                            .keys = p->keys,
                            .pids = p->pids,
                            .here = p->here};
    if (start)
        ck_assert_msg(comm_start(&p->c, &p->peers) == 0, "%s", p->error);
}

static void plane_close(plane *p) {
    comm_close(&p->c, true);
    close(p->end.fd);
    zmq_ctx_term(ctx);
}

/* A client of the plane: CURVE with key (NULL: plain). */
static void *client(const plane *p, const curve_keypair *key) {
    void *s = zmq_socket(ctx, ZMQ_PUSH);
    int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (key)
        ck_assert_int_eq(curve_client_setup(s, p->key, key), 0);
    ck_assert_int_eq(zmq_connect(s, p->endpoint), 0);
    return s;
}

/* Sends the frame of a ddp_send of one int (tag 7) from src to rank 0. */
static void send_int(void *s, int src, int value) {
    comm_header h = {.magic = COMM_MAGIC,
                     .version = COMM_VERSION,
                     .kind = COLL_SEND,
                     .dtype = DTYPE_I32,
                     .src = src,
                     .tag = 7,
                     .generation = GENERATION,
                     .count = 1,
                     .n = 1};
    ck_assert_int_eq(zmq_send(s, &h, sizeof(h), ZMQ_SNDMORE), sizeof(h));
    ck_assert_int_eq(zmq_send(s, &value, sizeof(value), 0), sizeof(value));
}

/* Rank 0's recv of that int from src: its value, or the error's code. */
static int recv_int(plane *p, int src, int timeout_ms, int *value) {
    comm_call call = {.kind = COLL_SEND,
                      .t = DTYPE_I32,
                      .root = src,
                      .count = 1,
                      .deadline_ms = clock_now_ms() + (uint64_t)timeout_ms};
    comm_frame *f = NULL;
    int r = comm_recv(&p->c, src, &call, 7, &f);
    if (r == 0) {
        memcpy(value, f->data, sizeof(*value));
        comm_frame_free(&p->c, f);
    }
    return r;
}

static unsigned long long refused(plane *p, char *last, size_t size) {
    return p->c.transport->refused(&p->c, last, size);
}

/* The refusal count once it is above `above`: the handshake is refused on ZeroMQ's own
 * threads, in their time (a loaded machine took more than 300 ms). */
static unsigned long long refused_above(plane *p, unsigned long long above, char *last, size_t size) {
    uint64_t deadline = clock_now_ms() + 10000;
    unsigned long long n;
    while ((n = refused(p, last, size)) <= above && clock_now_ms() < deadline)
        usleep(10 * 1000);
    return n;
}

START_TEST(test_keys) {
    plane p;
    plane_open(&p, true);
    char last[256];
    int value = 0;

    /* a key no rank advertised: refused at the handshake, counted, named */
    curve_keypair stranger;
    ck_assert_int_eq(zmq_curve_keypair(stranger.public_key, stranger.secret_key), 0);
    void *s = client(&p, &stranger);
    send_int(s, 1, 666);
    ck_assert_uint_ge(refused_above(&p, 0, last, sizeof(last)), 1);
    ck_assert_int_eq(recv_int(&p, 1, 300, &value), -ETIMEDOUT);
    ck_assert_msg(strstr(p.error, "connections refused"), "%s", p.error);
    ck_assert_msg(strstr(last, "which no rank of the job advertised"), "%s", last);
    zmq_close(s);

    /* a plain client on the CURVE socket: refused too */
    unsigned long long before = refused(&p, last, sizeof(last));
    s = client(&p, NULL);
    send_int(s, 1, 666);
    ck_assert_uint_gt(refused_above(&p, before, last, sizeof(last)), before);
    ck_assert_int_eq(recv_int(&p, 1, 300, &value), -ETIMEDOUT);
    ck_assert_msg(strstr(last, "failed before authentication"), "%s", last);
    zmq_close(s);

    /* rank 1's key: in, as rank 1; a frame of it that says rank 2 is dropped */
    ck_assert_uint_eq(p.c.stats.frames_dropped, 0);
    s = client(&p, &p.ranks[1]);
    send_int(s, 2, 666);
    send_int(s, 1, 42);
    ck_assert_msg(recv_int(&p, 1, 5000, &value) == 0, "%s", p.error);
    ck_assert_int_eq(value, 42);
    ck_assert_int_eq(recv_int(&p, 2, 300, &value), -ETIMEDOUT);
    ck_assert_uint_eq(p.c.stats.frames_dropped, 1);
    ck_assert_msg(strstr(p.error, "a header naming another rank than its connection's"), "%s", p.error);
    zmq_close(s);
    plane_close(&p);
}
END_TEST

/* A rank's handshake before this one knows the job waits for the Welcome, then gets in. */
START_TEST(test_before_start) {
    plane p;
    plane_open(&p, false);
    void *s = client(&p, &p.ranks[2]);
    send_int(s, 2, 42);
    usleep(200 * 1000);
    ck_assert_msg(comm_start(&p.c, &p.peers) == 0, "%s", p.error);
    int value = 0;
    ck_assert_msg(recv_int(&p, 2, 5000, &value) == 0, "%s", p.error);
    ck_assert_int_eq(value, 42);
    char last[256];
    ck_assert_uint_eq(refused(&p, last, sizeof(last)), 0);
    zmq_close(s);
    plane_close(&p);
}
END_TEST

int main(int argc, char **argv) {
    Suite *s = suite_create("data_guard");
    TCase *tc = tcase_create("data_guard");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_keys);
    tcase_add_test(tc, test_before_start);
    suite_add_tcase(s, tc);
    return check_main(s, argc, argv);
}
