#include "server/server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/curve_keys.h"
#include "common/data_plane.h"
#include "common/error.h"
#include "common/fd_passed.h"
#include "common/process_state.h"
#include "server/generation_file.h"
#include "server/prometheus.h"
#include "server/user_directory.h"
#include "server/zap.h"

#define SERVER_DISPATCH_BATCH 1024 /* messages per dispatch, so the tick is never starved */
#define SERVER_GONE_CONFIRM_MS 100 /* a gone member's last messages get this long to be read */
/* The user directory (user_directory.h): how long the loop waits, once, for a name it has
 * not seen (a tenth of the default heartbeat), and how long an answer serves before it is
 * asked again in the background. */
#define SERVER_USER_LOOKUP_WAIT_MS 50
#define SERVER_USER_LOOKUP_TTL_MS 60000

/* ---- sending ---------------------------------------------------------------------- */

static void server_reply_refused(server *s, const uint8_t *identity, size_t identity_size, Ddp__MsgType type,
                                 size_t queued);

/* Sends a reply charged to its connection's budget (server/reply_budget.h), raised by
 * extra bytes (a ps member's round of averages). */
static void server_send_within(server *s, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env,
                               const wire_frame *payload, size_t n_payload, size_t extra) {
    size_t queued = 0;
    int r =
        reply_budgets_send(&s->replies, s->router, identity, identity_size, env, payload, n_payload, extra, &queued);
    if (r == -ENOBUFS)
        server_reply_refused(s, identity, identity_size, env->type, queued);
    else if (r < 0)
        log_debug("could not send %s: %s", wire_type_name(env->type), error_string(r));
}

static void server_send(server *s, const uint8_t *identity, size_t identity_size, const Ddp__Envelope *env) {
    server_send_within(s, identity, identity_size, env, NULL, 0, 0);
}

/* Sends a frame made by wire_pack (and closes it): one message for many members. */
static void server_send_packed(server *s, const uint8_t *identity, size_t identity_size, zmq_msg_t *frame) {
    int e = zmq_send(s->router, identity, identity_size, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    if (e >= 0) /* the identity went: a signal must not leave the message half sent (wire.c) */
        while ((e = zmq_msg_send(frame, s->router, ZMQ_DONTWAIT)) < 0 && errno == EINTR)
            ;
    if (e < 0) {
        log_debug("could not send a packed message: %s", zmq_strerror(errno));
        zmq_msg_close(frame);
    }
}

static void server_send_error(server *s, const wire_msg *msg, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void server_send_error(server *s, const wire_msg *msg, int code, const char *fmt, ...) {
    char text[DDP_MAX_REASON];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    Ddp__Error body = DDP__ERROR__INIT;
    body.code = code;
    body.message = text;
    Ddp__Envelope env;
    const char *job_name = msg->env && wire_name_valid(msg->env->job, DDP_MAX_JOB_NAME) ? msg->env->job : "";
    wire_envelope_init(&env, DDP__MSG_TYPE__ERROR, job_name, -1, 0, msg->env ? msg->env->seq : 0);
    env.error = &body;
    server_send(s, msg->identity, msg->identity_size, &env);
}

static void server_send_reject(server *s, const uint8_t *identity, size_t identity_size, const char *job_name,
                               uint64_t seq, int code, const char *reason) {
    Ddp__Reject body = DDP__REJECT__INIT;
    body.code = code;
    body.reason = (char *)reason;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__REJECT, job_name, -1, 0, seq);
    env.reject = &body;
    server_send(s, identity, identity_size, &env);
}

/* ddpd's heartbeat to one member of j (only), or to each that has not left: one message
 * made once, so that a tick costs linear time in the members. */
static void server_send_heartbeats(server *s, const job *j, const job_member *only, bool stopping) {
    Ddp__Heartbeat body = DDP__HEARTBEAT__INIT;
    body.stopping = stopping;
    body.interval_ms = (uint32_t)s->opts.heartbeat_ms;
    body.liveness = (uint32_t)s->opts.liveness;
    /* for members on this host (a Unix socket, loopback TCP), who can see it in /proc */
    body.coordinator_pid = (uint32_t)getpid();
    body.instance = s->instance;
    body.stall_timeout_ms = (uint32_t)s->opts.stall_timeout * 1000u;
    uint32_t left[DDP_MAX_WORLD_SIZE];
    for (size_t i = 0; j->state == JOB_RUNNING && i < j->n_members; i++)
        if (j->members[i].left)
            left[body.n_left++] = (uint32_t)j->members[i].rank;
    body.left = left;
    int32_t *from = NULL; /* a recovered ps job's averages to be given back, until they are */
    if (j->n_ps_layout && j->state == JOB_RUNNING && !j->recovering && ps_awaits_average(&j->ps) &&
        (from = malloc(j->ps.n_buckets * sizeof(*from)))) {
        for (size_t b = 0; b < j->ps.n_buckets; b++)
            from[b] = j->ps.buckets[b].average_from;
        body.ps_average_from = from;
        body.n_ps_average_from = j->ps.n_buckets;
    }
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, j->name, -1, j->generation, 0);
    env.heartbeat = &body;
    zmq_msg_t packed;
    int packed_r = wire_pack(&env, &packed);
    free(from);
    if (packed_r < 0)
        return;
    for (size_t i = 0; i < j->n_members; i++) {
        const job_member *m = &j->members[i];
        if ((only && m != only) || (!only && m->left))
            continue;
        zmq_msg_t copy;
        zmq_msg_init(&copy);
        zmq_msg_copy(&copy, &packed);
        server_send_packed(s, m->identity, m->identity_size, &copy);
    }
    zmq_msg_close(&packed);
}

/* ---- jobs ------------------------------------------------------------------------- */

/* ---- who asks ------------------------------------------------------------------------- */

/* The uid of the user who sent msg, as the kernel says (ddpd bound to ipc://) or as the
 * CURVE users file does; -1 when ddpd cannot tell (a TCP client): such clients share one
 * namespace of their own. */
static int64_t server_peer_uid(const server *s, const wire_msg *msg) {
    uint32_t uid, pid;
    if (s->zap) { /* CURVE: the user the ZAP handler found for the client's key */
        uid_t user_uid;
        return zap_user_uid(s->zap, msg->user, &user_uid) == 0 ? (int64_t)user_uid : -1;
    }
    return s->local && wire_peer_credentials(msg, &uid, &pid) == 0 ? (int64_t)uid : -1;
}

/* Who sent msg, as a name for the reply budgets' shares (no lookup: for every message). */
static void server_peer_account(const server *s, const wire_msg *msg, char *buf, size_t size) {
    uint32_t uid, pid;
    if (s->zap)
        snprintf(buf, size, "curve %s", msg->user);
    else if (s->local && wire_peer_credentials(msg, &uid, &pid) == 0)
        snprintf(buf, size, "uid %u", uid);
    else
        snprintf(buf, size, "tcp");
}

/* root, or a member of the operator group: sees and aborts every job. 1 or 0, or
 * -ETIMEDOUT while the user directory has not answered yet. */
static int server_privileged(const server *s, int64_t uid) {
    if (uid == 0)
        return 1;
    if (uid < 0 || !s->opts.operator_group)
        return 0;
    int r = user_directory_in_group(s->users, (uid_t)uid, s->opts.operator_group); /* failures: logged there */
    return r == -ETIMEDOUT ? r : r > 0;
}

/* "root", "uid 1234" (no such user, or no answer yet), or "" for a TCP client: for
 * refusals and ddpctl status. */
static void server_user_name(const server *s, int64_t uid, char *buf, size_t size) {
    if (uid < 0)
        buf[0] = '\0';
    else if (user_directory_name(s->users, (uid_t)uid, buf, size) < 0)
        snprintf(buf, size, "uid %lld", (long long)uid);
}

/* The job name of owner: jobs of different users never collide, whatever their names. */
static job *server_find_job(server *s, const char *name, int64_t owner) {
    for (size_t i = 0; i < s->n_jobs; i++)
        if (s->jobs[i]->owner == owner && strcmp(s->jobs[i]->name, name) == 0)
            return s->jobs[i];
    return NULL;
}

/* ---- quotas: what one user's jobs hold together ----------------------------------- */

typedef struct {
    size_t jobs, members, waits;
    double store_mb, ps_mb;
} user_usage;

/* What ddpd holds for a ps job: every rank's push and the average, per bucket. */
static double job_ps_mb(uint64_t layout_floats, uint32_t world_size) {
    return (double)layout_floats * sizeof(float) * (world_size + 1.0) / (1 << 20);
}

static uint64_t layout_floats(const uint64_t *layout, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += layout[i];
    return sum;
}

static user_usage server_usage(const server *s, int64_t owner) {
    user_usage u = {0};
    for (size_t i = 0; i < s->n_jobs; i++) {
        const job *j = s->jobs[i];
        if (j->owner != owner)
            continue;
        u.jobs++;
        u.members += j->n_members;
        u.waits += j->waits.n;
        u.store_mb += (double)j->store.bytes / (1 << 20);
        u.ps_mb += job_ps_mb(layout_floats(j->ps_layout, j->n_ps_layout), j->world_size);
    }
    return u;
}

/* "user root's jobs" or "TCP clients' jobs": whose quota it is. */
static void server_quota_holder(const server *s, int64_t owner, char *buf, size_t size) {
    char name[64];
    server_user_name(s, owner, name, sizeof(name));
    if (name[0])
        snprintf(buf, size, "user %s's jobs", name);
    else
        snprintf(buf, size, "TCP clients' jobs");
}

/* Another user's job of that name, when the asker has none (for the refusal). */
static job *server_find_any_job(server *s, const char *name) {
    for (size_t i = 0; i < s->n_jobs; i++)
        if (strcmp(s->jobs[i]->name, name) == 0)
            return s->jobs[i];
    return NULL;
}

static void server_remove_job(server *s, job *j) {
    for (size_t i = 0; i < s->n_jobs; i++)
        if (s->jobs[i] == j) {
            memmove(&s->jobs[i], &s->jobs[i + 1], (s->n_jobs - i - 1) * sizeof(job *));
            s->n_jobs--;
            break;
        }
    job_free(j);
}

/* Ends a running job: every member still in it hears why. culprit < 0: ddpd's own reason. */
static void server_abort_job(server *s, job *j, ssize_t culprit, int code, const char *reason) {
    Ddp__Abort body = DDP__ABORT__INIT;
    body.code = code;
    body.rank = -1;
    body.host = (char *)"";
    body.reason = (char *)reason;
    if (culprit >= 0) {
        body.rank = j->members[culprit].rank;
        body.pid = j->members[culprit].pid;
        body.host = j->members[culprit].host;
    }
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ABORT, j->name, -1, j->generation, 0);
    env.abort = &body;
    for (size_t i = 0; i < j->n_members; i++)
        if ((ssize_t)i != culprit && !j->members[i].left)
            server_send(s, j->members[i].identity, j->members[i].identity_size, &env);
    log_warn("job '%s' (generation %llu) aborted: %s", j->name, (unsigned long long)j->generation, reason);
    ended_jobs_add(&s->ended, j, code, reason, clock_now_ms());
    s->aborts++;
    server_remove_job(s, j);
}

/* Takes generation as given (a rejoin's, or the next), never going back, and keeps the
 * state directory ahead of it so that a restarted ddpd does not go back either. The file
 * is written a block of generations ahead: a write (and its two fsyncs, on ddpd's loop)
 * per block of jobs, not per job; a restart skips what is left of the block. */
#define GENERATION_BLOCK 1024
static void server_note_generation(server *s, uint64_t generation) {
    if (generation <= s->last_generation)
        return;
    s->last_generation = generation;
    if (!s->opts.state_dir || generation <= s->saved_generation)
        return;
    char err[256];
    uint64_t ahead = generation + GENERATION_BLOCK;
    if (generation_save(s->opts.state_dir, ahead, err, sizeof(err)) < 0)
        log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN, "%s: a restarted ddpd may give generation %llu again", err,
                        (unsigned long long)generation);
    else
        s->saved_generation = ahead;
}

static void server_form_job(server *s, job *j) {
    server_note_generation(s, s->last_generation + 1);
    if (job_form(j, s->last_generation) < 0) {
        server_abort_job(s, j, -1, -ENOMEM, "ddpd is out of memory for the job's gradient buckets");
        return;
    }
    char *endpoints[DDP_MAX_WORLD_SIZE], *hosts[DDP_MAX_WORLD_SIZE], *keys[DDP_MAX_WORLD_SIZE];
    uint32_t pids[DDP_MAX_WORLD_SIZE];
    for (size_t i = 0; i < j->n_members; i++) {
        endpoints[i] = j->members[i].endpoint;
        keys[i] = j->members[i].data_key;
        hosts[i] = j->members[i].host;
        pids[i] = j->members[i].pid;
    }
    Ddp__Welcome body = DDP__WELCOME__INIT;
    body.world_size = j->world_size;
    body.generation = j->generation;
    body.n_endpoints = body.n_hosts = body.n_pids = body.n_data_keys = j->n_members;
    body.endpoints = endpoints;
    body.data_keys = keys;
    body.hosts = hosts;
    body.pids = pids;
    body.heartbeat_ms = (uint32_t)s->opts.heartbeat_ms;
    body.liveness = (uint32_t)s->opts.liveness;
    if (j->n_ps_layout) {               /* the ranks on this host may hand over their pushes in shared memory */
        int r = s->closes_held ? -EBUSY /* server_watch_closes */
                               : ps_shm_open(&j->shm, j->world_size, j->ps.total * sizeof(float), j->ps.n_buckets);
        if (r == 0) {
            ps_set_average(&j->ps, (float *)j->shm.average);
            body.ps_socket = j->shm.name;
        } else {
            log_warn("job '%s': no shared memory for its gradients (%s): the ranks push over ZeroMQ", j->name,
                     s->closes_held ? "descriptors handed to ddpd before are still being closed" : error_string(r));
        }
    }
    for (size_t i = 0; i < j->n_members; i++) {
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__WELCOME, j->name, -1, j->generation, j->members[i].join_seq);
        body.rank = (uint32_t)j->members[i].rank;
        env.welcome = &body;
        server_send(s, j->members[i].identity, j->members[i].identity_size, &env);
    }
    log_info("job '%s' formed: world size %u, generation %llu%s%s", j->name, j->world_size,
             (unsigned long long)j->generation, j->mode[0] ? ", mode " : "", j->mode);
}

/* Whether msg comes from j's user, where the kernel names it (the Unix socket): a
 * connection of another user that took a member's routing id over (ZeroMQ hands a
 * reconnecting id over) is not that member. */
static bool server_owner_speaks(const server *s, const wire_msg *msg, const job *j) {
    uint32_t uid, pid;
    return !s->local || s->zap || j->owner < 0 || wire_peer_credentials(msg, &uid, &pid) != 0 ||
           (int64_t)uid == j->owner;
}

/* The job and member a request comes from; answers with an error when there is none. */
static int server_member_of(server *s, const wire_msg *msg, job **ret_job, job_member **ret_member) {
    const Ddp__Envelope *env = msg->env;
    job *j = NULL; /* the one of that name this connection joined */
    ssize_t idx = -1;
    for (size_t i = 0; i < s->n_jobs && idx < 0; i++)
        if (strcmp(s->jobs[i]->name, env->job) == 0 &&
            (idx = job_find_member(s->jobs[i], msg->identity, msg->identity_size)) >= 0)
            j = s->jobs[i];
    if (idx >= 0 && !server_owner_speaks(s, msg, j))
        idx = -1;
    if (idx < 0) {
        server_send_error(s, msg, -ENXIO, "%s: not a member of a job '%s' (it ended, or this process never joined)",
                          wire_type_name(env->type), env->job);
        return -ENXIO;
    }
    if (j->state != JOB_RUNNING && env->type != DDP__MSG_TYPE__LEAVE) {
        server_send_error(s, msg, -EPROTO, "%s: job '%s' is still forming", wire_type_name(env->type), env->job);
        return -EPROTO;
    }
    if (j->state == JOB_RUNNING && env->generation != j->generation) {
        server_send_error(s, msg, -ESTALE, "%s: generation %llu, job '%s' is at generation %llu",
                          wire_type_name(env->type), (unsigned long long)env->generation, env->job,
                          (unsigned long long)j->generation);
        return -ESTALE;
    }
    *ret_job = j;
    *ret_member = &j->members[idx];
    return 0;
}

static bool server_is_member(server *s, const uint8_t *identity, size_t identity_size, job **ret_job,
                             job_member **ret_member) {
    for (size_t i = 0; i < s->n_jobs; i++) {
        ssize_t idx = job_find_member(s->jobs[i], identity, identity_size);
        if (idx >= 0) {
            *ret_job = s->jobs[i];
            *ret_member = &s->jobs[i]->members[idx];
            return true;
        }
    }
    return false;
}

/* ---- requests --------------------------------------------------------------------- */

/* Every rank is back after ddpd restarted: settles the ps buckets, then tells every rank
 * that it is back, with a heartbeat. */
static void server_finish_recovery(server *s, job *j) {
    char reason[DDP_MAX_REASON];
    if (j->n_ps_layout && job_ps_resolve(j, reason, sizeof(reason)) < 0) {
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return;
    }
    job_recovered(j);
    if (j->n_ps_layout && ps_awaits_average(&j->ps)) /* as long again for the averages to be given back */
        j->recover_deadline_ms =
            clock_now_ms() + (uint64_t)s->opts.heartbeat_ms * (uint64_t)s->opts.liveness + DDP_RECOVER_GRACE_MS;
    server_send_heartbeats(s, j, NULL, false);
    log_warn("job '%s' (generation %llu) recovered: every rank is back after ddpd restarted", j->name,
             (unsigned long long)j->generation);
}

static void server_answer_waiters(server *s, job *j, store_waiter *ready);
static void server_note_gone_rank(job *j, int32_t rank);

/* Sets key in j's store within its user's quota, answering the waits a new key completes;
 * why says what did not fit. A set by message and a rejoin's keys alike. */
static int server_store_put(server *s, job *j, const char *key, const uint8_t *value, size_t len, char *why,
                            size_t why_size) {
    user_usage use = server_usage(s, j->owner);
    const store_entry *old = store_get(&j->store, key); /* replaced: only the difference is new */
    double adding = ((double)(strlen(key) + len) - (old ? (double)(strlen(old->key) + old->size) : 0)) / (1 << 20);
    if (adding > 0 && use.store_mb + adding > s->opts.user_store_mb) {
        char holder[96];
        server_quota_holder(s, j->owner, holder, sizeof(holder));
        snprintf(why, why_size,
                 "store-set '%.64s' in job '%s': %s hold %.3f MB of store, and one user may hold %g (ddpd "
                 "--user-store-mb)",
                 key, j->name, holder, use.store_mb, s->opts.user_store_mb);
        return -EDQUOT;
    }
    bool fresh = !old; /* only a new key completes waits */
    int r = store_set(&j->store, key, value, len);
    if (r < 0) {
        snprintf(why, why_size, "store-set '%.64s' in job '%s': %s (limits: %u keys, %u bytes)", key, j->name,
                 error_string(r), DDP_MAX_STORE_KEYS, (unsigned)DDP_MAX_STORE_BYTES);
        return r;
    }
    if (fresh)
        server_answer_waiters(s, j, store_waits_key_set(&j->waits, key));
    return 0;
}

/* Tells one member its barrier (of seq) is done. */
static void server_release_barrier(server *s, const job *j, const job_member *m, uint64_t round, uint64_t seq) {
    Ddp__Barrier body = DDP__BARRIER__INIT;
    body.round = round;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, j->name, -1, j->generation, seq);
    env.barrier = &body;
    server_send(s, m->identity, m->identity_size, &env);
}

/* Ranks back after ddpd restarted may be a barrier apart: no rank passes a barrier the
 * others have not all reached, so the round of those behind completed before the restart
 * and only its releases were lost. A rank's round is refused unless within one of the
 * job's. */
static int server_check_barrier_round(const job *j, const Ddp__Join *jn, char *reason, size_t reason_size) {
    bool behind = j->rounds_split;
    if (jn->barrier_round + 1 >= j->barrier_round && jn->barrier_round <= j->barrier_round + (behind ? 0 : 1))
        return 0;
    snprintf(reason, reason_size,
             "rank %d comes back at barrier round %llu, job '%s''s ranks at %llu%s: ranks are never more than one "
             "round apart",
             jn->rank, (unsigned long long)jn->barrier_round, j->name, (unsigned long long)j->barrier_round,
             behind ? " and one a round behind" : "");
    return -EPROTO;
}

/* Member m is back at round: behind the job, its barrier is owed (released when it asks
 * again); ahead, the others are: those waiting are released now, the rest when they ask,
 * and the job goes on at its round. */
static void server_reconcile_barrier(server *s, job *j, job_member *m, uint64_t round) {
    if (round + 1 == j->barrier_round) {
        m->barrier_owed = true;
        j->rounds_split = true;
        return;
    }
    if (round != j->barrier_round + 1)
        return;
    j->rounds_split = true;
    for (size_t i = 0; i < j->n_members; i++) {
        job_member *x = &j->members[i];
        if (x == m)
            continue;
        if (x->at_barrier)
            server_release_barrier(s, j, x, j->barrier_round, x->barrier_seq);
        x->barrier_owed = !x->at_barrier;
        x->at_barrier = false;
    }
    log_info("job '%s': rank %d is back past barrier %llu: it completed before ddpd restarted", j->name, m->rank,
             (unsigned long long)j->barrier_round);
    j->barrier_round = round;
    j->barrier_arrived = 0;
}

/* Ranks that share memory and frames must read them alike: a rank's libddp speaks the
 * data plane of its job's first member, and in ps mode ddpd's own (it maps their segments). */
static uint32_t data_plane_of(const Ddp__Join *jn) {
    return jn->data_plane ? jn->data_plane : DDP_DATA_PLANE_UNSENT;
}

static int server_check_data_plane(const job *j, const Ddp__Join *jn, char *reason, size_t reason_size) {
    uint32_t version = data_plane_of(jn);
    if (!strcmp(jn->mode, "ps") && version != DDP_DATA_PLANE_VERSION) {
        snprintf(reason, reason_size,
                 "libddp's data plane version %u is not this ddpd's %u (ps mode: ddpd reads the ranks' segments): run "
                 "one release of ddpd and libddp",
                 version, DDP_DATA_PLANE_VERSION);
        return -EPROTONOSUPPORT;
    }
    if (j && version != j->data_plane) {
        snprintf(reason, reason_size,
                 "libddp's data plane version %u is not job '%s''s %u (its first member's): every rank must run one "
                 "release of libddp",
                 version, j->name, j->data_plane);
        return -EPROTONOSUPPORT;
    }
    return 0;
}

/* The members a rejoin brings back besides its rank: the ranks it says had left (wire.c
 * checked them against its world), each once, that job j (NULL: none yet) does not hold
 * yet (server_note_gone_rank). */
static size_t server_rejoin_left(const job *j, const Ddp__Join *jn) {
    bool *counted = calloc(jn->world_size, sizeof(bool));
    if (!counted)
        return jn->n_left; /* counting each: the quota errs on its side */
    for (size_t i = 0; j && i < j->n_members; i++)
        if (j->members[i].rank >= 0 && (uint32_t)j->members[i].rank < jn->world_size)
            counted[j->members[i].rank] = true;
    size_t n = 0;
    for (size_t i = 0; i < jn->n_left; i++)
        if (!counted[jn->left[i]]) {
            counted[jn->left[i]] = true;
            n++;
        }
    free(counted);
    return n;
}

static void server_on_join(server *s, const wire_msg *msg) {
    const Ddp__Envelope *env = msg->env;
    const Ddp__Join *jn = env->join;
    char reason[DDP_MAX_REASON];
    job *other;
    job_member *other_member;
    if (server_is_member(s, msg->identity, msg->identity_size, &other, &other_member)) {
        if (jn->generation && jn->generation == other->generation && strcmp(env->job, other->name) == 0) {
            if (!other->recovering) /* a rejoin sent again: it is back */
                server_send_heartbeats(s, other, other_member, false);
            return;
        }
        snprintf(reason, sizeof(reason), "this connection already joined job '%s'", other->name);
        server_send_reject(s, msg->identity, msg->identity_size, env->job, env->seq, -EPROTO, reason);
        return;
    }

    int64_t uid = server_peer_uid(s, msg);
    job *j = server_find_job(s, env->job, uid); /* this user's: another's of the name is another job */
    size_t n_members = 0;
    for (size_t i = 0; i < s->n_jobs; i++)
        n_members += s->jobs[i]->n_members;
    int r = 0;
    bool rejoin = jn->generation != 0; /* a member of a running job, back after ddpd restarted */
    if (j && rejoin)
        r = job_check_rejoin(j, jn->generation, jn->world_size, jn->mode, jn->rank, jn->ps_buckets, jn->n_ps_buckets,
                             reason, sizeof(reason));
    else if (j)
        r = job_check_join(j, jn->world_size, jn->mode, jn->rank, jn->ps_buckets, jn->n_ps_buckets, reason,
                           sizeof(reason));
    if (r == 0)
        r = server_check_data_plane(j, jn, reason, sizeof(reason));
    if (r == 0 && j && rejoin)
        r = server_check_barrier_round(j, jn, reason, sizeof(reason));
    /* a job this ddpd does not hold comes back only from a ddpd before it, which gave no
     * generation past the one the state directory had at start-up (else each rejoin at the
     * block's end would make the next job write the file again, fsyncs and all) */
    uint64_t rejoin_max = s->opts.state_dir ? (j ? s->saved_generation : s->loaded_generation) : DDP_MAX_GENERATION;
    if (r == 0 && rejoin && jn->generation > rejoin_max && jn->generation <= s->last_generation) {
        snprintf(reason, sizeof(reason), "a rejoin of generation %llu: this ddpd gave it, to a job that has ended",
                 (unsigned long long)jn->generation);
        r = -ESTALE;
    } else if (r == 0 && rejoin && jn->generation > rejoin_max) {
        snprintf(reason, sizeof(reason), "a rejoin of generation %llu: no ddpd %sgave one past %llu",
                 (unsigned long long)jn->generation, s->opts.state_dir && !j ? "before this one " : "",
                 (unsigned long long)rejoin_max);
        r = -EINVAL;
    } else if (r == 0 && !j && s->n_jobs == DDP_MAX_JOBS) {
        snprintf(reason, sizeof(reason), "ddpd already holds %d jobs", DDP_MAX_JOBS);
        r = -ENOSPC;
    }
    user_usage use = server_usage(s, uid);
    size_t adding = 1 + (rejoin ? server_rejoin_left(j, jn) : 0);
    char holder[96];
    server_quota_holder(s, uid, holder, sizeof(holder));
    double ps_mb = j ? 0 : job_ps_mb(layout_floats(jn->ps_buckets, jn->n_ps_buckets), jn->world_size);
    if (r == 0 && !j && use.jobs >= (size_t)s->opts.user_jobs) {
        snprintf(reason, sizeof(reason), "%s are %zu, the most one user may hold (ddpd --user-jobs %d)", holder,
                 use.jobs, s->opts.user_jobs);
        r = -EDQUOT;
    } else if (r == 0 && use.members + adding > (size_t)s->opts.user_members) {
        snprintf(reason, sizeof(reason),
                 "%s have %zu members, and this join would add %zu: more than one user may have (ddpd "
                 "--user-members %d)",
                 holder, use.members, adding, s->opts.user_members);
        r = -EDQUOT;
    } else if (r == 0 && use.ps_mb + ps_mb > s->opts.user_ps_mb) {
        snprintf(reason, sizeof(reason),
                 "%s would hold %.1f MB of ps buffers with this one, more than one user may (ddpd --user-ps-mb %g)",
                 holder, use.ps_mb + ps_mb, s->opts.user_ps_mb);
        r = -EDQUOT;
    }
    if (r == 0 && n_members + adding > DDP_MAX_PEERS) {
        snprintf(reason, sizeof(reason), "ddpd already holds %d members", DDP_MAX_PEERS);
        r = -ENOSPC;
    }
    if (r < 0) {
        log_info("job '%s': rejected pid %u on %s: %s", env->job, jn->pid, jn->host, reason);
        server_send_reject(s, msg->identity, msg->identity_size, env->job, env->seq, r, reason);
        return;
    }
    if (!j) {
        j = job_new(env->job, jn->mode, jn->world_size, jn->ps_buckets, jn->n_ps_buckets, clock_now_ms());
        if (!j) {
            server_send_reject(s, msg->identity, msg->identity_size, env->job, env->seq, -ENOMEM, "out of memory");
            return;
        }
        j->owner = uid;
        j->data_plane = data_plane_of(jn);
        s->jobs[s->n_jobs++] = j;
        if (rejoin) { /* running already: its ranks come back one by one */
            if (job_recover(j, jn->generation, jn->barrier_round, jn->ps_steps, jn->n_ps_steps) < 0) {
                server_send_reject(s, msg->identity, msg->identity_size, env->job, env->seq, -ENOMEM,
                                   "out of memory for the job's gradient buckets");
                server_remove_job(s, j);
                return;
            }
            j->recover_deadline_ms =
                clock_now_ms() + (uint64_t)s->opts.heartbeat_ms * (uint64_t)s->opts.liveness + DDP_RECOVER_GRACE_MS;
            server_note_generation(s, jn->generation);
            log_warn("job '%s' (generation %llu): rank %d rejoins after ddpd restarted; waiting %.1f s for the other "
                     "%u",
                     j->name, (unsigned long long)j->generation, jn->rank,
                     (double)(j->recover_deadline_ms - clock_now_ms()) / 1000.0, j->world_size - 1);
        }
    }

    job_member m = {
        .identity_size = msg->identity_size,
        .requested_rank = jn->rank,
        .rank = jn->rank,
        .pid = jn->pid,
        .join_seq = env->seq,
        .last_heard_ms = clock_now_ms(),
    };
    memcpy(m.identity, msg->identity, msg->identity_size);
    uint32_t peer_uid, peer_pid;
    if (s->local && wire_peer_credentials(msg, &peer_uid, &peer_pid) == 0)
        m.local_pid = peer_pid; /* the kernel's: a stall can be told from a death */
    else if (!s->local && wire_peer_loopback(msg))
        m.local_pid = jn->pid; /* on this host over loopback TCP, by its own word: a wrong one only keeps its own
                                  job waiting, up to the stall limit */
    snprintf(m.host, sizeof(m.host), "%s", jn->host);
    snprintf(m.endpoint, sizeof(m.endpoint), "%s", jn->data_endpoint);
    snprintf(m.data_key, sizeof(m.data_key), "%s", jn->data_key);
    if (rejoin && jn->n_ps_steps) { /* where its buckets are: settled once every rank is back */
        if ((m.ps_steps = malloc(jn->n_ps_steps * sizeof(uint64_t))))
            memcpy(m.ps_steps, jn->ps_steps, jn->n_ps_steps * sizeof(uint64_t));
        else
            r = -ENOMEM;
    }
    if (r < 0 || (r = job_add_member(j, &m)) < 0) {
        free(m.ps_steps);
        server_send_reject(s, msg->identity, msg->identity_size, env->job, env->seq, r, error_string(r));
        if (j->n_members == 0)
            server_remove_job(s, j);
        return;
    }
    if (rejoin) { /* answered once every rank is back (server_finish_recovery) */
        ssize_t back = job_find_member(j, msg->identity, msg->identity_size);
        if (back >= 0)
            server_reconcile_barrier(s, j, &j->members[back], jn->barrier_round);
        for (size_t i = 0; i < jn->n_left; i++)
            server_note_gone_rank(j, (int32_t)jn->left[i]);
        for (size_t i = 0; i < jn->n_store; i++) { /* the keys it set: the store as the members knew it */
            char why[DDP_MAX_REASON];
            if (server_store_put(s, j, jn->store[i]->key, jn->store[i]->value.data, jn->store[i]->value.len, why,
                                 sizeof(why)) < 0)
                log_warn("rank %d's store key did not fit back: %s", jn->rank, why);
        }
        log_info("job '%s': rank %d (pid %u on %s) is back (%zu/%u)", j->name, m.rank, m.pid, m.host, j->n_members,
                 j->world_size);
        if (job_complete(j))
            server_finish_recovery(s, j);
        return;
    }
    /* Answer at once so the worker learns our heartbeat interval before we judge it. */
    server_send_heartbeats(s, j, &j->members[j->n_members - 1], false);
    log_info("job '%s': pid %u on %s joined (%zu/%u)", j->name, m.pid, m.host, j->n_members, j->world_size);
    if (job_complete(j))
        server_form_job(s, j);
}

/* Tells every member waiting at the barrier that it cannot complete. */
static void server_fail_barrier(server *s, job *j, int code, const char *why) {
    Ddp__Error body = DDP__ERROR__INIT;
    body.code = code;
    body.message = (char *)why;
    for (size_t i = 0; i < j->n_members; i++) {
        job_member *m = &j->members[i];
        if (!m->at_barrier)
            continue;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__ERROR, j->name, -1, j->generation, m->barrier_seq);
        env.error = &body;
        server_send(s, m->identity, m->identity_size, &env);
        m->at_barrier = false;
    }
    j->barrier_arrived = 0;
}

/* A recovering job's rank that had left before ddpd restarted (its peers say so): held as
 * a member that left, as the ddpd before held it, rather than waited for, as it will not
 * come back. */
static void server_note_gone_rank(job *j, int32_t rank) {
    for (size_t i = 0; i < j->n_members; i++)
        if (j->members[i].rank == rank)
            return;
    job_member gone = {.requested_rank = rank, .rank = rank, .left = true, .last_heard_ms = clock_now_ms()};
    snprintf(gone.host, sizeof(gone.host), "(left before ddpd restarted)");
    if (job_add_member(j, &gone) == 0) {
        j->n_left++;
        log_info("job '%s': rank %d had left before ddpd restarted: not waited for", j->name, rank);
    }
}

/* The member of ps job j that left, if any: no average can be made without its pushes. */
static const job_member *server_ps_leaver(const job *j) {
    for (size_t i = 0; j->n_ps_layout && j->n_left && i < j->n_members; i++) /* a look only once one left */
        if (j->members[i].left)
            return &j->members[i];
    return NULL;
}

static void server_on_leave(server *s, const wire_msg *msg) {
    job *j;
    job_member *m;
    if (server_member_of(s, msg, &j, &m) < 0)
        return;
    if (j->state == JOB_FORMING) {
        log_info("job '%s': pid %u on %s left while forming", j->name, m->pid, m->host);
        job_remove_member(j, (size_t)(m - j->members));
        if (j->n_members == 0)
            server_remove_job(s, j);
        return;
    }
    j->n_left += !m->left;
    m->left = true;
    log_info("job '%s': rank %d (pid %u on %s) left", j->name, m->rank, m->pid, m->host);
    if (j->barrier_arrived) {
        char why[DDP_MAX_REASON];
        snprintf(why, sizeof(why), "rank %d (pid %u on %s) left the job before the barrier", m->rank, m->pid, m->host);
        server_fail_barrier(s, j, -EPIPE, why);
    }
    for (uint32_t b = 0; j->n_ps_layout && b < j->ps.n_buckets; b++) {
        const ps_bucket *bk = &j->ps.buckets[b];
        if (bk->n_arrived && !bk->arrived[m->rank]) { /* the others wait for an average that cannot come */
            char why[DDP_MAX_REASON];
            snprintf(why, sizeof(why), "rank %d (pid %u on %s) left the job without pushing bucket %u of step %llu",
                     m->rank, m->pid, m->host, b, (unsigned long long)bk->step);
            server_abort_job(s, j, -1, -EPIPE, why);
            return; /* j is gone */
        }
    }
    if (job_active_members(j) == 0) {
        log_info("job '%s' (generation %llu) finished", j->name, (unsigned long long)j->generation);
        server_remove_job(s, j);
    }
}

static void server_on_barrier(server *s, const wire_msg *msg) {
    job *j;
    job_member *m;
    if (server_member_of(s, msg, &j, &m) < 0)
        return;
    for (size_t i = 0; i < j->n_members; i++)
        if (j->members[i].left) {
            server_send_error(s, msg, -EPIPE, "barrier cannot complete: rank %d (pid %u on %s) left the job",
                              j->members[i].rank, j->members[i].pid, j->members[i].host);
            return;
        }
    uint64_t round = msg->env->barrier->round;
    if (m->barrier_owed && !m->at_barrier && round + 1 == j->barrier_round) { /* see server_reconcile_barrier */
        m->barrier_owed = false;
        server_release_barrier(s, j, m, round, msg->env->seq);
        return;
    }
    m->barrier_owed = false; /* it asks for the job's round: it had its release after all */
    if (round != j->barrier_round || m->at_barrier) {
        server_send_error(s, msg, -EPROTO, "barrier round %llu from rank %d, job '%s' is at round %llu",
                          (unsigned long long)round, m->rank, j->name, (unsigned long long)j->barrier_round);
        return;
    }
    m->at_barrier = true;
    m->barrier_seq = msg->env->seq;
    if (++j->barrier_arrived < j->world_size)
        return;

    Ddp__Barrier body = DDP__BARRIER__INIT;
    body.round = round;
    for (size_t i = 0; i < j->n_members; i++) {
        job_member *x = &j->members[i];
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__BARRIER, j->name, -1, j->generation, x->barrier_seq);
        env.barrier = &body;
        server_send(s, x->identity, x->identity_size, &env);
        x->at_barrier = false;
    }
    j->barrier_arrived = 0;
    j->barrier_round++;
}

static void server_send_value(server *s, const job *j, const uint8_t *identity, size_t identity_size, uint64_t seq,
                              const char *key, const store_entry *e, bool with_value) {
    Ddp__StoreValue body = DDP__STORE_VALUE__INIT;
    body.key = (char *)key;
    body.found = e != NULL;
    if (e && with_value) {
        body.value.data = e->value;
        body.value.len = e->size;
    }
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STORE_VALUE, j->name, -1, j->generation, seq);
    env.store_value = &body;
    server_send(s, identity, identity_size, &env);
}

/* Answers the store waits in ready (chained through next), and frees them. */
static void server_answer_waiters(server *s, job *j, store_waiter *ready) {
    for (store_waiter *w = ready, *next; w; w = next) {
        next = w->next;
        server_send_value(s, j, w->identity, w->identity_size, w->seq, w->keys[0], store_get(&j->store, w->keys[0]),
                          true);
        store_waiter_free(w);
    }
}

static void server_on_store(server *s, const wire_msg *msg) {
    job *j;
    job_member *m;
    if (server_member_of(s, msg, &j, &m) < 0)
        return;
    const Ddp__Envelope *env = msg->env;
    switch (env->type) {
    case DDP__MSG_TYPE__STORE_SET: {
        char why[DDP_MAX_REASON];
        int r = server_store_put(s, j, env->store_set->key, env->store_set->value.data, env->store_set->value.len, why,
                                 sizeof(why));
        if (r < 0)
            server_send_error(s, msg, r, "%s", why);
        else
            server_send_value(s, j, msg->identity, msg->identity_size, env->seq, env->store_set->key, NULL, false);
        return;
    }
    case DDP__MSG_TYPE__STORE_GET: {
        const char *key = env->store_get->key;
        server_send_value(s, j, msg->identity, msg->identity_size, env->seq, key, store_get(&j->store, key), true);
        return;
    }
    default: { /* STORE_WAIT */
        const Ddp__StoreWait *sw = env->store_wait;
        uint32_t timeout = sw->timeout_ms ? sw->timeout_ms : DDP_DEFAULT_TIMEOUT_MS;
        bool all_set = true; /* answered at once: never pending, so no quota */
        for (size_t k = 0; k < sw->n_keys && all_set; k++)
            all_set = store_get(&j->store, sw->keys[k]) != NULL;
        if (all_set) {
            server_send_value(s, j, msg->identity, msg->identity_size, env->seq, sw->keys[0],
                              store_get(&j->store, sw->keys[0]), true);
            return;
        }
        user_usage use = server_usage(s, j->owner);
        if (use.waits >= (size_t)s->opts.user_store_waits) {
            char holder[96];
            server_quota_holder(s, j->owner, holder, sizeof(holder));
            server_send_error(s, msg, -EDQUOT,
                              "store-wait in job '%s': %s have %zu store waits pending, the most one user may have "
                              "(ddpd --user-store-waits %d)",
                              j->name, holder, use.waits, s->opts.user_store_waits);
            return;
        }
        store_waiter *w = calloc(1, sizeof(*w));
        if (w) {
            *w = (store_waiter){.identity_size = msg->identity_size,
                                .rank = m->rank,
                                .seq = env->seq,
                                .deadline_ms = clock_now_ms() + timeout,
                                .timeout_ms = timeout};
            memcpy(w->identity, msg->identity, msg->identity_size);
            w->keys = calloc(sw->n_keys, sizeof(char *));
            for (size_t k = 0; w->keys && k < sw->n_keys; k++, w->n_keys++)
                if (!(w->keys[k] = strdup(sw->keys[k])))
                    break;
        }
        bool ready = false;
        int r = !w || !w->keys || w->n_keys < sw->n_keys ? -ENOMEM : store_waits_add(&j->waits, &j->store, w, &ready);
        if (r < 0) {
            store_waiter_free(w);
            server_send_error(s, msg, r, "store-wait in job '%s': %s", j->name, error_string(r));
        } else if (ready) {
            server_answer_waiters(s, j, w);
        }
        return;
    }
    }
}

/* ps mode: rank m's push of bucket at step, from payload, or from its push segment when
 * payload is NULL; once every rank's is in, each gets the average: in the average segment
 * when it shares memory with ddpd, else as a frame. A push that does not fit aborts the
 * job (the ranks that pushed would wait for an average that never comes; -ECONNABORTED:
 * j is gone); msg, when the push came as one, is told why too. */
static int server_ps_take(server *s, job *j, const job_member *m, uint64_t step, uint32_t bucket, zmq_msg_t *payload,
                          const wire_msg *msg) {
    char err[DDP_MAX_REASON];
    int r;
    const job_member *gone = server_ps_leaver(j);
    if (gone) {
        snprintf(err, sizeof(err), "bucket %u: rank %d (pid %u on %s) left the job, so no average can be made", bucket,
                 gone->rank, gone->pid, gone->host);
        r = -EPIPE;
    } else if (!payload &&
               (!j->shm.pushed || !j->shm.pushed[m->rank])) { /* none at all: a job recovered, or no segments */
        snprintf(err, sizeof(err), "bucket %u: pushed in shared memory that rank %d never handed over", bucket,
                 m->rank);
        r = -EPROTO;
    } else {
        r = ps_push(&j->ps, (uint32_t)m->rank, step, bucket, payload,
                    payload ? NULL : (const float *)j->shm.pushed[m->rank], err, sizeof(err));
    }
    if (r < 0) {
        char reason[DDP_MAX_REASON];
        snprintf(reason, sizeof(reason), "grad-push from rank %d refused: %.400s", m->rank, err);
        if (msg)
            server_send_error(s, msg, r, "%s", reason);
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return -ECONNABORTED;
    }
    if (r == 0)
        return 0;
    ps_shm_averaged(&j->shm, bucket, step);
    Ddp__GradAvg body = DDP__GRAD_AVG__INIT;
    body.step = step;
    body.bucket = bucket;
    wire_frame frame = {(void *)ps_average(&j->ps, bucket), j->ps.buckets[bucket].count * sizeof(float)};
    size_t round = 0; /* a member may hold a round of averages unread while it pushes the rest */
    for (size_t i = 0; i < j->n_members; i++) {
        int rank = j->members[i].rank;
        body.shared = j->shm.pushed && j->shm.pushed[rank] && !j->shm.by_frame[rank];
        if (body.shared && !j->shm.by_message[rank])
            continue; /* it reads the average segment's counter */
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_AVG, j->name, -1, j->generation, 0);
        env.grad_avg = &body;
        if (!body.shared && !round) /* only frames count: ranks on this host read the segment */
            round = layout_floats(j->ps_layout, j->n_ps_layout) * sizeof(float);
        server_send_within(s, j->members[i].identity, j->members[i].identity_size, &env, &frame, body.shared ? 0 : 1,
                           round);
    }
    return 0;
}

/* After a restart: rank m gives back bucket's average of step, which the ddpd before sent
 * it and not the ranks that lack it; they get it now, as the ddpd before would have sent it.
 * One that was not asked for aborts the job (the ranks behind would wait for it). */
static void server_ps_give_back(server *s, job *j, const job_member *m, uint64_t step, uint32_t bucket,
                                const wire_msg *msg) {
    char err[DDP_MAX_REASON];
    int r = ps_give_back(&j->ps, (uint32_t)m->rank, step, bucket, msg->n_payload ? &msg->payload[0] : NULL, err,
                         sizeof(err));
    if (r < 0) {
        char reason[DDP_MAX_REASON];
        snprintf(reason, sizeof(reason), "grad-push from rank %d refused: %.400s", m->rank, err);
        server_send_error(s, msg, r, "%s", reason);
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return;
    }
    Ddp__GradAvg body = DDP__GRAD_AVG__INIT;
    body.step = step;
    body.bucket = bucket;
    wire_frame frame = {(void *)ps_average(&j->ps, bucket), j->ps.buckets[bucket].count * sizeof(float)};
    for (size_t i = 0; i < j->n_members; i++) {
        if (!ps_lacking(&j->ps, bucket, (uint32_t)j->members[i].rank))
            continue;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__GRAD_AVG, j->name, -1, j->generation, 0);
        env.grad_avg = &body;
        server_send_within(s, j->members[i].identity, j->members[i].identity_size, &env, &frame, 1, frame.size);
        log_warn("job '%s': rank %d gave back bucket %u's average of step %llu, which went with the ddpd before "
                 "to it and not to rank %d: sent on",
                 j->name, m->rank, bucket, (unsigned long long)step, j->members[i].rank);
    }
}

static void server_on_grad_push(server *s, wire_msg *msg) {
    job *j;
    job_member *m;
    if (server_member_of(s, msg, &j, &m) < 0)
        return;
    if (!j->n_ps_layout) {
        server_send_error(s, msg, -EPROTO, "grad-push: job '%s' is not in ps mode", j->name);
        return;
    }
    const Ddp__GradPush *push = msg->env->grad_push;
    if (push->average) {
        server_ps_give_back(s, j, m, push->step, push->bucket, msg);
        return;
    }
    if (j->shm.pushed && j->shm.pushed[m->rank]) {
        j->shm.by_message[m->rank] = true;
        j->shm.by_frame[m->rank] |= !push->shared;
    }
    (void)server_ps_take(s, j, m, push->step, push->bucket, push->shared ? NULL : &msg->payload[0], msg);
}

/* A ps job's doorbell rang: each rank that shares memory says in its push segment how many
 * pushes of each bucket it has made; one more than ddpd has taken of it is a push. */
static void server_on_doorbell(server *s, job *j) {
    ps_shm_doorbell_clear(&j->shm);
    for (size_t i = 0; i < j->n_members && j->state == JOB_RUNNING && !j->recovering; i++) {
        const job_member *m = &j->members[i];
        for (uint32_t b = 0; b < j->ps.n_buckets && j->n_ps_layout; b++) {
            const ps_bucket *bk = &j->ps.buckets[b];
            uint64_t pushed = ps_shm_pushed(&j->shm, (uint32_t)m->rank, b);
            if (pushed <= bk->step || (pushed == bk->step + 1 && bk->arrived[m->rank]))
                continue;                                               /* taken already, or not pushed yet */
            if (server_ps_take(s, j, m, pushed - 1, b, NULL, NULL) < 0) /* a step ahead is refused there */
                return;                                                 /* j is gone */
        }
    }
}

size_t server_poll_fds(const server *s, int *fds, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const ps_shm *p = &s->jobs[i]->shm;
        if (ps_shm_listening(p) >= 0 && n < max) /* one connection at a time, read when it is ready */
            fds[n++] = p->listener;
        if (p->pending >= 0 && n < max)
            fds[n++] = p->pending;
        if (p->doorbell >= 0 && n < max)
            fds[n++] = p->doorbell;
    }
    return n;
}

/* The members' pids by rank, as the kernel gave them where ddpd could ask it (0 where not). */
static void server_member_pids(const job *j, uint32_t pids[DDP_MAX_WORLD_SIZE]) {
    memset(pids, 0, DDP_MAX_WORLD_SIZE * sizeof(uint32_t));
    for (size_t k = 0; k < j->n_members; k++)
        pids[j->members[k].rank] = j->members[k].local_pid;
}

void server_on_fd(server *s, int fd) {
    for (size_t i = 0; i < s->n_jobs; i++) {
        job *j = s->jobs[i];
        if (j->shm.doorbell == fd) {
            server_on_doorbell(s, j);
            return;
        }
        if (j->shm.listener != fd && j->shm.pending != fd)
            continue;
        uint32_t pids[DDP_MAX_WORLD_SIZE];
        server_member_pids(j, pids);
        char err[DDP_MAX_REASON];
        int r = j->shm.pending == fd ? ps_shm_take(&j->shm, pids, err, sizeof(err))
                                     : ps_shm_accept(&j->shm, pids, j->owner, err, sizeof(err));
        if (r < 0) {
            s->bad_messages++;
            log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN, "job '%s': %s", j->name, err);
        }
        return;
    }
}

/* A snapshot of every job and member, as a status reply; views into the server's state,
 * valid until it changes. */
typedef struct {
    Ddp__StatusReply reply;
    Ddp__JobStatus *jobs, **job_ptrs;
    Ddp__MemberStatus *members, **member_ptrs;
    char (*owners)[64]; /* per job: its owner's name */
} server_status;

/* Every job, with its members where the viewer may see them: its own jobs, or every job
 * for root, operators and the metrics file (all: true); the others' without members. */
static int server_status_build(server *s, server_status *st, int64_t viewer, bool all) {
    uint64_t now = clock_now_ms();
    size_t n_members = 0;
    for (size_t i = 0; i < s->n_jobs; i++)
        n_members += s->jobs[i]->n_members;
    st->jobs = calloc(s->n_jobs ? s->n_jobs : 1, sizeof(*st->jobs));
    st->job_ptrs = calloc(s->n_jobs ? s->n_jobs : 1, sizeof(*st->job_ptrs));
    st->members = calloc(n_members ? n_members : 1, sizeof(*st->members));
    st->member_ptrs = calloc(n_members ? n_members : 1, sizeof(*st->member_ptrs));
    st->owners = calloc(s->n_jobs ? s->n_jobs : 1, sizeof(*st->owners));
    if (!st->jobs || !st->job_ptrs || !st->members || !st->member_ptrs || !st->owners)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < s->n_jobs; i++) {
        const job *j = s->jobs[i];
        Ddp__JobStatus *js = &st->jobs[i];
        ddp__job_status__init(js);
        js->name = (char *)j->name;
        js->state = (char *)(j->state == JOB_FORMING ? "forming" : j->recovering ? "recovering" : "running");
        js->mode = (char *)j->mode;
        js->world_size = j->world_size;
        js->generation = j->generation;
        js->age_ms = now - j->created_ms;
        server_user_name(s, j->owner, st->owners[i], sizeof(st->owners[i]));
        js->owner = st->owners[i];
        js->joined = (uint32_t)j->n_members;
        js->withheld = !all && j->owner != viewer;
        js->members = &st->member_ptrs[k];
        js->n_members = js->withheld ? 0 : j->n_members;
        for (size_t m = 0; m < js->n_members; m++, k++) {
            Ddp__MemberStatus *ms = &st->members[k];
            ddp__member_status__init(ms);
            ms->rank = j->members[m].rank;
            ms->pid = j->members[m].pid;
            ms->host = (char *)j->members[m].host;
            ms->endpoint = (char *)j->members[m].endpoint;
            ms->last_heard_ms = now - j->members[m].last_heard_ms;
            ms->step = j->members[m].step;
            ms->samples_per_s = j->members[m].samples_per_s;
            ms->waiting = j->members[m].waiting;
            ms->waiting_on = j->members[m].waiting ? j->members[m].waiting_on : -1;
            ms->waiting_ms = j->members[m].waiting ? now - j->members[m].waiting_since_ms : 0;
            ms->stalled = j->members[m].stalled;
            ms->waiting_in = (char *)j->members[m].waiting_in;
            st->member_ptrs[k] = ms;
        }
        st->job_ptrs[i] = js;
    }
    ddp__status_reply__init(&st->reply);
    st->reply.version = (char *)DDP_VERSION;
    st->reply.uptime_ms = now - s->started_ms;
    st->reply.bad_messages = s->bad_messages;
    st->reply.job_aborts = s->aborts;
    st->reply.n_jobs = s->n_jobs;
    st->reply.jobs = st->job_ptrs;
    return 0;
}

static void server_status_free(server_status *st) {
    free(st->jobs);
    free(st->job_ptrs);
    free(st->members);
    free(st->member_ptrs);
    free(st->owners);
}

static void server_on_status(server *s, const wire_msg *msg) {
    server_status st = {0};
    int64_t uid = server_peer_uid(s, msg);
    /* an operator the directory has not placed yet sees what an ordinary user sees */
    if (server_status_build(s, &st, uid, server_privileged(s, uid) > 0) < 0)
        server_send_error(s, msg, -ENOMEM, "status: out of memory");
    else {
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REPLY, "", -1, 0, msg->env->seq);
        env.status_reply = &st.reply;
        server_send(s, msg->identity, msg->identity_size, &env);
    }
    server_status_free(&st);
}

/* An operator's abort (ddpctl abort JOB): the job's members hear why, the asker gets the
 * Abort back as its answer. */
static void server_on_abort_request(server *s, const wire_msg *msg) {
    int64_t uid = server_peer_uid(s, msg);
    const char *whose = msg->env->abort->owner;
    if (whose && whose[0]) { /* whose job of the name: the asker's own, or any user's for root and operators */
        /* root and operators may name anyone; anyone else only themselves: a name they make
         * up is never asked of NSS on their behalf */
        int privileged = server_privileged(s, uid), r = privileged;
        uid_t whose_uid = (uid_t)uid;
        char own[256] = "";
        if (privileged > 0)
            r = user_directory_uid(s->users, whose, &whose_uid);
        else if (privileged == 0)
            r = uid >= 0 ? user_directory_name(s->users, (uid_t)uid, own, sizeof(own)) : -ENOENT;
        if (r == -ETIMEDOUT) {
            server_send_error(s, msg, -EAGAIN, "abort: the user directory has not answered yet %s%s%s: try again",
                              privileged < 0 ? "whether you are an operator"
                              : privileged   ? "who "
                                             : "who you are",
                              privileged > 0 ? whose : "", privileged > 0 ? " is" : "");
            return;
        }
        if (privileged == 0 && r < 0 && r != -ENOENT) {
            server_send_error(s, msg, -EIO, "abort: the user directory cannot say who you are: %s", error_string(r));
            return;
        }
        if (privileged == 0 && (r < 0 || strcmp(own, whose) != 0)) {
            server_send_error(s, msg, -EPERM, "abort: job '%s' of user %s: only root and operators end another's",
                              msg->env->job, whose);
            return;
        }
        if (r < 0) {
            server_send_error(s, msg, -EINVAL, "abort: no user '%s'%s%s", whose, r == -ENOENT ? "" : ": ",
                              r == -ENOENT ? "" : error_string(r));
            return;
        }
        job *theirs = server_find_job(s, msg->env->job, (int64_t)whose_uid);
        if (!theirs) {
            server_send_error(s, msg, -ENOENT, "abort: user %s has no job '%s'", whose, msg->env->job);
            return;
        }
        uid = (int64_t)whose_uid; /* as if that user asked */
    }
    job *j = server_find_job(s, msg->env->job, uid), *other = j ? NULL : server_find_any_job(s, msg->env->job);
    size_t named = 0; /* other users' jobs of the name */
    for (size_t i = 0; !j && i < s->n_jobs; i++)
        named += strcmp(s->jobs[i]->name, msg->env->job) == 0;
    int privileged = other ? server_privileged(s, uid) : 0; /* another's job: root's and operators' to end */
    if (privileged == -ETIMEDOUT) {
        server_send_error(s, msg, -EAGAIN,
                          "abort: job '%s' is another user's, and the user directory has not answered yet whether you "
                          "are an operator: try again",
                          msg->env->job);
        return;
    }
    if (!j && named > 1 && privileged) {
        server_send_error(s, msg, -EINVAL,
                          "abort: %zu users have a job '%s': say whose (ddpctl abort --owner USER %s; ddpctl status "
                          "names the owners)",
                          named, msg->env->job, msg->env->job);
        return;
    }
    if (!j && other && privileged)
        j = other; /* root and operators may end any user's job */
    else if (!j && other) {
        char owner[64];
        server_user_name(s, other->owner, owner, sizeof(owner));
        server_send_error(s, msg, -EPERM, "abort: job '%s' belongs to %s%s: refused", msg->env->job,
                          owner[0] ? "user " : "", owner[0] ? owner : "a TCP client");
        return;
    }
    if (!j) {
        server_send_error(s, msg, -ENOENT, "abort: no job '%s'", msg->env->job);
        return;
    }
    char reason[DDP_MAX_REASON], name[DDP_MAX_JOB_NAME + 1];
    ssize_t idx = job_find_member(j, msg->identity, msg->identity_size);
    bool recovering_rank = j->recovering && msg->env->generation == j->generation; /* not back yet */
    if (idx < 0 && msg->env->rank >= 0 && !recovering_rank) {
        /* a rank's ddp_abort (an operator's names none) that is not this job's: of a job of
         * the name that has ended, whose relaunch must not end with it */
        log_info("job '%s': an abort from rank %d of generation %llu, which has ended, left generation %llu alone",
                 j->name, msg->env->rank, (unsigned long long)msg->env->generation, (unsigned long long)j->generation);
        server_send_error(s, msg, -ESTALE,
                          "abort: this rank is no member of job '%s' (generation %llu): the job it was in has ended",
                          j->name, (unsigned long long)j->generation);
        return;
    }
    if (idx < 0 && msg->env->rank >= 0) { /* a rank of the job that has not rejoined the ddpd that restarted */
        snprintf(reason, sizeof(reason), "rank %d (pid %u on %.64s) gave up: %.300s", msg->env->rank,
                 msg->env->abort->pid, msg->env->abort->host, msg->env->abort->reason);
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return;
    }
    if (idx >= 0 && j->state == JOB_RUNNING) { /* a member that cannot go on: the others hear from whom */
        const job_member *m = &j->members[idx];
        snprintf(reason, sizeof(reason), "rank %d (pid %u on %.64s) gave up: %.300s", m->rank, m->pid, m->host,
                 msg->env->abort->reason);
        server_abort_job(s, j, idx, -ECONNABORTED, reason);
        return;
    }
    snprintf(reason, sizeof(reason), "aborted by an operator: %s", msg->env->abort->reason);
    snprintf(name, sizeof(name), "%s", j->name); /* the answer goes out after the job is gone */
    Ddp__Abort body = DDP__ABORT__INIT;
    body.rank = -1;
    body.code = -ECONNABORTED;
    body.host = (char *)"";
    body.reason = reason;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ABORT, name, -1, j->generation, msg->env->seq);
    env.abort = &body;
    if (j->state == JOB_FORMING) {
        for (size_t i = 0; i < j->n_members; i++)
            server_send_reject(s, j->members[i].identity, j->members[i].identity_size, j->name, j->members[i].join_seq,
                               -ECONNABORTED, reason);
        log_warn("job '%s' (forming) %s", j->name, reason);
        server_remove_job(s, j);
    } else
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
    server_send(s, msg->identity, msg->identity_size, &env);
}

/* Jobs and workers, for systemd's STATUS= and logs. */
void server_summary(const server *s, char *buf, size_t size) {
    size_t members = 0;
    for (size_t i = 0; i < s->n_jobs; i++)
        members += s->jobs[i]->n_members;
    snprintf(buf, size, "%zu job%s, %zu worker%s", s->n_jobs, s->n_jobs == 1 ? "" : "s", members,
             members == 1 ? "" : "s");
}

/* Writes the Prometheus text to a new file and renames it over the old one, so the
 * textfile collector never reads half of it. */
int server_render_metrics(server *s, bool up, char **ret_text, size_t *ret_size) {
    server_status st = {0};
    FILE *out = NULL;
    int r = server_status_build(s, &st, -1, true); /* the operator's file: every job whole */
    if (r == 0 && !(out = open_memstream(ret_text, ret_size)))
        r = -ENOMEM;
    if (r == 0) {
        prometheus_write(out, up ? &st.reply : NULL);
        if (fclose(out) != 0)
            r = -ENOMEM;
    }
    server_status_free(&st);
    if (r < 0 && out) { /* what the stream had made */
        free(*ret_text);
        *ret_text = NULL;
    }
    return r;
}

/* A short printable name for a connection in logs. */
static const char *server_peer_name(const uint8_t *identity, size_t identity_size, char *buf, size_t size) {
    int n = snprintf(buf, size, "peer 0x");
    for (size_t i = 0; i < identity_size && i < 8 && n > 0 && (size_t)n + 3 < size; i++)
        n += snprintf(buf + n, size - (size_t)n, "%02x", identity[i]);
    return buf;
}

/* A reply that would have taken its connection past its budget was not sent: a member is
 * ended at the next tick (its job would wait on a reply it never got), anyone else only
 * loses the reply. */
static void server_reply_refused(server *s, const uint8_t *identity, size_t identity_size, Ddp__MsgType type,
                                 size_t queued) {
    job *j;
    job_member *m;
    if (server_is_member(s, identity, identity_size, &j, &m)) {
        if (!m->unread_reply_bytes)
            m->unread_reply_bytes = queued;
        return;
    }
    char peer[32];
    s->bad_messages++;
    log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN,
                    "not sending %s to %s: %.1f MiB of replies to it are still unread (the most is %u MiB)",
                    wire_type_name(type), server_peer_name(identity, identity_size, peer, sizeof(peer)),
                    (double)queued / (1 << 20), REPLY_BUDGET_BYTES >> 20);
}

/* A member's message from a job that ended while it did not answer (stopped, starved, cut
 * off): tells it how the job ended, as an Abort, rather than that it is nobody. */
static bool server_answer_late_member(server *s, const wire_msg *msg) {
    Ddp__MsgType type = msg->env->type;
    if (type == DDP__MSG_TYPE__JOIN || type == DDP__MSG_TYPE__STATUS_REQUEST || type == DDP__MSG_TYPE__ABORT)
        return false;
    uint64_t now = clock_now_ms();
    ended_member *m;
    ended_job *ej = ended_jobs_find(&s->ended, msg->identity, msg->identity_size, now, &m);
    if (!ej)
        return false;
    if (type == DDP__MSG_TYPE__LEAVE)
        return true; /* nothing to leave, nothing to say */
    char reason[DDP_MAX_REASON];
    snprintf(reason, sizeof(reason), "it ended %.1f s ago, while this rank (%d) did not answer: %.300s",
             (double)(now - ej->ended_ms) / 1000.0, m->rank, ej->reason);
    if (!m->came_back)
        log_info("job '%s' (generation %llu): rank %d answers again, %.1f s after the job ended; told so", ej->job,
                 (unsigned long long)ej->generation, m->rank, (double)(now - ej->ended_ms) / 1000.0);
    m->came_back = true;
    Ddp__Abort body = DDP__ABORT__INIT;
    body.code = ej->code;
    body.rank = -1;
    body.host = (char *)"";
    body.reason = reason;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ABORT, ej->job, -1, ej->generation, 0);
    env.abort = &body;
    server_send(s, msg->identity, msg->identity_size, &env);
    return true;
}

static void server_handle(server *s, wire_msg *msg, int r) {
    job *j = NULL;
    job_member *m = NULL;
    char user[sizeof(msg->user) + 16];
    server_peer_account(s, msg, user, sizeof(user));
    if (reply_budgets_note_user(&s->replies, msg->identity, msg->identity_size, user, clock_now_ms()) < 0)
        log_debug("no memory to note who sent a message: its replies count as an unknown user's");
    bool member = server_is_member(s, msg->identity, msg->identity_size, &j, &m) && server_owner_speaks(s, msg, j);
    if (member) {
        uint64_t now = clock_now_ms();
        if (m->stalled[0]) {
            log_ratelimited(&s->stall_log, LOG_LEVEL_INFO,
                            "job '%s': rank %d (pid %u on %s) answers again after %.1f s (it was %s)", j->name, m->rank,
                            m->pid, m->host, (double)(now - m->last_heard_ms) / 1000.0, m->stalled);
            m->stalled[0] = '\0';
        }
        m->last_heard_ms = now; /* any message counts as a heartbeat */
    }

    if (r < 0) {
        char peer[32];
        s->bad_messages++;
        log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN, "dropped a bad message from %s: %s",
                        server_peer_name(msg->identity, msg->identity_size, peer, sizeof(peer)), msg->error);
        if (!msg->env)
            return; /* undecodable: nothing to answer */
        if (msg->env->type == DDP__MSG_TYPE__JOIN)
            server_send_reject(s, msg->identity, msg->identity_size, "", msg->env->seq, r, msg->error);
        else
            server_send_error(s, msg, r, "%s", msg->error);
        return;
    }
    if (!member && server_answer_late_member(s, msg))
        return;

    switch (msg->env->type) {
    case DDP__MSG_TYPE__JOIN:
        server_on_join(s, msg);
        break;
    case DDP__MSG_TYPE__HEARTBEAT:
        if (member) { /* progress, for status and the stall report */
            const Ddp__Heartbeat *hb = msg->env->heartbeat;
            m->step = hb->step;
            m->samples_per_s = hb->samples_per_s;
            /* a rank out of the job's range is no rank to wait on (and would make the status invalid) */
            bool in_job = hb->waiting_on >= -1 && hb->waiting_on < (int32_t)j->world_size;
            m->waiting = hb->waiting && in_job;
            m->waiting_on = in_job ? hb->waiting_on : -1;
            m->waiting_since_ms = clock_now_ms() - hb->waiting_ms;
            snprintf(m->waiting_in, sizeof(m->waiting_in), "%s", hb->waiting_in);
        } else if (msg->env->generation) /* a member of a job this ddpd never held: it restarted */
            server_send_error(s, msg, -ENXIO, "heartbeat: ddpd does not hold job '%s' (generation %llu): rejoin it",
                              msg->env->job, (unsigned long long)msg->env->generation);
        break;
    case DDP__MSG_TYPE__LEAVE:
        server_on_leave(s, msg);
        break;
    case DDP__MSG_TYPE__BARRIER:
        server_on_barrier(s, msg);
        break;
    case DDP__MSG_TYPE__STORE_SET:
    case DDP__MSG_TYPE__STORE_GET:
    case DDP__MSG_TYPE__STORE_WAIT:
        server_on_store(s, msg);
        break;
    case DDP__MSG_TYPE__STATUS_REQUEST:
        server_on_status(s, msg);
        break;
    case DDP__MSG_TYPE__GRAD_PUSH:
        server_on_grad_push(s, msg);
        break;
    case DDP__MSG_TYPE__ABORT:
        server_on_abort_request(s, msg);
        break;
    default: {
        char peer[32];
        log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN, "dropped a %s message from %s: ddpd does not take it",
                        wire_type_name(msg->env->type),
                        server_peer_name(msg->identity, msg->identity_size, peer, sizeof(peer)));
        server_send_error(s, msg, -EPROTO, "ddpd does not take %s messages", wire_type_name(msg->env->type));
    }
    }
}

void server_dispatch(server *s) {
    for (int i = 0; i < SERVER_DISPATCH_BATCH; i++) {
        wire_msg msg;
        int r = wire_recv(s->router, true, ZMQ_DONTWAIT, &msg);
        if (r == -EAGAIN || r == -EINTR || r == -ETERM)
            break;
        server_handle(s, &msg, r);
        wire_msg_close(&msg);
    }
}

/* ---- housekeeping ----------------------------------------------------------------- */

static void server_expire_waiters(server *s, job *j, uint64_t now) {
    for (store_waiter *w = j->waits.head, *next; w; w = next) {
        next = w->next;
        if (now < w->deadline_ms)
            continue;
        char text[DDP_MAX_REASON];
        snprintf(text, sizeof(text), "store-wait for '%.64s'%s in job '%s' timed out after %u ms", w->keys[0],
                 w->n_keys > 1 ? " and others" : "", j->name, w->timeout_ms);
        Ddp__Error body = DDP__ERROR__INIT;
        body.code = -ETIMEDOUT;
        body.message = text;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__ERROR, j->name, -1, j->generation, w->seq);
        env.error = &body;
        server_send(s, w->identity, w->identity_size, &env);
        store_waits_remove(&j->waits, &j->store, w);
        store_waiter_free(w);
    }
}

/* Returns true when the job was removed. */
static bool server_check_job(server *s, job *j, uint64_t now) {
    uint64_t window = (uint64_t)s->opts.heartbeat_ms * (uint64_t)s->opts.liveness;
    for (size_t i = 0; i < j->n_members; i++) {
        job_member *m = &j->members[i];
        if (m->left || (now - m->last_heard_ms <= window && !m->unread_reply_bytes))
            continue;
        char reason[DDP_MAX_REASON], state[sizeof(m->stalled)];
        uint64_t silent_ms = now - m->last_heard_ms;
        if (m->unread_reply_bytes) { /* it asks and does not read: ddpd would hold its replies without end */
            snprintf(reason, sizeof(reason),
                     "rank %d (pid %u on %s) does not read ddpd's replies: %.1f MiB of them were waiting when the "
                     "next did not fit",
                     m->rank, m->pid, m->host, (double)m->unread_reply_bytes / (1 << 20));
        } else if (m->local_pid && process_state(m->local_pid, state, sizeof(state)) == 0) {
            /* Silent, but its process is still here: stopped, hung or starved, not dead. */
            if (!m->stalled[0])
                log_ratelimited(
                    &s->stall_log, LOG_LEVEL_WARN,
                    "job '%s': rank %d (pid %u on %s) stalled: silent for %llu ms, its process %s; it may stall "
                    "%d s (--stall-timeout)",
                    j->name, m->rank, m->pid, m->host, (unsigned long long)silent_ms, state, s->opts.stall_timeout);
            snprintf(m->stalled, sizeof(m->stalled), "%s", state);
            if (silent_ms <= (uint64_t)s->opts.stall_timeout * 1000u)
                continue;
            snprintf(reason, sizeof(reason),
                     "rank %d (pid %u on %s) stopped responding %.1f s ago (state %s; ddpd --stall-timeout %d s)",
                     m->rank, m->pid, m->host, (double)silent_ms / 1000.0, state, s->opts.stall_timeout);
        } else if (m->local_pid && (!m->gone_seen_ms || now - m->gone_seen_ms < SERVER_GONE_CONFIRM_MS)) {
            /* Its process is gone, but what it sent last (a Leave) may still be on its way
             * through ZeroMQ's I/O thread, which a crowded host starves: look again later. */
            if (!m->gone_seen_ms)
                m->gone_seen_ms = now;
            continue;
        } else {
            snprintf(reason, sizeof(reason), "rank %d (pid %u on %s) died: silent for %llu ms", m->rank, m->pid,
                     m->host, (unsigned long long)silent_ms);
        }
        if (j->state == JOB_FORMING) { /* no job to end yet: the member goes */
            log_warn("job '%s': %s; %s while the job was forming: dropped", j->name, reason,
                     m->unread_reply_bytes ? "its replies would have piled up" : "it stopped answering");
            job_remove_member(j, i);
            if (j->n_members == 0) {
                server_remove_job(s, j);
                return true;
            }
            i--;
            continue;
        }
        server_abort_job(s, j, (ssize_t)i, -ECONNABORTED, reason);
        return true;
    }

    if (j->state == JOB_RUNNING && j->recovering && now >= j->recover_deadline_ms) {
        char missing[256], reason[DDP_MAX_REASON];
        job_missing_ranks(j, missing, sizeof(missing));
        snprintf(reason, sizeof(reason), "ranks %s did not come back within %.1f s of ddpd's restart", missing,
                 (double)(s->opts.heartbeat_ms * s->opts.liveness + DDP_RECOVER_GRACE_MS) / 1000.0);
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return true;
    }
    if (j->state == JOB_RUNNING && j->n_ps_layout && now >= j->recover_deadline_ms && ps_awaits_average(&j->ps)) {
        char reason[DDP_MAX_REASON] = "";
        for (size_t b = 0; b < j->ps.n_buckets; b++)
            if (j->ps.buckets[b].average_from >= 0) {
                snprintf(reason, sizeof(reason),
                         "bucket %zu: rank %d did not give back its average of step %llu within %.1f s of the job's "
                         "recovery (a libddp older than this ddpd keeps none), and ranks behind it lack that average",
                         b, j->ps.buckets[b].average_from, (unsigned long long)(j->ps.buckets[b].step - 1),
                         (double)(s->opts.heartbeat_ms * s->opts.liveness + DDP_RECOVER_GRACE_MS) / 1000.0);
                break;
            }
        server_abort_job(s, j, -1, -ECONNABORTED, reason);
        return true;
    }
    if (j->state == JOB_RUNNING) {
        server_expire_waiters(s, j, now);
        return false;
    }
    char missing[256], reason[DDP_MAX_REASON];
    job_missing_ranks(j, missing, sizeof(missing));
    if (now - j->created_ms >= (uint64_t)s->opts.join_timeout * 1000u) {
        snprintf(reason, sizeof(reason), "job '%s' did not form within %d s: %zu/%u joined, missing ranks %s", j->name,
                 s->opts.join_timeout, j->n_members, j->world_size, missing);
        log_warn("%s", reason);
        for (size_t i = 0; i < j->n_members; i++)
            server_send_reject(s, j->members[i].identity, j->members[i].identity_size, j->name, j->members[i].join_seq,
                               -ETIMEDOUT, reason);
        server_remove_job(s, j);
        return true;
    }
    if (now - j->progress_logged_ms >= DDP_WAITING_LOG_MS) {
        log_info("job '%s': %zu/%u joined, missing ranks %s", j->name, j->n_members, j->world_size, missing);
        j->progress_logged_ms = now;
    }
    return false;
}

/* Says when ddpd stops taking push segments for the descriptors whose close is held, and
 * when it takes them again. */
static void server_watch_closes(server *s) {
    size_t closing = fd_passed_closing();
    bool held = closing >= PS_SHM_MAX_CLOSING;
    if (held && !s->closes_held) {
        log_warn("%zu descriptors handed to ddpd are still being closed (their filesystems hold the close): no push "
                 "segments are taken until fewer are (ps ranks push by message)",
                 closing);
        for (size_t i = 0; i < s->n_jobs; i++)
            ps_shm_stop_listening(&s->jobs[i]->shm);
    } else if (!held && s->closes_held)
        log_info("the held closes are done: push segments are taken again");
    s->closes_held = held;
}

void server_tick(server *s) {
    uint64_t now = clock_now_ms();
    server_watch_closes(s);
    uint64_t expected = (uint64_t)server_tick_ms(s);
    if (s->last_tick_ms && now - s->last_tick_ms > 2 * expected) {
        /* ddpd did not run (stopped, starved, swapped out): what the members sent meanwhile
         * is still on its way in, so that time does not count as their silence */
        uint64_t gap = now - s->last_tick_ms - expected;
        if (gap >= (uint64_t)s->opts.heartbeat_ms)
            log_ratelimited(&s->stall_log, LOG_LEVEL_WARN,
                            "ddpd did not run for %llu ms: not counted as the members' silence",
                            (unsigned long long)gap);
        for (size_t i = 0; i < s->n_jobs; i++)
            for (size_t k = 0; k < s->jobs[i]->n_members; k++) {
                job_member *m = &s->jobs[i]->members[k];
                m->last_heard_ms = m->last_heard_ms + gap < now ? m->last_heard_ms + gap : now;
            }
    }
    s->last_tick_ms = now;
    if (now >= s->next_heartbeat_ms) {
        for (size_t i = 0; i < s->n_jobs; i++)
            if (!s->jobs[i]->recovering) /* a rejoined member hears ddpd once every rank is back */
                server_send_heartbeats(s, s->jobs[i], NULL, false);
        s->next_heartbeat_ms = now + (uint64_t)s->opts.heartbeat_ms;
    }
    for (size_t i = s->n_jobs; i-- > 0;) {
        char err[DDP_MAX_REASON];
        if (ps_shm_expire(&s->jobs[i]->shm, now, err, sizeof(err)) < 0) {
            s->bad_messages++;
            log_ratelimited(&s->bad_input_log, LOG_LEVEL_WARN, "job '%s': %s", s->jobs[i]->name, err);
        }
        server_check_job(s, s->jobs[i], now);
    }
    reply_budgets_sweep(&s->replies, now);
}

int server_tick_ms(const server *s) {
    int t = s->opts.heartbeat_ms / 5;
    return t < 10 ? 10 : t > 100 ? 100 : t;
}

/* ---- lifecycle -------------------------------------------------------------------- */

int server_open(server *s, const server_options *opts) {
    s->opts = *opts;
    s->started_ms = clock_now_ms();
    FILE *urandom = fopen("/dev/urandom", "rb");
    if (!urandom || fread(&s->instance, sizeof(s->instance), 1, urandom) != 1) /* unique enough on one host */
        s->instance = ((uint64_t)getpid() << 32) ^ clock_now_us();
    if (urandom)
        fclose(urandom);
    s->instance |= 1; /* 0 is "none" */
    s->next_heartbeat_ms = s->started_ms;
    s->bad_input_log = (log_ratelimit)LOG_RATELIMIT_INIT(10000, 5);
    s->stall_log = (log_ratelimit)LOG_RATELIMIT_INIT(5000, 20);
    reply_budgets_init(&s->replies, REPLY_BUDGET_BYTES, REPLY_BUDGET_TOTAL_BYTES);
    int r = user_directory_open(&s->users, SERVER_USER_LOOKUP_WAIT_MS, SERVER_USER_LOOKUP_TTL_MS);
    if (r < 0) {
        log_error("cannot start the user directory's thread: %s", error_string(r));
        return r;
    }
    if (opts->state_dir) {
        char err[256];
        r = generation_load(opts->state_dir, &s->last_generation, err, sizeof(err));
        if (r < 0) {
            log_error("%s", err);
            return r;
        }
        s->saved_generation = s->loaded_generation = s->last_generation;
    }
    s->zmq_ctx = zmq_ctx_new();
    if (!s->zmq_ctx)
        return -errno;
    s->router = zmq_socket(s->zmq_ctx, ZMQ_ROUTER);
    if (!s->router)
        return -errno;
    int on = 1, ipv6 = strchr(opts->listen, '[') != NULL;
    r = wire_socket_setup(s->router, DDP_MAX_CONTROL_MSG_BYTES);
    /* An unknown peer is an error, not a silent drop; a member that reconnects with its
     * routing id keeps its place. */
    if (r == 0 && (zmq_setsockopt(s->router, ZMQ_ROUTER_MANDATORY, &on, sizeof(on)) < 0 ||
                   zmq_setsockopt(s->router, ZMQ_ROUTER_HANDOVER, &on, sizeof(on)) < 0 ||
                   zmq_setsockopt(s->router, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0))
        r = -errno;
    if (r < 0) {
        log_error("Failed to configure the control socket: %s", error_string(r));
        return r;
    }
    char err[256];
    if (opts->curve_key) { /* before bind: every TCP client then speaks CURVE, or nothing */
        curve_keypair keys;
        if ((r = curve_keypair_load(opts->curve_key, &keys, err, sizeof(err))) < 0 ||
            (r = zap_start(s->zmq_ctx, opts->curve_users, &s->zap, err, sizeof(err))) < 0) {
            log_error("%s", err);
            return r;
        }
        if (zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &on, sizeof(on)) < 0 || /* on: 1, as above */
            zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, keys.secret_key, CURVE_KEY_Z85) < 0 ||
            zmq_setsockopt(s->router, ZMQ_ZAP_DOMAIN, "ddpd", 4) < 0) {
            r = -errno;
            log_error("cannot set CURVE up: %s", error_string(r));
            return r;
        }
    }
    if ((r = endpoint_claim_prepare(&s->claim, opts->listen, err, sizeof(err))) < 0) {
        log_error("%s", err);
        return r;
    }
    if (zmq_bind(s->router, opts->listen) < 0) {
        r = -errno;
        log_error("Failed to bind '%s': %s%s", opts->listen, zmq_strerror(-r),
                  strcmp(opts->listen, DDP_DEFAULT_ENDPOINT) == 0
                      ? " (the lab service's socket, which its unit's RuntimeDirectory makes: for a ddpd of your "
                        "own, give --listen, e.g. ipc://$XDG_RUNTIME_DIR/ddpd.sock)"
                      : "");
        return r;
    }
    endpoint_claim_bound(&s->claim);
    /* Over a Unix socket every local user may connect: the kernel says who each is, and
     * each user's jobs are that user's (a TCP client's, which ddpd cannot name, are apart). */
    s->local = s->claim.ipc || strncmp(opts->listen, "ipc://", 6) == 0;
    if (s->claim.ipc && chmod(s->claim.path, 0666) < 0)
        log_warn("cannot let other users reach %s: %s", s->claim.path, strerror(errno));
    size_t len = sizeof(s->endpoint);
    if (zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, s->endpoint, &len) < 0)
        snprintf(s->endpoint, sizeof(s->endpoint), "%s", opts->listen);
    return 0;
}

void server_shutdown(server *s, const char *reason) {
    for (size_t i = s->n_jobs; i-- > 0;) {
        job *j = s->jobs[i];
        if (j->state == JOB_FORMING) {
            for (size_t k = 0; k < j->n_members; k++)
                server_send_reject(s, j->members[k].identity, j->members[k].identity_size, j->name,
                                   j->members[k].join_seq, -ESHUTDOWN, reason);
            server_remove_job(s, j);
        } else { /* ddp and dp never need ddpd between steps, ps pauses: they rejoin the next */
            log_info("job '%s' (generation %llu) goes on without ddpd; its members will rejoin the next one", j->name,
                     (unsigned long long)j->generation);
            server_send_heartbeats(s, j, NULL, true);
        }
    }
    /* Give the Aborts a moment to leave before the socket closes. */
    int linger = 1000;
    if (s->router)
        zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof(linger));
}

void server_close(server *s) {
    while (s->n_jobs)
        server_remove_job(s, s->jobs[s->n_jobs - 1]);
    char err[256]; /* a clean stop: the next ddpd goes on from the last generation given, not the block's end */
    if (s->opts.state_dir && s->saved_generation > s->last_generation &&
        generation_save(s->opts.state_dir, s->last_generation, err, sizeof(err)) < 0)
        log_warn("%s", err);
    ps_reduce_shutdown();
    ended_jobs_free(&s->ended);
    if (s->router)
        zmq_close(s->router);
    zap_stop(s->zap); /* before the context ends */
    s->zap = NULL;
    if (s->zmq_ctx)
        zmq_ctx_term(s->zmq_ctx);
    s->router = s->zmq_ctx = NULL;
    reply_budgets_free(&s->replies); /* every frame let go with the context */
    endpoint_claim_release(&s->claim);
    user_directory_close(s->users);
    s->users = NULL;
}
