/*
 * The simulator's built-in kernel tables, used where no table measured with
 * dcp-kernel-bench is given: the device figures of topo/device_kernels.c, which the cost
 * model of the cluster presets reads too.
 */
#include "partition/simulate.h"

#include "include/base/error.h"
#include "topo/device_kernels.h"

#include <math.h>
#include <string.h>

dcp_status_t dcp_sim_kernels_builtin(const char *name, dcp_sim_kernels_t *k_out)
{
    const dcp_device_kernels_t *d = dcp_device_kernels(name);
    if (!d)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "kernel table: no built-in table '%s' (h100, a100)",
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

void dcp_sim_kernels_from_perf(const dcp_perf_model_t *m, dcp_sim_kernels_t *k_out)
{
    dcp_sim_kernels_t k = {.n = m->eff_n, .merge_gbps = m->hbm_gbps, .copy_gbps = m->hbm_gbps};
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
