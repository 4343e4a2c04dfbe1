/*
 * The simulator's built-in kernel tables, used where no table measured with
 * dcp-kernel-bench is given.
 *
 * Figures (../shared/KERNELS.md): FlashAttention-2 on H100 SXM, bf16, head dim 128, reaches
 * about 370 TFLOP/s forward and 335 backward on 8K-32K sequences (MagiAttention's uniform
 * benchmark; the FA3 paper's 370 / 320), and much less on short tiles (FA3's causal forward
 * at 1K is 0.43x its 8K figure); the curve scales the 8K figure by 0.13, 0.25, 0.43, 0.65,
 * 0.85, 1.0 at edges 256 .. 8192. On A100 FA2 reaches 50-73% of the 312 TFLOP/s peak:
 * 220 forward and 180 backward at 8K, on the same curve. dcp's merge and copy kernels ran
 * at 1.24 and 0.54 TB/s on H100; A100 gets them scaled by the HBM bandwidths (1555 / 3350).
 */
#include "partition/simulate.h"

#include "include/base/error.h"

#include <math.h>
#include <string.h>

enum { BUILTIN_POINTS = 6 };

static const double builtin_tile[BUILTIN_POINTS] = {256, 512, 1024, 2048, 4096, 8192};
static const double builtin_shape[BUILTIN_POINTS] = {0.13, 0.25, 0.43, 0.65, 0.85, 1.0};

typedef struct {
    const char *name;
    double peak, fwd, bwd, merge, copy; /* TFLOP/s at 8K; GB/s */
} builtin_t;

static const builtin_t builtins[] = {
    {"h100", 989.0, 370.0, 335.0, 1240.0, 540.0},
    {"a100", 312.0, 220.0, 180.0, 1240.0 * 1555 / 3350, 540.0 * 1555 / 3350},
};
#define NUM_BUILTINS ((int)(sizeof builtins / sizeof builtins[0]))

dcp_status_t dcp_sim_kernels_builtin(const char *name, dcp_sim_kernels_t *k_out)
{
    for (int i = 0; name && i < NUM_BUILTINS; i++) {
        const builtin_t *b = &builtins[i];
        if (strcmp(name, b->name)) continue;
        dcp_sim_kernels_t k = {.n = BUILTIN_POINTS, .merge_gbps = b->merge, .copy_gbps = b->copy};
        for (int j = 0; j < BUILTIN_POINTS; j++) {
            k.tile[j] = builtin_tile[j];
            k.fwd_tflops[j] = b->fwd * builtin_shape[j];
            k.bwd_tflops[j] = b->bwd * builtin_shape[j];
        }
        *k_out = k;
        return DCP_OK;
    }
    return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table: no built-in table '%s' (h100, a100)",
                         name ? name : "(null)");
}

const char *dcp_sim_kernels_builtin_for(double peak_tflops)
{
    int best = 0;
    for (int i = 1; i < NUM_BUILTINS; i++)
        if (fabs(builtins[i].peak - peak_tflops) < fabs(builtins[best].peak - peak_tflops))
            best = i;
    return builtins[best].name;
}

static int positive(double v)
{
    return isfinite(v) && v > 0;
}

dcp_status_t dcp_sim_kernels_check(const dcp_sim_kernels_t *k)
{
    if (k->n < 1 || k->n > DCP_MAX_KERNEL_POINTS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table: %d tile sizes, need 1..%d", k->n,
                             DCP_MAX_KERNEL_POINTS);
    for (int32_t i = 0; i < k->n; i++) {
        if (!positive(k->tile[i]) || (i > 0 && k->tile[i] <= k->tile[i - 1]))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "kernel table: tile[%d] = %g, must be > 0 and increasing", i,
                                 k->tile[i]);
        if (!positive(k->fwd_tflops[i]) || !positive(k->bwd_tflops[i]))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "kernel table: fwd_tflops[%d] = %g, bwd_tflops[%d] = %g, both "
                                 "must be > 0",
                                 i, k->fwd_tflops[i], i, k->bwd_tflops[i]);
    }
    if (!positive(k->merge_gbps) || !positive(k->copy_gbps))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "kernel table: merge_gbps = %g, copy_gbps = %g, both must be > 0",
                             k->merge_gbps, k->copy_gbps);
    return DCP_OK;
}
