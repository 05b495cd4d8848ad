/* The config reader (inih under common/config.c) on any file: every kind of option, a
 * section of its own and others; what it refuses it names with the path and the line. */
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "common/config.h"
#include "tests/fuzz/fuzz_input.h"

typedef struct {
    char *listen, *level, *config;
    int heartbeat_ms;
    double ratio;
    bool json;
} fuzz_options;

static const char *const levels[] = {"error", "warn", "info", "debug", NULL};

static const config_option table[] = {
    {"listen", CONFIG_STRING, 1, 255, "tcp://127.0.0.1:29500", offsetof(fuzz_options, listen), "endpoint", "EP"},
    {"config", CONFIG_STRING, 1, 4096, NULL, offsetof(fuzz_options, config), "config file", "FILE"},
    {"heartbeat-ms", CONFIG_INT, 10, 60000, "500", offsetof(fuzz_options, heartbeat_ms), "interval", "MS"},
    {"ratio", CONFIG_DOUBLE, 0.0, 1.0, "0.5", offsetof(fuzz_options, ratio), "a fraction", "X"},
    {"log-level", CONFIG_STRING, 1, 8, "info", offsetof(fuzz_options, level), "log level", "LEVEL", levels},
    {"json", CONFIG_BOOL, 0, 1, NULL, offsetof(fuzz_options, json), "JSON output"},
};

static const config_spec spec = {
    .program = "ddpd",
    .usage = "[OPTIONS]",
    .summary = "the fuzz target's options",
    .env_prefix = "FUZZD_",
    .options = table,
    .n_options = sizeof(table) / sizeof(table[0]),
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_file(data, size, path, sizeof(path));
    if (fd < 0)
        return 0;
    fuzz_options o = {0};
    if (config_read_file(&spec, &o, path, err, sizeof(err)) < 0 && strncmp(err, path, strlen(path)) != 0)
        __builtin_trap(); /* an error that does not say where */
    config_free(&spec, &o);
    close(fd);
    return 0;
}
