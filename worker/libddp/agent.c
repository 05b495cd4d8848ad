#include "worker/libddp/agent.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "common/process_state.h"

#define AGENT_FORWARD 'F'
#define AGENT_QUIT 'Q'
#define AGENT_LEAVE_LINGER_MS 2000 /* how long a Leave may take to go out at exit */

static void agent_post(agent *a, agent_event *ev) {
    if (!ev->msg.env)
        job_end_raise(&a->end, ev->failure, ev->text);
    else if (ev->msg.env->type == DDP__MSG_TYPE__ABORT) {
        char text[DDP_MAX_REASON + 64];
        snprintf(text, sizeof(text), "job '%s' aborted: %s", a->job, ev->msg.env->abort->reason);
        job_end_raise(&a->end, ev->msg.env->abort->code, text);
    }
    if (zmq_send(a->agent_pipe, &ev, sizeof(ev), ZMQ_DONTWAIT) < 0)
        agent_event_free(ev);
}

static void agent_post_failure(agent *a, int failure, const char *fmt, unsigned ms) {
    agent_event *ev = calloc(1, sizeof(*ev));
    if (!ev)
        return;
    ev->failure = failure;
    snprintf(ev->text, sizeof(ev->text), fmt, a->coordinator, ms);
    agent_post(a, ev);
}

void agent_set_progress(agent *a, uint64_t step, double samples_per_s) {
    pthread_mutex_lock(&a->progress_lock);
    a->step = step;
    a->samples_per_s = samples_per_s >= 0 && samples_per_s < 1e15 ? samples_per_s : 0;
    pthread_mutex_unlock(&a->progress_lock);
}

void agent_set_waiting(agent *a, int on, const char *what) {
    pthread_mutex_lock(&a->progress_lock);
    a->waiting = on >= 0;
    a->waiting_on = on;
    if (on >= 0) {
        a->waiting_since_ms = clock_now_ms();
        snprintf(a->waiting_in, sizeof(a->waiting_in), "%s", what);
    }
    pthread_mutex_unlock(&a->progress_lock);
}

static void agent_send_heartbeat(agent *a, uint32_t interval_ms, uint32_t liveness) {
    Ddp__Heartbeat body = DDP__HEARTBEAT__INIT;
    body.interval_ms = interval_ms;
    body.liveness = liveness;
    char waiting_in[64] = "";
    pthread_mutex_lock(&a->progress_lock);
    body.step = a->step;
    body.samples_per_s = a->samples_per_s;
    body.waiting = a->waiting;
    body.waiting_on = a->waiting ? a->waiting_on : -1;
    body.waiting_ms = a->waiting ? clock_now_ms() - a->waiting_since_ms : 0;
    if (a->waiting)
        snprintf(waiting_in, sizeof(waiting_in), "%s", a->waiting_in);
    pthread_mutex_unlock(&a->progress_lock);
    body.waiting_in = waiting_in;
    Ddp__Envelope env;
    wire_envelope_init(&env, DDP__MSG_TYPE__HEARTBEAT, a->job, -1, 0, 0);
    env.heartbeat = &body;
    wire_send(a->control, NULL, 0, &env, NULL, 0); /* a full queue drops a beat: the next one will do */
}

/* Moves the rest of a multipart message from the pipe to the control socket, whole or
 * not at all: if ddpd's queue is full, a payload must not go out as a message of its own
 * (the caller's wait then ends at its timeout, with its own error). */
static void agent_forward(agent *a) {
    int more = 1;
    size_t more_size = sizeof(more);
    bool dropping = false;
    while (zmq_getsockopt(a->agent_pipe, ZMQ_RCVMORE, &more, &more_size) == 0 && more) {
        zmq_msg_t frame;
        zmq_msg_init(&frame);
        if (zmq_msg_recv(&frame, a->agent_pipe, 0) < 0) {
            zmq_msg_close(&frame);
            return;
        }
        zmq_getsockopt(a->agent_pipe, ZMQ_RCVMORE, &more, &more_size);
        /* ZeroMQ takes the later parts of a message whose first part it took */
        if (dropping || zmq_msg_send(&frame, a->control, (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&frame);
            dropping = true;
        }
    }
}

/* ddp_interrupt(): a flag for the threads, and an eventfd that never empties, to wake
 * them; made once, before any agent runs, and kept for the life of the process. */
static volatile sig_atomic_t interrupted;
static int interrupt_fd = -1;
static pthread_once_t interrupt_once = PTHREAD_ONCE_INIT;

static void interrupt_fd_make(void) {
    interrupt_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

int agent_interrupt(void) {
    interrupted = 1;
    uint64_t one = 1;
    if (interrupt_fd >= 0 && write(interrupt_fd, &one, sizeof(one)) < 0)
        return -errno;
    return 0;
}

/* Takes in the control socket's handshake failures seen so far. */
static void agent_read_monitor(agent *a) {
    zmq_msg_t event;
    zmq_msg_init(&event);
    while (a->monitor && zmq_msg_recv(&event, a->monitor, ZMQ_DONTWAIT) >= 0) {
        uint16_t code = 0;
        if (zmq_msg_size(&event) >= sizeof(code) && zmq_msg_more(&event)) { /* [event, value][endpoint] */
            memcpy(&code, zmq_msg_data(&event), sizeof(code));
            if (a->handshake_failed != ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) /* the telling one stays */
                a->handshake_failed = code;
        }
    }
    zmq_msg_close(&event);
}

/* When the watchdog ends this process: a while after the job ended, unless the caller's
 * thread has been in libddp since (then it knows, and goes its own way). */
static uint64_t agent_watchdog_deadline(agent *a) {
    if (a->watchdog_ms <= 0 || !job_end_code(&a->end) || atomic_load(&a->end.told))
        return UINT64_MAX;
    return atomic_load(&a->end.at_ms) + (uint64_t)a->watchdog_ms;
}

/* As PyTorch's NCCL watchdog: a rank whose program never comes back to see its job's end
 * (a hung or endless computation) must not live on, holding its rank and its memory, so
 * that the job can form again. SIGABRT, so that a core dump shows where it hung. */
static void agent_watchdog_fire(agent *a, uint64_t now) {
    fprintf(stderr,
            "ddp: %s\nddp: that was %.1f s ago, and this program has not called libddp since (busy or hung): the "
            "watchdog ends the process (DDP_WATCHDOG_MS=%d)\n",
            a->end.text, (double)(now - atomic_load(&a->end.at_ms)) / 1000.0, a->watchdog_ms);
    fflush(stderr);
    abort();
}

static void *agent_main(void *arg) {
    agent *a = arg;
    uint64_t start = clock_now_ms(), last_heard = 0, next_beat = start;
    uint32_t interval = DDP_DEFAULT_HEARTBEAT_MS, liveness = DDP_DEFAULT_LIVENESS;
    uint32_t coordinator_pid = 0, stall_limit_ms = 0; /* ddpd on this host says who it is */
    bool heard = false, failed = false;

    for (;;) {
        uint64_t deadline = next_beat;
        if (!failed) {
            uint64_t silence =
                heard ? last_heard + (uint64_t)interval * liveness + 1 : start + (uint64_t)a->connect_timeout_ms;
            if (silence > clock_now_ms()) /* past it, ddpd is stalled: judged again at each beat */
                deadline = silence < deadline ? silence : deadline;
        }
        uint64_t watchdog = agent_watchdog_deadline(a);
        deadline = watchdog < deadline ? watchdog : deadline;
        zmq_pollitem_t items[3] = {{.socket = a->control, .events = ZMQ_POLLIN},
                                   {.socket = a->agent_pipe, .events = ZMQ_POLLIN},
                                   {.fd = interrupt_fd, .events = ZMQ_POLLIN}};
        int n = zmq_poll(items, failed || interrupt_fd < 0 ? 2 : 3, clock_ms_until(deadline));
        if (n < 0 && zmq_errno() == ETERM)
            break;
        if (interrupted && !failed) { /* every wait on this group ends, with this reason */
            agent_event *ev = calloc(1, sizeof(*ev));
            if (ev) {
                ev->failure = -EINTR;
                snprintf(ev->text, sizeof(ev->text), "interrupted: the program called ddp_interrupt (a signal)");
                agent_post(a, ev);
            }
            failed = true;
        }

        if (n > 0 && (items[1].revents & ZMQ_POLLIN)) {
            char cmd = 0;
            if (zmq_recv(a->agent_pipe, &cmd, 1, 0) >= 0) {
                agent_forward(a);
                if (cmd == AGENT_QUIT)
                    break;
            }
        }
        while (n > 0 && (items[0].revents & ZMQ_POLLIN)) {
            agent_event *ev = calloc(1, sizeof(*ev));
            if (!ev)
                break;
            int r = wire_recv(a->control, false, ZMQ_DONTWAIT, &ev->msg);
            if (r == -EAGAIN || r == -EINTR || r == -ETERM) {
                free(ev);
                break;
            }
            if (r < 0) { /* ddpd broke the protocol: drop it, the caller's timeout still holds */
                agent_event_free(ev);
                continue;
            }
            heard = true;
            last_heard = clock_now_ms();
            if (ev->msg.env->type == DDP__MSG_TYPE__HEARTBEAT) {
                interval = ev->msg.env->heartbeat->interval_ms;
                liveness = ev->msg.env->heartbeat->liveness;
                coordinator_pid = ev->msg.env->heartbeat->coordinator_pid;
                stall_limit_ms = ev->msg.env->heartbeat->stall_timeout_ms;
                for (size_t i = 0; i < ev->msg.env->heartbeat->n_left; i++) /* checked below the world size */
                    atomic_store(&a->end.left[ev->msg.env->heartbeat->left[i]], 1);
                agent_event_free(ev);
                continue;
            }
            agent_post(a, ev);
        }

        uint64_t now = clock_now_ms();
        if (now > deadline + interval) {
            /* This process did not run for a while (stopped, starved): ddpd's silence since
             * is not ddpd's. Beat at once and give it a whole window to answer; if the job
             * ended meanwhile, its answer says so. */
            start = last_heard = now;
            next_beat = now;
        }
        if (now >= watchdog)
            agent_watchdog_fire(a, now);
        if (now >= next_beat) {
            agent_send_heartbeat(a, interval, liveness);
            next_beat = now + interval;
        }
        if (!failed && !heard && now - start >= (uint64_t)a->connect_timeout_ms) {
            agent_read_monitor(a);
            agent_post_failure(a, -EHOSTUNREACH,
                               a->handshake_failed == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH
                                   ? "ddpd at %s refused this client's CURVE key (its --curve-users does not name "
                                     "it); no answer within %u ms"
                               : a->handshake_failed
                                   ? "ddpd at %s dropped the connection before it answered: one side speaks CURVE "
                                     "and the other not (DDP_CURVE_SERVER_KEY, DDP_CURVE_KEY); no answer within %u ms"
                                   : "no coordinator answered at %s within %u ms (is ddpd running there?)",
                               (unsigned)a->connect_timeout_ms);
            failed = true;
        } else if (!failed && heard && now - last_heard > (uint64_t)interval * liveness) {
            char state[32];
            /* ddpd on this host, silent but there (starved by a crowd of ranks, stopped): it
             * is judged as it judges us, by its stall limit */
            bool stalled = coordinator_pid && strncmp(a->coordinator, "ipc://", 6) == 0 &&
                           process_state(coordinator_pid, state, sizeof(state)) == 0;
            if (!stalled)
                agent_post_failure(a, -ECONNABORTED, "lost the coordinator at %s: silent for %u ms",
                                   (unsigned)(now - last_heard));
            else if (now - last_heard > (uint64_t)stall_limit_ms) {
                agent_event *ev = calloc(1, sizeof(*ev));
                if (ev) {
                    ev->failure = -ECONNABORTED;
                    snprintf(ev->text, sizeof(ev->text),
                             "the coordinator at %s (pid %u) stopped responding %.1f s ago (state %s; its "
                             "--stall-timeout %u s)",
                             a->coordinator, coordinator_pid, (double)(now - last_heard) / 1000.0, state,
                             stall_limit_ms / 1000);
                    agent_post(a, ev);
                }
            }
            failed = !stalled || now - last_heard > (uint64_t)stall_limit_ms;
        }
    }

    int linger = AGENT_LEAVE_LINGER_MS;
    zmq_setsockopt(a->control, ZMQ_LINGER, &linger, sizeof(linger));
    zmq_close(a->control);
    zmq_close(a->agent_pipe);
    if (a->monitor)
        zmq_close(a->monitor);
    return NULL;
}

static void agent_routing_id(uint8_t *id, size_t size) {
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id, 1, size, f) : 0;
    if (f)
        fclose(f);
    if (got < size) { /* no urandom: pid and clock are unique enough on one host */
        uint64_t seed[2] = {(uint64_t)getpid(), clock_now_us()};
        memcpy(id, seed, size < sizeof(seed) ? size : sizeof(seed));
    }
    id[0] |= 0x80;
}

int agent_start(agent *a, void *zmq_ctx, const char *coordinator, const char *job, int connect_timeout_ms,
                int watchdog_ms, const char *curve_server_key, const curve_keypair *own) {
    pthread_once(&interrupt_once, interrupt_fd_make);
    static _Atomic unsigned long pipe_counter;
    char pipe_name[64];
    snprintf(pipe_name, sizeof(pipe_name), "inproc://ddp-agent-%lu", (unsigned long)pipe_counter++);
    *a = (agent){.zmq_ctx = zmq_ctx, .connect_timeout_ms = connect_timeout_ms, .watchdog_ms = watchdog_ms};
    atomic_flag_clear(&a->end.raised);
    a->end.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->end.fd < 0)
        return -errno;
    pthread_mutex_init(&a->progress_lock, NULL);
    a->waiting_on = -1;
    snprintf(a->coordinator, sizeof(a->coordinator), "%s", coordinator);
    snprintf(a->job, sizeof(a->job), "%s", job);

    int r = 0;
    a->pipe = zmq_socket(zmq_ctx, ZMQ_PAIR);
    a->agent_pipe = zmq_socket(zmq_ctx, ZMQ_PAIR);
    a->control = zmq_socket(zmq_ctx, ZMQ_DEALER);
    if (!a->pipe || !a->agent_pipe || !a->control)
        r = -errno;
    /* Our own routing id, so that ddpd knows us again if the connection is re-made. ZeroMQ
     * reserves ids that start with a zero byte. */
    uint8_t id[16];
    agent_routing_id(id, sizeof(id));
    int ipv6 = strchr(coordinator, '[') != NULL;
    if (r == 0)
        r = wire_socket_setup(a->pipe, sizeof(agent_event *));
    if (r == 0)
        r = wire_socket_setup(a->agent_pipe, DDP_MAX_CONTROL_MSG_BYTES);
    if (r == 0)
        r = wire_socket_setup(a->control, DDP_MAX_CONTROL_MSG_BYTES);
    if (r == 0 && (zmq_setsockopt(a->control, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0 ||
                   zmq_setsockopt(a->control, ZMQ_ROUTING_ID, id, sizeof(id)) < 0))
        r = -errno;
    if (r == 0 && curve_server_key)
        r = curve_client_setup(a->control, curve_server_key, own);
    char monitor_name[64]; /* a refused key shows only here: ZeroMQ retries in silence */
    snprintf(monitor_name, sizeof(monitor_name), "inproc://ddp-agent-monitor-%lu", (unsigned long)pipe_counter++);
    if (r == 0 && (zmq_socket_monitor(a->control, monitor_name,
                                      ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                          ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED) < 0 ||
                   !(a->monitor = zmq_socket(zmq_ctx, ZMQ_PAIR)) || zmq_connect(a->monitor, monitor_name) < 0))
        r = -errno;
    if (r == 0 && (zmq_bind(a->agent_pipe, pipe_name) < 0 || zmq_connect(a->pipe, pipe_name) < 0))
        r = -errno;
    if (r == 0 && zmq_connect(a->control, coordinator) < 0)
        r = -EINVAL; /* a malformed endpoint; the caller names it */
    if (r == 0 && (r = -pthread_create(&a->thread, NULL, agent_main, a)) == 0) {
        a->running = true;
        return 0;
    }
    if (a->control)
        zmq_close(a->control);
    if (a->monitor)
        zmq_close(a->monitor);
    if (a->agent_pipe)
        zmq_close(a->agent_pipe);
    if (a->pipe)
        zmq_close(a->pipe);
    a->pipe = a->agent_pipe = a->control = NULL;
    close(a->end.fd);
    a->end.fd = -1;
    pthread_mutex_destroy(&a->progress_lock);
    return r;
}

static int agent_command(agent *a, char cmd, const Ddp__Envelope *env, const void *payload, size_t bytes) {
    /* The agent always drains its pipe, so only a quit may block: it must get through. */
    int dontwait = cmd == AGENT_QUIT ? 0 : ZMQ_DONTWAIT;
    zmq_msg_t frame;
    if (env)
        TRY(wire_pack(env, &frame));
    if (zmq_send(a->pipe, &cmd, 1, (env ? ZMQ_SNDMORE : 0) | dontwait) < 0) {
        int r = -errno;
        if (env)
            zmq_msg_close(&frame);
        return r;
    }
    /* A multipart message goes whole once its first part went: the rest cannot fail on a full queue. */
    if (env && zmq_msg_send(&frame, a->pipe, (bytes ? ZMQ_SNDMORE : 0) | dontwait) < 0) {
        zmq_msg_close(&frame);
        return -errno;
    }
    if (bytes && zmq_send(a->pipe, payload, bytes, dontwait) < 0)
        return -errno;
    return 0;
}

int agent_send(agent *a, const Ddp__Envelope *env) {
    return agent_command(a, AGENT_FORWARD, env, NULL, 0);
}

int agent_send_payload(agent *a, const Ddp__Envelope *env, const void *payload, size_t bytes) {
    return agent_command(a, AGENT_FORWARD, env, payload, bytes);
}

int agent_next(agent *a, int timeout_ms, agent_event **ret_event) {
    zmq_pollitem_t item = {.socket = a->pipe, .events = ZMQ_POLLIN};
    int n = zmq_poll(&item, 1, timeout_ms);
    if (n < 0)
        return -zmq_errno();
    if (n == 0)
        return -ETIMEDOUT;
    agent_event *ev = NULL;
    if (zmq_recv(a->pipe, &ev, sizeof(ev), 0) != (int)sizeof(ev) || !ev)
        return -EPROTO;
    *ret_event = ev;
    return 0;
}

void agent_event_free(agent_event *ev) {
    if (!ev)
        return;
    wire_msg_close(&ev->msg);
    free(ev);
}

void agent_stop(agent *a, const Ddp__Envelope *leave) {
    if (!a->running)
        return;
    if (agent_command(a, AGENT_QUIT, leave, NULL, 0) < 0 && leave)
        agent_command(a, AGENT_QUIT, NULL, NULL, 0);
    pthread_join(a->thread, NULL);
    /* Free whatever the agent posted that nobody read. */
    agent_event *ev;
    while (zmq_recv(a->pipe, &ev, sizeof(ev), ZMQ_DONTWAIT) == (int)sizeof(ev))
        agent_event_free(ev);
    zmq_close(a->pipe);
    a->pipe = NULL;
    close(a->end.fd);
    a->end.fd = -1;
    pthread_mutex_destroy(&a->progress_lock);
    a->running = false;
}
