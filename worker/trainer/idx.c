#include "worker/trainer/idx.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "common/limits.h"

#define IDX_READ_CHUNK (1u << 24)         /* bytes per read() or inflate() call */
#define IDX_IN_SIZE (1u << 17)            /* compressed bytes buffered */
#define IDX_FIRST_ALLOC (16u << 20)       /* the payload buffer grows from here as bytes arrive */
#define IDX_MAX_TRAILING_COUNT (1u << 16) /* trailing bytes counted before saying "at least" */

/* What one kind of file looks like. */
typedef struct {
    uint32_t magic;
    const char *kind;        /* "images": in messages */
    const char *description; /* of the magic */
    unsigned n_dims;
    const char *dim_names[3];
    const char *element; /* "pixels": what the payload holds */
} idx_format;

static const idx_format idx_images_format = {
    IDX_MAGIC_IMAGES, "images", "unsigned byte images, 3 dimensions", 3, {"image count", "rows", "cols"}, "pixels"};
static const idx_format idx_labels_format = {IDX_MAGIC_LABELS, "labels", "unsigned byte labels, 1 dimension", 1,
                                             {"label count"},  "labels"};

/* How a read failed, for idx_source_error(). */
typedef enum { IDX_FAIL_IO, IDX_FAIL_NOMEM, IDX_FAIL_TRUNCATED, IDX_FAIL_CORRUPT, IDX_FAIL_GARBAGE } idx_failure;

/* The bytes of a file, inflated when it starts with gzip's magic. inflate() rather than
 * gzread(), which takes whatever follows the last gzip member for the end of the file. */
typedef struct {
    int fd;
    const char *path;
    const idx_format *format;
    uint64_t want_item_size; /* images: the pixels each must have, from the caller (0: any) */
    uint32_t want_items;     /* how many items the header must say (0: any) */
    char *err;
    size_t err_size;
    bool gzip;
    bool inflating;   /* inflateInit2() done */
    bool member_done; /* gzip: the last member ended; another may follow */
    z_stream z;       /* next_in/avail_in: buffered input, also for plain files */
    uint8_t *in;      /* (IDX_IN_SIZE) */
    idx_failure failure;
    int failure_errno;
    const char *failure_text; /* zlib's msg */
} idx_source;

/* More input after what is buffered; returns the bytes read, 0 at the end, or -1. */
static ssize_t idx_fill(idx_source *s) {
    if (s->z.avail_in > 0 && s->z.next_in != s->in)
        memmove(s->in, s->z.next_in, s->z.avail_in);
    s->z.next_in = s->in;
    ssize_t r;
    do
        r = read(s->fd, s->in + s->z.avail_in, IDX_IN_SIZE - s->z.avail_in);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        s->failure = IDX_FAIL_IO;
        s->failure_errno = errno;
        return -1;
    }
    s->z.avail_in += (uInt)r;
    return r;
}

static bool idx_fail(idx_source *s, idx_failure failure, const char *text) {
    s->failure = failure;
    s->failure_text = text ? text : "unknown zlib error";
    return false;
}

static bool idx_read_plain(idx_source *s, uint8_t *buf, size_t size, size_t *ret_got) {
    size_t got = s->z.avail_in < size ? s->z.avail_in : size; /* what the gzip check looked at first */
    memcpy(buf, s->z.next_in, got);
    s->z.next_in += got;
    s->z.avail_in -= (uInt)got;
    while (got < size) {
        size_t want = size - got > IDX_READ_CHUNK ? IDX_READ_CHUNK : size - got;
        ssize_t r = read(s->fd, buf + got, want);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            *ret_got = got;
            s->failure = IDX_FAIL_IO;
            s->failure_errno = errno;
            return false;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    *ret_got = got;
    return true;
}

static bool idx_read_gzip(idx_source *s, uint8_t *buf, size_t size, size_t *ret_got) {
    size_t got = 0;
    bool ok = true;
    while (got < size) {
        if (s->member_done) {
            /* Another member (as `cat a.gz b.gz` makes), or the end of the file, or garbage. */
            ssize_t r = 1;
            while (s->z.avail_in < 2 && r > 0)
                r = idx_fill(s);
            if (r < 0) {
                ok = false;
                break;
            }
            if (s->z.avail_in == 0)
                break; /* the end */
            if (s->z.avail_in < 2 || s->z.next_in[0] != 0x1f || s->z.next_in[1] != 0x8b) {
                ok = idx_fail(s, IDX_FAIL_GARBAGE, NULL);
                break;
            }
            inflateReset(&s->z);
            s->member_done = false;
        }
        if (s->z.avail_in == 0) {
            ssize_t r = idx_fill(s);
            if (r < 0) {
                ok = false;
                break;
            }
            if (r == 0) {
                ok = idx_fail(s, IDX_FAIL_TRUNCATED, "unexpected end of file");
                break;
            }
        }
        size_t want = size - got > IDX_READ_CHUNK ? IDX_READ_CHUNK : size - got;
        s->z.next_out = buf + got;
        s->z.avail_out = (uInt)want;
        int zr = inflate(&s->z, Z_NO_FLUSH);
        got += want - s->z.avail_out;
        if (zr == Z_STREAM_END)
            s->member_done = true;
        else if (zr == Z_MEM_ERROR) {
            ok = idx_fail(s, IDX_FAIL_NOMEM, s->z.msg);
            break;
        } else if (zr != Z_OK && !(zr == Z_BUF_ERROR && s->z.avail_in == 0)) {
            ok = idx_fail(s, IDX_FAIL_CORRUPT, s->z.msg);
            break;
        }
    }
    *ret_got = got;
    return ok;
}

/* Reads until size bytes or the end of the data; *ret_got says how many arrived. Returns
 * false on an error, which idx_source_error() then describes. */
static bool idx_read_full(idx_source *s, uint8_t *buf, size_t size, size_t *ret_got) {
    return s->gzip ? idx_read_gzip(s, buf, size, ret_got) : idx_read_plain(s, buf, size, ret_got);
}

/* After idx_read_full() failed: got of the expected bytes of `what` ("header", "pixels")
 * had arrived. */
static int idx_source_error(idx_source *s, const char *what, unsigned long long got, unsigned long long expected) {
    switch (s->failure) {
    case IDX_FAIL_IO:
        snprintf(s->err, s->err_size, "%s: read error after %llu of the %llu bytes of %s: %s", s->path, got, expected,
                 what, strerror(s->failure_errno));
        return -EIO;
    case IDX_FAIL_NOMEM:
        snprintf(s->err, s->err_size, "%s: out of memory decompressing: %s", s->path, s->failure_text);
        return -ENOMEM;
    case IDX_FAIL_TRUNCATED:
        snprintf(s->err, s->err_size, "%s: truncated gzip stream: %s after %llu of the %llu bytes of %s", s->path,
                 s->failure_text, got, expected, what);
        return -EBADMSG;
    case IDX_FAIL_CORRUPT:
        snprintf(s->err, s->err_size, "%s: corrupt gzip data after %llu of the %llu bytes of %s: %s", s->path, got,
                 expected, what, s->failure_text);
        return -EBADMSG;
    case IDX_FAIL_GARBAGE:
        break;
    }
    snprintf(s->err, s->err_size,
             "%s: bytes that are not gzip data after the gzip stream (after %llu of the %llu "
             "bytes of %s)",
             s->path, got, expected, what);
    return -EBADMSG;
}

static uint32_t idx_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int idx_check_magic(idx_source *s, uint32_t magic) {
    const idx_format *fmt = s->format;
    if (magic == fmt->magic)
        return 0;
    char why[96];
    unsigned type = magic >> 8 & 0xff, n_dims = magic & 0xff;
    if (magic >> 16 != 0)
        snprintf(why, sizeof(why), "not an IDX file");
    else if (type != 0x08)
        snprintf(why, sizeof(why), "element type 0x%02x is not unsigned byte (0x08)", type);
    else
        snprintf(why, sizeof(why), "%u dimension%s, IDX %s have %u%s", n_dims, n_dims == 1 ? "" : "s", fmt->kind,
                 fmt->n_dims,
                 magic == IDX_MAGIC_LABELS   ? " (a labels file?)"
                 : magic == IDX_MAGIC_IMAGES ? " (an images file?)"
                                             : "");
    snprintf(s->err, s->err_size, "%s: bad magic: expected 0x%08x (%s), got 0x%08x: %s", s->path, fmt->magic,
             fmt->description, magic, why);
    return -EBADMSG;
}

/* The header: magic and dimensions, each checked before anything is allocated. */
static int idx_read_header(idx_source *s, uint32_t dims[3], uint64_t *ret_payload) {
    const idx_format *fmt = s->format;
    uint8_t header[4 + 4 * 3];
    size_t header_size = 4 + 4 * (size_t)fmt->n_dims, got;

    if (!idx_read_full(s, header, 4, &got))
        return idx_source_error(s, "header", got, header_size);
    if (got == 0) {
        snprintf(s->err, s->err_size, "%s: empty file: expected an IDX header of %zu bytes", s->path, header_size);
        return -EBADMSG;
    }
    if (got < 4) {
        snprintf(s->err, s->err_size, "%s: truncated header: expected %zu bytes, got %zu", s->path, header_size, got);
        return -EBADMSG;
    }
    int r = idx_check_magic(s, idx_be32(header));
    if (r < 0)
        return r;
    if (!idx_read_full(s, header + 4, header_size - 4, &got))
        return idx_source_error(s, "header", 4 + got, header_size);
    if (4 + got < header_size) {
        snprintf(s->err, s->err_size, "%s: truncated header: expected %zu bytes, got %zu", s->path, header_size,
                 4 + got);
        return -EBADMSG;
    }

    uint64_t item_size = 1;
    for (unsigned d = 0; d < fmt->n_dims; d++) {
        dims[d] = idx_be32(header + 4 + 4 * d);
        if (dims[d] == 0) {
            snprintf(s->err, s->err_size, "%s: header: %s is 0", s->path, fmt->dim_names[d]);
            return -EBADMSG;
        }
        if (d > 0)
            item_size *= dims[d];
    }
    if (dims[0] > DDP_MAX_IDX_ITEMS) {
        snprintf(s->err, s->err_size, "%s: header: %s %u exceeds the limit of %u", s->path, fmt->dim_names[0], dims[0],
                 DDP_MAX_IDX_ITEMS);
        return -EBADMSG;
    }
    if (item_size > DDP_MAX_IDX_ITEM_PIXELS) {
        snprintf(s->err, s->err_size, "%s: header: %ux%u images (%llu pixels each) exceed the limit of %u pixels",
                 s->path, dims[1], dims[2], (unsigned long long)item_size, DDP_MAX_IDX_ITEM_PIXELS);
        return -EBADMSG;
    }
    if (s->want_item_size && item_size != s->want_item_size) { /* said before a payload is read */
        snprintf(s->err, s->err_size, "%s: header: %ux%u images (%llu pixels each), not the %llu pixels wanted",
                 s->path, dims[1], dims[2], (unsigned long long)item_size, (unsigned long long)s->want_item_size);
        return -EDOM;
    }
    if (s->want_items && dims[0] != s->want_items) { /* nor inflated only to be refused (a small file of zeros) */
        snprintf(s->err, s->err_size, "%s: header: %u %s, where %u were wanted", s->path, dims[0], fmt->dim_names[0],
                 s->want_items);
        return -ERANGE;
    }
    uint64_t payload = (uint64_t)dims[0] * item_size; /* at most 1e7 * 1e6: no overflow */
    if (payload > DDP_MAX_IDX_BYTES) {
        snprintf(s->err, s->err_size, "%s: header: %llu bytes of %s exceed the limit of %llu", s->path,
                 (unsigned long long)payload, fmt->element, (unsigned long long)DDP_MAX_IDX_BYTES);
        return -EBADMSG;
    }
    *ret_payload = payload;
    return 0;
}

/* Exactly `size` bytes of payload, then the end of the data. The buffer grows with what
 * arrives, so a header that lies costs no more memory than the file holds. */
static int idx_read_payload(idx_source *s, uint64_t size, uint8_t **ret) {
    const char *what = s->format->element;
    size_t capacity = size < IDX_FIRST_ALLOC ? (size_t)size : IDX_FIRST_ALLOC, have = 0;
    uint8_t *buf = malloc(capacity);
    if (!buf) {
        snprintf(s->err, s->err_size, "%s: out of memory for %zu bytes of %s", s->path, capacity, what);
        return -ENOMEM;
    }
    int r = 0;
    for (;;) {
        size_t got;
        if (!idx_read_full(s, buf + have, capacity - have, &got)) {
            r = idx_source_error(s, what, have + got, size);
            goto fail;
        }
        have += got;
        if (have < capacity) {
            snprintf(s->err, s->err_size, "%s: truncated: the header promises %llu bytes of %s, the file holds %zu",
                     s->path, (unsigned long long)size, what, have);
            r = -EBADMSG;
            goto fail;
        }
        if (have == size)
            break;
        capacity = size - capacity < capacity ? (size_t)size : 2 * capacity;
        uint8_t *bigger = realloc(buf, capacity);
        if (!bigger) {
            snprintf(s->err, s->err_size, "%s: out of memory for %zu bytes of %s", s->path, capacity, what);
            r = -ENOMEM;
            goto fail;
        }
        buf = bigger;
    }

    /* Reading on finds trailing bytes, a gzip trailer cut short, and anything after the gzip stream. */
    uint8_t scratch[4096];
    size_t trailing = 0, got = 0;
    do {
        if (!idx_read_full(s, scratch, sizeof(scratch), &got)) {
            r = idx_source_error(s, what, size, size);
            goto fail;
        }
        trailing += got;
    } while (got == sizeof(scratch) && trailing < IDX_MAX_TRAILING_COUNT);
    if (trailing > 0) {
        snprintf(s->err, s->err_size, "%s: %s%zu trailing bytes after the %llu bytes of %s the header promises",
                 s->path, got == sizeof(scratch) ? "at least " : "", trailing, (unsigned long long)size, what);
        r = -EBADMSG;
        goto fail;
    }
    *ret = buf;
    return 0;
fail:
    free(buf);
    return r;
}

/* Opens, reads and checks one file of the given format: dims and payload on success. */
static int idx_read(const char *path, const idx_format *format, uint64_t want_item_size, uint32_t want_items,
                    uint32_t dims[3], uint8_t **ret_payload, char *err, size_t err_size) {
    if (!path) {
        snprintf(err, err_size, "no IDX file named");
        return -EINVAL;
    }
    /* Non-blocking until it is known to be a file: a FIFO would wait for a writer forever. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        snprintf(err, err_size, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct stat st;
    int e = fstat(fd, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : !S_ISREG(st.st_mode) ? EINVAL : 0;
    if (e) {
        close(fd);
        snprintf(err, err_size, "%s: %s, not an IDX file", path,
                 e == EISDIR   ? "is a directory"
                 : e == EINVAL ? "not a regular file"
                               : strerror(e));
        return -e;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    idx_source s = {.fd = fd,
                    .path = path,
                    .format = format,
                    .want_item_size = want_item_size,
                    .want_items = want_items,
                    .err = err,
                    .err_size = err_size};
    s.in = malloc(IDX_IN_SIZE);
    if (!s.in) {
        close(fd);
        snprintf(err, err_size, "%s: out of memory opening it", path);
        return -ENOMEM;
    }
    s.z.next_in = s.in;
    /* The content decides: gzip's magic, or plain bytes (an IDX file starts with 00 00). */
    ssize_t got = 1;
    while (s.z.avail_in < 2 && got > 0)
        got = idx_fill(&s);
    int r = 0;
    if (got < 0)
        r = idx_source_error(&s, "header", 0, 4 + 4 * format->n_dims);
    s.gzip = s.z.avail_in >= 2 && s.in[0] == 0x1f && s.in[1] == 0x8b;
    if (r == 0 && s.gzip) {
        /* 15 + 16: a gzip wrapper only, up to the largest window. */
        if (inflateInit2(&s.z, 15 + 16) != Z_OK) {
            snprintf(err, err_size, "%s: out of memory for zlib", path);
            r = -ENOMEM;
        } else
            s.inflating = true;
    }
    uint64_t payload_size = 0;
    if (r == 0)
        r = idx_read_header(&s, dims, &payload_size);
    if (r == 0)
        r = idx_read_payload(&s, payload_size, ret_payload);
    if (s.inflating)
        inflateEnd(&s.z);
    free(s.in);
    close(fd);
    return r;
}

int idx_read_images(const char *path, uint32_t want_pixels, idx_images *ret, char *err, size_t err_size) {
    return idx_read_images_of(path, want_pixels, 0, ret, err, err_size);
}

int idx_read_images_of(const char *path, uint32_t want_pixels, uint32_t want_n, idx_images *ret, char *err,
                       size_t err_size) {
    memset(ret, 0, sizeof(*ret));
    uint32_t dims[3] = {0};
    uint8_t *pixels = NULL;
    int r = idx_read(path, &idx_images_format, want_pixels, want_n, dims, &pixels, err, err_size);
    if (r == -ERANGE)
        ret->n = dims[0];
    if (r < 0)
        return r;
    *ret = (idx_images){.n = dims[0], .rows = dims[1], .cols = dims[2], .pixels = pixels};
    return 0;
}

int idx_read_labels(const char *path, unsigned n_classes, idx_labels *ret, char *err, size_t err_size) {
    memset(ret, 0, sizeof(*ret));
    if (n_classes < 1 || n_classes > 256) {
        snprintf(err, err_size, "%s: %u classes: byte labels allow 1 to 256", path ? path : "(null)", n_classes);
        return -EINVAL;
    }
    uint32_t dims[3] = {0};
    uint8_t *labels = NULL;
    int r = idx_read(path, &idx_labels_format, 0, 0, dims, &labels, err, err_size);
    if (r < 0)
        return r;
    for (uint32_t i = 0; i < dims[0]; i++)
        if (labels[i] >= n_classes) {
            snprintf(err, err_size, "%s: label %u at index %u is out of range [0, %u)", path, labels[i], i, n_classes);
            free(labels);
            return -EBADMSG;
        }
    *ret = (idx_labels){.n = dims[0], .labels = labels};
    return 0;
}

void idx_images_free(idx_images *images) {
    if (!images)
        return;
    free(images->pixels);
    memset(images, 0, sizeof(*images));
}

void idx_labels_free(idx_labels *labels) {
    if (!labels)
        return;
    free(labels->labels);
    memset(labels, 0, sizeof(*labels));
}
