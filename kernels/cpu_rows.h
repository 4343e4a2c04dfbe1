/* The allowed keys of a block of query rows inside one KV tile, as the CPU attention kernels
 * (forward and backward) keep them: at most two tile-local ranges per row. */
#ifndef DCP_KERNELS_CPU_ROWS_H
#define DCP_KERNELS_CPU_ROWS_H

#include <stdint.h>

#define DCP_CPU_QB 32 /* query rows per block of the CPU attention kernels */

typedef struct {
    int32_t lo[DCP_CPU_QB][2], hi[DCP_CPU_QB][2]; /* empty ranges: lo == hi */
} dcp_cpu_rows_t;

/* Row i's ranges from the absolute key ranges rg = {s0, e0, s1, e1}, shifted by -base and
 * clamped into [0, n]; widens [*klo, *khi) to cover them. */
static inline void dcp_cpu_row_set(dcp_cpu_rows_t *w, int32_t i, const int32_t rg[4], int32_t base,
                                   int32_t n, int32_t *klo, int32_t *khi)
{
    for (int j = 0; j < 2; j++) {
        int32_t x = rg[2 * j] - base, y = rg[2 * j + 1] - base;
        x = x < 0 ? 0 : (x > n ? n : x);
        y = y < x ? x : (y > n ? n : y);
        w->lo[i][j] = x;
        w->hi[i][j] = y;
        if (x < y) {
            if (x < *klo) *klo = x;
            if (y > *khi) *khi = y;
        }
    }
}

/* Row i sees some key of [c0, c1). */
static inline int dcp_cpu_row_sees(const dcp_cpu_rows_t *w, int32_t i, int32_t c0, int32_t c1)
{
    return (w->lo[i][0] < c1 && c0 < w->hi[i][0]) || (w->lo[i][1] < c1 && c0 < w->hi[i][1]);
}

/* Row i sees every key of [c0, c1). */
static inline int dcp_cpu_row_covers(const dcp_cpu_rows_t *w, int32_t i, int32_t c0, int32_t c1)
{
    return (w->lo[i][0] <= c0 && c1 <= w->hi[i][0]) || (w->lo[i][1] <= c0 && c1 <= w->hi[i][1]);
}

/* Row i sees `key`. */
static inline int dcp_cpu_row_has(const dcp_cpu_rows_t *w, int32_t i, int32_t key)
{
    return (key >= w->lo[i][0] && key < w->hi[i][0]) || (key >= w->lo[i][1] && key < w->hi[i][1]);
}

#endif
