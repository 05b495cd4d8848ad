/* ddp-worker: one rank of a data-parallel training job.
 *   ddp-run -n 2 -- ddp-worker --mode ddp --model mlp --epochs 3 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/limits.h"
#include "common/log.h"
#include "worker/trainer/blas_kernels.h"
#include "worker/trainer/trainer.h"
#include "worker/trainer/worker_options.h"

#define EXIT_FAILURE_RUN 1       /* training failed, or its metrics could not be written */
#define EXIT_USAGE 2             /* the flags, the config file or the environment ask the impossible */
#define EXIT_COORDINATOR_GONE 75 /* EX_TEMPFAIL: ddpd went away; stopped with the checkpoint, run again */

#define STOP_REPEAT_MS 1000 /* a stop signal again within this is the same request */

/* In training, the ranks agree to stop between steps and write the checkpoint. Before it
 * (joining, loading) there is nothing to keep, and on a second signal the user will not
 * wait: libddp's waits end now. A stop signal again within a second is not a second
 * request but the first one from another sender: systemd's KillMode=control-group and
 * Slurm's scancel signal every process of the job while ddp-run forwards its own, and
 * systemd's SendSIGHUP= follows SIGTERM with SIGHUP. */
static void on_stop(int sig) {
    static volatile int64_t first_ms; /* when the stop was asked */
    int saved_errno = errno;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    int64_t ms = (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
    bool again = trainer_stop_signal != 0;
    if (!again || ms - first_ms >= STOP_REPEAT_MS) {
        if (!trainer_training || again)
            ddp_interrupt();
        if (!again) {
            first_ms = ms;
            trainer_stop_signal = sig;
        }
    }
    errno = saved_errno;
}

int main(int argc, char **argv) {
    const config_spec *spec = worker_options_spec();
    worker_options o = {0};
    char err[512];
    int first = argc;
    int r = config_load(spec, &o, argc, argv, &first, err, sizeof(err));
    if (r < 0 || first < argc) {
        fprintf(stderr, "ddp-worker: %s\n", r < 0 ? err : "unexpected argument (see --help)");
        config_free(spec, &o);
        return EXIT_USAGE;
    }
    if (o.help || o.version) {
        if (o.version)
            printf("ddp-worker %s\n", DDP_VERSION);
        else
            config_print_help(spec, stdout);
        config_free(spec, &o);
        return 0;
    }
    if ((o.resume || o.overwrite) && !o.checkpoint) {
        fprintf(stderr, "ddp-worker: --%s needs --checkpoint PATH\n", o.resume ? "resume" : "overwrite");
        config_free(spec, &o);
        return EXIT_USAGE;
    }
    if (o.resume && o.overwrite) {
        fprintf(stderr, "ddp-worker: --resume continues from --checkpoint and --overwrite starts over: choose one\n");
        config_free(spec, &o);
        return EXIT_USAGE;
    }
    const char *kernels;
    r = blas_kernels_restart_if_generic(argv, &kernels); /* returns only when it did not restart */
    if (r < 0)
        fprintf(stderr,
                "ddp-worker: OpenBLAS does not know this CPU and chose its generic kernels; starting again with "
                "OPENBLAS_CORETYPE=%s (which the CPU runs) failed: %s; training goes on, slower\n",
                kernels, strerror(-r));
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* SIGTERM, SIGINT and SIGHUP (a closed terminal, a lost ssh session) end the job
     * between steps, with a checkpoint (trainer.h). */
    /* SA_RESTART: a write to a slow pipe goes on; libddp's waits end by ddp_interrupt, not EINTR. */
    struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask); /* one stop signal's handler at a time */
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGHUP);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* A reader that went away (a --metrics FIFO, `| head`) fails the write with EPIPE,
     * which the metrics say once, rather than killing the rank without its checkpoint. */
    signal(SIGPIPE, SIG_IGN);
    trainer t;
    r = trainer_open(&t, &o);
    if (r == 0)
        r = trainer_run(&t);
    if (r < 0) {
        if (t.g) {
            fprintf(stderr, "ddp-worker: rank %d: %s\n", t.rank, t.error);
            ddp_abort(t.g, t.error); /* the others fail now, naming us, not at their timeout */
        } else
            fprintf(stderr, "ddp-worker: %s\n", t.error);
    }
    trainer_close(&t);
    config_free(spec, &o);
    /* its lines (RESULT among them) on a full disk: not a run that went well; a reader
     * that went away (`| head`) is the reader's choice */
    int out_error = fflush(stdout) != 0 ? errno : ferror(stdout) ? -1 : 0; /* -1: an earlier write, errno gone */
    struct pollfd out = {.fd = STDOUT_FILENO};
    if (out_error < 0 && poll(&out, 1, 0) == 1 && (out.revents & (POLLERR | POLLHUP))) /* its reader went away */
        out_error = EPIPE;
    if (out_error && out_error != EPIPE) {
        fprintf(stderr, "ddp-worker: rank %d: its output could not be written%s%s\n", t.rank,
                out_error > 0 ? ": " : " (a write to it failed: a full disk?)",
                out_error > 0 ? strerror(out_error) : "");
        if (r == 0 && !t.stopped_by)
            return EXIT_FAILURE_RUN;
    }
    if (r == 0 && t.metrics_error) {
        fprintf(stderr, "ddp-worker: rank %d: trained, but --metrics %s could not be written: %s\n", t.rank,
                t.metrics_path, strerror(t.metrics_error));
        return EXIT_FAILURE_RUN;
    }
    /* stopped before training: what ended it was the signal (a peer's abort, come first,
     * as much as an interrupted wait) */
    if (r < 0 && trainer_stop_signal && (r == -EINTR || !trainer_training))
        return 128 + trainer_stop_signal;
    if (r < 0)
        return t.usage_error ? EXIT_USAGE : EXIT_FAILURE_RUN;
    /* Stopped by a signal or for a lost ddpd, with the checkpoint written: not a finished run. */
    if (t.stopped_by == TRAINER_STOP_COORDINATOR)
        return EXIT_COORDINATOR_GONE;
    return t.stopped_by ? 128 + t.stopped_by : 0;
}
