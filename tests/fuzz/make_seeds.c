/* Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/, committed): inputs in
 * each target's own format that reach past the first check, made with the code that makes
 * the real thing (wire_pack, checkpoint_write, zlib), so that they stay true to it.
 *   make_seeds CORPUS_DIR */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/wire.h"
#include "worker/libddp/comm.h"
#include "worker/trainer/checkpoint.h"

static const char *root;

typedef struct {
    uint8_t bytes[16384];
    size_t size;
} seed;

static void put(seed *s, const void *data, size_t n) {
    if (s->size + n > sizeof(s->bytes)) {
        fprintf(stderr, "make_seeds: a seed over %zu bytes\n", sizeof(s->bytes));
        exit(1);
    }
    memcpy(s->bytes + s->size, data, n);
    s->size += n;
}

static void put_byte(seed *s, uint8_t b) {
    put(s, &b, 1);
}

static void save(const char *target, const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) < 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* An envelope of type for job "fuzz", packed; its bytes at *ret (malloc'd). */
static size_t pack(Ddp__Envelope *env, uint8_t **ret) {
    zmq_msg_t m;
    if (wire_pack(env, &m) < 0)
        exit(1);
    size_t n = zmq_msg_size(&m);
    *ret = malloc(n);
    memcpy(*ret, zmq_msg_data(&m), n);
    zmq_msg_close(&m);
    return n;
}

typedef struct {
    uint8_t *env;
    size_t env_size;
    const void *payload;
    size_t payload_size;
} message;

/* The control messages of a ps job of two: join, heartbeat, barrier, the store, a status
 * request, a gradient push, a leave, for rank r. With rejoin, of a ddp job at generation 5
 * instead, whose members rejoin a ddpd that restarted, bringing a store key. */
static size_t control_messages(int r, bool rejoin, message *out) {
    uint64_t gen = rejoin ? 5 : 1;
    static const uint64_t buckets[] = {4};
    static const float grads[4] = {1, 2, 3, 4};
    size_t n = 0;
    Ddp__Envelope env;
    Ddp__Join join = DDP__JOIN__INIT;
    join.world_size = 2;
    join.rank = r;
    join.mode = "ps";
    join.pid = 1000u + (unsigned)r;
    join.host = "fuzzhost";
    join.data_endpoint = "tcp://127.0.0.1:40000";
    join.data_key = "Yne@$w-vo<fVvi]a<NY6T1ed:M$fCG*[IaLV{hID";
    join.ps_buckets = (uint64_t *)buckets;
    join.n_ps_buckets = 1;
    Ddp__StoreSet kept = DDP__STORE_SET__INIT, *kept_list[] = {&kept};
    if (rejoin) {
        join.mode = "ddp";
        join.n_ps_buckets = 0;
        join.generation = gen;
        join.barrier_round = 2;
        kept.key = "kept";
        kept.value = (ProtobufCBinaryData){4, (uint8_t *)"kept"};
        join.store = kept_list;
        join.n_store = 1;
    }
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, rejoin ? "fuzz-rejoin" : "fuzz", r, rejoin ? gen : 0, 1);
    env.join = &join;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__Heartbeat beat = DDP__HEARTBEAT__INIT;
    beat.interval_ms = 500;
    beat.liveness = 3;
    beat.step = 3;
    beat.waiting = 1;
    beat.waiting_on = 1 - r;
    beat.waiting_in = "all_reduce #1";
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 2);
    env.heartbeat = &beat;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__Barrier barrier = DDP__BARRIER__INIT;
    wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 3);
    env.barrier = &barrier;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__StoreSet set = DDP__STORE_SET__INIT;
    set.key = "k";
    set.value = (ProtobufCBinaryData){2, (uint8_t *)"v1"};
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_SET, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 4);
    env.store_set = &set;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__StoreWait wait = DDP__STORE_WAIT__INIT;
    char *keys[] = {"k", "never"};
    wait.keys = keys;
    wait.n_keys = 2;
    wait.timeout_ms = 50;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_WAIT, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 5);
    env.store_wait = &wait;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__StoreGet get = DDP__STORE_GET__INIT;
    get.key = "k";
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_GET, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 6);
    env.store_get = &get;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__StatusRequest status = DDP__STATUS_REQUEST__INIT;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, 7);
    env.status_request = &status;
    out[n].env_size = pack(&env, &out[n].env), n++;

    Ddp__GradPush push = DDP__GRAD_PUSH__INIT;
    push.bucket = 0;
    wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_PUSH, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 8);
    env.grad_push = &push;
    out[n].env_size = pack(&env, &out[n].env);
    out[n].payload = grads, out[n].payload_size = sizeof(grads), n++;

    Ddp__Leave leave = DDP__LEAVE__INIT;
    wire_envelope_init(&env, DDP__MSG_TYPE__LEAVE, rejoin ? "fuzz-rejoin" : "fuzz", r, gen, 9);
    env.leave = &leave;
    out[n].env_size = pack(&env, &out[n].env), n++;
    return n;
}

static void put_len12(seed *s, size_t n) { /* fuzz_ddpd's frame length: 12 bits */
    put_byte(s, (uint8_t)(n & 0xff));
    put_byte(s, (uint8_t)((n >> 8) & 0x0f));
}

static void ddpd_seed(bool rejoin, const char *name) {
    message m[2][16];
    size_t n = control_messages(0, rejoin, m[0]);
    control_messages(1, rejoin, m[1]);
    seed s = {.size = 0};
    for (size_t i = 0; i < n; i++)
        for (int r = 0; r < 2; r++) {
            put_byte(&s, (uint8_t)r);              /* the client */
            put_byte(&s, m[r][i].payload ? 1 : 0); /* frames - 1 */
            put_len12(&s, m[r][i].env_size);
            put(&s, m[r][i].env, m[r][i].env_size);
            if (m[r][i].payload) {
                put_len12(&s, m[r][i].payload_size);
                put(&s, m[r][i].payload, m[r][i].payload_size);
            }
        }
    save("fuzz_ddpd", name, s.bytes, s.size);
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < n; i++)
            free(m[r][i].env);
}

static void envelope_and_ddpd_seeds(void) {
    message m[16];
    size_t n = control_messages(0, false, m);
    for (size_t i = 0; i < n; i++) { /* fuzz_envelope: one message each */
        seed s = {.size = 0};
        put_byte(&s, m[i].payload ? 1 : 0); /* frames - 1 */
        if (m[i].payload) {
            put_byte(&s, (uint8_t)(m[i].env_size & 0xff));
            put_byte(&s, (uint8_t)(m[i].env_size >> 8));
            put(&s, m[i].env, m[i].env_size);
            put(&s, m[i].payload, m[i].payload_size);
        } else {
            put(&s, m[i].env, m[i].env_size);
        }
        char name[32];
        snprintf(name, sizeof(name), "message-%02zu", i);
        save("fuzz_envelope", name, s.bytes, s.size);
        free(m[i].env);
    }
    /* fuzz_ddpd: both ranks join (the job forms), then each message of each in turn; and
     * the members of a running job rejoining a ddpd that restarted, then going on */
    ddpd_seed(false, "ps-job");
    ddpd_seed(true, "rejoin");
}

/* fuzz_frame: a frame and the recv that takes it, a mismatched one, a stale one. */
static void frame_seeds(void) {
    seed s = {.size = 0};
    /* send: op, shape, kind - 1, dtype, op, src - 1, tag, root, seq, count, offset, n, how, payload */
    const uint8_t send[] = {1, 0, COLL_ALL_REDUCE - 1, DTYPE_F32, 0, 0, 0, 0, 1, 4, 0, 4, 0};
    put(&s, send, sizeof(send));
    const float payload[4] = {1, 2, 3, 4};
    put(&s, payload, sizeof(payload));
    /* recv: op, kind - 1, dtype, op, root, seq, count, src - 1, tag, offset, n */
    const uint8_t recv[] = {0, COLL_ALL_REDUCE - 1, DTYPE_F32, 0, 0, 1, 4, 0, 0, 0, 4};
    put(&s, recv, sizeof(recv));
    save("fuzz_frame", "take-one", s.bytes, s.size);
    const uint8_t mismatch[] = {0, COLL_BROADCAST - 1, DTYPE_F32, 0, 0, 1, 4, 0, 0, 0, 4};
    s.size = sizeof(send) + sizeof(payload);
    put(&s, mismatch, sizeof(mismatch));
    save("fuzz_frame", "mismatch", s.bytes, s.size);
}

static void idx_seeds(void) {
    uint8_t images[16 + 2 * 3 * 3] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3};
    for (size_t i = 16; i < sizeof(images); i++)
        images[i] = (uint8_t)(i * 7);
    save("fuzz_idx", "images", images, sizeof(images));
    const uint8_t labels[] = {0, 0, 8, 1, 0, 0, 0, 3, 1, 9, 0};
    save("fuzz_idx", "labels", labels, sizeof(labels));
    char path[600];
    snprintf(path, sizeof(path), "%s/fuzz_idx/images.gz", root);
    gzFile gz = gzopen(path, "wb");
    if (!gz || gzwrite(gz, images, sizeof(images)) != (int)sizeof(images) || gzclose(gz) != Z_OK)
        exit(1);
}

static void checkpoint_seeds(void) {
    char path[600], err[256];
    snprintf(path, sizeof(path), "%s/fuzz_checkpoint", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/fuzz_checkpoint/model-4-2-2", root);
    float params[16], velocity[16];
    for (int i = 0; i < 16; i++)
        params[i] = (float)i / 4, velocity[i] = (float)-i / 8;
    checkpoint_info info = {.model = "4-2-2",
                            .n_params = 16,
                            .step = 5,
                            .epoch = 1,
                            .step_in_epoch = 1,
                            .seed = 42,
                            .world_size = 2,
                            .global_batch = 8,
                            .has_velocity = 1,
                            .has_settings = true,
                            .sampler = "random",
                            .lr = 0.01,
                            .momentum = 0.5};
    unlink(path);
    if (checkpoint_write(path, &info, params, velocity, NULL, err, sizeof(err)) < 0) {
        fprintf(stderr, "make_seeds: %s\n", err);
        exit(1);
    }
}

static void config_seeds(void) {
    static const char *const texts[] = {
        "# ddpd's settings\nlisten = tcp://127.0.0.1:29500\nheartbeat-ms = 700 ; ms\n",
        "[ddpd]\nratio = 0.25\nlog-level = debug\njson = yes\n",
        "[other]\nlisten = x\n",
        "heartbeat_ms = 5\n",
        "bogus = 1\n",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "config-%zu", i);
        save("fuzz_config", name, texts[i], strlen(texts[i]));
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
        return 2;
    }
    root = argv[1];
    envelope_and_ddpd_seeds();
    frame_seeds();
    idx_seeds();
    checkpoint_seeds();
    config_seeds();
    return 0;
}
