/* A rank's shared memory segment as a file: an anonymous memfd of a fixed size, sealed so
 * that no one, its owner included, can shrink it under the peers' mappings (a read past
 * the end would be SIGBUS). What a peer hands over is checked before it is mapped: a memfd
 * (a regular file) of exactly the size every rank makes, sealed against shrinking and not
 * against writing. Anything else is refused, and never mapped nor read. */
#pragma once
#include <stddef.h>

/* A new segment of bytes, sealed, named name (as /proc shows it); its fd in *ret_fd. 0 or
 * -errno. */
int shm_segment_make(const char *name, size_t bytes, int *ret_fd);
/* Maps a segment a peer handed over, once it is what shm_segment_make makes; -EPROTO (or
 * the kernel's error) with why saying what is wrong with it. */
int shm_segment_map(int fd, size_t bytes, char **ret, char *why, size_t why_size);
