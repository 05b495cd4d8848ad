/* Every limit on what a peer or a user controls, in one place. */
#pragma once

#define DDP_PROTOCOL_VERSION 1u

/* Jobs and members */
#define DDP_MAX_WORLD_SIZE 1024      /* members of one job */
#define DDP_MAX_JOBS 256             /* jobs ddpd holds at once, forming or running */
#define DDP_MAX_PEERS 4096           /* members of all jobs together */
#define DDP_MAX_JOB_NAME 64          /* bytes, [A-Za-z0-9._-] */
#define DDP_MAX_MODE 16              /* bytes */
#define DDP_MAX_HOST 255             /* bytes, as HOST_NAME_MAX */
#define DDP_MAX_ENDPOINT 256         /* bytes, a ZeroMQ endpoint */
/* The lab service's socket (systemd's RuntimeDirectory=ddp): where ddpd listens and
 * clients look by default. Over a Unix socket ddpd knows each client's user. */
#define DDP_DEFAULT_ENDPOINT "ipc:///run/ddp/ddpd.sock"
#define DDP_MAX_REASON 512           /* bytes of an error, reject or abort text */

/* Key-value store, per job */
#define DDP_MAX_STORE_KEY 512        /* bytes */
#define DDP_MAX_STORE_VALUE (1u << 20)  /* bytes */
#define DDP_MAX_STORE_KEYS 4096      /* keys */
#define DDP_MAX_STORE_BYTES (64u << 20) /* keys and values together */
#define DDP_MAX_STORE_WAIT_KEYS 64   /* keys one wait may name */
#define DDP_MAX_STORE_WAITERS 4096   /* pending waits */

/* Parameter-server mode: gradient buckets ddpd reduces */
#define DDP_MAX_PS_BUCKETS 1024
#define DDP_MAX_PS_BUCKET_ELEMENTS (16u << 20) /* f32: a 64 MiB frame, DDP_MAX_CONTROL_MSG_BYTES */
#define DDP_MAX_PS_ELEMENTS (1u << 28)        /* all buckets of a job together */

/* ddp_alloc: one buffer that peers map (a memfd each rank maps once per peer) */
#define DDP_MAX_ALLOC_BYTES (64ull << 30)

/* Framing: [envelope][payload...] */
#define DDP_MAX_PAYLOAD_FRAMES 8
#define DDP_MAX_ENVELOPE_BYTES (4u << 20)  /* a status of DDP_MAX_PEERS members, a store value */
#define DDP_MAX_CONTROL_MSG_BYTES (64ll << 20) /* ZMQ_MAXMSGSIZE of control sockets */
#define DDP_MAX_DATA_MSG_BYTES (256ll << 20)   /* ZMQ_MAXMSGSIZE of data sockets */

/* Timing, milliseconds */
#define DDP_DEFAULT_HEARTBEAT_MS 500
#define DDP_MIN_HEARTBEAT_MS 10
#define DDP_MAX_HEARTBEAT_MS 60000
#define DDP_DEFAULT_LIVENESS 3       /* missed intervals before a peer is dead */
#define DDP_MAX_LIVENESS 100
#define DDP_DEFAULT_JOIN_TIMEOUT_MS 300000
#define DDP_DEFAULT_TIMEOUT_MS 60000    /* one collective or control request */
#define DDP_DEFAULT_CONNECT_TIMEOUT_MS 10000 /* until ddpd first answers */
#define DDP_MAX_TIMEOUT_MS 86400000     /* one day */
#define DDP_DEFAULT_COORDINATOR_WAIT_MS 60000 /* for a ddpd that went away to come back (a restart) */
#define DDP_DEFAULT_WATCHDOG_MS 10000   /* a program away from libddp after its job ended, before it is ended */
#define DDP_WAITING_LOG_MS 5000      /* "job 'x': 3/4 joined" every so often */
#define DDP_RECOVER_GRACE_MS 10000   /* after ddpd restarted, beyond the liveness window, for every rank to be back */

/* Configuration */
#define DDP_MAX_CONFIG_STRING 1024   /* bytes of a string option */
#define DDP_MAX_CONFIG_FILE (1 << 20) /* bytes of a config file */
#define DDP_MAX_CONFIG_LINE 198      /* characters of a config line: inih's 200-byte buffer, less newline and NUL */

/* IDX data files (MNIST, Fashion-MNIST): what a header may promise before we allocate */
#define DDP_MAX_IDX_ITEMS 10000000u        /* images or labels in one file */
#define DDP_MAX_IDX_ITEM_PIXELS 1000000u   /* rows * cols of one image */
#define DDP_MAX_IDX_BYTES (4ull << 30)     /* the whole payload */

/* Job generations stay exact as JSON numbers (doubles): a job a microsecond for 285 years. */
#define DDP_MAX_GENERATION ((1ull << 53) - 1)
