/* The launcher behind ddp-run. One poll() loop over every child's pipes and a self-pipe:
 * the signal handlers only set a flag and write a byte, the loop does the rest. */
#define _GNU_SOURCE /* pipe2, O_CLOEXEC */
#include "worker/tools/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fd_limit.h"
#include "common/limits.h"
#include "common/log.h"
#include "worker/tools/line_stream.h"
#include "worker/tools/out_queue.h"
#include "worker/tools/rank_env.h"

extern char **environ;

#define SAFETY_TICK_MS 1000 /* re-check the children even if a wakeup went missing */

typedef struct {
    char label[24]; /* "rank 3", "the private ddpd" */
    pid_t pid;      /* also its process group: signals reach what it started */
    bool running;
    bool group_left; /* it exited with processes of its group still there: signalled at the end */
    int code;        /* exit code, 128+signal when killed by one; valid once reaped */
    line_stream streams[2];
    int n_streams;
} child;

typedef struct {
    const launcher_options *opts;
    child *ranks;
    int n_started, n_running;
    child ddpd;
    bool have_ddpd;
    bool ddpd_stopping; /* we sent it SIGTERM: its exit is expected */
    char endpoint[DDP_MAX_ENDPOINT + 1];
    char socket_dir[128]; /* the private ddpd's socket and the ranks' (unless DDP_DATA_ENDPOINT) */
    int devnull;
    struct rlimit files; /* RLIMIT_NOFILE as we found it, for the children */
    bool files_raised;
    bool stopping;          /* the ranks were told to stop */
    bool ending_leftovers;  /* the job is over; what ranks left behind is being ended */
    bool leftovers_now;     /* ... and a stop signal came: SIGKILL without the grace period */
    bool killed;            /* ... and then SIGKILLed */
    bool grace_ran_out;     /* ... because the grace period ended (not a second signal) */
    unsigned sent_signals;  /* a bit for each signal sent to the ranks: their deaths by it are ours */
    uint64_t kill_at_ms;    /* when stopping turns into SIGKILL */
    uint64_t give_up_at_ms; /* after SIGKILL: a child stuck in the kernel is left behind */
    int stop_signal;        /* forwarded to the ranks; SIGTERM when a rank failed */
    int told_to_stop;       /* the first stop signal ddp-run itself received, or 0 */
    bool stop_failed;       /* a rank told to stop failed instead: its code is the exit code */
    bool cause_set;         /* exit_code says why the job ended, first cause wins */
    int exit_code;
    out_queue out;        /* what goes to our stdout and stderr: the ranks', ddpd's and our lines */
    struct pollfd *pfds;  /* the poll set, rebuilt each round: signals, output, ddpd, ranks */
    line_stream **owners; /* owners[i] reads pfds[i] (NULL: not a child's pipe) */
} launcher;

/* ---- signals ---- */

static const int handled_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
#define N_HANDLED (sizeof(handled_signals) / sizeof(handled_signals[0]))

static int signal_pipe[2] = {-1, -1};
/* Whether each came: two of one kind before the loop looks are one (GNU timeout sends its
 * child SIGTERM, then its whole group: a second signal would kill the ranks at once). */
static volatile sig_atomic_t signal_seen[N_HANDLED];
/* Ignored when we started (nohup, a script's background job): left ignored, for us and for
 * the ranks, as a shell would. */
static bool signal_ignored[N_HANDLED];

static void launcher_on_signal(int sig) {
    int saved_errno = errno;
    for (size_t i = 0; i < N_HANDLED; i++)
        if (handled_signals[i] == sig)
            signal_seen[i] = 1;
    /* Only a wakeup: if the pipe is full, one is already pending. */
    ssize_t w = write(signal_pipe[1], "s", 1);
    (void)w;
    errno = saved_errno;
}

typedef struct {
    struct sigaction old[N_HANDLED];
    struct sigaction old_pipe;
} saved_signals;

static int signals_install(saved_signals *saved) {
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return -errno;
    for (size_t i = 0; i < N_HANDLED; i++)
        signal_seen[i] = 0;
    struct sigaction sa = {.sa_handler = launcher_on_signal, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < N_HANDLED; i++) {
        sigaction(handled_signals[i], NULL, &saved->old[i]);
        signal_ignored[i] = handled_signals[i] != SIGCHLD && saved->old[i].sa_handler == SIG_IGN;
        if (!signal_ignored[i])
            sigaction(handled_signals[i], &sa, NULL);
    }
    /* A reader of our output that went away must not kill the supervisor. */
    struct sigaction ignore = {.sa_handler = SIG_IGN};
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &saved->old_pipe);
    return 0;
}

static void signals_restore(const saved_signals *saved) {
    for (size_t i = 0; i < N_HANDLED; i++)
        sigaction(handled_signals[i], &saved->old[i], NULL);
    sigaction(SIGPIPE, &saved->old_pipe, NULL);
    for (int i = 0; i < 2; i++) {
        if (signal_pipe[i] >= 0)
            close(signal_pipe[i]);
        signal_pipe[i] = -1;
    }
}

/* Empties the self-pipe and returns which signals arrived since the last call: taken with
 * the signals held, so that one arriving between the read and the clear is not lost. */
static void signals_take(bool seen[N_HANDLED]) {
    char drain[64];
    while (read(signal_pipe[0], drain, sizeof(drain)) > 0)
        ;
    sigset_t handled, old_mask;
    sigemptyset(&handled);
    for (size_t i = 0; i < N_HANDLED; i++)
        sigaddset(&handled, handled_signals[i]);
    sigprocmask(SIG_BLOCK, &handled, &old_mask);
    for (size_t i = 0; i < N_HANDLED; i++) {
        seen[i] = signal_seen[i];
        signal_seen[i] = 0;
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGINT:
        return "SIGINT";
    case SIGTERM:
        return "SIGTERM";
    case SIGHUP:
        return "SIGHUP";
    case SIGKILL:
        return "SIGKILL";
    default:
        return "a signal";
    }
}

/* ---- children ---- */

static int code_from_status(int status) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

static void describe_exit(int status, char *buf, size_t size) {
    if (WIFSIGNALED(status))
        snprintf(buf, size, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(buf, size, "exited with code %d", code_from_status(status));
}

/* Signals c's process group, so that a shell's children go too; c itself if that fails. */
static void child_signal(const child *c, int sig) {
    if (!c->running)
        return;
    if (kill(-c->pid, sig) < 0)
        kill(c->pid, sig);
}

/* Starts path with argv and envp, its output through pipes: two (stdout and stderr kept
 * apart) or one for both. All our descriptors are close-on-exec; the child gets
 * /dev/null as stdin, its own process group, and SIGTERM should ddp-run die. */
static int child_spawn(launcher *l, child *c, const char *label, const char *path, char *const *argv, char **envp,
                       bool split_stderr, const char *prefix, bool quiet_info) {
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    int n_pipes = split_stderr ? 2 : 1;
    for (int i = 0; i < n_pipes; i++)
        if (pipe2(pipes[i], O_CLOEXEC) < 0) {
            int r = -errno;
            for (int k = 0; k < i; k++) {
                close(pipes[k][0]);
                close(pipes[k][1]);
            }
            return r;
        }
    /* Until it has our handlers undone, a signal to the child would only run them (and
     * be lost): hold the signals across fork, the child gets them once it can die of them. */
    sigset_t handled, old_mask;
    sigemptyset(&handled);
    for (size_t i = 0; i < N_HANDLED; i++)
        sigaddset(&handled, handled_signals[i]);
    sigprocmask(SIG_BLOCK, &handled, &old_mask);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (pid < 0) {
        int r = -errno;
        for (int i = 0; i < n_pipes; i++) {
            close(pipes[i][0]);
            close(pipes[i][1]);
        }
        return r;
    }
    if (pid == 0) {
        /* Ignored signals stay ignored across exec, blocked ones blocked: undo ours, and
         * leave ignored what was ignored when we started (nohup). */
        for (size_t i = 0; i < N_HANDLED; i++)
            signal(handled_signals[i], signal_ignored[i] ? SIG_IGN : SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        setpgid(0, 0);
        if (l->files_raised)
            setrlimit(RLIMIT_NOFILE, &l->files);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) /* it died before the line above */
            _exit(128 + SIGTERM);
        dup2(l->devnull, STDIN_FILENO);
        dup2(pipes[0][1], STDOUT_FILENO);
        dup2(pipes[n_pipes - 1][1], STDERR_FILENO);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        environ = envp;
        execvp(path, argv);
        char msg[PATH_MAX + 128];
        int n = snprintf(msg, sizeof(msg), "ddp-run: cannot run '%s': %s\n", argv[0], strerror(errno));
        ssize_t w = n > 0 ? write(STDERR_FILENO, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1) : 0;
        (void)w; /* into our pipe, read by the launcher */
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so the group exists before we ever signal it */
    memset(c, 0, sizeof(*c));
    snprintf(c->label, sizeof(c->label), "%s", label);
    c->pid = pid;
    c->running = true;
    c->n_streams = n_pipes;
    for (int i = 0; i < n_pipes; i++) {
        close(pipes[i][1]);
        fcntl(pipes[i][0], F_SETFL, fcntl(pipes[i][0], F_GETFL) | O_NONBLOCK);
        line_stream_init(&c->streams[i], pipes[i][0], i == 0 && split_stderr ? STDOUT_FILENO : STDERR_FILENO, &l->out,
                         prefix, quiet_info);
    }
    return 0;
}

static void launcher_set_cause(launcher *l, int code) {
    if (l->cause_set)
        return;
    l->cause_set = true;
    l->exit_code = code;
}

/* Tells every running rank to stop with sig, SIGKILL after the grace period. */
static void launcher_stop_ranks(launcher *l, int sig) {
    if (l->stopping)
        return;
    l->stopping = true;
    l->stop_signal = sig;
    l->sent_signals |= 1u << sig;
    l->kill_at_ms = clock_now_ms() + (uint64_t)l->opts->grace_ms;
    for (int i = 0; i < l->n_started; i++)
        child_signal(&l->ranks[i], sig);
}

static void launcher_kill_ranks(launcher *l) {
    l->killed = true;
    l->sent_signals |= 1u << SIGKILL;
    l->give_up_at_ms = clock_now_ms() + LAUNCHER_REAP_TIMEOUT_MS;
    for (int i = 0; i < l->n_started; i++)
        child_signal(&l->ranks[i], SIGKILL);
}

/* Whether process group pgid still has a member we may signal. Members that ended as our
 * children (orphans come to us where we are the subreaper or init: a container) are
 * reaped first, so that zombies do not count. */
static bool group_alive(pid_t pgid) {
    while (waitpid(-pgid, NULL, WNOHANG) > 0)
        ;
    return kill(-pgid, 0) == 0;
}

/* A rank's exit. job_ran: nothing was stopping the ranks when this round of reaping began,
 * so a failure is news even if another rank's, reaped just before, started the stop. */
static void launcher_rank_exited(launcher *l, child *c, int status, bool job_ran, bool cause_known) {
    for (int i = 0; i < c->n_streams; i++)
        line_stream_drain(&c->streams[i]);
    c->running = false;
    /* Looked at now, while its pid still names the group: a group with members keeps the
     * number from being given to another process, an empty one is never signalled. */
    c->group_left = group_alive(c->pid);
    c->code = code_from_status(status);
    l->n_running--;
    char how[64];
    describe_exit(status, how, sizeof(how));
    /* killed by what ddp-run sent it, once another rank had failed in this round: no news */
    bool ours = WIFSIGNALED(status) && WTERMSIG(status) < 32 && (l->sent_signals & (1u << WTERMSIG(status)));
    if (c->code != 0 && job_ran && !ours) {
        log_error("%s (pid %d) %s%s", c->label, (int)c->pid, how,
                  l->n_running > 0 && !l->stopping ? "; stopping the other ranks" : "");
        /* Of ranks that ended together, one killed by a signal (a crash) is the likelier
         * cause of the others' failure (a peer gone): its code is ddp-run's. */
        if (!cause_known && (!l->cause_set || (c->code > 128 && l->exit_code <= 128))) {
            l->cause_set = false;
            launcher_set_cause(l, c->code);
        }
        launcher_stop_ranks(l, SIGTERM);
    } else if (c->code != 0 && l->told_to_stop && l->exit_code == 128 + l->told_to_stop &&
               ((!ours && c->code != 128 + l->stop_signal && c->code != 128 + l->told_to_stop) ||
                (l->grace_ran_out && c->code == 128 + SIGKILL))) {
        /* asked to stop (the stop being what ends the job: not a failure before it), it
         * failed instead (ddp-worker: its last checkpoint not written), or did not stop
         * within the grace period (what it had not saved is lost): news, and its code is
         * ddp-run's rather than the signal's */
        if (ours)
            log_error("%s (pid %d) did not stop within %d ms of %s and was killed: what it had not saved is lost "
                      "(--grace-ms)",
                      c->label, (int)c->pid, l->opts->grace_ms, signal_name(l->stop_signal));
        else
            log_error("%s (pid %d) %s while stopping", c->label, (int)c->pid, how);
        if (!l->stop_failed) {
            l->stop_failed = true;
            l->cause_set = false;
            launcher_set_cause(l, c->code);
        }
    } else {
        log_info("%s (pid %d) %s", c->label, (int)c->pid, how);
    }
}

static void launcher_ddpd_exited(launcher *l, int status) {
    child *c = &l->ddpd;
    line_stream_drain(&c->streams[0]);
    c->running = false;
    c->code = code_from_status(status);
    char how[64];
    describe_exit(status, how, sizeof(how));
    if (l->ddpd_stopping) {
        if (c->code != 0 && c->code != 128 + SIGTERM) /* what we asked of it is no news */
            log_warn("the private ddpd (pid %d) %s", (int)c->pid, how);
        return;
    }
    if (!l->endpoint[0])
        return; /* still starting: the caller says what went wrong */
    /* Without a coordinator the ranks cannot go on: end the job rather than let it hang. */
    if (l->n_running > 0 && !l->stopping) {
        log_error("the private ddpd (pid %d) %s while the ranks ran; stopping them", (int)c->pid, how);
        launcher_set_cause(l, 1);
        launcher_stop_ranks(l, SIGTERM);
    }
}

/* Reaps whatever of ours has exited; waits for each pid, not any child, so that a program
 * embedding the launcher keeps its own children. */
static void launcher_reap(launcher *l) {
    int status;
    bool job_ran = !l->stopping, cause_known = l->cause_set;
    for (int i = 0; i < l->n_started; i++) {
        child *c = &l->ranks[i];
        if (c->running && waitpid(c->pid, &status, WNOHANG) == c->pid)
            launcher_rank_exited(l, c, status, job_ran, cause_known);
    }
    if (l->have_ddpd && l->ddpd.running && waitpid(l->ddpd.pid, &status, WNOHANG) == l->ddpd.pid)
        launcher_ddpd_exited(l, status);
}

static void launcher_on_stop_signal(launcher *l, int sig) {
    bool first = !l->told_to_stop;
    if (!l->told_to_stop) /* whatever else ended the job: a stopped job is not started again */
        l->told_to_stop = sig;
    if (l->n_started > 0 && l->n_running == 0) /* the ranks are done: the exit code says it, unless theirs did */
        launcher_set_cause(l, 128 + sig);
    if (l->n_started == 0 && !l->cause_set) {
        log_warn("received %s before the ranks started", signal_name(sig));
        launcher_set_cause(l, 128 + sig);
    } else if (l->n_running > 0 && !l->stopping) {
        log_warn("received %s; forwarding it to %d rank%s", signal_name(sig), l->n_running,
                 l->n_running == 1 ? "" : "s");
        launcher_set_cause(l, 128 + sig);
        launcher_stop_ranks(l, sig);
    } else if (l->n_running > 0 && !l->killed && first) {
        /* the ranks are stopping after a rank failed: the user's first signal is theirs too,
         * within the same grace period; a second one kills them */
        log_warn("received %s while the ranks stop after a failure; forwarding it (again: kill them)",
                 signal_name(sig));
        l->sent_signals |= 1u << sig;
        for (int i = 0; i < l->n_started; i++)
            if (l->ranks[i].running)
                child_signal(&l->ranks[i], sig);
    } else if (l->n_running > 0 && !l->killed) {
        log_warn("received %s again; killing the ranks now", signal_name(sig));
        launcher_kill_ranks(l);
    } else if (l->ending_leftovers) {
        l->leftovers_now = true;
    } else if (l->ddpd_stopping && l->ddpd.running) {
        child_signal(&l->ddpd, SIGKILL);
    }
}

/* One round of the loop: waits at most until deadline_ms (and the grace timers) for
 * output or a signal, and handles what came. */
static void launcher_pump(launcher *l, uint64_t deadline_ms) {
    uint64_t now = clock_now_ms();
    uint64_t wake = now + SAFETY_TICK_MS;
    if (deadline_ms < wake)
        wake = deadline_ms;
    if (l->stopping && !l->killed && l->kill_at_ms < wake)
        wake = l->kill_at_ms;
    if (l->killed && l->give_up_at_ms < wake)
        wake = l->give_up_at_ms;

    struct pollfd *pfds = l->pfds;
    line_stream **owners = l->owners;
    size_t n = 0;
    owners[n] = NULL;
    pfds[n++] = (struct pollfd){.fd = signal_pipe[0], .events = POLLIN};
    int out_fd = out_queue_waiting_fd(&l->out);
    if (out_fd >= 0) {
        owners[n] = NULL;
        pfds[n++] = (struct pollfd){.fd = out_fd, .events = POLLOUT};
    }
    /* Output that our reader does not take: the children wait to write theirs. */
    bool reading = l->out.held < OUT_QUEUE_HIGH_BYTES;
    if (l->have_ddpd && l->ddpd.streams[0].fd >= 0) { /* read always: ddpd must not block on its log */
        owners[n] = &l->ddpd.streams[0];
        pfds[n++] = (struct pollfd){.fd = l->ddpd.streams[0].fd, .events = POLLIN};
    }
    for (int i = 0; reading && i < l->n_started; i++)
        for (int k = 0; k < l->ranks[i].n_streams; k++)
            if (l->ranks[i].streams[k].fd >= 0) {
                owners[n] = &l->ranks[i].streams[k];
                pfds[n++] = (struct pollfd){.fd = l->ranks[i].streams[k].fd, .events = POLLIN};
            }

    for (size_t i = 1; i < n; i++) /* a line's start that waits for its end goes out in time */
        if (owners[i] && line_stream_due_ms(owners[i]) < wake)
            wake = line_stream_due_ms(owners[i]);

    int ready = poll(pfds, n, clock_ms_until(wake));
    bool check_children = ready == 0; /* the safety tick */
    if (ready > 0) {
        for (size_t i = 1; i < n; i++)
            if (pfds[i].revents && owners[i])
                line_stream_read(owners[i]);
        if (pfds[0].revents) {
            bool seen[N_HANDLED];
            signals_take(seen);
            check_children = seen[0];
            for (size_t i = 1; i < N_HANDLED; i++)
                if (seen[i])
                    launcher_on_stop_signal(l, handled_signals[i]);
        }
    }
    now = clock_now_ms();
    for (size_t i = 1; i < n; i++)
        if (owners[i])
            line_stream_flush_due(owners[i], now);
    if (check_children)
        launcher_reap(l);
    out_queue_write(&l->out);
    /* An exited rank's group that has emptied is forgotten at once: its number may be
     * given to another process, whose group must never get our signals. */
    for (int i = 0; i < l->n_started; i++)
        if (l->ranks[i].group_left && !group_alive(l->ranks[i].pid))
            l->ranks[i].group_left = false;

    now = clock_now_ms();
    if (l->stopping && !l->killed && now >= l->kill_at_ms && l->n_running > 0) {
        log_warn("%d rank%s still running %d ms after %s; sending SIGKILL", l->n_running, l->n_running == 1 ? "" : "s",
                 l->opts->grace_ms, signal_name(l->stop_signal));
        l->grace_ran_out = true;
        launcher_kill_ranks(l);
    }
    if (l->killed && now >= l->give_up_at_ms)
        for (int i = 0; i < l->n_started; i++) {
            child *c = &l->ranks[i];
            if (!c->running)
                continue;
            log_error("%s (pid %d) did not die %d ms after SIGKILL; leaving it", c->label, (int)c->pid,
                      LAUNCHER_REAP_TIMEOUT_MS);
            for (int k = 0; k < c->n_streams; k++)
                line_stream_close(&c->streams[k]);
            c->running = false;
            l->n_running--;
        }
}

/* ---- the ranks' sockets ---- */

/* A private directory (0700: only this user reaches what listens in it) for the private
 * ddpd's socket and the ranks' sockets. Not the ipc wildcard of libzmq: that makes its
 * directory in the working directory when TMPDIR is unset, and a killed rank leaves it
 * behind. Ours goes when the launch ends, whatever the ranks did. */
static int socket_dir_create(launcher *l) {
    const char *base = getenv("TMPDIR");
    /* sun_path holds 108 bytes: leave room for "/ddp-run.XXXXXX/rank-NNNNNNN". */
    if (!base || base[0] != '/' || strlen(base) > 64)
        base = "/tmp";
    snprintf(l->socket_dir, sizeof(l->socket_dir), "%s/ddp-run.XXXXXX", base);
    if (!mkdtemp(l->socket_dir)) {
        int r = -errno;
        log_error("cannot create a private directory for the launch's sockets in %s: %s", base, strerror(-r));
        l->socket_dir[0] = '\0';
        return r;
    }
    return 0;
}

static void socket_dir_remove(launcher *l) {
    if (!l->socket_dir[0])
        return;
    char path[sizeof(l->socket_dir) + 32];
    for (int i = 0; i < l->opts->nproc; i++) {
        snprintf(path, sizeof(path), "%s/rank-%d", l->socket_dir, i);
        unlink(path); /* a rank that exited cleanly removed its own */
    }
    snprintf(path, sizeof(path), "%s/ddpd.sock", l->socket_dir);
    unlink(path); /* a private ddpd that stopped cleanly removed it */
    if (rmdir(l->socket_dir) < 0)
        log_warn("cannot remove %s: %s", l->socket_dir, strerror(errno));
    l->socket_dir[0] = '\0';
}

/* ---- the private ddpd ---- */

/* ddpd's "ddpd 0.1.0 listening on ENDPOINT (heartbeat ...)" says it is there. */
static void launcher_check_listening(void *ctx, const char *line, size_t n) {
    launcher *l = ctx;
    if (l->endpoint[0])
        return;
    char copy[512]; /* the line is short; a long one does not say where ddpd listens */
    if (n >= sizeof(copy))
        return;
    memcpy(copy, line, n);
    copy[n] = '\0';
    const char *at = strstr(copy, "listening on ");
    if (!at)
        return;
    at += strlen("listening on ");
    size_t len = strcspn(at, " \t");
    if (len == 0 || len > DDP_MAX_ENDPOINT)
        return;
    memcpy(l->endpoint, at, len);
    l->endpoint[len] = '\0';
}

static int launcher_start_ddpd(launcher *l) {
    char path[PATH_MAX];
    if (l->opts->ddpd_path)
        snprintf(path, sizeof(path), "%s", l->opts->ddpd_path);
    else {
        char dir[PATH_MAX];
        TRY(launcher_self_dir(dir, sizeof(dir)));
        if ((size_t)snprintf(path, sizeof(path), "%s/ddpd", dir) >= sizeof(path))
            return -ENAMETOOLONG;
    }
    if (access(path, X_OK) < 0) {
        int r = -errno;
        log_error("cannot start a private coordinator: %s: %s (or pass --coordinator EP)", path, strerror(-r));
        return r;
    }

    /* Its lines are parsed for the port: the plain format, not journald's. And at least
     * info, or the "listening on" line never comes. */
    const char *level = getenv("DDPD_LOG_LEVEL");
    level = level && strcmp(level, "debug") == 0 ? "debug" : "info";
    /* In the launch's private directory: only this user reaches it, and ddpd knows who it is. */
    char listen[sizeof(l->socket_dir) + 32];
    snprintf(listen, sizeof(listen), "ipc://%s/ddpd.sock", l->socket_dir);
    char *argv[] = {path, "--listen", listen, "--log-level", (char *)level, NULL};
    size_t n_environ = 0;
    while (environ[n_environ])
        n_environ++;
    char **envp = calloc(n_environ + 1, sizeof(char *));
    if (!envp)
        return -ENOMEM;
    for (size_t i = 0, k = 0; i < n_environ; i++)
        if (!env_entry_is(environ[i], "JOURNAL_STREAM"))
            envp[k++] = environ[i];
    int r = child_spawn(l, &l->ddpd, "the private ddpd", path, argv, envp, false, "[ddpd] ", !l->opts->verbose);
    free(envp);
    if (r < 0) {
        log_error("cannot start %s: %s", path, strerror(-r));
        return r;
    }
    l->have_ddpd = true;
    l->ddpd.streams[0].watch = launcher_check_listening;
    l->ddpd.streams[0].watch_ctx = l;

    uint64_t deadline = clock_now_ms() + LAUNCHER_DDPD_START_TIMEOUT_MS;
    while (!l->endpoint[0] && l->ddpd.running && !l->cause_set && clock_now_ms() < deadline)
        launcher_pump(l, deadline);
    if (l->endpoint[0]) {
        log_info("private ddpd (pid %d) listening on %s", (int)l->ddpd.pid, l->endpoint);
        return 0;
    }
    if (l->cause_set)
        return 0; /* told to stop while it started: not an error of ours */
    if (!l->ddpd.running) {
        log_error("the private ddpd (%s) exited with code %d before it listened", path, l->ddpd.code);
        return -ECHILD;
    }
    log_error("the private ddpd (pid %d) did not say where it listens within %d ms", (int)l->ddpd.pid,
              LAUNCHER_DDPD_START_TIMEOUT_MS);
    return -ETIMEDOUT;
}

/* SIGTERM, then SIGKILL if it lingers; its output is drained all along. */
static void launcher_stop_ddpd(launcher *l) {
    if (!l->have_ddpd)
        return;
    if (l->ddpd.running) {
        l->ddpd_stopping = true;
        child_signal(&l->ddpd, SIGTERM);
        uint64_t deadline = clock_now_ms() + LAUNCHER_DDPD_STOP_TIMEOUT_MS;
        while (l->ddpd.running && clock_now_ms() < deadline)
            launcher_pump(l, deadline);
        if (l->ddpd.running) {
            log_warn("the private ddpd (pid %d) did not stop within %d ms of SIGTERM; killing it", (int)l->ddpd.pid,
                     LAUNCHER_DDPD_STOP_TIMEOUT_MS);
            child_signal(&l->ddpd, SIGKILL);
            deadline = clock_now_ms() + LAUNCHER_REAP_TIMEOUT_MS;
            while (l->ddpd.running && clock_now_ms() < deadline)
                launcher_pump(l, deadline);
        }
    }
    line_stream_close(&l->ddpd.streams[0]);
}

/* What a rank started and left behind when it exited (a shell's background job, a server
 * it forked), in its process group: SIGTERM at the end of the job, SIGKILL after the grace
 * period, as torchrun ends its workers' process groups. */
static void launcher_end_leftovers(launcher *l) {
    int left = 0;
    for (int i = 0; i < l->n_started; i++) {
        child *c = &l->ranks[i];
        if (c->running || !c->group_left || !group_alive(c->pid)) {
            c->group_left = false;
            continue;
        }
        log_warn("processes that %s (pid %d) started outlived it; sending their group SIGTERM", c->label, (int)c->pid);
        kill(-c->pid, SIGTERM);
        left++;
    }
    uint64_t deadline = clock_now_ms() + (uint64_t)l->opts->grace_ms;
    l->ending_leftovers = true;
    while (left > 0 && clock_now_ms() < deadline && !l->leftovers_now) {
        uint64_t tick = clock_now_ms() + 20;
        launcher_pump(l, tick < deadline ? tick : deadline); /* our output goes on meanwhile */
        left = 0;
        for (int i = 0; i < l->n_started; i++)
            left += l->ranks[i].group_left && group_alive(l->ranks[i].pid);
    }
    for (int i = 0; i < l->n_started; i++)
        if (l->ranks[i].group_left && group_alive(l->ranks[i].pid)) {
            log_warn("processes that %s started still run %d ms after SIGTERM; sending SIGKILL", l->ranks[i].label,
                     l->opts->grace_ms);
            kill(-l->ranks[i].pid, SIGKILL);
        }
    l->ending_leftovers = false;
}

/* A stop signal that came once the ranks were gone: no restart after it (ddp-run's
 * --max-restarts, ddp-compare's next mode), and the exit code says it unless a rank's did. */
static void launcher_note_stop(launcher *l, const bool seen[N_HANDLED]) {
    for (size_t i = 1; i < N_HANDLED; i++) /* [0] is SIGCHLD */
        if (seen[i] && !l->told_to_stop) {
            l->told_to_stop = handled_signals[i];
            launcher_set_cause(l, 128 + handled_signals[i]);
        }
}

/* The rest of our output, as long as our reader takes it; a stop signal drops it. */
static void launcher_flush_output(launcher *l) {
    bool seen[N_HANDLED];
    while (!out_queue_flush(&l->out, signal_pipe[0])) {
        signals_take(seen);
        launcher_note_stop(l, seen);
        bool stop = false; /* this round's: a SIGCHLD, or a stop signal long handled, goes on */
        for (size_t i = 1; i < N_HANDLED; i++)
            stop = stop || seen[i];
        if (stop)
            break;
    }
    signals_take(seen); /* one that came while nothing waited */
    launcher_note_stop(l, seen);
}

static void launcher_log_sink(void *ctx, const char *line, size_t n) {
    out_queue_put(ctx, STDERR_FILENO, "", line, n > 0 && line[n - 1] == '\n' ? n - 1 : n);
}

/* ---- the public part ---- */

int launcher_run(const launcher_options *opts, int *exit_code, int *ret_stop_signal, bool *ret_output_lost) {
    launcher l = {.opts = opts, .devnull = -1};
    l.ddpd.streams[0].fd = -1;
    saved_signals saved;
    rank_env env = {0};
    /* Two pipes a rank: 1024 ranks need more descriptors than the usual soft limit. */
    l.files_raised = fd_limit_raise(&l.files) == 0;
    int r = signals_install(&saved);
    if (r < 0) {
        log_error("cannot set up signal handling: %s", strerror(-r));
        if (l.files_raised)
            setrlimit(RLIMIT_NOFILE, &l.files);
        *exit_code = 1;
        return r;
    }
    out_queue_open(&l.out);
    log_set_sink(launcher_log_sink, &l.out);
    l.ranks = calloc((size_t)opts->nproc, sizeof(child));
    l.pfds = calloc(3 + 2 * (size_t)opts->nproc, sizeof(*l.pfds));
    l.owners = calloc(3 + 2 * (size_t)opts->nproc, sizeof(*l.owners));
    l.devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (!l.ranks || !l.pfds || !l.owners || l.devnull < 0) {
        r = l.devnull < 0 ? -errno : -ENOMEM;
        log_error("cannot set up the launch: %s", strerror(-r));
        goto out;
    }

    /* the private ddpd's socket and the ranks' data sockets (unless DDP_DATA_ENDPOINT says) */
    if ((r = socket_dir_create(&l)) < 0)
        goto out;
    if (opts->coordinator)
        snprintf(l.endpoint, sizeof(l.endpoint), "%s", opts->coordinator);
    else if ((r = launcher_start_ddpd(&l)) < 0 || l.cause_set)
        goto out;

    const char *data_dir = getenv("DDP_DATA_ENDPOINT") ? NULL : l.socket_dir;
    if ((r = rank_env_build(&env, opts->nproc, opts->job, l.endpoint, data_dir)) < 0) {
        log_error("cannot set up the ranks' environment: %s", strerror(-r));
        goto out;
    }
    for (int i = 0; i < opts->nproc; i++) {
        char label[24], prefix[24];
        rank_env_set_rank(&env, i);
        snprintf(label, sizeof(label), "rank %d", i);
        snprintf(prefix, sizeof(prefix), "[rank %d] ", i);
        r = child_spawn(&l, &l.ranks[i], label, opts->program, opts->argv, env.envp, true, prefix, false);
        if (r < 0) {
            log_error("cannot start rank %d: %s", i, strerror(-r));
            launcher_set_cause(&l, 1);
            launcher_stop_ranks(&l, SIGTERM);
            break;
        }
        l.n_started++;
        l.n_running++;
        log_info("rank %d is pid %d", i, (int)l.ranks[i].pid);
    }

out:
    /* Whatever happened, nothing we started outlives us. */
    while (l.n_running > 0)
        launcher_pump(&l, UINT64_MAX);
    if (l.ranks)
        launcher_end_leftovers(&l);
    launcher_stop_ddpd(&l);
    socket_dir_remove(&l);
    if (l.ranks)
        for (int i = 0; i < l.n_started; i++)
            for (int k = 0; k < l.ranks[i].n_streams; k++)
                line_stream_close(&l.ranks[i].streams[k]);
    if (l.devnull >= 0)
        close(l.devnull);
    rank_env_free(&env);
    free(l.ranks);
    free(l.pfds);
    free(l.owners);
    launcher_flush_output(&l);
    log_set_sink(NULL, NULL);
    if (l.out.dropped)
        log_warn("%u lines of output were lost: out of memory to hold them", l.out.dropped);
    /* A full disk under `> train.log` is a failure, said where it can be; a reader that went
     * away (`| head`) is the reader's choice. */
    bool lost_output = false;
    for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++)
        if (l.out.gone[fd] && l.out.error[fd] != EPIPE) {
            lost_output = true;
            if (!l.out.gone[STDERR_FILENO])
                log_error("its %s could not be written (%s): the lines after it were lost",
                          fd == STDOUT_FILENO ? "output" : "error output", strerror(l.out.error[fd]));
        }
    out_queue_free(&l.out);
    signals_restore(&saved);
    if (l.files_raised)
        setrlimit(RLIMIT_NOFILE, &l.files);
    *exit_code = l.cause_set ? l.exit_code : r < 0 || lost_output ? 1 : 0;
    if (ret_stop_signal)
        *ret_stop_signal = l.told_to_stop;
    if (ret_output_lost)
        *ret_output_lost = lost_output;
    return r;
}
