#include "common/wire.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/curve_keys.h"
#include "common/error.h"
#include "common/fd_socket.h"

/* Per message type: the body it must carry, whether it names a job, its payload frames. */
static const struct {
    const char *name;
    Ddp__Envelope__BodyCase body;
    bool needs_job;
    size_t payload_frames;
} wire_types[] = {
    [DDP__MSG_TYPE__JOIN] = {"join", DDP__ENVELOPE__BODY_JOIN, true},
    [DDP__MSG_TYPE__WELCOME] = {"welcome", DDP__ENVELOPE__BODY_WELCOME, true},
    [DDP__MSG_TYPE__REJECT] = {"reject", DDP__ENVELOPE__BODY_REJECT, false},
    [DDP__MSG_TYPE__HEARTBEAT] = {"heartbeat", DDP__ENVELOPE__BODY_HEARTBEAT, false},
    [DDP__MSG_TYPE__BARRIER] = {"barrier", DDP__ENVELOPE__BODY_BARRIER, true},
    [DDP__MSG_TYPE__STORE_SET] = {"store-set", DDP__ENVELOPE__BODY_STORE_SET, true},
    [DDP__MSG_TYPE__STORE_GET] = {"store-get", DDP__ENVELOPE__BODY_STORE_GET, true},
    [DDP__MSG_TYPE__STORE_WAIT] = {"store-wait", DDP__ENVELOPE__BODY_STORE_WAIT, true},
    [DDP__MSG_TYPE__STORE_VALUE] = {"store-value", DDP__ENVELOPE__BODY_STORE_VALUE, true},
    [DDP__MSG_TYPE__ABORT] = {"abort", DDP__ENVELOPE__BODY_ABORT, false},
    [DDP__MSG_TYPE__LEAVE] = {"leave", DDP__ENVELOPE__BODY_LEAVE, true},
    [DDP__MSG_TYPE__STATUS_REQUEST] = {"status-request", DDP__ENVELOPE__BODY_STATUS_REQUEST, false},
    [DDP__MSG_TYPE__STATUS_REPLY] = {"status-reply", DDP__ENVELOPE__BODY_STATUS_REPLY, false},
    [DDP__MSG_TYPE__ERROR] = {"error", DDP__ENVELOPE__BODY_ERROR, false},
    [DDP__MSG_TYPE__GRAD_PUSH] = {"grad-push", DDP__ENVELOPE__BODY_GRAD_PUSH, true, 1},
    [DDP__MSG_TYPE__GRAD_AVG] = {"grad-avg", DDP__ENVELOPE__BODY_GRAD_AVG, true, 1},
};
#define WIRE_N_TYPES (sizeof(wire_types) / sizeof(wire_types[0]))

const char *wire_type_name(int type) {
    if (type <= 0 || (size_t)type >= WIRE_N_TYPES)
        return "unknown";
    return wire_types[type].name;
}

int wire_socket_setup(void *socket, int64_t max_msg_bytes) {
    int linger = 0;
    if (zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger)) < 0)
        return -errno;
    if (zmq_setsockopt(socket, ZMQ_MAXMSGSIZE, &max_msg_bytes, sizeof(max_msg_bytes)) < 0)
        return -errno;
    return 0;
}

void wire_envelope_init(Ddp__Envelope *env, Ddp__MsgType type, const char *job, int32_t rank, uint64_t generation,
                        uint64_t seq) {
    ddp__envelope__init(env);
    env->version = DDP_PROTOCOL_VERSION;
    env->type = type;
    env->job = (char *)(job ? job : "");
    env->rank = rank;
    env->generation = generation;
    env->seq = seq;
    if (type > 0 && (size_t)type < WIRE_N_TYPES)
        env->body_case = wire_types[type].body;
}

static int wire_frame_init_plain(void *ctx, zmq_msg_t *msg, size_t size) {
    (void)ctx;
    return zmq_msg_init_size(msg, size) < 0 ? -ENOMEM : 0;
}

static const wire_frame_maker wire_plain_frames = {wire_frame_init_plain, NULL};

static int wire_pack_made(const Ddp__Envelope *env, const wire_frame_maker *maker, zmq_msg_t *ret_frame) {
    size_t size = ddp__envelope__get_packed_size(env);
    if (size > DDP_MAX_ENVELOPE_BYTES)
        return -EMSGSIZE;
    TRY(maker->init(maker->ctx, ret_frame, size));
    ddp__envelope__pack(env, zmq_msg_data(ret_frame));
    return 0;
}

int wire_pack(const Ddp__Envelope *env, zmq_msg_t *ret_frame) {
    return wire_pack_made(env, &wire_plain_frames, ret_frame);
}

size_t wire_message_bytes(const Ddp__Envelope *env, const wire_frame *payload, size_t n_payload) {
    size_t bytes = ddp__envelope__get_packed_size(env);
    for (size_t i = 0; i < n_payload; i++)
        bytes += payload[i].size;
    return bytes;
}

int wire_send_made(void *socket, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env,
                   const wire_frame *payload, size_t n_payload, const wire_frame_maker *maker) {
    if (n_payload > DDP_MAX_PAYLOAD_FRAMES)
        return -EMSGSIZE;
    zmq_msg_t frames[1 + DDP_MAX_PAYLOAD_FRAMES];
    size_t n_frames = 0;
    int r = wire_pack_made(env, maker, &frames[0]);
    for (n_frames = r == 0 ? 1 : 0; r == 0 && n_frames <= n_payload; n_frames++) {
        const wire_frame *p = &payload[n_frames - 1];
        if ((r = maker->init(maker->ctx, &frames[n_frames], p->size)) < 0)
            break;
        if (p->size)
            memcpy(zmq_msg_data(&frames[n_frames]), p->data, p->size);
    }
    /* ZeroMQ sends a multipart message atomically: nothing goes out unless all of it does.
     * Past the first part, a part is refused only for a closed socket or a signal (EINTR,
     * from the wait for ZeroMQ's commands): tried again, as a half-sent message would take
     * the next one's parts as its own. */
    size_t sent = 0;
    if (r == 0 && identity && zmq_send(socket, identity, identity_size, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        r = -errno;
    bool started = identity != NULL;
    for (; r == 0 && sent < n_frames; sent++) {
        int flags = (sent + 1 < n_frames ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT, e;
        while ((e = zmq_msg_send(&frames[sent], socket, flags)) < 0 && errno == EINTR && started)
            ;
        if (e < 0) {
            r = -errno;
            break;
        }
        started = true;
    }
    for (size_t i = sent; i < n_frames; i++) /* those ZeroMQ did not take */
        zmq_msg_close(&frames[i]);
    return r;
}

int wire_send(void *socket, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env,
              const wire_frame *payload, size_t n_payload) {
    return wire_send_made(socket, identity, identity_size, env, payload, n_payload, &wire_plain_frames);
}

static int wire_fail(wire_msg *msg, int err, const char *fmt, const char *detail) {
    snprintf(msg->error, sizeof(msg->error), fmt, detail);
    return err;
}

/* Reads and discards the rest of a multipart message. */
static void wire_drain(void *socket) {
    int more = 1;
    size_t more_size = sizeof(more);
    while (zmq_getsockopt(socket, ZMQ_RCVMORE, &more, &more_size) == 0 && more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, socket, 0) < 0) {
            zmq_msg_close(&m);
            return;
        }
        zmq_msg_close(&m);
    }
}

static bool wire_has_more(void *socket) {
    int more = 0;
    size_t more_size = sizeof(more);
    return zmq_getsockopt(socket, ZMQ_RCVMORE, &more, &more_size) == 0 && more;
}

/* The last ':' in [start, end), or NULL. */
static const char *colon_before(const char *start, const char *end) {
    while (end > start)
        if (*--end == ':')
            return end;
    return NULL;
}

/* The number in [p, end): all digits, at most UINT32_MAX. */
static bool parse_u32(const char *p, const char *end, uint32_t *ret) {
    uint64_t v = 0;
    if (p == end)
        return false;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9' || (v = v * 10 + (uint64_t)(*p - '0')) > UINT32_MAX)
            return false;
    }
    *ret = (uint32_t)v;
    return true;
}

int wire_peer_credentials(const wire_msg *msg, uint32_t *ret_uid, uint32_t *ret_pid) {
    return wire_address_credentials(msg->peer, ret_uid, ret_pid);
}

bool wire_peer_loopback(const wire_msg *msg) {
    return wire_address_loopback(msg->peer);
}

bool wire_address_loopback(const char *address) {
    return strncmp(address, "127.", 4) == 0 || strcmp(address, "::1") == 0 ||
           strncmp(address, "::ffff:127.", 11) == 0 || strcmp(address, "localhost") == 0;
}

int wire_address_credentials(const char *address, uint32_t *ret_uid, uint32_t *ret_pid) {
    /* "HOST:UID:GID:PID": the last three fields */
    const char *end = address + strlen(address);
    const char *before_pid = colon_before(address, end);
    const char *before_gid = before_pid ? colon_before(address, before_pid) : NULL;
    const char *before_uid = before_gid ? colon_before(address, before_gid) : NULL;
    uint32_t gid;
    if (!before_uid || !parse_u32(before_uid + 1, before_gid, ret_uid) ||
        !parse_u32(before_gid + 1, before_pid, &gid) || !parse_u32(before_pid + 1, end, ret_pid))
        return -ENOENT;
    return 0;
}

int wire_recv(void *socket, bool router, int flags, wire_msg *msg) {
    msg->identity_size = 0;
    msg->env = NULL;
    msg->n_payload = 0;
    msg->error[0] = '\0';

    zmq_msg_t frame;
    zmq_msg_init(&frame);
    if (zmq_msg_recv(&frame, socket, flags) < 0) {
        int r = -errno;
        zmq_msg_close(&frame);
        return r;
    }
    msg->peer[0] = msg->user[0] = '\0';
    if (router) {
        /* ROUTER prepends the routing id; it is at most 255 bytes by construction. */
        msg->identity_size = zmq_msg_size(&frame);
        if (msg->identity_size > WIRE_MAX_IDENTITY)
            msg->identity_size = WIRE_MAX_IDENTITY;
        memcpy(msg->identity, zmq_msg_data(&frame), msg->identity_size);
        zmq_msg_close(&frame);
        if (!wire_has_more(socket))
            return wire_fail(msg, -EBADMSG, "%s", "empty message: no envelope frame");
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, socket, 0) < 0) {
            int r = -errno;
            zmq_msg_close(&frame);
            return r;
        }
        /* the connection's metadata rides on the peer's own frames (the routing id that
         * ROUTER makes up after a poll carries none) */
        const char *peer = zmq_msg_gets(&frame, "Peer-Address"), *user = zmq_msg_gets(&frame, "User-Id");
        snprintf(msg->peer, sizeof(msg->peer), "%s", peer ? peer : "");
        snprintf(msg->user, sizeof(msg->user), "%s", user ? user : "");
    }

    /* Count and size every frame before anything is decoded. */
    size_t env_size = zmq_msg_size(&frame);
    if (env_size > DDP_MAX_ENVELOPE_BYTES) {
        zmq_msg_close(&frame);
        wire_drain(socket);
        snprintf(msg->error, sizeof(msg->error), "envelope of %zu bytes exceeds the limit of %u", env_size,
                 (unsigned)DDP_MAX_ENVELOPE_BYTES);
        return -EMSGSIZE;
    }
    while (wire_has_more(socket)) {
        if (msg->n_payload == DDP_MAX_PAYLOAD_FRAMES) {
            zmq_msg_close(&frame);
            wire_drain(socket);
            wire_msg_close(msg);
            snprintf(msg->error, sizeof(msg->error), "more than %d payload frames", DDP_MAX_PAYLOAD_FRAMES);
            return -EMSGSIZE;
        }
        zmq_msg_t *p = &msg->payload[msg->n_payload];
        zmq_msg_init(p);
        if (zmq_msg_recv(p, socket, 0) < 0) {
            int r = -errno;
            zmq_msg_close(p);
            zmq_msg_close(&frame);
            wire_msg_close(msg);
            return r;
        }
        msg->n_payload++;
    }

    if (env_size == 0) { /* it would decode as all defaults: call it what it is */
        zmq_msg_close(&frame);
        wire_msg_close(msg);
        return wire_fail(msg, -EBADMSG, "%s", "empty envelope frame");
    }
    msg->env = ddp__envelope__unpack(NULL, env_size, zmq_msg_data(&frame));
    zmq_msg_close(&frame);
    if (!msg->env) {
        wire_msg_close(msg);
        return wire_fail(msg, -EBADMSG, "%s", "the envelope is not a valid protobuf message");
    }
    return wire_validate(msg->env, msg->n_payload, msg->error, sizeof(msg->error));
}

void wire_msg_close(wire_msg *msg) {
    for (size_t i = 0; i < msg->n_payload; i++)
        zmq_msg_close(&msg->payload[i]);
    msg->n_payload = 0;
    if (msg->env)
        ddp__envelope__free_unpacked(msg->env, NULL);
    msg->env = NULL;
}

int wire_endpoint_check(const char *ep, bool wildcard_port, char *err, size_t err_size) {
    if (strncmp(ep, "ipc://", 6) == 0) {
        size_t n = strlen(ep + 6);
        if (n == 0 || n >= 108) { /* sun_path */
            snprintf(err, err_size, "'%.64s': an ipc:// path is 1 to 107 bytes", ep);
            return -EINVAL;
        }
        return 0;
    }
    if (strncmp(ep, "tcp://", 6) != 0) {
        snprintf(err, err_size, "'%.64s': use tcp://HOST:PORT or ipc://PATH", ep);
        return -EINVAL;
    }
    const char *host = ep + 6, *colon = strrchr(host, ':');
    bool v6 = host[0] == '[';
    if (!colon || colon == host || (v6 && colon[-1] != ']')) {
        snprintf(err, err_size, "'%.64s': no port (tcp://HOST:PORT)", ep);
        return -EINVAL;
    }
    const char *port = colon + 1;
    if (wildcard_port && strcmp(port, "*") == 0)
        return 0;
    size_t digits = strspn(port, "0123456789");
    long value = digits && digits <= 5 && !port[digits] ? strtol(port, NULL, 10) : -1;
    if (value < 1 || value > 65535) {
        snprintf(err, err_size, "'%.64s': the port is 1 to 65535%s", ep, wildcard_port ? ", or *" : "");
        return -EINVAL;
    }
    return 0;
}

bool wire_name_valid(const char *s, size_t max) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                  c == '-';
        if (!ok || n >= max)
            return false;
    }
    return n > 0;
}

/* Printable ASCII of at most max bytes (hosts, endpoints, keys, reasons). */
static bool wire_text_valid(const char *s, size_t max, bool allow_empty) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!wire_printable(s[n]) || n >= max)
            return false;
    return allow_empty || n > 0;
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            snprintf(err, err_size, __VA_ARGS__);                                                                      \
            return -EPROTO;                                                                                            \
        }                                                                                                              \
    } while (0)

static int wire_validate_body(const Ddp__Envelope *env, char *err, size_t err_size) {
    switch (env->body_case) {
    case DDP__ENVELOPE__BODY_JOIN: {
        const Ddp__Join *j = env->join;
        CHECK(j->world_size >= 1 && j->world_size <= DDP_MAX_WORLD_SIZE, "join: world size %u not in [1, %d]",
              j->world_size, DDP_MAX_WORLD_SIZE);
        CHECK(j->rank >= -1 && j->rank < (int32_t)j->world_size, "join: rank %d not in [-1, %u)", j->rank,
              j->world_size);
        CHECK(!j->mode[0] || wire_name_valid(j->mode, DDP_MAX_MODE), "join: invalid mode");
        CHECK(wire_text_valid(j->host, DDP_MAX_HOST, false), "join: invalid host");
        CHECK(wire_text_valid(j->data_endpoint, DDP_MAX_ENDPOINT, true), "join: invalid data endpoint");
        CHECK(!j->data_key[0] || curve_key_valid(j->data_key), "join: invalid data key");
        CHECK(j->n_ps_buckets <= DDP_MAX_PS_BUCKETS, "join: %zu ps buckets exceed %d", j->n_ps_buckets,
              DDP_MAX_PS_BUCKETS);
        uint64_t total = 0;
        for (size_t i = 0; i < j->n_ps_buckets; i++) {
            CHECK(j->ps_buckets[i] >= 1 && j->ps_buckets[i] <= DDP_MAX_PS_BUCKET_ELEMENTS,
                  "join: ps bucket %zu of %llu elements not in [1, %u]", i, (unsigned long long)j->ps_buckets[i],
                  DDP_MAX_PS_BUCKET_ELEMENTS);
            total += j->ps_buckets[i];
        }
        CHECK(total <= DDP_MAX_PS_ELEMENTS, "join: ps buckets of %llu elements in all exceed %u",
              (unsigned long long)total, DDP_MAX_PS_ELEMENTS);
        CHECK(strcmp(j->mode, "ps") != 0 || j->n_ps_buckets > 0, "join: ps mode without a bucket layout");
        CHECK(!j->generation || j->rank >= 0, "rejoin: without a rank");
        CHECK(j->n_ps_steps == 0 || j->n_ps_steps == j->n_ps_buckets, "rejoin: %zu ps steps for %zu buckets",
              j->n_ps_steps, j->n_ps_buckets);
        CHECK(j->n_store <= DDP_MAX_STORE_KEYS, "rejoin: %zu store keys exceed %d", j->n_store, DDP_MAX_STORE_KEYS);
        CHECK(j->n_left == 0 || j->generation, "join: ranks that left, in a first join");
        CHECK(j->n_left < j->world_size, "rejoin: %zu ranks left of a world of %u", j->n_left, j->world_size);
        for (size_t i = 0; i < j->n_left; i++)
            CHECK(j->left[i] < j->world_size && (int32_t)j->left[i] != j->rank,
                  "rejoin: rank %u said to have left, in a world of %u, by rank %d", j->left[i], j->world_size,
                  j->rank);
        for (size_t i = 0; i < j->n_store; i++) {
            CHECK(wire_text_valid(j->store[i]->key, DDP_MAX_STORE_KEY, false), "rejoin: invalid store key");
            CHECK(j->store[i]->value.len <= DDP_MAX_STORE_VALUE, "rejoin: a store value of %zu bytes exceeds %u",
                  j->store[i]->value.len, (unsigned)DDP_MAX_STORE_VALUE);
        }
        return 0;
    }
    case DDP__ENVELOPE__BODY_WELCOME: {
        const Ddp__Welcome *w = env->welcome;
        CHECK(w->world_size >= 1 && w->world_size <= DDP_MAX_WORLD_SIZE, "welcome: world size %u not in [1, %d]",
              w->world_size, DDP_MAX_WORLD_SIZE);
        CHECK(w->rank < w->world_size, "welcome: rank %u not below world size %u", w->rank, w->world_size);
        CHECK(w->n_endpoints == w->world_size, "welcome: %zu endpoints for world size %u", w->n_endpoints,
              w->world_size);
        for (size_t i = 0; i < w->n_endpoints; i++)
            CHECK(wire_text_valid(w->endpoints[i], DDP_MAX_ENDPOINT, true), "welcome: invalid endpoint %zu", i);
        CHECK(w->n_pids == w->world_size && w->n_hosts == w->world_size,
              "welcome: %zu pids and %zu hosts for world size %u", w->n_pids, w->n_hosts, w->world_size);
        for (size_t i = 0; i < w->n_hosts; i++)
            CHECK(wire_text_valid(w->hosts[i], DDP_MAX_HOST, false), "welcome: invalid host %zu", i);
        CHECK(w->n_data_keys == w->world_size, "welcome: %zu data keys for world size %u", w->n_data_keys,
              w->world_size);
        for (size_t i = 0; i < w->n_data_keys; i++)
            CHECK(!w->data_keys[i][0] || curve_key_valid(w->data_keys[i]), "welcome: invalid data key %zu", i);
        CHECK(wire_text_valid(w->ps_socket, FD_SOCKET_NAME_BYTES - 1, true), "welcome: invalid ps socket");
        CHECK(w->heartbeat_ms >= DDP_MIN_HEARTBEAT_MS && w->heartbeat_ms <= DDP_MAX_HEARTBEAT_MS,
              "welcome: heartbeat %u ms out of range", w->heartbeat_ms);
        CHECK(w->liveness >= 1 && w->liveness <= DDP_MAX_LIVENESS, "welcome: liveness %u out of range", w->liveness);
        return 0;
    }
    case DDP__ENVELOPE__BODY_REJECT:
        CHECK(env->reject->code < 0, "reject: code %d is not a negative error", env->reject->code);
        CHECK(wire_text_valid(env->reject->reason, DDP_MAX_REASON, false), "reject: invalid reason");
        return 0;
    case DDP__ENVELOPE__BODY_HEARTBEAT:
        CHECK(env->heartbeat->interval_ms >= DDP_MIN_HEARTBEAT_MS &&
                  env->heartbeat->interval_ms <= DDP_MAX_HEARTBEAT_MS,
              "heartbeat: interval %u ms out of range", env->heartbeat->interval_ms);
        CHECK(env->heartbeat->liveness >= 1 && env->heartbeat->liveness <= DDP_MAX_LIVENESS,
              "heartbeat: liveness %u out of range", env->heartbeat->liveness);
        CHECK(env->heartbeat->waiting_on >= -1 && env->heartbeat->waiting_on < DDP_MAX_WORLD_SIZE,
              "heartbeat: waiting on rank %d out of range", env->heartbeat->waiting_on);
        CHECK(env->heartbeat->n_left <= DDP_MAX_WORLD_SIZE, "heartbeat: %zu ranks left", env->heartbeat->n_left);
        for (size_t i = 0; i < env->heartbeat->n_left; i++)
            CHECK(env->heartbeat->left[i] < DDP_MAX_WORLD_SIZE, "heartbeat: rank %u out of range",
                  env->heartbeat->left[i]);
        CHECK(env->heartbeat->samples_per_s >= 0 && env->heartbeat->samples_per_s < 1e15,
              "heartbeat: samples/s out of range");
        CHECK(wire_text_valid(env->heartbeat->waiting_in, 64, true), "heartbeat: invalid waiting_in");
        return 0;
    case DDP__ENVELOPE__BODY_BARRIER:
        return 0;
    case DDP__ENVELOPE__BODY_STORE_SET:
        CHECK(wire_text_valid(env->store_set->key, DDP_MAX_STORE_KEY, false), "store-set: invalid key");
        CHECK(env->store_set->value.len <= DDP_MAX_STORE_VALUE, "store-set: value of %zu bytes exceeds %u",
              env->store_set->value.len, (unsigned)DDP_MAX_STORE_VALUE);
        return 0;
    case DDP__ENVELOPE__BODY_STORE_GET:
        CHECK(wire_text_valid(env->store_get->key, DDP_MAX_STORE_KEY, false), "store-get: invalid key");
        return 0;
    case DDP__ENVELOPE__BODY_STORE_WAIT: {
        const Ddp__StoreWait *w = env->store_wait;
        CHECK(w->n_keys >= 1 && w->n_keys <= DDP_MAX_STORE_WAIT_KEYS, "store-wait: %zu keys not in [1, %d]", w->n_keys,
              DDP_MAX_STORE_WAIT_KEYS);
        for (size_t i = 0; i < w->n_keys; i++)
            CHECK(wire_text_valid(w->keys[i], DDP_MAX_STORE_KEY, false), "store-wait: invalid key %zu", i);
        CHECK(w->timeout_ms <= DDP_MAX_TIMEOUT_MS, "store-wait: timeout %u ms too long", w->timeout_ms);
        return 0;
    }
    case DDP__ENVELOPE__BODY_STORE_VALUE:
        CHECK(wire_text_valid(env->store_value->key, DDP_MAX_STORE_KEY, false), "store-value: invalid key");
        CHECK(env->store_value->value.len <= DDP_MAX_STORE_VALUE, "store-value: value too large");
        return 0;
    case DDP__ENVELOPE__BODY_ABORT:
        CHECK(env->abort->rank >= -1 && env->abort->rank < DDP_MAX_WORLD_SIZE, "abort: rank %d out of range",
              env->abort->rank);
        CHECK(wire_text_valid(env->abort->host, DDP_MAX_HOST, true), "abort: invalid host");
        CHECK(wire_text_valid(env->abort->reason, DDP_MAX_REASON, false), "abort: invalid reason");
        CHECK(wire_text_valid(env->abort->owner, 64, true), "abort: invalid owner");
        CHECK(env->abort->code < 0, "abort: code %d is not a negative error", env->abort->code);
        return 0;
    case DDP__ENVELOPE__BODY_LEAVE:
    case DDP__ENVELOPE__BODY_STATUS_REQUEST:
        return 0;
    case DDP__ENVELOPE__BODY_STATUS_REPLY: {
        const Ddp__StatusReply *s = env->status_reply;
        CHECK(wire_text_valid(s->version, 32, false), "status: invalid version");
        CHECK(s->n_jobs <= DDP_MAX_JOBS, "status: %zu jobs exceed %d", s->n_jobs, DDP_MAX_JOBS);
        for (size_t i = 0; i < s->n_jobs; i++) {
            const Ddp__JobStatus *j = s->jobs[i];
            CHECK(wire_name_valid(j->name, DDP_MAX_JOB_NAME), "status: invalid job name");
            CHECK(strcmp(j->state, "forming") == 0 || strcmp(j->state, "running") == 0 ||
                      strcmp(j->state, "recovering") == 0,
                  "status: invalid job state");
            CHECK(!j->mode[0] || wire_name_valid(j->mode, DDP_MAX_MODE), "status: invalid mode");
            CHECK(j->world_size >= 1 && j->world_size <= DDP_MAX_WORLD_SIZE, "status: world size %u out of range",
                  j->world_size);
            CHECK(j->n_members <= j->world_size, "status: %zu members for world size %u", j->n_members, j->world_size);
            for (size_t k = 0; k < j->n_members; k++) {
                const Ddp__MemberStatus *m = j->members[k];
                CHECK(m->rank >= -1 && m->rank < (int32_t)j->world_size, "status: member rank %d out of range",
                      m->rank);
                CHECK(m->waiting_on >= -1 && m->waiting_on < (int32_t)j->world_size && m->samples_per_s >= 0 &&
                          m->samples_per_s < 1e15 && wire_text_valid(m->waiting_in, 64, true) &&
                          wire_text_valid(m->stalled, 32, true),
                      "status: invalid progress of a member");
                CHECK(wire_text_valid(m->host, DDP_MAX_HOST, true) &&
                          wire_text_valid(m->endpoint, DDP_MAX_ENDPOINT, true),
                      "status: invalid member");
            }
        }
        return 0;
    }
    case DDP__ENVELOPE__BODY_GRAD_PUSH:
        CHECK(env->grad_push->bucket < DDP_MAX_PS_BUCKETS, "grad-push: bucket %u out of range", env->grad_push->bucket);
        return 0;
    case DDP__ENVELOPE__BODY_GRAD_AVG:
        CHECK(env->grad_avg->bucket < DDP_MAX_PS_BUCKETS, "grad-avg: bucket %u out of range", env->grad_avg->bucket);
        return 0;
    case DDP__ENVELOPE__BODY_ERROR:
        CHECK(env->error->code < 0, "error: code %d is not a negative error", env->error->code);
        CHECK(wire_text_valid(env->error->message, DDP_MAX_REASON, false), "error: invalid message");
        return 0;
    default:
        CHECK(false, "no body");
    }
}

int wire_validate(const Ddp__Envelope *env, size_t n_payload, char *err, size_t err_size) {
    if (env->version != DDP_PROTOCOL_VERSION) {
        snprintf(err, err_size, "protocol version %u, this side speaks %u", env->version, DDP_PROTOCOL_VERSION);
        return -EPROTONOSUPPORT;
    }
    CHECK(env->type > 0 && (size_t)env->type < WIRE_N_TYPES, "unknown message type %d", (int)env->type);
    CHECK(env->body_case == wire_types[env->type].body, "%s message carries the wrong body",
          wire_types[env->type].name);
    if (wire_types[env->type].needs_job || env->job[0])
        CHECK(wire_name_valid(env->job, DDP_MAX_JOB_NAME), "%s: invalid job name (1-%d of [A-Za-z0-9._-])",
              wire_types[env->type].name, DDP_MAX_JOB_NAME);
    CHECK(env->rank >= -1 && env->rank < DDP_MAX_WORLD_SIZE, "rank %d out of range", env->rank);
    size_t frames = wire_types[env->type].payload_frames;
    if ((env->type == DDP__MSG_TYPE__GRAD_PUSH && env->grad_push->shared) ||
        (env->type == DDP__MSG_TYPE__GRAD_AVG && env->grad_avg->shared))
        frames = 0; /* the gradients are in shared memory */
    CHECK(n_payload == frames, "%s message with %zu payload frames, not %zu", wire_types[env->type].name, n_payload,
          frames);
    return wire_validate_body(env, err, err_size);
}
