/* ddpd's metrics file, written on a thread of its own: the file's filesystem (NFS, a disk
 * under load) can hold a write and its fsyncs for seconds, and ddpd's loop carries every
 * job's heartbeats. The loop hands over each second's text; one still waiting when the
 * next comes is replaced by it (a reader wants the latest, not each one). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct metrics_writer metrics_writer;

/* Writes to path (0640, of group gid when group_name is not NULL: --metrics-group). */
int metrics_writer_start(metrics_writer **ret, const char *path, const char *group_name, gid_t gid);
/* Hands text (malloc'd, size bytes) over: the writer frees it. */
void metrics_writer_post(metrics_writer *w, char *text, size_t size);
/* Writes text last (ddpd is down) and stops, waiting at most timeout_ms for the writes
 * still under way: a writer that the filesystem holds longer is left to it (false). */
bool metrics_writer_stop(metrics_writer *w, char *text, size_t size, int timeout_ms);
/* The texts written so far (for the tests). */
unsigned long metrics_writer_written(metrics_writer *w);
