/* Telling systemd how ddpd is (sd_notify): READY=1 once it can serve, STATUS= lines when
 * its jobs change, WATCHDOG=1 at half the WatchdogSec interval, STOPPING=1 on the way out.
 * Without libsystemd, or outside a Type=notify service, every call does nothing. */
#pragma once
#include <stdint.h>

void notify_ready(const char *status);
/* Sends STATUS= only when the text differs from the last one sent. */
void notify_status(const char *status);
void notify_stopping(void);
/* The watchdog's ping interval (half of WatchdogSec) in milliseconds, 0 when none. */
uint64_t notify_watchdog_interval_ms(void);
void notify_watchdog(void);
