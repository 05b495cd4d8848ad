/* ddpctl: asks a running ddpd what it is doing. */
#include <cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/config.h"
#include "common/curve_keys.h"
#include "common/error.h"
#include "common/handshake_watch.h"
#include "common/wire.h"
#include "server/prometheus.h"

/* Exit codes, so that a script can tell a ddpd that is not there from one that said no. */
enum {
    EXIT_DONE = 0,
    EXIT_FAILED = 1,    /* ddpd refused (no such job, not allowed), or the output could not be written */
    EXIT_USAGE = 2,     /* a bad flag, command or endpoint */
    EXIT_UNREACHED = 3, /* no answer from ddpd: not running, or the handshake failed (named) */
};

typedef struct {
    char *coordinator;
    char *curve_server_key, *curve_key; /* CURVE: ddpd's public key, this client's key file */
    int timeout_ms;
    char *owner; /* abort: whose job of the name */
    bool json;
    bool help;
    bool version;
} ddpctl_options;

static const config_option ddpctl_options_table[] = {
    {"coordinator", CONFIG_STRING, 1, DDP_MAX_ENDPOINT, DDP_DEFAULT_ENDPOINT, offsetof(ddpctl_options, coordinator),
     "ddpd's control endpoint", "EP"},
    {"curve-server-key", CONFIG_STRING, 40, 40, NULL, offsetof(ddpctl_options, curve_server_key),
     "ddpd's CURVE public key (a ddpd with --curve-key, over TCP)", "KEY"},
    {"curve-key", CONFIG_STRING, 1, 4096, NULL, offsetof(ddpctl_options, curve_key),
     "this client's CURVE key pair (ddpctl keygen), whose public key ddpd's --curve-users names", "FILE"},
    {"timeout-ms", CONFIG_INT, 1, DDP_MAX_TIMEOUT_MS, "5000", offsetof(ddpctl_options, timeout_ms),
     "how long to wait for ddpd's answer", "MS"},
    {"json", CONFIG_BOOL, 0, 1, NULL, offsetof(ddpctl_options, json), "print JSON instead of a table"},
    {"owner", CONFIG_STRING, 1, 64, NULL, offsetof(ddpctl_options, owner),
     "abort: the job of that name of this user (root and operators, when several users have one)", "USER"},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(ddpctl_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(ddpctl_options, help), "print this help and exit", NULL, NULL, NULL,
     'h'},
};

static const config_spec ddpctl_spec = {
    .program = "ddpctl",
    .usage = "[OPTIONS] status|metrics|abort JOB|keygen FILE",
    .summary =
        "Talks to a running ddpd.\n\nCommands:\n  status      jobs, members, ranks, pids, hosts and when each was "
        "last heard\n  metrics     the same in the Prometheus text format\n  abort JOB   end a job: its members "
        "get an Abort saying who asked\n  keygen FILE make a CURVE key pair in FILE (0600) and print its public key",
    .env_prefix = "DDPCTL_",
    .options = ddpctl_options_table,
    .n_options = sizeof(ddpctl_options_table) / sizeof(ddpctl_options_table[0]),
};

static void format_duration(uint64_t ms, char *buf, size_t size) {
    if (ms < 1000)
        snprintf(buf, size, "%llu ms", (unsigned long long)ms);
    else if (ms < 60000)
        snprintf(buf, size, "%.1f s", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(buf, size, "%llum%02llus", (unsigned long long)(ms / 60000), (unsigned long long)(ms / 1000 % 60));
    else
        snprintf(buf, size, "%lluh%02llum", (unsigned long long)(ms / 3600000), (unsigned long long)(ms / 60000 % 60));
}

#define STALL_REPORT_MS 2000 /* a wait this long is worth a line */

static void print_table(const char *endpoint, const Ddp__StatusReply *st) {
    char up[32], age[32], heard[32];
    format_duration(st->uptime_ms, up, sizeof(up));
    printf("ddpd %s at %s, up %s, %zu job%s\n", st->version, endpoint, up, st->n_jobs, st->n_jobs == 1 ? "" : "s");
    for (size_t i = 0; i < st->n_jobs; i++) {
        const Ddp__JobStatus *j = st->jobs[i];
        format_duration(j->age_ms, age, sizeof(age));
        printf("\njob '%s'%s%s: %s, %u/%u members, mode %s, generation %llu, age %s\n", j->name,
               j->owner[0] ? " of user " : "", j->owner, j->state, j->joined, j->world_size, j->mode[0] ? j->mode : "-",
               (unsigned long long)j->generation, age);
        if (j->withheld) { /* another user's job: its members are its owner's business */
            printf("  (members withheld: the job of another user)\n");
            continue;
        }
        printf("  %-6s %-8s %-20s %-10s %-9s %-11s %s\n", "RANK", "PID", "HOST", "STEP", "SAMPLES/S", "LAST HEARD",
               "ENDPOINT");
        for (size_t k = 0; k < j->n_members; k++) {
            const Ddp__MemberStatus *m = j->members[k];
            char rank[16];
            snprintf(rank, sizeof(rank), m->rank < 0 ? "-" : "%d", m->rank);
            format_duration(m->last_heard_ms, heard, sizeof(heard));
            printf("  %-6s %-8u %-20s %-10llu %-9.0f %-11s %s\n", rank, m->pid, m->host, (unsigned long long)m->step,
                   m->samples_per_s, heard, m->endpoint[0] ? m->endpoint : "-");
        }
        /* The stall report: who stopped answering (its process still there), who has been
         * blocked for a while, in what, waiting for whom. */
        bool header = false;
        for (size_t k = 0; k < j->n_members; k++) {
            const Ddp__MemberStatus *m = j->members[k];
            if (m->stalled[0]) {
                if (!header)
                    printf("  stalled:\n");
                header = true;
                format_duration(m->last_heard_ms, heard, sizeof(heard));
                printf("    rank %d (pid %u) has not answered for %s: its process is %s\n", m->rank, m->pid, heard,
                       m->stalled);
            }
            if (!m->waiting || m->waiting_ms < STALL_REPORT_MS)
                continue;
            if (!header)
                printf("  stalled:\n");
            header = true;
            format_duration(m->waiting_ms, heard, sizeof(heard));
            printf("    rank %d has waited %s in %s for rank %d\n", m->rank, heard, m->waiting_in, m->waiting_on);
        }
    }
}

static int print_json(const char *endpoint, const Ddp__StatusReply *st) {
    cJSON *root = cJSON_CreateObject(), *jobs = cJSON_AddArrayToObject(root, "jobs");
    cJSON_AddStringToObject(root, "version", st->version);
    cJSON_AddStringToObject(root, "endpoint", endpoint);
    cJSON_AddNumberToObject(root, "uptime_ms", (double)st->uptime_ms);
    for (size_t i = 0; i < st->n_jobs; i++) {
        const Ddp__JobStatus *j = st->jobs[i];
        cJSON *job = cJSON_CreateObject(), *members = NULL;
        cJSON_AddStringToObject(job, "name", j->name);
        cJSON_AddStringToObject(job, "state", j->state);
        cJSON_AddStringToObject(job, "mode", j->mode);
        cJSON_AddNumberToObject(job, "world_size", j->world_size);
        cJSON_AddNumberToObject(job, "generation", (double)j->generation);
        cJSON_AddNumberToObject(job, "age_ms", (double)j->age_ms);
        cJSON_AddStringToObject(job, "owner", j->owner);
        cJSON_AddNumberToObject(job, "joined", j->joined);
        cJSON_AddBoolToObject(job, "withheld", j->withheld);
        members = cJSON_AddArrayToObject(job, "members");
        for (size_t k = 0; k < j->n_members; k++) {
            const Ddp__MemberStatus *m = j->members[k];
            cJSON *member = cJSON_CreateObject();
            cJSON_AddNumberToObject(member, "rank", m->rank);
            cJSON_AddNumberToObject(member, "pid", m->pid);
            cJSON_AddStringToObject(member, "host", m->host);
            cJSON_AddNumberToObject(member, "last_heard_ms", (double)m->last_heard_ms);
            cJSON_AddStringToObject(member, "endpoint", m->endpoint);
            cJSON_AddNumberToObject(member, "step", (double)m->step);
            cJSON_AddNumberToObject(member, "samples_per_s", m->samples_per_s);
            if (m->stalled[0])
                cJSON_AddStringToObject(member, "stalled", m->stalled);
            if (m->waiting) {
                cJSON *w = cJSON_AddObjectToObject(member, "waiting");
                cJSON_AddNumberToObject(w, "on_rank", m->waiting_on);
                cJSON_AddNumberToObject(w, "ms", (double)m->waiting_ms);
                cJSON_AddStringToObject(w, "in", m->waiting_in);
            }
            cJSON_AddItemToArray(members, member);
        }
        cJSON_AddItemToArray(jobs, job);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return -ENOMEM;
    puts(text);
    free(text);
    return 0;
}

/* Sends env to ddpd and waits, within timeout_ms, for an answer of reply_type (or an Error,
 * which is printed: -EREMOTEIO). *msg holds the answer on success. -EHOSTUNREACH when no
 * answer came, with why where ZeroMQ knows it (a refused CURVE key). */
static int ddpctl_request(const ddpctl_options *o, const curve_keypair *own, Ddp__Envelope *env,
                          Ddp__MsgType reply_type, wire_msg *msg) {
    int r = 0;
    void *ctx = zmq_ctx_new(), *sock = ctx ? zmq_socket(ctx, ZMQ_DEALER) : NULL;
    handshake_watch handshakes = {0};
    if (!sock || wire_socket_setup(sock, DDP_MAX_CONTROL_MSG_BYTES) < 0 ||
        handshake_watch_start(&handshakes, ctx, sock) < 0) { /* this process's trouble: not ddpd's absence */
        r = -zmq_errno();
        fprintf(stderr, "ddpctl: cannot make a socket: %s\n", zmq_strerror(-r));
        goto out;
    }
    if (own && (r = curve_client_setup(sock, o->curve_server_key, own)) < 0) {
        fprintf(stderr, "ddpctl: cannot set CURVE up: %s\n", error_string(r));
        goto out;
    }
    if (zmq_connect(sock, o->coordinator) < 0) {
        r = -zmq_errno();
        fprintf(stderr, "ddpctl: cannot connect to '%s': %s\n", o->coordinator, zmq_strerror(-r));
        goto out;
    }
    if ((r = wire_send(sock, NULL, 0, env, NULL, 0)) < 0) {
        fprintf(stderr, "ddpctl: cannot send to '%s': %s\n", o->coordinator, error_string(r));
        goto out;
    }
    uint64_t deadline = clock_now_ms() + (uint64_t)o->timeout_ms;
    for (;;) {
        zmq_pollitem_t item = {.socket = sock, .events = ZMQ_POLLIN};
        int n = zmq_poll(&item, 1, clock_ms_until(deadline));
        if (n < 0 && zmq_errno() == EINTR)
            continue;
        if (n < 0) {
            r = -zmq_errno();
            fprintf(stderr, "ddpctl: cannot wait for ddpd's answer: %s\n", zmq_strerror(-r));
            goto out;
        }
        if (n == 0) {
            handshake_outcome handshake = handshake_watch_read(&handshakes);
            if (handshake == HANDSHAKE_KEY_REFUSED)
                fprintf(stderr,
                        "ddpctl: ddpd at '%s' refused this client's CURVE key (its --curve-users does not "
                        "name its public key)\n",
                        o->coordinator);
            else if (handshake == HANDSHAKE_MECHANISM_DIFFERS)
                fprintf(stderr,
                        "ddpctl: ddpd at '%s' dropped the connection before it answered: one side speaks CURVE and "
                        "the other not, --curve-server-key is not its key, or no ddpd listens there\n",
                        o->coordinator);
            else
                fprintf(stderr, "ddpctl: no answer from ddpd at '%s' within %d ms (is it running?)\n", o->coordinator,
                        o->timeout_ms);
            r = -EHOSTUNREACH;
            goto out;
        }
        r = wire_recv(sock, false, 0, msg);
        if (r < 0) {
            fprintf(stderr, "ddpctl: bad answer from '%s': %s\n", o->coordinator, msg->error);
            wire_msg_close(msg);
            goto out;
        }
        if (msg->env->type == reply_type)
            break;
        if (msg->env->type == DDP__MSG_TYPE__ERROR) {
            fprintf(stderr, "ddpctl: ddpd answered: %s\n", msg->env->error->message);
            r = -EREMOTEIO;
            wire_msg_close(msg);
            goto out;
        }
        wire_msg_close(msg);
    }
out:
    handshake_watch_stop(&handshakes);
    if (sock)
        zmq_close(sock);
    if (ctx)
        zmq_ctx_term(ctx);
    return r;
}

static int ddpctl_status(const ddpctl_options *o, const curve_keypair *own, bool prometheus) {
    Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, 1);
    env.status_request = &body;
    wire_msg msg = {0};
    int r = ddpctl_request(o, own, &env, DDP__MSG_TYPE__STATUS_REPLY, &msg);
    if (r < 0)
        return r;
    if (prometheus)
        prometheus_write(stdout, msg.env->status_reply);
    else if (o->json)
        r = print_json(o->coordinator, msg.env->status_reply);
    else
        print_table(o->coordinator, msg.env->status_reply);
    wire_msg_close(&msg);
    return r;
}

static int ddpctl_abort(const ddpctl_options *o, const curve_keypair *own, const char *job) {
    char host[DDP_MAX_HOST + 1] = "localhost", reason[DDP_MAX_REASON];
    gethostname(host, sizeof(host) - 1);
    snprintf(reason, sizeof(reason), "ddpctl abort (pid %d on %s)", (int)getpid(), host);
    Ddp__Abort body = DDP__ABORT__INIT;
    body.rank = -1;
    body.code = -ECONNABORTED;
    body.host = host;
    body.reason = reason;
    body.owner = o->owner ? o->owner : (char *)"";
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__ABORT, job, -1, 0, 1);
    env.abort = &body;
    wire_msg msg = {0};
    int r = ddpctl_request(o, own, &env, DDP__MSG_TYPE__ABORT, &msg);
    if (r == 0)
        printf("job '%s' aborted\n", job);
    wire_msg_close(&msg);
    return r;
}

/* The exit code for r, once stdout is written out: output that could not be written (a
 * full disk) is a failure too. */
static int exit_code(int r) {
    int e = fflush(stdout) == EOF ? errno : ferror(stdout) ? EIO : 0;
    if (e) {
        fprintf(stderr, "ddpctl: cannot write the output: %s\n", strerror(e));
        return EXIT_FAILED;
    }
    return r == 0 ? EXIT_DONE : r == -EHOSTUNREACH ? EXIT_UNREACHED : EXIT_FAILED;
}

int main(int argc, char **argv) {
    ddpctl_options o = {0};
    char err[512];
    int first = 0;
    int r = config_load(&ddpctl_spec, &o, argc, argv, &first, err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "ddpctl: %s\n", err);
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    if (o.help || o.version) {
        if (o.version)
            printf("ddpctl %s (protocol %u)\n", DDP_VERSION, DDP_PROTOCOL_VERSION);
        else
            config_print_help(&ddpctl_spec, stdout);
        config_free(&ddpctl_spec, &o);
        return exit_code(0);
    }
    if (wire_endpoint_check(o.coordinator, false, err, sizeof(err)) < 0) {
        fprintf(stderr, "ddpctl: --coordinator %s\n", err);
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    const char *command = first < argc ? argv[first] : "status";
    int operands = argc - first - 1; /* after the command */
    if (!strcmp(command, "keygen") && operands == 1) {
        curve_keypair k;
        r = curve_keypair_generate(argv[first + 1], &k, err, sizeof(err));
        if (r < 0)
            fprintf(stderr, "ddpctl: keygen %s\n", err);
        else
            printf("%s\n", k.public_key);
        config_free(&ddpctl_spec, &o);
        return r < 0 ? EXIT_FAILED : exit_code(0);
    }
    if (!o.curve_server_key != !o.curve_key || (o.curve_server_key && !curve_key_valid(o.curve_server_key))) {
        fprintf(stderr, "ddpctl: --curve-server-key (ddpd's public key, 40 Z85 characters) and --curve-key go "
                        "together\n");
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    bool known = (!strcmp(command, "status") && operands <= 0) || (!strcmp(command, "metrics") && operands <= 0) ||
                 (!strcmp(command, "abort") && operands == 1);
    if (!known) {
        fprintf(stderr, "ddpctl: '%s'%s: use status, metrics or abort JOB (see --help)\n", command,
                !strcmp(command, "abort") ? " needs one job name" : " is not a command, or has extra arguments");
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    if (!strcmp(command, "abort") && !wire_name_valid(argv[first + 1], DDP_MAX_JOB_NAME)) {
        fprintf(stderr, "ddpctl: abort: '%s' is not a job name\n", argv[first + 1]);
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    curve_keypair own; /* a key file that cannot be read is a bad flag: before any request */
    if (o.curve_server_key && curve_keypair_load(o.curve_key, &own, err, sizeof(err)) < 0) {
        fprintf(stderr, "ddpctl: %s\n", err);
        config_free(&ddpctl_spec, &o);
        return EXIT_USAGE;
    }
    const curve_keypair *curve = o.curve_server_key ? &own : NULL;
    if (!strcmp(command, "abort"))
        r = ddpctl_abort(&o, curve, argv[first + 1]);
    else
        r = ddpctl_status(&o, curve, !strcmp(command, "metrics"));
    config_free(&ddpctl_spec, &o);
    return exit_code(r);
}
