#include "tests/integration/harness.h"

#include <check.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/data_plane.h"

extern char **environ;

/* Variables a member would otherwise inherit from whoever runs the tests. */
static bool harness_inherited(const char *kv) {
    static const char *const drop[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "MASTER_ADDR=", "MASTER_PORT=", "DDP_",
                                       "DDPD_", "DDPCTL_",     NULL};
    for (const char *const *d = drop; *d; d++)
        if (strncmp(kv, *d, strlen(*d)) == 0)
            return false;
    return true;
}

/* True when env sets kv's variable: getenv() would find the inherited one first. */
static bool harness_overridden(const char *kv, const char *const *env) {
    size_t key_len = strcspn(kv, "=");
    for (size_t i = 0; env && env[i]; i++)
        if (strncmp(kv, env[i], key_len + 1) == 0)
            return true;
    return false;
}

void proc_start(proc *p, const char *const *argv, const char *const *env) {
    memset(p, 0, sizeof(*p));
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fcntl(fds[0], F_SETFD, FD_CLOEXEC); /* the child keeps only its dup2'd stdout and stderr */
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env])
        n_env++;
    while (env && env[n_extra])
        n_extra++;
    char **envp = calloc(n_env + n_extra + 1, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++)
        if (harness_inherited(environ[i]) && !harness_overridden(environ[i], env))
            envp[k++] = environ[i];
    for (size_t i = 0; i < n_extra; i++)
        envp[k++] = (char *)env[i];

    p->pid = fork();
    ck_assert_int_ge(p->pid, 0);
    if (p->pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        execve(argv[0], (char *const *)argv, envp);
        fprintf(stderr, "cannot run %s\n", argv[0]);
        _exit(127);
    }
    free(envp);
    close(fds[1]);
    p->out = fds[0];
    p->cap = 4096;
    p->buf = calloc(1, p->cap);
}

/* Reads what is there, waiting at most timeout_ms for something. */
static void proc_read(proc *p, int timeout_ms) {
    if (p->eof)
        return;
    struct pollfd pfd = {.fd = p->out, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0)
        return;
    if (p->len + 4096 + 1 > p->cap) {
        p->cap *= 2;
        p->buf = realloc(p->buf, p->cap);
    }
    ssize_t n = read(p->out, p->buf + p->len, p->cap - p->len - 1);
    if (n <= 0)
        p->eof = true;
    else
        p->len += (size_t)n;
    p->buf[p->len] = '\0';
}

bool proc_expect(proc *p, const char *needle, int timeout_ms, char *line, size_t size) {
    uint64_t deadline = clock_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        /* Look only at complete lines after the cursor. */
        char *start = p->buf + p->cursor;
        char *hit = strstr(start, needle);
        if (hit) {
            char *bol = hit, *eol = strchr(hit, '\n');
            while (bol > start && bol[-1] != '\n')
                bol--;
            if (eol) {
                if (line)
                    snprintf(line, size, "%.*s", (int)(eol - bol), bol);
                p->cursor = (size_t)(eol + 1 - p->buf);
                return true;
            }
        }
        if (p->eof || clock_now_ms() >= deadline)
            return false;
        proc_read(p, clock_ms_until(deadline));
    }
}

int proc_wait(proc *p, int timeout_ms) {
    uint64_t deadline = clock_now_ms() + (uint64_t)timeout_ms;
    while (!p->reaped) {
        /* Its output closes when it exits: wait on that, then reap. */
        while (!p->eof && clock_now_ms() < deadline)
            proc_read(p, clock_ms_until(deadline));
        int status;
        pid_t r = waitpid(p->pid, &status, p->eof ? 0 : WNOHANG);
        if (r == p->pid) {
            p->reaped = true;
            p->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            break;
        }
        if (clock_now_ms() >= deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            p->reaped = true;
            p->status = -1;
            return -1;
        }
    }
    return p->status;
}

void proc_signal(proc *p, int sig) {
    if (!p->reaped)
        kill(p->pid, sig);
}

void proc_close(proc *p) {
    if (p->pid > 0 && !p->reaped) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->reaped = true;
    }
    if (p->out > 0)
        close(p->out);
    free(p->buf);
    p->buf = NULL;
    p->out = -1;
}

const char *proc_output(proc *p) {
    proc_read(p, 0);
    return p->buf ? p->buf : "";
}

const char *proc_output_tail(proc *p) {
    const char *out = proc_output(p);
    size_t n = strlen(out);
    return n > 3000 ? out + n - 3000 : out;
}

void ddpd_start(ddpd_proc *d, const char *const *extra_args) {
    const char *argv[32] = {DDPD_PATH, "--listen", "tcp://127.0.0.1:*"};
    size_t n = 3;
    for (size_t i = 0; extra_args && extra_args[i] && n < 31; i++)
        argv[n++] = extra_args[i];
    argv[n] = NULL;
    proc_start(&d->p, argv, NULL);
    char line[512];
    ck_assert_msg(proc_expect(&d->p, "listening on ", 10000, line, sizeof(line)), "ddpd did not start: %s",
                  proc_output(&d->p));
    ck_assert(sscanf(strstr(line, "listening on ") + 13, "%256s", d->endpoint) == 1);
    const char *colon = strrchr(d->endpoint, ':');
    snprintf(d->port, sizeof(d->port), "%s", colon + 1);
}

int ddpd_stop(ddpd_proc *d) {
    proc_signal(&d->p, SIGTERM);
    int code = proc_wait(&d->p, 10000);
    proc_close(&d->p);
    return code;
}

void rank_start(proc *p, const ddpd_proc *d, int world_size, int rank, const char *job, const char *const *argv) {
    char env_buf[4][DDP_MAX_ENDPOINT + 32];
    snprintf(env_buf[0], sizeof(env_buf[0]), "DDP_COORDINATOR=%s", d->endpoint);
    snprintf(env_buf[1], sizeof(env_buf[1]), "WORLD_SIZE=%d", world_size);
    snprintf(env_buf[2], sizeof(env_buf[2]), "DDP_JOB=%s", job ? job : "default");
    snprintf(env_buf[3], sizeof(env_buf[3]), "RANK=%d", rank);
    const char *env[] = {env_buf[0], env_buf[1], env_buf[2], rank >= 0 ? env_buf[3] : NULL, NULL};
    proc_start(p, argv, env); /* the child has its copy once fork returns */
}

void member_start(proc *p, const ddpd_proc *d, int world_size, int rank, const char *job, const char *const *args) {
    const char *argv[16] = {MEMBER_PATH};
    size_t n = 1;
    for (size_t i = 0; args && args[i] && n < 15; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    rank_start(p, d, world_size, rank, job, argv);
}

static void put_be32(gzFile f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                          (unsigned char)v};
    gzwrite(f, b, 4);
}

void idx_write_split(const char *dir, const char *split, int n, int side, unsigned seed) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, split);
    gzFile img = gzopen(path, "wb");
    snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, split);
    gzFile lab = gzopen(path, "wb");
    ck_assert(img && lab);
    put_be32(img, 0x803);
    put_be32(img, (uint32_t)n);
    put_be32(img, (uint32_t)side);
    put_be32(img, (uint32_t)side);
    put_be32(lab, 0x801);
    put_be32(lab, (uint32_t)n);
    unsigned char *px = malloc((size_t)side * side);
    for (int i = 0; i < n; i++) {
        unsigned char label = (unsigned char)(rand_r(&seed) % 10);
        for (int k = 0; k < side * side; k++)
            px[k] = (unsigned char)(rand_r(&seed) % 64 +
                                    ((k % side) == label % side && (k / side) >= label / side * 4 ? 160 : 0));
        gzwrite(img, px, (unsigned)(side * side));
        gzwrite(lab, &label, 1);
    }
    free(px);
    gzclose(img);
    gzclose(lab);
}

void *raw_connect(void *zmq_ctx, const char *endpoint) {
    void *s = zmq_socket(zmq_ctx, ZMQ_DEALER);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(wire_socket_setup(s, DDP_MAX_CONTROL_MSG_BYTES), 0);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

int raw_next(void *socket, int timeout_ms, wire_msg *msg) {
    uint64_t deadline = clock_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        zmq_pollitem_t item = {.socket = socket, .events = ZMQ_POLLIN};
        int n = zmq_poll(&item, 1, clock_ms_until(deadline));
        if (n == 0) {
            memset(msg, 0, sizeof(*msg));
            return -ETIMEDOUT;
        }
        if (n < 0)
            continue;
        int r = wire_recv(socket, false, 0, msg);
        if (r == 0 && msg->env->type == DDP__MSG_TYPE__HEARTBEAT) {
            wire_msg_close(msg);
            continue;
        }
        return r;
    }
}

int raw_request(void *socket, const Ddp__Envelope *env, int timeout_ms, wire_msg *msg) {
    int r = wire_send(socket, NULL, 0, env, NULL, 0);
    if (r < 0)
        return r;
    return raw_next(socket, timeout_ms, msg);
}

void raw_wait_members(void *zmq_ctx, const char *endpoint, const char *job, size_t n, int timeout_ms) {
    void *s = raw_connect(zmq_ctx, endpoint);
    uint64_t deadline = clock_now_ms() + (uint64_t)timeout_ms;
    size_t seen = 0;
    for (uint64_t seq = 1; seen < n && clock_now_ms() < deadline; seq++) {
        Ddp__StatusRequest body = DDP__STATUS_REQUEST__INIT;
        Ddp__Envelope env;
        wire_envelope_init(&env, DDP__MSG_TYPE__STATUS_REQUEST, "", -1, 0, seq);
        env.status_request = &body;
        wire_msg msg;
        if (raw_request(s, &env, (int)clock_ms_until(deadline), &msg) < 0)
            break;
        seen = 0;
        if (msg.env->type == DDP__MSG_TYPE__STATUS_REPLY)
            for (size_t i = 0; i < msg.env->status_reply->n_jobs; i++)
                if (!strcmp(msg.env->status_reply->jobs[i]->name, job))
                    seen = msg.env->status_reply->jobs[i]->n_members;
        wire_msg_close(&msg);
    }
    zmq_close(s);
    ck_assert_msg(seen >= n, "job '%s' has %zu members, not %zu, after %d ms", job, seen, n, timeout_ms);
}

void *raw_ps_join(void *zmq_ctx, const char *endpoint, const char *job, int rank, const uint64_t *layout, size_t n,
                  uint32_t pid) {
    void *s = raw_connect(zmq_ctx, endpoint);
    Ddp__Join join = DDP__JOIN__INIT;
    join.data_plane = DDP_DATA_PLANE_VERSION; /* as this build's libddp */
    join.world_size = 2;
    join.rank = rank;
    join.mode = (char *)"ps";
    join.pid = pid;
    join.host = (char *)"test";
    join.ps_buckets = (uint64_t *)layout;
    join.n_ps_buckets = n;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__JOIN, job, -1, 0, 1);
    env.join = &join;
    ck_assert_int_eq(wire_send(s, NULL, 0, &env, NULL, 0), 0);
    return s;
}
