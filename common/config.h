/* One configuration table per program, shared by its flags (getopt_long), an optional INI
 * config file (libinih) and environment variables.
 *
 * Precedence: defaults < config file < environment < flags. A value out of range, an
 * unknown key and a malformed value are refused with a message naming the key and where
 * it came from; nothing is clamped. The target struct starts zeroed. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum {
    CONFIG_INT,    /* int, within [min, max] */
    CONFIG_DOUBLE, /* double, within [min, max] */
    CONFIG_STRING, /* char *, heap-allocated, at most max bytes, one of choices if given */
    CONFIG_BOOL,   /* bool; a flag takes no value, elsewhere true/false/yes/no/on/off/1/0 */
} config_type;

typedef struct {
    const char *name;          /* "heartbeat-ms": flag --heartbeat-ms, INI key heartbeat-ms or heartbeat_ms */
    config_type type;
    double min, max;           /* value range; for strings, length range */
    const char *default_value; /* parsed like any value; NULL leaves a string NULL */
    size_t offset;             /* offsetof() the field in the target struct */
    const char *help;
    const char *metavar;       /* "MS", "FILE"; NULL for flags */
    const char *const *choices;/* CONFIG_STRING: the allowed values, NULL-terminated, or NULL */
    const char *env;           /* environment variable; NULL: env_prefix + NAME, if any */
    char short_name;           /* -h; 0 for none */
} config_option;

typedef struct {
    const char *program;       /* also the INI section that may hold the keys */
    const char *usage;         /* after the program name: "[OPTIONS]" */
    const char *summary;       /* one line */
    const char *env_prefix;    /* "DDPD_"; NULL: no environment variables but explicit ones */
    const config_option *options;
    size_t n_options;
} config_spec;

/* Fills target from defaults, then the file named by the "config" option (if the table
 * has one and it is set), then the environment, then argv. As with GNU getopt, operands
 * are moved after the options and "--" ends them; *ret_optind is the first operand.
 * Returns 0, or a negative error (-EINVAL; -ENOENT for a config file that cannot be
 * opened) with err saying what is wrong: "--heartbeat-ms: 5 is out of range [10, 60000]".
 * The target's strings are owned: config_free() releases them, also after a failure. */
int config_load(const config_spec *spec, void *target, int argc, char **argv, int *ret_optind, char *err,
                size_t err_size);

/* Sets one option by name from text; `where` prefixes the error ("ddpd.conf:3"). */
int config_set(const config_spec *spec, void *target, const char *name, const char *value, const char *where,
               char *err, size_t err_size);

/* Reads an INI file into target (only the keys it names). A key the file sets twice is
 * refused, naming the line: inih takes an indented line as more of the key above it. */
int config_read_file(const config_spec *spec, void *target, const char *path, char *err, size_t err_size);

/* The option a command-line argument sets as getopt_long takes it: "--name" or
 * "--name=value", where name is the option's or the beginning of only one option's. NULL
 * for anything else (an operand, a short option, an unknown or ambiguous name). */
const config_option *config_find_flag(const config_spec *spec, const char *arg);

void config_print_help(const config_spec *spec, FILE *out);
void config_free(const config_spec *spec, void *target);
