#include "server/notify.h"

#include <stdio.h>
#include <string.h>

#ifdef DDP_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#define NOTIFY(...) sd_notifyf(0, __VA_ARGS__)
#else
#define NOTIFY(...) ((void)0)
#endif

static char last_status[256];

void notify_ready(const char *status) {
    snprintf(last_status, sizeof(last_status), "%s", status);
    NOTIFY("READY=1\nSTATUS=%s", status);
}

void notify_status(const char *status) {
    if (strcmp(status, last_status) == 0)
        return;
    snprintf(last_status, sizeof(last_status), "%s", status);
    NOTIFY("STATUS=%s", status);
}

void notify_stopping(void) {
    NOTIFY("STOPPING=1");
}

uint64_t notify_watchdog_interval_ms(void) {
#ifdef DDP_HAVE_SYSTEMD
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) > 0)
        return usec / 2000; /* half the interval, as systemd recommends */
#endif
    return 0;
}

void notify_watchdog(void) {
    NOTIFY("WATCHDOG=1");
}
