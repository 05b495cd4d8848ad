/* Users' and groups' names for ddpd, looked up off its loop. NSS (LDAP, sssd, NIS) can
 * take seconds to answer, and the loop carries every job's heartbeats: a thread of its own
 * asks, the loop reads what it found. An answer is kept for ttl_ms and then refreshed in
 * the background while the old one still serves, as nscd does. The loop waits for a new
 * question only while that thread has nothing else to do, and for at most wait_ms in any
 * second: a slow directory costs it 5% at the most, not a wait per message. Questions
 * waiting for NSS are bounded (past 256, asked later), and so are the answers kept (the
 * half used longest ago forgotten past 4096). */
#pragma once
#include <stddef.h>
#include <sys/types.h>

typedef struct user_directory user_directory;

int user_directory_open(user_directory **ret, int wait_ms, int ttl_ms);
void user_directory_close(user_directory *d);

/* Each answers 0 (or, in_group, 1 and 0), -ENOENT where there is no such user (or
 * group), -ETIMEDOUT where the answer has not come yet (it is still asked: a later call
 * may have it), another negative error where NSS failed. */
int user_directory_uid(user_directory *d, const char *name, uid_t *ret_uid);
int user_directory_name(user_directory *d, uid_t uid, char *buf, size_t size);
/* Whether uid is in group: its primary group, or a member. A group of no name is 0. */
int user_directory_in_group(user_directory *d, uid_t uid, const char *group);

/* The questions asked of NSS so far (for the tests: a refresh, not a wait, each ttl). */
unsigned long user_directory_lookups(user_directory *d);
