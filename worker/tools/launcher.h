/* The launcher behind ddp-run: starts a private ddpd unless given a coordinator, spawns
 * N ranks of one program with the torchrun variables set, prefixes their output with the
 * rank, forwards SIGINT/SIGTERM/SIGHUP, and on the first failure stops the rest.
 *
 * Everything happens in one poll() loop over the children's pipes and a self-pipe that
 * the signal handlers write to; nothing sleeps, and every wait has a deadline. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#define LAUNCHER_DDPD_START_TIMEOUT_MS 10000 /* until ddpd says where it listens */
#define LAUNCHER_DDPD_STOP_TIMEOUT_MS 5000   /* after SIGTERM, before SIGKILL */
#define LAUNCHER_REAP_TIMEOUT_MS 10000       /* after SIGKILL, before giving up on a child */

typedef struct {
    int nproc;               /* ranks to start, 1..DDP_MAX_WORLD_SIZE */
    const char *coordinator; /* ddpd's endpoint; NULL: start a private one */
    const char *job;         /* DDP_JOB for the ranks; NULL: leave it alone */
    int grace_ms;            /* SIGTERM (or the forwarded signal) to SIGKILL */
    bool verbose;            /* forward all of the private ddpd's lines, not only warnings */
    const char *program;     /* as resolved by launcher_resolve_program() */
    char *const *argv;       /* argv[0] is the program as the user named it; NULL-terminated */
    const char *ddpd_path;   /* the private ddpd; NULL: "ddpd" next to the running binary */
} launcher_options;

/* The directory of the running executable (/proc/self/exe), without a trailing slash.
 * Returns 0 or a negative errno. */
int launcher_self_dir(char *buf, size_t size);

/* Finds what execvp would run for name: name itself when it has a slash, else the first
 * executable regular file on PATH, else one in ddp-run's own directory (the build tree).
 * Returns 0, -ENOENT (nowhere), or another negative errno (found but not runnable), with
 * err saying which. */
int launcher_resolve_program(const char *name, char *path, size_t size, char *err, size_t err_size);

/* Runs the job to its end. On return *exit_code is what ddp-run should exit with: 0 when
 * every rank exited 0; the first failed rank's code (128+signal when killed by one); or
 * 128+signal when ddp-run was told to stop; 1 where it would be 0 but output was lost (a
 * full disk). *ret_stop_signal (may be NULL): the first SIGINT, SIGTERM or SIGHUP ddp-run
 * received, whatever ended the job first, or 0 (a job told to stop is not restarted).
 * *ret_output_lost (may be NULL): output could not be written (the job itself may have
 * gone well: not one to restart). Returns 0, or a negative errno when the job could not
 * be set up (no private ddpd, no pipes), with the reason logged; children that were
 * started are stopped and reaped either way. */
int launcher_run(const launcher_options *opts, int *exit_code, int *ret_stop_signal, bool *ret_output_lost);
