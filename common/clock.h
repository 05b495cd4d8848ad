/* A monotonic clock: intervals, deadlines and timeouts never follow wall-clock jumps. */
#pragma once
#include <stdint.h>

uint64_t clock_now_ns(void); /* for timing calls shorter than a microsecond */
uint64_t clock_now_us(void);
uint64_t clock_now_ms(void);

/* Milliseconds left until deadline_ms (0 once it has passed), clamped to int for zmq_poll. */
int clock_ms_until(uint64_t deadline_ms);
