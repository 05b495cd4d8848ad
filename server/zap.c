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
#include "common/zap_request.h"

struct zap {
    void *socket;
    strmap users; /* public key (Z85) -> user name */
    strmap uids;  /* user name -> its uid (uid_t *), as at start-up: the loop asks no NSS */
    pthread_t thread;
    atomic_bool stopping;
};

static void free_value(const char *key, void *value, void *ctx) {
    (void)key;
    (void)ctx;
    free(value);
}

static void zap_free_maps(zap *z) {
    strmap_each(&z->users, free_value, NULL);
    strmap_clear(&z->users);
    strmap_each(&z->uids, free_value, NULL);
    strmap_clear(&z->uids);
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
        struct passwd *pw;
        int fields = sscanf(line, "%63s %63s %1s", user, key, extra);
        if (fields <= 0 || user[0] == '#') /* a comment line ('#' is also a Z85 character: only at a line's start) */
            continue;
        if (fields != 2 || !curve_key_valid(key)) {
            snprintf(err, err_size, "--curve-users %s:%d: not \"USER PUBLIC-KEY\" (a 40-character Z85 key)", path, n);
            r = -EINVAL;
        } else if (!(pw = getpwnam(user))) {
            snprintf(err, err_size, "--curve-users %s:%d: '%s' is not a user of this host", path, n, user);
            r = -EINVAL;
        } else {
            char *name = strdup(user), *old = strmap_get(&z->users, key); /* a key named twice: the last */
            uid_t *uid = strmap_get(&z->uids, user);
            if (!uid && (uid = malloc(sizeof(*uid))) && strmap_put(&z->uids, user, uid) < 0) {
                free(uid);
                uid = NULL;
            }
            if (uid)
                *uid = pw->pw_uid;
            if (!name || !uid || strmap_put(&z->users, key, name) < 0) {
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

/* One ZAP exchange: a client's key in, its user (or a refusal) out. */
static void answer(zap *z) {
    zap_request req;
    if (zap_request_read(z->socket, &req) < 0)
        return;
    const char *name = req.valid && req.key[0] ? strmap_get(&z->users, req.key) : NULL;
    if (name)
        zap_request_reply(z->socket, &req, "200", "OK", name);
    else if (req.key[0]) {
        log_warn("refused a CURVE client with key %s: not in --curve-users", req.key);
        zap_request_reply(z->socket, &req, "400", "unknown key", NULL);
    } else
        zap_request_reply(z->socket, &req, "400", "CURVE only", NULL);
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
        zap_free_maps(z);
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
    zap_free_maps(z);
    free(z);
}

int zap_user_uid(const zap *z, const char *user, uid_t *ret_uid) {
    const uid_t *uid = user[0] ? strmap_get(&z->uids, user) : NULL;
    if (!uid)
        return -ENOENT;
    *ret_uid = *uid;
    return 0;
}
