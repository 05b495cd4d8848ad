#include "common/process_state.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char *state_name(char c) {
    switch (c) {
    case 'R':
        return "running";
    case 'S':
        return "sleeping";
    case 'D':
        return "waiting for I/O";
    case 'T':
        return "stopped";
    case 't':
        return "stopped by a debugger";
    case 'I':
        return "idle";
    default:
        return NULL;
    }
}

int process_state(uint32_t pid, char *ret_state, size_t size) {
    char path[32], line[512];
    snprintf(path, sizeof(path), "/proc/%u/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) {
        /* Out of descriptors (EMFILE) is no news of the process: ask the kernel without a file. */
        if (errno != ENOENT && (kill((pid_t)pid, 0) == 0 || errno == EPERM)) {
            snprintf(ret_state, size, "?: state unreadable");
            return 0;
        }
        return -ESRCH;
    }
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    /* "PID (COMM) STATE ...": COMM may hold anything, the state follows its last ')' */
    const char *close = strrchr(line, ')');
    char c = close && close[1] == ' ' ? close[2] : '?';
    const char *name = state_name(c);
    if (!name) /* Z, X: ended; anything else unknown is treated the same */
        return -ESRCH;
    snprintf(ret_state, size, "%c: %s", c, name);
    return 0;
}
