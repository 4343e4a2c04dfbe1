/*
 * The simulator's built-in kernel tables, used where no table measured with
 * dcp-kernel-bench is given: the device figures of topo/device_kernels.c, which the cost
 * model of the cluster presets reads too.
 */
#include "partition/sim/simulate.h"

#include "include/base/error.h"
#include "topo/device_kernels.h"

#include <math.h>
#include <string.h>

/* Tables measured on one H100 80GB HBM3 (bf16, head dim 128; kernels/README.md):
 * dcp-kernel-bench --total 16384 --tile 2048,4096 --gqa 8:2 and tests/perf/compare_sdpa.py,
 * TFLOP/s over the exact allowed pairs, full tiles, the backward counted 2.5x.
 *  - h100-dcp: dcp's attention engine as it runs today, full segments forward on cuDNN
 *    (484-527 TFLOP/s, 505 kept) and the whole backward on dcp's own kernels (144-147, 145);
 *  - h100-cudnn: cuDNN's SDPA through PyTorch (forward 615-674, 640 kept; backward 551-576,
 *    560), the target of the engine.
 * Measured at tiles of 2048 and 4096 tokens, held flat above; shorter tiles follow cuDNN's
 * curve on MagiAttention's H100 charts (about half its 8K rate at 1K: 285 against 575 full
 * forward) and below 1K the shape of the FlashAttention curve of
 * topo/device_kernels.c (0.13 / 0.25 / 0.43 at 256 / 512 / 1K): not measured here. Merge and
 * copy are dcp's kernels as measured on that H100 (the h100 table's). */
static const double h100_tile[] = {256, 512, 1024, 2048, 4096, 8192};
static const double h100_short[] = {0.13 / 0.43 * 0.5, 0.25 / 0.43 * 0.5, 0.5, 1, 1, 1};
static const struct {
    const char *name;
    double fwd, bwd; /* at 2048 and above */
} measured[] = {{"h100-dcp", 505.0, 145.0}, {"h100-cudnn", 640.0, 560.0}};

static int measured_table(const char *name, dcp_sim_kernels_t *k_out)
{
    for (size_t i = 0; name && i < sizeof measured / sizeof measured[0]; i++) {
        if (strcmp(name, measured[i].name)) continue;
        const dcp_device_kernels_t *h = dcp_device_kernels("h100");
        dcp_sim_kernels_t k = {.n = 6, .merge_gbps = h->merge_gbps, .copy_gbps = h->copy_gbps};
        for (int j = 0; j < k.n; j++) {
            k.tile[j] = h100_tile[j];
            k.fwd_tflops[j] = measured[i].fwd * h100_short[j];
            k.bwd_tflops[j] = measured[i].bwd * h100_short[j];
        }
        *k_out = k;
        return 1;
    }
    return 0;
}

dcp_status_t dcp_sim_kernels_builtin(const char *name, dcp_sim_kernels_t *k_out)
{
    if (measured_table(name, k_out)) return DCP_OK;
    const dcp_device_kernels_t *d = dcp_device_kernels(name);
    if (!d)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "kernel table: no built-in table '%s' (h100, a100, h100-dcp, "
                             "h100-cudnn)",
                             name ? name : "(null)");
    dcp_sim_kernels_t k = {
        .n = DCP_DEVICE_CURVE_POINTS, .merge_gbps = d->merge_gbps, .copy_gbps = d->copy_gbps};
    for (int j = 0; j < DCP_DEVICE_CURVE_POINTS; j++) {
        k.tile[j] = dcp_device_curve_tile[j];
        k.fwd_tflops[j] = d->fwd_tflops * dcp_device_curve_shape[j];
        k.bwd_tflops[j] = d->bwd_tflops * dcp_device_curve_shape[j];
    }
    *k_out = k;
    return DCP_OK;
}

const char *dcp_sim_kernels_builtin_for(double peak_tflops)
{
    return dcp_device_kernels_for_peak(peak_tflops)->name;
}

/* The H100's memory bandwidth that the h100 table's merge and copy figures are a share of. */
#define H100_HBM_GBPS 3350.0

void dcp_sim_kernels_from_perf(const dcp_perf_model_t *m, dcp_sim_kernels_t *k_out)
{
    const dcp_device_kernels_t *h = dcp_device_kernels("h100");
    dcp_sim_kernels_t k = {.n = m->eff_n,
                           .merge_gbps = m->hbm_gbps * h->merge_gbps / H100_HBM_GBPS,
                           .copy_gbps = m->hbm_gbps * h->copy_gbps / H100_HBM_GBPS};
    for (int32_t i = 0; i < m->eff_n; i++) {
        k.tile[i] = m->eff_tokens[i];
        k.fwd_tflops[i] = m->peak_tflops * m->eff_value[i];
        k.bwd_tflops[i] = k.fwd_tflops[i] * m->bwd_speed;
    }
    *k_out = k;
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
