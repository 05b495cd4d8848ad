#include "server/zap.h"

#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/curve_keys.h"
#include "common/log.h"
#include "common/strmap.h"

struct zap {
    void *socket;
    strmap users; /* public key (Z85) -> user name */
    pthread_t thread;
    atomic_bool stopping;
};

static void free_name(const char *key, void *value, void *ctx) {
    (void)key;
    (void)ctx;
    free(value);
}

static int load_users(zap *z, const char *path, char *err, size_t err_size) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, err_size, "--curve-users %s: %s", path, strerror(errno));
        return -errno;
    }
    char line[512];
    int r = 0;
    for (int n = 1; r == 0 && fgets(line, sizeof(line), f); n++) {
        char user[64], key[64], extra[2];
        int fields = sscanf(line, "%63s %63s %1s", user, key, extra);
        if (fields <= 0 || user[0] == '#') /* a comment line ('#' is also a Z85 character: only at a line's start) */
            continue;
        if (fields != 2 || !curve_key_valid(key)) {
            snprintf(err, err_size, "--curve-users %s:%d: not \"USER PUBLIC-KEY\" (a 40-character Z85 key)", path, n);
            r = -EINVAL;
        } else if (!getpwnam(user)) {
            snprintf(err, err_size, "--curve-users %s:%d: '%s' is not a user of this host", path, n, user);
            r = -EINVAL;
        } else {
            char *name = strdup(user), *old = strmap_get(&z->users, key); /* a key named twice: the last */
            if (!name || strmap_put(&z->users, key, name) < 0) {
                free(name);
                r = -ENOMEM;
            } else {
                free(old);
            }
        }
    }
    fclose(f);
    return r;
}

/* One ZAP exchange: request frames in, the reply out. */
static void answer(zap *z) {
    zmq_msg_t part[8];
    int n = 0, more = 1;
    size_t more_size = sizeof(more);
    while (more && n < 8) {
        zmq_msg_init(&part[n]);
        if (zmq_msg_recv(&part[n], z->socket, 0) < 0) {
            zmq_msg_close(&part[n]);
            break;
        }
        n++;
        zmq_getsockopt(z->socket, ZMQ_RCVMORE, &more, &more_size);
    }
    /* version, request id, domain, address, routing id, mechanism, credentials... */
    const char *status = "400", *text = "unknown key", *user = "";
    char mechanism[16] = "", key[CURVE_KEY_Z85] = "";
    if (n >= 6) {
        size_t len = zmq_msg_size(&part[5]) < sizeof(mechanism) - 1 ? zmq_msg_size(&part[5]) : sizeof(mechanism) - 1;
        memcpy(mechanism, zmq_msg_data(&part[5]), len);
    }
    if (strcmp(mechanism, "CURVE") == 0 && n == 7 && zmq_msg_size(&part[6]) == 32) {
        zmq_z85_encode(key, zmq_msg_data(&part[6]), 32);
        const char *name = strmap_get(&z->users, key);
        if (name)
            status = "200", text = "OK", user = name;
        else
            log_warn("refused a CURVE client with key %s: not in --curve-users", key);
    } else {
        text = "CURVE only";
    }
    const char *reply[6] = {"1.0", NULL, status, text, user, ""};
    for (int i = 0; i < 6; i++) {
        int flags = i < 5 ? ZMQ_SNDMORE : 0;
        if (i == 1 && n >= 2) /* the request id, echoed */
            zmq_send(z->socket, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), flags);
        else
            zmq_send(z->socket, reply[i] ? reply[i] : "", reply[i] ? strlen(reply[i]) : 0, flags);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

static void *zap_main(void *arg) {
    zap *z = arg;
    while (!atomic_load(&z->stopping)) {
        zmq_pollitem_t item = {.socket = z->socket, .events = ZMQ_POLLIN};
        if (zmq_poll(&item, 1, 100) == 1)
            answer(z);
    }
    return NULL;
}

int zap_start(void *zmq_ctx, const char *users_path, zap **ret, char *err, size_t err_size) {
    zap *z = calloc(1, sizeof(*z));
    if (!z) {
        snprintf(err, err_size, "out of memory");
        return -ENOMEM;
    }
    int r = load_users(z, users_path, err, err_size), linger = 0;
    if (r == 0 && (!(z->socket = zmq_socket(zmq_ctx, ZMQ_REP)) ||
                   zmq_setsockopt(z->socket, ZMQ_LINGER, &linger, sizeof(linger)) < 0 ||
                   zmq_bind(z->socket, "inproc://zeromq.zap.01") < 0)) {
        r = -zmq_errno();
        snprintf(err, err_size, "cannot start the ZAP handler: %s", zmq_strerror(-r));
    }
    if (r == 0 && (r = -pthread_create(&z->thread, NULL, zap_main, z)) < 0)
        snprintf(err, err_size, "cannot start the ZAP handler: %s", strerror(-r));
    if (r < 0) {
        if (z->socket)
            zmq_close(z->socket);
        strmap_each(&z->users, free_name, NULL);
        strmap_clear(&z->users);
        free(z);
        return r;
    }
    *ret = z;
    return 0;
}

void zap_stop(zap *z) {
    if (!z)
        return;
    atomic_store(&z->stopping, true);
    pthread_join(z->thread, NULL);
    zmq_close(z->socket);
    strmap_each(&z->users, free_name, NULL);
    strmap_clear(&z->users);
    free(z);
}
