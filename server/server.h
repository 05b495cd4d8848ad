/* ddpd's state and its answers to every message: rendezvous, liveness, barrier, store,
 * status. Single-threaded; ddpd.c owns the loop and calls server_handle() and
 * server_tick(). Nothing a peer sends can make it exit. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/limits.h"
#include "common/log.h"
#include "server/ended_jobs.h"
#include "server/endpoint.h"
#include "server/job.h"
#include "server/reply_budget.h"

typedef struct {
    char *listen;
    char *config;
    int heartbeat_ms;
    int liveness;
    int stall_timeout; /* seconds a silent member whose process is still on this host may stay stalled */
    int join_timeout;  /* seconds a job may take to form */
    char *log_level;
    char *metrics_file;
    char *metrics_group;  /* the metrics file's group, or NULL: ddpd's own */
    gid_t metrics_gid;    /* metrics_group's, looked up at start-up */
    char *state_dir;      /* where the last generation is kept across restarts, or NULL */
    char *operator_group; /* its members (and root) may see and abort every job */
    /* Per user (a job's owner; every TCP client counts as one), over all its jobs. */
    int user_jobs, user_members, user_store_waits;
    double user_store_mb, user_ps_mb;
    char *curve_key;   /* ddpd's CURVE key pair file: TCP clients must speak CURVE */
    char *curve_users; /* "USER PUBLIC-KEY" lines: who may connect over TCP */
    bool insecure;     /* listen on a non-loopback TCP address without CURVE all the same */
    bool help;
    bool version;
} server_options;

typedef struct {
    server_options opts;
    void *zmq_ctx;
    void *router;
    char endpoint[DDP_MAX_ENDPOINT + 1]; /* as bound, port resolved */
    endpoint_claim claim;                /* an ipc:// path, to give back */
    bool local;                          /* bound to ipc://: the kernel names each peer's user */
    struct zap *zap;                     /* with CURVE: who each TCP client is */
    struct user_directory *users;        /* users' and groups' names, looked up off the loop */
    job *jobs[DDP_MAX_JOBS];
    size_t n_jobs;
    ended_jobs ended;           /* to tell a member that comes back late how its job ended */
    uint64_t last_generation;   /* the last a job was given */
    uint64_t saved_generation;  /* the state directory's: a block above last_generation, written ahead */
    uint64_t loaded_generation; /* the state directory's at start-up: no ddpd before gave one past it */
    uint64_t started_ms;
    uint64_t instance; /* drawn at the start: this ddpd, not one that restarted (Heartbeat.instance) */
    uint64_t next_heartbeat_ms;
    uint64_t last_tick_ms; /* a tick later than a heartbeat interval: ddpd itself did not run */
    log_ratelimit bad_input_log;
    log_ratelimit stall_log;       /* hundreds of ranks starved at once: the machine, said in a few lines */
    uint64_t bad_messages, aborts; /* for the metrics */
    reply_budgets replies;         /* what ZeroMQ holds of the replies to each connection */
    bool closes_held; /* PS_SHM_MAX_CLOSING passed descriptors still closing: said when it begins and ends */
} server;

/* Binds the ROUTER socket. Logs and returns a negative error on failure. */
int server_open(server *s, const server_options *opts);
/* Reads and answers every message waiting on the socket. */
void server_dispatch(server *s);
/* The descriptors besides the socket that the loop polls for reading, two a job at most
 * (a ps job's listener for push segments or the connection it accepted, and its
 * doorbell), up to max; and what to do when one is ready. */
size_t server_poll_fds(const server *s, int *fds, size_t max);
void server_on_fd(server *s, int fd);
/* Housekeeping: heartbeats, dead members, join timeouts, store-wait timeouts, progress. */
void server_tick(server *s);
/* Tells every member why the job ends and gives queued messages a moment to leave. */
void server_shutdown(server *s, const char *reason);
void server_close(server *s);

/* "2 jobs, 6 workers" */
void server_summary(const server *s, char *buf, size_t size);
/* The jobs and members in the Prometheus text format (malloc'd: server/metrics_writer.h
 * writes it); with up false, that ddpd is down (its last, at a clean stop). */
int server_render_metrics(server *s, bool up, char **ret_text, size_t *ret_size);

/* Milliseconds between ticks: fine enough to notice a death well within the window. */
int server_tick_ms(const server *s);
