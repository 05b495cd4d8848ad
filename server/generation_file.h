/* The last generation ddpd gave, kept in its state directory (DIR/generation) so that a
 * restarted ddpd goes on from it: a generation names one forming of one job for as long as
 * the state directory lives, and a member can never mistake a new job for its own. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Reads it into *ret (0 when there is no file yet). 0, or a negative errno with err saying
 * what is wrong with the file. */
int generation_load(const char *dir, uint64_t *ret, char *err, size_t err_size);
/* Replaces it whole (atomic_file.h): a crash leaves the old value or the new. */
int generation_save(const char *dir, uint64_t generation, char *err, size_t err_size);
