#include "common/clock.h"

#include <limits.h>
#include <time.h>

uint64_t clock_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t clock_now_us(void) {
    return clock_now_ns() / 1000u;
}

uint64_t clock_now_ms(void) {
    return clock_now_us() / 1000u;
}

int clock_ms_until(uint64_t deadline_ms) {
    uint64_t now = clock_now_ms();
    if (now >= deadline_ms)
        return 0;
    uint64_t left = deadline_ms - now;
    return left > INT_MAX ? INT_MAX : (int)left;
}
