/* ddp-run: the launcher, as torchrun or mpirun. Starts a private ddpd (or uses the one
 * named), N ranks of a program with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT and
 * DDP_COORDINATOR set, prefixes their output with the rank and, on the first failure,
 * stops the rest and exits with that failure's code. The work is in launcher.c. */
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/wire.h"
#include "worker/tools/launcher.h"

#define EXIT_USAGE 2
#define EXIT_CANNOT_RUN 127 /* as a shell says of a command it cannot run */

typedef struct {
    int nproc;
    char *coordinator;
    char *job;
    int grace_ms;
    int max_restarts;
    bool verbose;
    bool help;
    bool version;
} ddp_run_options;

static const config_option ddp_run_options_table[] = {
    {"nproc", CONFIG_INT, 1, DDP_MAX_WORLD_SIZE, NULL, offsetof(ddp_run_options, nproc),
     "number of ranks to start (required)", "N", NULL, NULL, 'n'},
    {"coordinator", CONFIG_STRING, 1, DDP_MAX_ENDPOINT, NULL, offsetof(ddp_run_options, coordinator),
     "use the ddpd at EP instead of starting a private one (on a Unix socket in a directory only this user can "
     "open)",
     "EP"},
    {"job", CONFIG_STRING, 1, DDP_MAX_JOB_NAME, NULL, offsetof(ddp_run_options, job),
     "job name, given to the ranks as DDP_JOB", "NAME"},
    {"max-restarts", CONFIG_INT, 0, 1000, "0", offsetof(ddp_run_options, max_restarts),
     "start the whole job again this many times after a failure (as torchrun's); ranks that keep a checkpoint "
     "resume from it",
     "N"},
    {"grace-ms", CONFIG_INT, 0, DDP_MAX_TIMEOUT_MS, "5000", offsetof(ddp_run_options, grace_ms),
     "how long stopping ranks get before SIGKILL", "MS"},
    {"verbose", CONFIG_BOOL, 0, 1, NULL, offsetof(ddp_run_options, verbose),
     "say what ddp-run does and pass on all of the private ddpd's lines, not only its warnings", NULL, NULL, NULL, 'v'},
    {"version", CONFIG_BOOL, 0, 1, NULL, offsetof(ddp_run_options, version), "print the version and exit", NULL, NULL,
     NULL, 'V'},
    {"help", CONFIG_BOOL, 0, 1, NULL, offsetof(ddp_run_options, help), "print this help and exit", NULL, NULL, NULL,
     'h'},
};

static const config_spec ddp_run_spec = {
    .program = "ddp-run",
    .usage = "-n N [OPTIONS] [--] PROGRAM [ARGS...]",
    .summary = "Starts N ranks of PROGRAM as one ddp job and supervises them.\n\n"
               "Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,\n"
               "DDP_COORDINATOR (and DDP_JOB with --job). Its output comes out as \"[rank R] line\".\n"
               "Exit code: 0 if every rank exits 0, else the first failed rank's (128+signal when\n"
               "killed by one); 130/143 after SIGINT/SIGTERM; 127 if PROGRAM cannot run; 2 usage.",
    .env_prefix = "DDP_RUN_",
    .options = ddp_run_options_table,
    .n_options = sizeof(ddp_run_options_table) / sizeof(ddp_run_options_table[0]),
};

/* Options end at PROGRAM, so that its own flags are left alone even without "--"
 * (`ddp-run -n 2 train --lr 0.1`): glibc's getopt stops at the first operand under
 * POSIXLY_CORRECT, which the ranks must not inherit. */
static int load_options(ddp_run_options *opts, int argc, char **argv, int *first_operand, char *err, size_t err_size) {
    bool was_set = getenv("POSIXLY_CORRECT") != NULL;
    if (!was_set)
        setenv("POSIXLY_CORRECT", "1", 0);
    int r = config_load(&ddp_run_spec, opts, argc, argv, first_operand, err, err_size);
    if (!was_set)
        unsetenv("POSIXLY_CORRECT");
    return r;
}

static int usage_error(ddp_run_options *opts, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int usage_error(ddp_run_options *opts, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ddp-run: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(" (usage: ddp-run -n N [OPTIONS] [--] PROGRAM [ARGS...]; see --help)\n", stderr);
    config_free(&ddp_run_spec, opts);
    return EXIT_USAGE;
}

int main(int argc, char **argv) {
    ddp_run_options opts = {0};
    char err[512];
    int first_operand = argc;
    if (load_options(&opts, argc, argv, &first_operand, err, sizeof(err)) < 0)
        return usage_error(&opts, "%s", err);
    if (opts.help || opts.version) {
        if (opts.version)
            printf("ddp-run %s (protocol %u)\n", DDP_VERSION, DDP_PROTOCOL_VERSION);
        else
            config_print_help(&ddp_run_spec, stdout);
        config_free(&ddp_run_spec, &opts);
        return 0;
    }
    if (opts.nproc == 0)
        return usage_error(&opts, "%s", "-n/--nproc N is required");
    if (first_operand >= argc)
        return usage_error(&opts, "%s", "no PROGRAM to run");
    if (opts.job && !wire_name_valid(opts.job, DDP_MAX_JOB_NAME))
        return usage_error(&opts, "--job: '%s' is not 1-%d of [A-Za-z0-9._-]", opts.job, DDP_MAX_JOB_NAME);

    log_set_prefix("ddp-run");
    log_set_level(opts.verbose ? LOG_LEVEL_INFO : LOG_LEVEL_WARN);

    /* Refused before anything starts: no private ddpd for a program that cannot run. */
    char program[PATH_MAX];
    int r = launcher_resolve_program(argv[first_operand], program, sizeof(program), err, sizeof(err));
    if (r < 0) {
        fprintf(stderr, "ddp-run: %s\n", err);
        config_free(&ddp_run_spec, &opts);
        return EXIT_CANNOT_RUN;
    }

    launcher_options launch = {
        .nproc = opts.nproc,
        .coordinator = opts.coordinator,
        .job = opts.job,
        .grace_ms = opts.grace_ms,
        .verbose = opts.verbose,
        .program = program,
        .argv = argv + first_operand,
    };
    int exit_code = 1;
    for (int attempt = 0;; attempt++) {
        exit_code = 1;
        int stop_signal = 0;
        bool output_lost = false;
        launcher_run(&launch, &exit_code, &stop_signal, &output_lost); /* it logs its own failures */
        /* Done, told to stop (SIGINT, SIGTERM, SIGHUP: even while a failed job was ending),
         * or out of restarts. A rank's own exit code, whatever it is, is a failure; output
         * lost to a full disk is one too, but not the job's to run again. */
        if (exit_code == 0 || stop_signal || output_lost || attempt >= opts.max_restarts)
            break;
        log_warn("the job failed (exit code %d); starting it again (%d of %d restarts)", exit_code, attempt + 1,
                 opts.max_restarts);
    }
    config_free(&ddp_run_spec, &opts);
    return exit_code;
}
