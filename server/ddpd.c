/* ddpd: the coordinator. One zmq_poll loop over the control socket plus a periodic tick;
 * signal handlers only set flags. */
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/atomic_file.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/fd_limit.h"
#include "common/fd_passed.h"
#include "common/log.h"
#include "common/wire.h"
#include "server/metrics_writer.h"
#include "server/notify.h"
#include "server/server.h"

#define DDPD_METRICS_STOP_MS 5000 /* the last write of the metrics file (ddpd down) gets this long */
#define DDPD_LOG_FLUSH_MS 1000    /* and the journal this long to take what it has not of the log */

static const char *const log_levels[] = {"error", "warn", "info", "debug", NULL};

static const config_option ddpd_options[] = {
    {"listen", CONFIG_STRING, 1, DDP_MAX_ENDPOINT, DDP_DEFAULT_ENDPOINT, offsetof(server_options, listen),
     "control endpoint to bind: a Unix socket (ipc://PATH: ddpd knows each client's user) or tcp://HOST:PORT", "EP"},
    {"config", CONFIG_STRING, 1, 4096, NULL, offsetof(server_options, config), "read options from an INI file", "FILE"},
    {"heartbeat-ms", CONFIG_INT, DDP_MIN_HEARTBEAT_MS, DDP_MAX_HEARTBEAT_MS, "500",
     offsetof(server_options, heartbeat_ms), "heartbeat interval, both ways", "MS"},
    {"liveness", CONFIG_INT, 1, DDP_MAX_LIVENESS, "3", offsetof(server_options, liveness),
     "missed heartbeats before a member is declared dead", "N"},
    {"stall-timeout", CONFIG_INT, 1, 86400, "60", offsetof(server_options, stall_timeout),
     "seconds a silent member whose process still exists on this host (stopped, hung) may stall before it ends "
     "its job",
     "S"},
    {"state-dir", CONFIG_STRING, 1, 1024, NULL, offsetof(server_options, state_dir),
     "keep the last job generation here, so that a restarted ddpd goes on from it (the members of running jobs "
     "rejoin it)",
     "DIR"},
    {"join-timeout", CONFIG_INT, 1, 86400, "300", offsetof(server_options, join_timeout),
     "seconds a job may take to form before its members are rejected", "S"},
    {"log-level", CONFIG_STRING, 1, 8, "info", offsetof(server_options, log_level), "error, warn, info or debug",
     "LEVEL", log_levels},
    {"metrics-file", CONFIG_STRING, 1, 4096, NULL, offsetof(server_options, metrics_file),
     "write jobs and members in the Prometheus text format here every second (atomically)", "PATH"},
    {"metrics-group", CONFIG_STRING, 1, 64, NULL, offsetof(server_options, metrics_group),
     "the group that may read --metrics-file (mode 0640; node_exporter's, for its textfile collector); by default "
     "ddpd's own",
     "GROUP"},
    {"operator-group", CONFIG_STRING, 1, 64, "ddp", offsetof(server_options, operator_group),
     "its members, and root, may see and abort every user's job", "GROUP"},
    {"user-jobs", CONFIG_INT, 1, DDP_MAX_JOBS, "16", offsetof(server_options, user_jobs),
     "jobs one user may hold at once", "N"},
    {"user-members", CONFIG_INT, 1, DDP_MAX_PEERS, "1024", offsetof(server_options, user_members),
     "members of one user's jobs, together", "N"},
    {"user-store-mb", CONFIG_DOUBLE, 0, 1 << 20, "256", offsetof(server_options, user_store_mb),
     "store keys and values of one user's jobs, together", "MB"},
    {"user-store-waits", CONFIG_INT, 1, 1 << 20, "4096", offsetof(server_options, user_store_waits),
     "pending store waits of one user's jobs, together", "N"},
    {"curve-key", CONFIG_STRING, 1, 4096, NULL, offsetof(server_options, curve_key),
     "ddpd's CURVE key pair (ddpctl keygen): TCP clients must then speak CURVE with a key --curve-users names", "FILE"},
    {"curve-users", CONFIG_STRING, 1, 4096, NULL, offsetof(server_options, curve_users),
     "who may connect over CURVE: \"USER PUBLIC-KEY\" lines", "FILE"},
    {"insecure", CONFIG_BOOL, 0, 1, NULL, offsetof(server_options, insecure),
     "listen on a non-loopback TCP address without CURVE all the same"},
    {"user-ps-mb", CONFIG_DOUBLE, 0, 1 << 24, "4096", offsetof(server_options, user_ps_mb),
     "ps buffers ddpd holds for one user's jobs, together", "MB"},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(server_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(server_options, help), "print this help and exit", NULL, NULL, NULL,
     'h'},
};

static const config_spec ddpd_spec = {
    .program = "ddpd",
    .usage = "[OPTIONS]",
    .summary = "The ddpd coordinator: rendezvous, ranks, liveness, barrier and store for training jobs.",
    .env_prefix = "DDPD_",
    .options = ddpd_options,
    .n_options = sizeof(ddpd_options) / sizeof(ddpd_options[0]),
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    if (stop_signal == SIGINT && sig == SIGINT)
        _exit(130); /* a second Ctrl-C: leave at once */
    stop_signal = sig;
}

/* A TCP endpoint other hosts may reach: not 127.x, localhost or [::1]. */
static bool listen_is_open(const char *ep) {
    if (strncmp(ep, "tcp://", 6) != 0)
        return false;
    const char *host = ep + 6;
    return strncmp(host, "127.", 4) != 0 && strncmp(host, "localhost:", 10) != 0 && strncmp(host, "[::1]:", 6) != 0;
}

int main(int argc, char **argv) {
    server_options opts = {0};
    char err[512];
    int optind_ = 0;
    int r = config_load(&ddpd_spec, &opts, argc, argv, &optind_, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "ddpd: %s\n", err);
        config_free(&ddpd_spec, &opts);
        return 2;
    }
    if (opts.help || opts.version || optind_ < argc) {
        if (opts.version)
            printf("ddpd %s (protocol %u)\n", DDP_VERSION, DDP_PROTOCOL_VERSION);
        else if (opts.help)
            config_print_help(&ddpd_spec, stdout);
        else
            fprintf(stderr, "ddpd: unexpected argument '%s' (see --help)\n", argv[optind_]);
        config_free(&ddpd_spec, &opts);
        return optind_ < argc && !opts.help && !opts.version ? 2 : 0;
    }
    if (wire_endpoint_check(opts.listen, true, err, sizeof(err)) < 0) {
        fprintf(stderr, "ddpd: --listen %s\n", err);
        config_free(&ddpd_spec, &opts);
        return 2;
    }
    /* Anyone who reaches a TCP port can speak to ddpd: beyond loopback only with CURVE. */
    if (!opts.curve_key != !opts.curve_users) {
        fprintf(stderr, "ddpd: --curve-key and --curve-users go together\n");
        config_free(&ddpd_spec, &opts);
        return 2;
    }
    if (listen_is_open(opts.listen) && !opts.curve_key && !opts.insecure) {
        fprintf(stderr,
                "ddpd: refusing to listen on %s without CURVE: anyone who can reach it could join, read or end any "
                "job. Give --curve-key and --curve-users (see ddpctl keygen), or --insecure to do it all the same\n",
                opts.listen);
        config_free(&ddpd_spec, &opts);
        return 2;
    }
    /* A metrics file that could not be written is found now, not a second after READY. */
    if (opts.metrics_file && atomic_file_check(opts.metrics_file, "--metrics-file", err, sizeof(err)) < 0) {
        fprintf(stderr, "ddpd: %s\n", err);
        config_free(&ddpd_spec, &opts);
        return 2;
    }
    if (opts.metrics_group) {
        errno = 0;
        struct group *gr = getgrnam(opts.metrics_group);
        if (!gr) {
            fprintf(stderr, "ddpd: --metrics-group %s: %s\n", opts.metrics_group,
                    errno ? strerror(errno) : "no such group");
            config_free(&ddpd_spec, &opts);
            return 2;
        }
        opts.metrics_gid = gr->gr_gid; /* looked up once: the loop makes no NSS lookups for it */
    }
    log_level level = LOG_LEVEL_INFO;
    log_level_from_string(opts.log_level, &level);
    log_set_level(level);
    log_set_prefix("ddpd");

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* A descriptor per member: a thousand members need more than the usual soft limit. */
    if ((r = fd_limit_raise(NULL)) < 0)
        log_warn("cannot raise the open-file limit: %s", strerror(-r));
    if (!fd_passed_can_tell()) /* common/fd_passed.h */
        log_warn("/proc cannot tell the descriptors ranks pass apart: a file on a FUSE mount that stops answering "
                 "could hold ddpd");
    server s = {0};
    if ((r = server_open(&s, &opts)) < 0) {
        server_close(&s);
        config_free(&ddpd_spec, &opts);
        return 1;
    }
    log_info("ddpd %s listening on %s (heartbeat %d ms, liveness %d, join timeout %d s)", DDP_VERSION, s.endpoint,
             opts.heartbeat_ms, opts.liveness, opts.join_timeout);
    if (opts.insecure && listen_is_open(opts.listen) && !opts.curve_key)
        log_warn("--insecure: anyone who can reach %s may join, read or end any job", s.endpoint);
    metrics_writer *metrics = NULL;
    if (opts.metrics_file &&
        (r = metrics_writer_start(&metrics, opts.metrics_file, opts.metrics_group, opts.metrics_gid)) < 0) {
        log_error("cannot start the metrics file's writer: %s", error_string(r));
        server_close(&s);
        config_free(&ddpd_spec, &opts);
        return 1;
    }
    log_never_wait(); /* the loop starts: a journal that does not read must not stop it */
    /* Ready only now: the configuration is valid and the socket is bound. */
    char summary[128];
    server_summary(&s, summary, sizeof(summary));
    notify_ready(summary);
    uint64_t watchdog_ms = notify_watchdog_interval_ms(), next_watchdog = clock_now_ms(), next_metrics = 0;

    uint64_t next_tick = clock_now_ms();
    while (!stop_signal) {
        zmq_pollitem_t items[1 + 2 * DDP_MAX_JOBS] = {{.socket = s.router, .events = ZMQ_POLLIN}};
        int fds[2 * DDP_MAX_JOBS];
        size_t n_fds = server_poll_fds(&s, fds, 2 * DDP_MAX_JOBS);
        for (size_t i = 0; i < n_fds; i++)
            items[1 + i] = (zmq_pollitem_t){.fd = fds[i], .events = ZMQ_POLLIN};
        int rc = zmq_poll(items, (int)(1 + n_fds), clock_ms_until(next_tick));
        if (rc < 0 && zmq_errno() != EINTR) {
            log_error("zmq_poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (size_t i = 0; rc > 0 && i < n_fds; i++)
            if (items[1 + i].revents & ZMQ_POLLIN)
                server_on_fd(&s, fds[i]);
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN))
            server_dispatch(&s);
        uint64_t now = clock_now_ms();
        if (now >= next_tick) {
            server_tick(&s);
            if (metrics && now >= next_metrics) { /* written on the writer's thread */
                char *text = NULL;
                size_t size = 0;
                if ((r = server_render_metrics(&s, true, &text, &size)) < 0)
                    log_ratelimited(&s.bad_input_log, LOG_LEVEL_WARN, "--metrics-file: %s", error_string(r));
                else
                    metrics_writer_post(metrics, text, size);
                next_metrics = now + 1000;
            }
            server_summary(&s, summary, sizeof(summary));
            notify_status(summary);
            if (watchdog_ms && now >= next_watchdog) { /* last: a ping means this tick's work is done */
                notify_watchdog();
                next_watchdog = now + watchdog_ms;
            }
            next_tick = clock_now_ms() + (uint64_t)server_tick_ms(&s);
        }
    }

    const char *why = stop_signal == SIGTERM  ? "ddpd is shutting down (SIGTERM)"
                      : stop_signal == SIGINT ? "ddpd is shutting down (SIGINT)"
                                              : "ddpd is shutting down";
    log_info("%s", why);
    notify_stopping();
    server_shutdown(&s, why);
    /* The file outlives ddpd: it must not keep saying that ddpd is up. */
    if (metrics) {
        char *text = NULL;
        size_t size = 0;
        if ((r = server_render_metrics(&s, false, &text, &size)) < 0)
            log_warn("--metrics-file: %s", error_string(r));
        if (!metrics_writer_stop(metrics, r < 0 ? NULL : text, size, DDPD_METRICS_STOP_MS))
            log_warn("--metrics-file %s: its filesystem held the last write for %d ms: ddpd stops without it",
                     opts.metrics_file, DDPD_METRICS_STOP_MS);
    }
    server_close(&s);
    config_free(&ddpd_spec, &opts);
    (void)log_flush(DDPD_LOG_FLUSH_MS); /* the rest of a line the journal did not take yet */
    return stop_signal ? 0 : 1;
}
