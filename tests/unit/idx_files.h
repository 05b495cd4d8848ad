/* IDX files on disk for the unit tests of the reader and the dataset loader: written plain
 * or gzip'd, in a temporary tree removed at the end. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes size bytes of data to path, gzip'd through zlib when gz. */
void write_file(const char *path, const void *data, size_t size, bool gz);
/* An IDX file in memory (malloc'd): magic, n_dims sizes, then payload_size bytes of payload. */
uint8_t *make_idx(uint32_t magic, unsigned n_dims, const uint32_t *dims, const uint8_t *payload, size_t payload_size,
                  size_t *ret_size);
/* make_idx, written to path. */
void write_idx(const char *path, uint32_t magic, unsigned n_dims, const uint32_t *dims, const uint8_t *payload,
               size_t payload_size, bool gz);
/* rm -rf dir, without a shell. */
void remove_tree(const char *dir);
