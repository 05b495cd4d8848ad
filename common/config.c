#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/limits.h"

extern char **environ;

#define FIELD(target, opt, type) ((type *)((char *)(target) + (opt)->offset))

/* "heartbeat_ms" and "heartbeat-ms" name the same key. */
static bool config_name_equal(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        char ca = *a == '_' ? '-' : *a, cb = *b == '_' ? '-' : *b;
        if (ca != cb)
            return false;
    }
    return *a == *b;
}

static const config_option *config_find(const config_spec *spec, const char *name) {
    for (size_t i = 0; i < spec->n_options; i++)
        if (config_name_equal(spec->options[i].name, name))
            return &spec->options[i];
    return NULL;
}

static int config_bool_parse(const char *s, bool *ret) {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *ret = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *ret = false;
            return 0;
        }
    }
    return -EINVAL;
}

static int config_assign(const config_option *opt, void *target, const char *value, const char *where, char *err,
                         size_t err_size) {
    char *end;
    switch (opt->type) {
    case CONFIG_INT: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end) {
            snprintf(err, err_size, "%s: '%.64s' is not an integer", where, value);
            return -EINVAL;
        }
        if ((double)v < opt->min || (double)v > opt->max) {
            snprintf(err, err_size, "%s: %lld is out of range [%.0f, %.0f]", where, v, opt->min, opt->max);
            return -EINVAL;
        }
        *FIELD(target, opt, int) = (int)v;
        return 0;
    }
    case CONFIG_DOUBLE: {
        errno = 0;
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v)) {
            snprintf(err, err_size, "%s: '%.64s' is not a number", where, value);
            return -EINVAL;
        }
        if (v < opt->min || v > opt->max) {
            snprintf(err, err_size, "%s: %g is out of range [%g, %g]", where, v, opt->min, opt->max);
            return -EINVAL;
        }
        *FIELD(target, opt, double) = v;
        return 0;
    }
    case CONFIG_BOOL: {
        bool b;
        if (config_bool_parse(value, &b) < 0) {
            snprintf(err, err_size, "%s: '%.64s' is not a boolean (true/false)", where, value);
            return -EINVAL;
        }
        *FIELD(target, opt, bool) = b;
        return 0;
    }
    case CONFIG_STRING: {
        size_t n = strlen(value);
        if ((double)n < opt->min || (double)n > opt->max || n > DDP_MAX_CONFIG_STRING) {
            snprintf(err, err_size, "%s: a value of %zu bytes is not allowed (%.0f to %.0f)", where, n, opt->min,
                     opt->max);
            return -EINVAL;
        }
        if (opt->choices) {
            bool found = false;
            for (const char *const *c = opt->choices; *c; c++)
                found = found || strcmp(*c, value) == 0;
            if (!found) {
                int m = snprintf(err, err_size, "%s: '%.64s' is not one of", where, value);
                for (const char *const *c = opt->choices; *c && m > 0 && (size_t)m < err_size; c++)
                    m += snprintf(err + m, err_size - (size_t)m, " %s", *c);
                return -EINVAL;
            }
        }
        char *copy = strdup(value);
        if (!copy)
            return -ENOMEM;
        char **field = FIELD(target, opt, char *);
        free(*field);
        *field = copy;
        return 0;
    }
    }
    return -EINVAL;
}

int config_set(const config_spec *spec, void *target, const char *name, const char *value, const char *where, char *err,
               size_t err_size) {
    const config_option *opt = config_find(spec, name);
    if (!opt) {
        snprintf(err, err_size, "%s: unknown key '%.64s'", where, name);
        return -EINVAL;
    }
    char label[256];
    snprintf(label, sizeof(label), "%s: %s", where, opt->name);
    return config_assign(opt, target, value, label, err, err_size);
}

typedef struct {
    const config_spec *spec;
    void *target;
    bool *seen; /* per option: the file set it already */
    int failed;
    char detail[600]; /* what is wrong, after "path:line: " (the path may be any length) */
} config_ini_state;

static int config_ini_handler(void *user, const char *section, const char *name, const char *value) {
    config_ini_state *st = user;
    if (st->failed)
        return 0;
    if (section[0] && strcmp(section, st->spec->program) != 0) {
        snprintf(st->detail, sizeof(st->detail), "unknown section [%.64s] (keys go at the top or under [%s])", section,
                 st->spec->program);
        st->failed = -EINVAL;
        return 0;
    }
    const config_option *opt = config_find(st->spec, name);
    if (opt && strcmp(opt->name, "config") == 0)
        opt = NULL; /* a config file does not name another */
    if (!opt) {
        snprintf(st->detail, sizeof(st->detail), "unknown key '%.64s'", name);
        st->failed = -EINVAL;
        return 0;
    }
    /* inih hands an indented line on as more of the key above it (a second call with the
     * same name): refused with a key given twice, rather than one silently winning. */
    size_t i = (size_t)(opt - st->spec->options);
    if (st->seen[i]) {
        snprintf(st->detail, sizeof(st->detail),
                 "%s: set a second time (a key goes once in a file; an indented line continues the one above it)",
                 opt->name);
        st->failed = -EINVAL;
        return 0;
    }
    st->seen[i] = true;
    int r = config_assign(opt, st->target, value, opt->name, st->detail, sizeof(st->detail));
    if (r < 0) {
        st->failed = r;
        return 0;
    }
    return 1;
}

/* The whole file, checked to be text inih can take: a regular file (a FIFO or a device
 * would block or never end), of bounded size, no NUL bytes, no line but a comment over
 * inih's limit. A '#' after a blank starts a comment as ';' does. */
static int config_slurp(const char *path, char **ret, char *err, size_t err_size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int r = -errno;
        snprintf(err, err_size, "%s: cannot open config file: %s", path, strerror(-r));
        return r;
    }
    struct stat st;
    int r = fstat(fd, &st) < 0 ? -errno : 0;
    if (r == 0 && !S_ISREG(st.st_mode)) {
        r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        snprintf(err, err_size, "%s: %s, not a config file", path,
                 S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    } else if (r == 0 && st.st_size > DDP_MAX_CONFIG_FILE) {
        r = -EFBIG;
        snprintf(err, err_size, "%s: %lld bytes, more than a config file may hold (%d)", path, (long long)st.st_size,
                 DDP_MAX_CONFIG_FILE);
    } else if (r < 0)
        snprintf(err, err_size, "%s: %s", path, strerror(-r));
    char *text = r == 0 ? malloc((size_t)st.st_size + 2) : NULL; /* a last newline may be added */
    if (r == 0 && !text) {
        r = -ENOMEM;
        snprintf(err, err_size, "%s: out of memory", path);
    }
    size_t n = 0;
    while (r == 0 && n < (size_t)st.st_size) {
        ssize_t got = read(fd, text + n, (size_t)st.st_size - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) { /* it shrank, or could not be read */
            r = got < 0 ? -errno : -EIO;
            snprintf(err, err_size, "%s: cannot read it: %s", path, strerror(-r));
        } else
            n += (size_t)got;
    }
    close(fd);
    if (r < 0) {
        free(text);
        return r;
    }
    text[n] = '\0';
    if (memchr(text, '\0', n)) {
        snprintf(err, err_size, "%s: a NUL byte: not a text file", path);
        free(text);
        return -EINVAL;
    }
    /* Line by line into out (never longer): comments go, whatever their length, so that
     * inih sees only what it can hold; their newlines stay, and with them the numbers. */
    char *out = text;
    size_t k = 0;
    int line = 1;
    for (size_t start = 0; start < n; line++) {
        size_t end = start;
        while (end < n && text[end] != '\n')
            end++;
        size_t first = start;
        while (first < end && (text[first] == ' ' || text[first] == '\t'))
            first++;
        size_t stop = end;
        if (first < end && (text[first] == '#' || text[first] == ';'))
            stop = start; /* a comment line */
        for (size_t i = first + 1; i < stop; i++)
            if ((text[i] == '#' || text[i] == ';') && (text[i - 1] == ' ' || text[i - 1] == '\t'))
                stop = i; /* a comment after a value: '#' as ';', which is all inih knows */
        while (stop > start && (text[stop - 1] == ' ' || text[stop - 1] == '\t' || text[stop - 1] == '\r'))
            stop--;
        if (stop - start > DDP_MAX_CONFIG_LINE) {
            snprintf(err, err_size, "%s:%d: the line is longer than %d characters", path, line, DDP_MAX_CONFIG_LINE);
            free(text);
            return -EINVAL;
        }
        memmove(out + k, text + start, stop - start);
        k += stop - start;
        out[k++] = '\n';
        start = end + 1;
    }
    out[k] = '\0';
    *ret = out;
    return 0;
}

int config_read_file(const config_spec *spec, void *target, const char *path, char *err, size_t err_size) {
    char *text = NULL;
    int r = config_slurp(path, &text, err, err_size);
    if (r < 0)
        return r;
    config_ini_state st = {.spec = spec, .target = target, .seen = calloc(spec->n_options + 1, sizeof(bool))};
    int line = st.seen ? ini_parse_string(text, config_ini_handler, &st) : -2;
    free(text);
    free(st.seen);
    if (line == -2) {
        snprintf(err, err_size, "%s: out of memory", path);
        return -ENOMEM;
    }
    if (st.failed || line > 0) { /* "ddpd.conf:3: unknown key 'x'" */
        snprintf(err, err_size, "%s:%d: %s", path, line, st.failed ? st.detail : "syntax error");
        return st.failed ? st.failed : -EINVAL;
    }
    return 0;
}

static void config_env_name(const config_spec *spec, const config_option *opt, char *buf, size_t size) {
    if (opt->env) {
        snprintf(buf, size, "%s", opt->env);
        return;
    }
    if (!spec->env_prefix || strcmp(opt->name, "help") == 0 || strcmp(opt->name, "version") == 0) {
        buf[0] = '\0';
        return;
    }
    int n = snprintf(buf, size, "%s", spec->env_prefix);
    for (const char *p = opt->name; *p && (size_t)n + 1 < size; p++)
        buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    buf[n] = '\0';
}

static int config_read_env(const config_spec *spec, void *target, char *err, size_t err_size) {
    char name[128];
    for (size_t i = 0; i < spec->n_options; i++) {
        const config_option *opt = &spec->options[i];
        config_env_name(spec, opt, name, sizeof(name));
        const char *value = name[0] ? getenv(name) : NULL;
        if (!value)
            continue;
        char where[160];
        snprintf(where, sizeof(where), "environment %s", name);
        int r = config_assign(opt, target, value, where, err, err_size);
        if (r < 0)
            return r;
    }
    /* A misspelt variable with our prefix is refused, not ignored. */
    if (spec->env_prefix)
        for (char **e = environ; *e; e++) {
            size_t plen = strlen(spec->env_prefix);
            if (strncmp(*e, spec->env_prefix, plen) != 0)
                continue;
            const char *eq = strchr(*e, '=');
            bool known = false;
            for (size_t i = 0; eq && i < spec->n_options && !known; i++) {
                config_env_name(spec, &spec->options[i], name, sizeof(name));
                known = strlen(name) == (size_t)(eq - *e) && strncmp(name, *e, (size_t)(eq - *e)) == 0;
            }
            if (!known) {
                snprintf(err, err_size, "environment: unknown variable %.*s", eq ? (int)(eq - *e) : 64, *e);
                return -EINVAL;
            }
        }
    return 0;
}

int config_load(const config_spec *spec, void *target, int argc, char **argv, int *ret_optind, char *err,
                size_t err_size) {
    int r;
    for (size_t i = 0; i < spec->n_options; i++) {
        const config_option *opt = &spec->options[i];
        if (opt->default_value) {
            r = config_assign(opt, target, opt->default_value, opt->name, err, err_size);
            if (r < 0)
                return r;
        } else if (opt->type == CONFIG_STRING) {
            *FIELD(target, opt, char *) = NULL;
        } else if (opt->type == CONFIG_BOOL) {
            *FIELD(target, opt, bool) = false;
        }
    }

    struct option *longopts = calloc(spec->n_options + 1, sizeof(*longopts));
    char shortopts[2 * 64 + 2] = ":"; /* report missing values ourselves */
    if (!longopts)
        return -ENOMEM;
    for (size_t i = 0, n = strlen(shortopts); i < spec->n_options; i++) {
        const config_option *opt = &spec->options[i];
        longopts[i].name = opt->name;
        longopts[i].has_arg = opt->type == CONFIG_BOOL ? no_argument : required_argument;
        longopts[i].val = 256 + (int)i;
        if (opt->short_name && n + 2 < sizeof(shortopts)) {
            shortopts[n++] = opt->short_name;
            if (opt->type != CONFIG_BOOL)
                shortopts[n++] = ':';
            shortopts[n] = '\0';
        }
    }

    /* Pass 1: only find --config, which must be read before the environment and flags. */
    const char *config_path = NULL;
    const config_option *config_opt = config_find(spec, "config");
    opterr = 0;
    optind = 0; /* 0 makes glibc reinitialise getopt for a new argv */
    for (int c; (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1;)
        if (config_opt && c == 256 + (int)(config_opt - spec->options))
            config_path = optarg;
    if (!config_path && config_opt) {
        char name[128];
        config_env_name(spec, config_opt, name, sizeof(name));
        config_path = name[0] ? getenv(name) : NULL;
    }
    if (config_path && (r = config_read_file(spec, target, config_path, err, err_size)) < 0)
        goto out;
    if ((r = config_read_env(spec, target, err, err_size)) < 0)
        goto out;

    /* Pass 2: flags, last and strongest. */
    optind = 0;
    for (int c; (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1;) {
        const config_option *opt = NULL;
        if (c >= 256)
            opt = &spec->options[c - 256];
        else if (c == '?' || c == ':') {
            const char *arg = argv[optind - 1];
            if (c == '?')
                snprintf(err, err_size, "unknown option '%.64s' (see --help)",
                         optopt ? (char[]){'-', (char)optopt, 0} : arg);
            else
                snprintf(err, err_size, "option '%.64s' needs a value", arg);
            r = -EINVAL;
            goto out;
        } else
            for (size_t i = 0; i < spec->n_options && !opt; i++)
                if (spec->options[i].short_name == c)
                    opt = &spec->options[i];
        if (!opt)
            continue;
        char where[80];
        snprintf(where, sizeof(where), "--%s", opt->name);
        r = config_assign(opt, target, opt->type == CONFIG_BOOL ? "true" : optarg, where, err, err_size);
        if (r < 0)
            goto out;
    }
    if (ret_optind)
        *ret_optind = optind;
    r = 0;
out:
    free(longopts);
    return r;
}

const config_option *config_find_flag(const config_spec *spec, const char *arg) {
    if (strncmp(arg, "--", 2) != 0 || !arg[2])
        return NULL;
    const char *name = arg + 2;
    size_t n = strcspn(name, "=");
    const config_option *found = NULL;
    int matches = 0;
    for (size_t i = 0; i < spec->n_options; i++) {
        const config_option *opt = &spec->options[i];
        if (strncmp(opt->name, name, n) != 0)
            continue;
        if (strlen(opt->name) == n)
            return opt; /* exact: taken over any longer name it begins */
        found = opt;
        matches++;
    }
    return matches == 1 ? found : NULL;
}

void config_print_help(const config_spec *spec, FILE *out) {
    fprintf(out, "Usage: %s %s\n%s\n\nOptions:\n", spec->program, spec->usage, spec->summary);
    for (size_t i = 0; i < spec->n_options; i++) {
        const config_option *opt = &spec->options[i];
        char flag[96];
        int n = 0;
        if (opt->short_name)
            n = snprintf(flag, sizeof(flag), "-%c, ", opt->short_name);
        snprintf(flag + n, sizeof(flag) - (size_t)n, "--%s%s%s", opt->name, opt->metavar ? " " : "",
                 opt->metavar ? opt->metavar : "");
        fprintf(out, "  %-28s %s", flag, opt->help);
        if (opt->default_value && opt->type != CONFIG_BOOL)
            fprintf(out, " (default %s)", opt->default_value);
        char env[128];
        config_env_name(spec, opt, env, sizeof(env));
        if (env[0])
            fprintf(out, " [$%s]", env);
        fputc('\n', out);
    }
}

void config_free(const config_spec *spec, void *target) {
    for (size_t i = 0; i < spec->n_options; i++)
        if (spec->options[i].type == CONFIG_STRING) {
            char **field = FIELD(target, &spec->options[i], char *);
            free(*field);
            *field = NULL;
        }
}
