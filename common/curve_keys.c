#include "common/curve_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

bool curve_key_valid(const char *s) {
    uint8_t raw[32];
    return s && strlen(s) == CURVE_KEY_Z85 - 1 && zmq_z85_decode(raw, s) != NULL;
}

static int on_pair(void *user, const char *section, const char *name, const char *value) {
    curve_keypair *k = user;
    if (section[0])
        return 0;
    char *dst = strcmp(name, "public") == 0 ? k->public_key : strcmp(name, "secret") == 0 ? k->secret_key : NULL;
    if (!dst || strlen(value) >= CURVE_KEY_Z85)
        return 0;
    memcpy(dst, value, strlen(value) + 1);
    return 1;
}

int curve_keypair_load(const char *path, curve_keypair *ret, char *err, size_t err_size) {
    *ret = (curve_keypair){0};
    struct stat st;
    if (stat(path, &st) < 0) {
        snprintf(err, err_size, "CURVE key file %s: %s", path, strerror(errno));
        return -errno;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
        snprintf(err, err_size, "CURVE key file %s: %s", path,
                 S_ISREG(st.st_mode) ? "other users may read it (chmod 600 it)" : "not a regular file");
        return -EPERM;
    }
    int line = ini_parse(path, on_pair, ret);
    if (line != 0) {
        snprintf(err, err_size, "CURVE key file %s:%d: not \"public = KEY\" or \"secret = KEY\"", path, line);
        return -EINVAL;
    }
    if (!curve_key_valid(ret->public_key) || !curve_key_valid(ret->secret_key)) {
        snprintf(err, err_size, "CURVE key file %s: needs a public and a secret key, 40 Z85 characters each", path);
        return -EINVAL;
    }
    char derived[CURVE_KEY_Z85];
    if (zmq_curve_public(derived, ret->secret_key) < 0 || strcmp(derived, ret->public_key) != 0) {
        snprintf(err, err_size, "CURVE key file %s: the public key is not the secret key's", path);
        return -EINVAL;
    }
    return 0;
}

int curve_keypair_generate(const char *path, curve_keypair *ret, char *err, size_t err_size) {
    if (zmq_curve_keypair(ret->public_key, ret->secret_key) < 0) {
        snprintf(err, err_size, "cannot make a CURVE key pair: %s (is libzmq built with CURVE?)",
                 zmq_strerror(zmq_errno()));
        return -ENOTSUP;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        int r = -errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, err_size, "%s: %s", path, strerror(-r));
        return r;
    }
    fprintf(f,
            "# a CURVE key pair for ddpd (ddpctl keygen): give others the public key only\npublic = %s\nsecret = %s\n",
            ret->public_key, ret->secret_key);
    if (fclose(f) != 0) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return -EIO;
    }
    return 0;
}

int curve_client_setup(void *socket, const char *server_key, const curve_keypair *own) {
    if (zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, server_key, CURVE_KEY_Z85) < 0 ||
        zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, own->public_key, CURVE_KEY_Z85) < 0 ||
        zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, own->secret_key, CURVE_KEY_Z85) < 0)
        return -errno;
    return 0;
}
