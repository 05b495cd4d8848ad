/* The sync modes, in the order --help lists them: the one list of their names, read by
 * ddp-worker, the trainer and ddp-compare. Each NAME is the table sync_mode_NAME (sync.h),
 * in sync_NAME.c; a new mode is a new file and an entry here. */
#pragma once
#include <stdio.h>
#include <string.h>

#define SYNC_MODES(X) X(ddp) X(dp) X(ps)

#define SYNC_MODE_STRING(name) #name,

/* The names for a message, as "ddp, dp or ps". */
static inline void sync_modes_describe(char *buf, size_t size) {
    static const char *const names[] = {SYNC_MODES(SYNC_MODE_STRING)};
    size_t n = sizeof(names) / sizeof(names[0]);
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++)
        snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i == 0 ? "" : i + 1 < n ? ", " : " or ", names[i]);
}
