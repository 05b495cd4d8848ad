/* --checkpoint-keep N: the last N checkpoints stay, as PATH.STEP beside PATH: hard links to
 * what PATH held after each save (no space beyond the files themselves; PATH is replaced
 * by a rename, so each link keeps the file it was made to). Older ones are removed. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* After a save of path at step: links it as path.STEP and removes all but the keep newest
 * such links up to step (keep 1: none are made); links past step, another run's, stay.
 * err names the file. */
int checkpoint_keep(const char *path, uint64_t step, int keep, char *err, size_t err_size);
