#include "worker/libddp/data_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/wire.h"
#include "common/zap_request.h"

#define GUARD_EVENTS                                                                                                   \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

struct data_guard {
    void *socket;  /* the data socket, watched until unwatch */
    void *zap;     /* REP on inproc://zeromq.zap.01 */
    void *monitor; /* PAIR: the data socket's failed handshakes */
    int wake;      /* eventfd: stop */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t admitted_changed;
    const comm_peers *peers; /* NULL until admit */
    atomic_bool stopping;
    unsigned long long refused;
    char last[192];
};

/* The rank that may connect as this ZAP request, or -1 with why not. */
static int guard_rank_of(const data_guard *g, const zap_request *req, char *why, size_t size) {
    const comm_peers *p = g->peers;
    if (!req->valid) {
        snprintf(why, size, "a malformed ZAP request");
        return -1;
    }
    if (strcmp(req->mechanism, "CURVE") == 0) {
        for (int r = 0; r < p->world; r++)
            if (r != p->rank && p->keys[r][0] && strcmp(p->keys[r], req->key) == 0)
                return r;
        snprintf(why, size, "a connection from %.80s with CURVE key %.8s..., which no rank of the job advertised",
                 req->address, req->key);
        return -1;
    }
    uint32_t uid, pid;
    if (strcmp(req->mechanism, "NULL") != 0 || wire_address_credentials(req->address, &uid, &pid) < 0) {
        snprintf(why, size, "a %.15s connection from %.80s that the kernel does not name", req->mechanism,
                 req->address);
        return -1;
    }
    for (int r = 0; r < p->world; r++)
        if (r != p->rank && p->here[r] && p->pids[r] == pid && uid == (uint32_t)geteuid())
            return r;
    snprintf(why, size, "a connection from pid %u (uid %u), which is not a rank of the job on this host", pid, uid);
    return -1;
}

/* One handshake: waits for the job's ranks, then admits a rank or refuses. */
static void guard_answer(data_guard *g) {
    zap_request req;
    if (zap_request_read(g->zap, &req) < 0)
        return;
    pthread_mutex_lock(&g->lock);
    while (!g->peers && !atomic_load(&g->stopping))
        pthread_cond_wait(&g->admitted_changed, &g->lock);
    char why[sizeof(g->last)] = "the data plane is closing", rank_text[16];
    int rank = g->peers ? guard_rank_of(g, &req, why, sizeof(why)) : -1;
    if (rank < 0)
        snprintf(g->last, sizeof(g->last), "%s", why); /* counted by the monitor's event */
    pthread_mutex_unlock(&g->lock);
    snprintf(rank_text, sizeof(rank_text), "%d", rank);
    if (rank >= 0)
        zap_request_reply(g->zap, &req, "200", "OK", rank_text);
    else
        zap_request_reply(g->zap, &req, "400", why, NULL);
}

/* One monitor event: [u16 event, u32 value][endpoint]. */
static void guard_count(data_guard *g) {
    zmq_msg_t head, endpoint;
    zmq_msg_init(&head);
    zmq_msg_init(&endpoint);
    if (zmq_msg_recv(&head, g->monitor, 0) >= 0 && zmq_msg_more(&head) && zmq_msg_recv(&endpoint, g->monitor, 0) >= 0 &&
        zmq_msg_size(&head) >= 6) {
        uint16_t event;
        memcpy(&event, zmq_msg_data(&head), sizeof(event));
        pthread_mutex_lock(&g->lock);
        g->refused++;
        if (event != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) /* the ZAP answer said why; here ZeroMQ alone knows */
            snprintf(g->last, sizeof(g->last),
                     "a handshake that failed before authentication (a client without CURVE on a CURVE socket, "
                     "or with another server key, or the reverse)");
        pthread_mutex_unlock(&g->lock);
    }
    zmq_msg_close(&head);
    zmq_msg_close(&endpoint);
}

static void *guard_main(void *arg) {
    data_guard *g = arg;
    while (!atomic_load(&g->stopping)) {
        zmq_pollitem_t items[3] = {{.socket = g->zap, .events = ZMQ_POLLIN},
                                   {.socket = g->monitor, .events = ZMQ_POLLIN},
                                   {.fd = g->wake, .events = ZMQ_POLLIN}};
        if (zmq_poll(items, 3, -1) <= 0)
            continue;
        if (items[0].revents & ZMQ_POLLIN)
            guard_answer(g);
        if (items[1].revents & ZMQ_POLLIN)
            guard_count(g);
    }
    return NULL;
}

static void guard_free(data_guard *g) {
    if (g->zap)
        zmq_close(g->zap);
    if (g->monitor)
        zmq_close(g->monitor);
    if (g->wake >= 0)
        close(g->wake);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->admitted_changed);
    free(g);
}

int data_guard_start(void *zmq_ctx, void *socket, data_guard **ret) {
    data_guard *g = calloc(1, sizeof(*g));
    if (!g)
        return -ENOMEM;
    g->socket = socket;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->admitted_changed, NULL);
    if ((g->wake = eventfd(0, EFD_CLOEXEC)) < 0) {
        int r = -errno;
        guard_free(g);
        return r;
    }
    char monitor[64];
    snprintf(monitor, sizeof(monitor), "inproc://ddp-data-guard-%p", (void *)g);
    int linger = 0, r = 0;
    if (!(g->zap = zmq_socket(zmq_ctx, ZMQ_REP)) || zmq_setsockopt(g->zap, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
        zmq_bind(g->zap, "inproc://zeromq.zap.01") < 0 || zmq_socket_monitor(socket, monitor, GUARD_EVENTS) < 0 ||
        !(g->monitor = zmq_socket(zmq_ctx, ZMQ_PAIR)) || zmq_connect(g->monitor, monitor) < 0 ||
        /* ZAP for the NULL mechanism (ipc://) too: ZeroMQ asks only when a domain is set */
        zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, "ddp-data", 8) < 0)
        r = -zmq_errno();
    if (r == 0)
        r = -pthread_create(&g->thread, NULL, guard_main, g);
    if (r < 0) {
        guard_free(g);
        return r;
    }
    *ret = g;
    return 0;
}

void data_guard_admit(data_guard *g, const comm_peers *peers) {
    pthread_mutex_lock(&g->lock);
    g->peers = peers;
    pthread_cond_broadcast(&g->admitted_changed);
    pthread_mutex_unlock(&g->lock);
}

unsigned long long data_guard_refused(data_guard *g, char *last, size_t size) {
    pthread_mutex_lock(&g->lock);
    unsigned long long n = g->refused;
    snprintf(last, size, "%s", g->last);
    pthread_mutex_unlock(&g->lock);
    return n;
}

void data_guard_unwatch(data_guard *g) {
    if (g && g->socket)
        zmq_socket_monitor(g->socket, NULL, 0);
    if (g)
        g->socket = NULL;
}

void data_guard_stop(data_guard *g) {
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    atomic_store(&g->stopping, true);
    pthread_cond_broadcast(&g->admitted_changed);
    pthread_mutex_unlock(&g->lock);
    uint64_t one = 1;
    ssize_t woken = write(g->wake, &one, sizeof(one)); /* fails only on overflow: the thread is woken anyway */
    (void)woken;
    pthread_join(g->thread, NULL);
    guard_free(g);
}
