/* Whether a process of this host still exists, and what the kernel says it is doing
 * (/proc/PID/stat): how ddpd tells a member that stalled (stopped, hung, starved) from one
 * that is gone, and a member a stalled ddpd from a dead one. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* 0 with the state in words ("T: stopped", "R: running") while pid exists (a zombie does
 * not: it has ended); -ESRCH when it does not. */
int process_state(uint32_t pid, char *ret_state, size_t size);
