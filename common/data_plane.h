/* The version of what the ranks of one job read of each other, and ddpd of a ps job's
 * ranks: libddp's frames (worker/libddp/comm.h), its shared segments
 * (worker/libddp/shm_layout.h) and the ps segments (common/ps_segment.h). Raised whenever
 * any of them changes. Every Join carries it: ddpd refuses a rank whose version is not its
 * job's (a host with another libddp would read garbage, or crash, rather than fail), nor,
 * in ps mode, ddpd's own. */
#pragma once

#define DDP_DATA_PLANE_VERSION 1
/* What a Join without the field (0) speaks: the releases before it was sent read the
 * layouts of version 1. */
#define DDP_DATA_PLANE_UNSENT 1
