/* The process group: joining through ddpd, ranks, barrier, errors. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/data_plane.h"
#include "common/error.h"
#include "worker/libddp/coll.h"
#include "worker/libddp/group.h"

static _Thread_local char init_error[DDP_MAX_REASON + 256];

/* ---- options ---------------------------------------------------------------------- */

/* The options with every unset field filled from the environment or the default. */
typedef struct {
    const unsigned long long *ps_buckets;
    size_t n_ps_buckets;
    char coordinator[DDP_MAX_ENDPOINT + 1];
    char job[DDP_MAX_JOB_NAME + 1];
    char mode[DDP_MAX_MODE + 1];
    char data_endpoint[DDP_MAX_ENDPOINT + 1];
    char transport[8];
    int world_size, rank, local_rank;
    int timeout_ms, join_timeout_ms, connect_timeout_ms;
    int watchdog_ms;              /* $DDP_WATCHDOG_MS: 0 for none */
    int coordinator_wait_ms;      /* $DDP_COORDINATOR_WAIT_MS: 0 for none */
    const char *curve_server_key; /* $DDP_CURVE_SERVER_KEY: ddpd speaks CURVE; NULL: it does not */
    curve_keypair curve;          /* $DDP_CURVE_KEY's pair */
} group_settings;

DDP_EXPORT int ddp_get_version(void) {
    return DDP_VERSION_CODE;
}

DDP_EXPORT void ddp_options_init(ddp_options *opts) {
    *opts = (ddp_options)DDP_OPTIONS_INIT;
}

static int env_int(const char *name, int min, int max, int *value) {
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min || v > max) {
        snprintf(init_error, sizeof(init_error), "environment %s='%.32s' is not an integer in [%d, %d]", name, s, min,
                 max);
        return -EINVAL;
    }
    *value = (int)v;
    return 0;
}

static int settings_string(char *dst, size_t size, const char *from_opts, const char *env, const char *def,
                           const char *what) {
    const char *v = from_opts ? from_opts : (env && getenv(env) && *getenv(env)) ? getenv(env) : def;
    if (strlen(v) >= size) {
        snprintf(init_error, sizeof(init_error), "%s '%.64s...' is longer than %zu bytes", what, v, size - 1);
        return -EINVAL;
    }
    snprintf(dst, size, "%s", v);
    return 0;
}

static int settings_resolve(const ddp_options *o, group_settings *s) {
    ddp_options none = DDP_OPTIONS_INIT;
    if (!o)
        o = &none;
    if (o->size != sizeof(ddp_options)) {
        snprintf(init_error, sizeof(init_error),
                 "ddp_options.size is %zu where this libddp knows %zu: start from DDP_OPTIONS_INIT, and run with a "
                 "libddp as new as the ddp.h you built with",
                 o->size, sizeof(ddp_options));
        return -EINVAL;
    }
    *s = (group_settings){.rank = -1, .local_rank = 0};

    if (o->coordinator || getenv("DDP_COORDINATOR"))
        TRY(settings_string(s->coordinator, sizeof(s->coordinator), o->coordinator, "DDP_COORDINATOR", "",
                            "coordinator"));
    else if (!getenv("MASTER_ADDR") && !getenv("MASTER_PORT")) /* the lab service's socket */
        snprintf(s->coordinator, sizeof(s->coordinator), "%s", DDP_DEFAULT_ENDPOINT);
    else {
        const char *addr = getenv("MASTER_ADDR");
        int port = 29500;
        TRY(env_int("MASTER_PORT", 1, 65535, &port));
        if (!addr || !*addr)
            addr = "127.0.0.1";
        bool v6 = strchr(addr, ':') != NULL;
        if ((size_t)snprintf(s->coordinator, sizeof(s->coordinator), v6 ? "tcp://[%s]:%d" : "tcp://%s:%d", addr,
                             port) >= sizeof(s->coordinator)) {
            snprintf(init_error, sizeof(init_error), "MASTER_ADDR is too long");
            return -EINVAL;
        }
    }
    char why[256];
    if (wire_endpoint_check(s->coordinator, false, why, sizeof(why)) < 0) {
        snprintf(init_error, sizeof(init_error), "coordinator %s", why);
        return -EINVAL;
    }
    TRY(settings_string(s->job, sizeof(s->job), o->job, "DDP_JOB", "default", "job name"));
    if (!wire_name_valid(s->job, DDP_MAX_JOB_NAME)) {
        snprintf(init_error, sizeof(init_error), "job name '%.64s' is not 1-%d of [A-Za-z0-9._-]", s->job,
                 DDP_MAX_JOB_NAME);
        return -EINVAL;
    }
    TRY(settings_string(s->mode, sizeof(s->mode), o->mode, NULL, "", "mode"));
    if (s->mode[0] && !wire_name_valid(s->mode, DDP_MAX_MODE)) {
        snprintf(init_error, sizeof(init_error), "mode '%s' is not a name", s->mode);
        return -EINVAL;
    }
    TRY(settings_string(s->data_endpoint, sizeof(s->data_endpoint), o->data_endpoint, "DDP_DATA_ENDPOINT", "ipc://@*",
                        "data endpoint"));
    if (wire_endpoint_check(s->data_endpoint, true, why, sizeof(why)) < 0) {
        snprintf(init_error, sizeof(init_error), "data endpoint %s", why);
        return -EINVAL;
    }
    /* CURVE to a ddpd over TCP: its public key, and this user's key pair (ddpctl keygen) */
    s->curve_server_key = getenv("DDP_CURVE_SERVER_KEY");
    const char *curve_key = getenv("DDP_CURVE_KEY");
    if (!s->curve_server_key != !curve_key || (s->curve_server_key && !curve_key_valid(s->curve_server_key))) {
        snprintf(init_error, sizeof(init_error),
                 "DDP_CURVE_SERVER_KEY (ddpd's public key, 40 Z85 characters) and DDP_CURVE_KEY (this user's key "
                 "file) go together");
        return -EINVAL;
    }
    if (curve_key && curve_keypair_load(curve_key, &s->curve, init_error, sizeof(init_error)) < 0)
        return -EINVAL;
    TRY(settings_string(s->transport, sizeof(s->transport), o->transport, "DDP_TRANSPORT", "auto", "transport"));
    if (strcmp(s->transport, "auto") && strcmp(s->transport, "shm") && strcmp(s->transport, "zmq")) {
        snprintf(init_error, sizeof(init_error), "transport '%s': use auto, shm or zmq", s->transport);
        return -EINVAL;
    }

    s->world_size = o->world_size;
    if (s->world_size <= 0)
        TRY(env_int("WORLD_SIZE", 1, DDP_MAX_WORLD_SIZE, &s->world_size));
    if (s->world_size <= 0 || s->world_size > DDP_MAX_WORLD_SIZE) {
        snprintf(init_error, sizeof(init_error),
                 "world size not set or out of range: set ddp_options.world_size or WORLD_SIZE to 1..%d",
                 DDP_MAX_WORLD_SIZE);
        return -EINVAL;
    }
    s->rank = o->rank;
    if (s->rank < 0)
        TRY(env_int("RANK", 0, s->world_size - 1, &s->rank));
    if (s->rank >= s->world_size) {
        snprintf(init_error, sizeof(init_error), "rank %d is not below the world size %d", s->rank, s->world_size);
        return -EINVAL;
    }
    s->local_rank = o->local_rank;
    if (s->local_rank < 0) {
        s->local_rank = 0;
        TRY(env_int("LOCAL_RANK", 0, DDP_MAX_WORLD_SIZE - 1, &s->local_rank));
    }
    s->ps_buckets = o->ps_buckets;
    s->n_ps_buckets = o->n_ps_buckets;
    if (s->n_ps_buckets > DDP_MAX_PS_BUCKETS || (s->n_ps_buckets && !s->ps_buckets)) {
        snprintf(init_error, sizeof(init_error), "ps_buckets: %zu buckets (at most %d)", s->n_ps_buckets,
                 DDP_MAX_PS_BUCKETS);
        return -EINVAL;
    }
    s->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DDP_DEFAULT_TIMEOUT_MS;
    s->join_timeout_ms = o->join_timeout_ms > 0 ? o->join_timeout_ms : DDP_DEFAULT_JOIN_TIMEOUT_MS;
    s->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : DDP_DEFAULT_CONNECT_TIMEOUT_MS;
    if (o->timeout_ms <= 0)
        TRY(env_int("DDP_TIMEOUT_MS", 1, DDP_MAX_TIMEOUT_MS, &s->timeout_ms));
    if (o->join_timeout_ms <= 0)
        TRY(env_int("DDP_JOIN_TIMEOUT_MS", 1, DDP_MAX_TIMEOUT_MS, &s->join_timeout_ms));
    if (o->connect_timeout_ms <= 0)
        TRY(env_int("DDP_CONNECT_TIMEOUT_MS", 1, DDP_MAX_TIMEOUT_MS, &s->connect_timeout_ms));
    s->watchdog_ms = DDP_DEFAULT_WATCHDOG_MS;
    TRY(env_int("DDP_WATCHDOG_MS", 0, DDP_MAX_TIMEOUT_MS, &s->watchdog_ms));
    s->coordinator_wait_ms = DDP_DEFAULT_COORDINATOR_WAIT_MS;
    TRY(env_int("DDP_COORDINATOR_WAIT_MS", 0, DDP_MAX_TIMEOUT_MS, &s->coordinator_wait_ms));
    return 0;
}

/* ---- requests --------------------------------------------------------------------- */

int group_fail(ddp_group *g, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->last_error, sizeof(g->last_error), fmt, ap);
    va_end(ap);
    return err;
}

/* ---- the group -------------------------------------------------------------------- */

static void group_free(ddp_group *g) {
    comm_close(&g->comm, g->failed != 0);
    pthread_mutex_destroy(&g->queue_lock);
    pthread_cond_destroy(&g->queue_changed);
    for (int i = 0; i < g->world_size; i++) {
        free(g->endpoints ? g->endpoints[i] : NULL);
        free(g->data_keys ? g->data_keys[i] : NULL);
    }
    free(g->endpoints);
    free(g->data_keys);
    free(g->pids);
    free(g->here);
    store_clear(&g->store_sets);
    for (size_t i = 0; g->ps_early && i < g->n_ps_buckets; i++)
        agent_event_free(g->ps_early[i]);
    free(g->ps_early);
    free(g->ps_buckets);
    free(g->ps_push_step);
    free(g->ps_average_copy);
    free(g->ps_pull_step);
    /* before the push segment goes: a push sent as a frame of it may still be in ZeroMQ's
     * queue (after a ddpd restart), which the context's end waits out */
    if (g->zmq_ctx)
        zmq_ctx_term(g->zmq_ctx);
    if (g->ps_pushed)
        munmap(g->ps_pushed, g->ps_bytes);
    if (g->ps_average)
        munmap(g->ps_average, g->ps_bytes);
    if (g->ps_doorbell >= 0)
        close(g->ps_doorbell);
    for (size_t i = 0; i < g->n_private_buffers; i++)
        free(g->private_buffers[i]);
    free(g->private_buffers);
    free(g);
}

/* This host's name as ddpd hears it: $DDP_HOST when set (a container, or two "hosts" on
 * one machine in the tests), else gethostname. Ranks of one name share memory. */
static void group_host(char *host, size_t size) {
    const char *given = getenv("DDP_HOST");
    if (given && *given && wire_name_valid(given, size - 1))
        snprintf(host, size, "%s", given);
    else if (gethostname(host, size - 1) < 0)
        snprintf(host, size, "localhost");
    host[size - 1] = '\0';
}

/* The data plane's stall report goes to ddpd with the control thread's heartbeats. */
static void group_waiting(void *ctx, int peer, const char *what) {
    agent_set_waiting(ctx, peer, what);
}

/* Joins the job and waits for it to form; *ret_peers is the data plane's view of the others. */
static int group_join(ddp_group *g, const group_settings *s, comm_peers *ret_peers) {
    group_host(g->host, sizeof(g->host));
    snprintf(g->mode, sizeof(g->mode), "%s", s->mode);
    char *host = g->host;
    Ddp__Join body = DDP__JOIN__INIT;
    body.world_size = (uint32_t)s->world_size;
    body.rank = s->rank;
    body.mode = (char *)s->mode;
    body.pid = (uint32_t)getpid();
    body.host = host;
    body.data_endpoint = g->data_endpoint;
    body.data_key = g->data_key;
    body.data_plane = DDP_DATA_PLANE_VERSION;
    body.ps_buckets = g->ps_buckets;
    body.n_ps_buckets = g->n_ps_buckets;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__JOIN);
    env.join = &body;

    char timeout_text[DDP_MAX_REASON];
    snprintf(timeout_text, sizeof(timeout_text), "job '%s' did not form within %d ms at %s", g->job, s->join_timeout_ms,
             g->coordinator);
    agent_event *ev = NULL;
    int r = group_request(g, &env, DDP__MSG_TYPE__WELCOME, s->join_timeout_ms, timeout_text, &ev);
    if (r < 0) {
        snprintf(init_error, sizeof(init_error), "%s", g->last_error);
        return r;
    }
    const Ddp__Welcome *w = ev->msg.env->welcome;
    if ((int)w->world_size != s->world_size || (s->rank >= 0 && (int)w->rank != s->rank)) {
        snprintf(init_error, sizeof(init_error), "ddpd welcomed rank %u of %u, not what was asked (%d of %d)", w->rank,
                 w->world_size, s->rank, s->world_size);
        agent_event_free(ev);
        return -EPROTO;
    }
    g->rank = (int)w->rank;
    g->generation = w->generation;
    snprintf(g->ps_socket, sizeof(g->ps_socket), "%s", w->ps_socket);
    g->endpoints = calloc(w->world_size, sizeof(char *));
    g->data_keys = calloc(w->world_size, sizeof(char *));
    g->pids = calloc(w->world_size, sizeof(uint32_t));
    g->here = calloc(w->world_size, sizeof(bool));
    bool one_host = true, hosts_shared = false, have_all = g->endpoints && g->data_keys && g->pids && g->here;
    for (size_t i = 0; have_all && i < w->n_endpoints; i++) {
        if (!(g->endpoints[i] = strdup(w->endpoints[i])) || !(g->data_keys[i] = strdup(w->data_keys[i])))
            r = -ENOMEM;
        g->pids[i] = w->pids[i];
        g->here[i] = strcmp(w->hosts[i], w->hosts[w->rank]) == 0;
        one_host = one_host && g->here[i];
        for (size_t j = 0; j < i && !hosts_shared; j++)
            hosts_shared = strcmp(w->hosts[i], w->hosts[j]) == 0;
    }
    *ret_peers = (comm_peers){.rank = g->rank,
                              .world = g->world_size,
                              .generation = g->generation,
                              .endpoints = g->endpoints,
                              .keys = g->data_keys,
                              .pids = g->pids,
                              .here = g->here,
                              .one_host = one_host,
                              .hosts_shared = hosts_shared};
    agent_event_free(ev);
    if (!have_all || r < 0) {
        snprintf(init_error, sizeof(init_error), "out of memory");
        return -ENOMEM;
    }
    return 0;
}

/* Shared memory wherever every rank wants it (they agree first: one rank on ZeroMQ alone
 * would leave the others waiting): for the collectives where every rank is on this host;
 * in a job on several hosts, for the frames between the ranks of one host. */
static int group_choose_transport(ddp_group *g, const group_settings *s, const comm_peers *peers) {
    if (peers->world == 1)
        return 0;
    bool asked = strcmp(s->transport, "shm") == 0;
    if (asked && !peers->one_host)
        return group_fail(g, -EINVAL, "transport shm: the job's ranks are not all on this host");
    int32_t wanted = peers->hosts_shared && strcmp(s->transport, "zmq") != 0;
    TRY(comm_agree_min(&g->comm, &wanted));
    if (!wanted && asked)
        return group_fail(g, -EINVAL, "transport shm: another rank of the job uses zmq");
    if (!wanted)
        return 0;
    return peers->one_host ? coll_shm_open(&g->comm) : comm_mailbox_open(&g->comm);
}

DDP_EXPORT int ddp_init(const ddp_options *opts, ddp_group **ret_group) {
    init_error[0] = '\0';
    if (!ret_group) { /* before joining: a member nobody holds would block the job */
        snprintf(init_error, sizeof(init_error), "ddp_init: ret_group is NULL");
        return -EINVAL;
    }
    group_settings s;
    int r = settings_resolve(opts, &s);
    if (r < 0)
        return r;
    ddp_group *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(init_error, sizeof(init_error), "out of memory");
        return -ENOMEM;
    }
    g->ps_doorbell = -1;
    pthread_mutex_init(&g->queue_lock, NULL);
    pthread_cond_init(&g->queue_changed, NULL);
    snprintf(g->coordinator, sizeof(g->coordinator), "%s", s.coordinator);
    if (s.n_ps_buckets) {
        g->n_ps_buckets = s.n_ps_buckets;
        g->ps_buckets = calloc(s.n_ps_buckets, sizeof(uint64_t));
        g->ps_push_step = calloc(s.n_ps_buckets, sizeof(uint64_t));
        g->ps_pull_step = calloc(s.n_ps_buckets, sizeof(uint64_t));
        g->ps_early = calloc(s.n_ps_buckets, sizeof(agent_event *));
        if (!g->ps_buckets || !g->ps_push_step || !g->ps_pull_step || !g->ps_early) {
            r = -ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < s.n_ps_buckets; i++)
            g->ps_buckets[i] = s.ps_buckets[i];
    }
    snprintf(g->job, sizeof(g->job), "%s", s.job);
    g->rank = -1;
    g->world_size = s.world_size;
    g->local_rank = s.local_rank;
    g->timeout_ms = s.timeout_ms;
    g->zmq_ctx = zmq_ctx_new();
    if (!g->zmq_ctx) {
        r = -errno;
        snprintf(init_error, sizeof(init_error), "cannot create a ZeroMQ context: %s", zmq_strerror(-r));
        goto fail;
    }
    g->comm = (comm){.timeout_ms = s.timeout_ms,
                     .end = &g->agent.end,
                     .waiting = group_waiting,
                     .waiting_ctx = &g->agent,
                     .error = g->last_error,
                     .error_size = sizeof(g->last_error)};
    if ((r = comm_zmq_open(&g->comm)) < 0 ||
        (r = comm_listen(&g->comm, s.data_endpoint, g->data_endpoint, sizeof(g->data_endpoint), g->data_key)) < 0) {
        snprintf(init_error, sizeof(init_error), "%s", g->last_error);
        goto fail;
    }
    if ((r = agent_start(&g->agent, g->zmq_ctx, s.coordinator, s.job, s.connect_timeout_ms, s.watchdog_ms,
                         s.coordinator_wait_ms, s.curve_server_key, &s.curve)) < 0) {
        snprintf(init_error, sizeof(init_error), "cannot connect to the coordinator '%s': %s", s.coordinator,
                 r == -EINVAL ? "not a valid ZeroMQ endpoint" : error_string(r));
        goto fail;
    }
    comm_peers peers;
    if ((r = group_join(g, &s, &peers)) < 0)
        goto fail;
    if ((r = comm_start(&g->comm, &peers)) < 0 || (r = group_choose_transport(g, &s, &peers)) < 0) {
        snprintf(init_error, sizeof(init_error), "%s", g->last_error);
        goto fail;
    }
    /* ddpd's memory only where ddpd is on this host: the socket's name is abstract, so on
     * another host it is free for anyone to take, and a rank would hand its gradients to
     * whoever bound it, and train on what that one wrote as averages */
    bool share = g->ps_socket[0] && strcmp(s.transport, "zmq") != 0 && g->agent.coordinator_here;
    if (g->n_ps_buckets && (r = ps_client_start(g, share)) < 0) {
        snprintf(init_error, sizeof(init_error), "out of memory for the ps buckets");
        goto fail;
    }
    group_update_rejoin(g); /* from now on, a ddpd that restarts takes this rank back */
    *ret_group = g;
    return 0;
fail:
    if (!init_error[0])
        snprintf(init_error, sizeof(init_error), "%s", error_string(r));
    g->failed = r; /* nothing queued for a peer during init is worth waiting for */
    /* Interrupted while the job formed: ddpd frees our place at once, not after silence. */
    Ddp__Leave leave_body = DDP__LEAVE__INIT;
    Ddp__Envelope leave;
    group_envelope(g, &leave, DDP__MSG_TYPE__LEAVE);
    leave.leave = &leave_body;
    agent_stop(&g->agent, r == -EINTR ? &leave : NULL);
    group_free(g);
    return r;
}

DDP_EXPORT int ddp_interrupt(void) {
    return agent_interrupt();
}

DDP_EXPORT int ddp_abort(ddp_group *g, const char *reason) {
    if (!g)
        return -EINVAL;
    char text[DDP_MAX_REASON];
    snprintf(text, sizeof(text), "%s", reason && *reason ? reason : "no reason given");
    for (char *c = text; *c; c++) /* the wire takes printable ASCII */
        if (!wire_printable(*c))
            *c = ' ';
    char host[DDP_MAX_HOST + 1];
    group_host(host, sizeof(host));
    Ddp__Abort body = DDP__ABORT__INIT;
    body.rank = g->rank;
    body.pid = (uint32_t)getpid();
    body.host = host;
    body.code = -ECONNABORTED;
    body.reason = text;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__ABORT);
    env.abort = &body;
    int r = agent_send(&g->agent, &env); /* ddpd ends the job on it: ddp_finalize sends no Leave after */
    /* The job is over here too, at once: not only when ddpd's Abort comes back. */
    char why[DDP_MAX_REASON + 64];
    snprintf(why, sizeof(why), "job '%s' aborted by this rank: %.400s", g->job, text);
    job_end_raise(&g->agent.end, -ECONNABORTED, why);
    job_end_told(&g->agent.end);
    g->failed = group_fail(g, -ECONNABORTED, "%s", why);
    return r;
}

DDP_EXPORT void ddp_finalize(ddp_group *g) {
    if (!g)
        return;
    coll_shutdown(g);
    Ddp__Leave body = DDP__LEAVE__INIT;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__LEAVE);
    env.leave = &body;
    agent_stop(&g->agent, g->failed ? NULL : &env);
    group_free(g);
}

DDP_EXPORT int ddp_job_status(ddp_group *g) {
    if (!g)
        return -EINVAL;
    int code = job_end_code(&g->agent.end);
    if (!code)
        return 0;
    job_end_told(&g->agent.end);
    return group_fail(g, code, "%s", g->agent.end.text);
}

DDP_EXPORT int ddp_stop_requested(ddp_group *g) {
    TRY(ddp_job_status(g));
    job_end_told(&g->agent.end);
    if (!atomic_load(&g->agent.end.stop_asked))
        return 0;
    return group_fail(g, -ECONNABORTED, "%s", g->agent.end.stop_text);
}

DDP_EXPORT int ddp_report_progress(ddp_group *g, unsigned long long step, double samples_per_s) {
    if (!g)
        return -EINVAL;
    job_end_told(&g->agent.end);
    agent_set_progress(&g->agent, step, samples_per_s);
    return 0;
}

DDP_EXPORT int ddp_rank(const ddp_group *g) {
    return g ? g->rank : -EINVAL;
}

DDP_EXPORT int ddp_world_size(const ddp_group *g) {
    return g ? g->world_size : -EINVAL;
}

DDP_EXPORT int ddp_local_rank(const ddp_group *g) {
    return g ? g->local_rank : -EINVAL;
}

DDP_EXPORT int ddp_timeout_ms(const ddp_group *g) {
    return g ? g->timeout_ms : -EINVAL;
}

DDP_EXPORT const char *ddp_transport(const ddp_group *g) {
    if (!g)
        return NULL;
    if (g->comm.collectives)
        return g->comm.collectives->name;
    return g->comm.local ? "shm+zmq" : g->comm.transport->name;
}

DDP_EXPORT int ddp_barrier(ddp_group *g) {
    if (!g)
        return -EINVAL;
    if (g->comm.collectives) /* the ranks share memory: no round trip to ddpd */
        return coll_barrier(g);
    coll_drain(g); /* after every async request before it, as every call on the group */
    Ddp__Barrier body = DDP__BARRIER__INIT;
    body.round = g->barrier_round;
    Ddp__Envelope env;
    group_envelope(g, &env, DDP__MSG_TYPE__BARRIER);
    env.barrier = &body;
    char timeout_text[128];
    snprintf(timeout_text, sizeof(timeout_text), "barrier %llu timed out after %d ms: another rank has not reached it",
             (unsigned long long)g->barrier_round, g->timeout_ms);
    agent_event *ev = NULL;
    int r = group_request(g, &env, DDP__MSG_TYPE__BARRIER, g->timeout_ms, timeout_text, &ev);
    if (r == -ETIMEDOUT) /* ddpd still counts us as arrived: the group cannot go on */
        g->failed = r;
    if (r < 0)
        return r;
    agent_event_free(ev);
    g->barrier_round++;
    group_update_rejoin(g);
    return 0;
}

DDP_EXPORT const char *ddp_strerror(int err) {
    return error_string(err);
}

DDP_EXPORT const char *ddp_last_error(const ddp_group *g) {
    return g ? g->last_error : init_error;
}
