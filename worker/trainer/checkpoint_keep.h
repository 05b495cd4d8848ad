/* --checkpoint-keep N: the last N checkpoints stay, as PATH.STEP beside PATH: hard links to
 * what PATH held after each save (no space beyond the files themselves; PATH is replaced
 * by a rename, so each link keeps the file it was made to). Older ones are removed. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The links a run ranks and removes: those at or below the step it resumed from (its
 * past) and those it made itself. Another run's (one before --overwrite, whose steps this
 * run may never save at) are not its own: they stay, and never count among its N. */
typedef struct {
    bool resumed;
    uint64_t resumed_step;
    uint64_t *made; /* steps of the links this run made and has not removed */
    size_t n_made, room;
} checkpoint_links;

/* After a save of path at step: links it as path.STEP and removes all but the keep newest
 * of the run's own links (keep 1: none are made). err names the file. */
int checkpoint_keep(const char *path, uint64_t step, int keep, checkpoint_links *own, char *err, size_t err_size);
void checkpoint_links_free(checkpoint_links *own);
