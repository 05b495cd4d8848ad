/* ddp-compare's report: what each run measured, and the three renderings of it (the
 * Markdown table, report.json, report.svg). Pure functions from the results to a stream;
 * each returns 0, or -EIO when the stream could not take it. */
#pragma once
#include <stdio.h>

#define COMPARE_MAX_RANKS 64

typedef struct {
    double peak_tracked, peak_rss_kb, sent, received;
    double device_used; /* what the GPU itself reports in use (cudaMemGetInfo); -1 on the CPU */
    double compute_s, comm_s, wait_s;
    double forward_s, backward_s, optimizer_s; /* of compute_s */
} rank_result;

typedef struct {
    char mode[16];
    char transport[8]; /* what carried the run's data plane (shm, zmq, nccl), from its metrics */
    double bucket_mb;  /* the sweep: 0 for the default */
    int world, steps;
    double samples_per_s, seconds, loss, accuracy;
    rank_result ranks[COMPARE_MAX_RANKS];
    double imbalance;       /* max/min peak tracked memory */
    int link_from, link_to; /* busiest link; to == world: ddpd */
    double link_bytes;
} mode_result;

typedef struct {
    int world;
    const mode_result *modes; /* one run per mode */
    int n_modes;
    const mode_result *sweep; /* ddp at other bucket sizes; n_sweep 0 without --sweep-buckets */
    int n_sweep;
} compare_report;

/* The table of the modes, then the bucket sweep's when there is one: what the terminal shows. */
int compare_write_table(FILE *f, const compare_report *r);
/* report.md: a heading, then the table. */
int compare_write_markdown(FILE *f, const compare_report *r);
/* report.json, as tests/compare/report.schema.json describes it. */
int compare_write_json(FILE *f, const compare_report *r);
/* report.svg: throughput per mode, and peak tracked memory per rank per mode, values on the bars. */
int compare_write_svg(FILE *f, const compare_report *r);
