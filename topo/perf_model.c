/* The cost model's figures of a machine: the defaults, and the check every source of figures
 * (cluster specs, node files, kernel tables, plans read from bytes) runs on them. */
#include "topo/perf_model.h"

#include "include/base/error.h"

#include <math.h>
#include <string.h>

/* The default kernel curve: fraction of peak that a fused attention kernel reaches on a
 * square tile of the given edge, in the range FlashAttention-2/3 report on A100/H100. It is
 * an assumption until a measured table (dcp-kernel-bench) replaces it. */
static const double default_tokens[] = {64, 128, 256, 512, 1024, 2048, 4096};
static const double default_eff[] = {0.12, 0.25, 0.40, 0.52, 0.60, 0.65, 0.68};

void dcp_perf_model_default(dcp_perf_model_t *m)
{
    memset(m, 0, sizeof *m);
    m->intra_gbps = 300.0;
    m->inter_gbps = 25.0;
    m->lat_us = 5.0;
    m->peak_tflops = 312.0;
    m->hbm_gbps = 1500.0;
    m->bwd_speed = 1.0;
    m->eff_n = (int32_t)(sizeof default_tokens / sizeof default_tokens[0]);
    memcpy(m->eff_tokens, default_tokens, sizeof default_tokens);
    memcpy(m->eff_value, default_eff, sizeof default_eff);
}

static int positive(double v)
{
    return isfinite(v) && v > 0;
}

dcp_status_t dcp_perf_model_check(const dcp_perf_model_t *m, const char *field)
{
    if (!positive(m->intra_gbps) || !positive(m->inter_gbps) || !positive(m->lat_us) ||
        !positive(m->peak_tflops) || !positive(m->hbm_gbps) || !positive(m->bwd_speed))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s: bandwidths, latency, peak and backward speed must be positive "
                             "numbers",
                             field);
    if (m->eff_n < 1 || m->eff_n > DCP_MAX_KERNEL_POINTS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: %d kernel points, need 1..%d", field,
                             m->eff_n, DCP_MAX_KERNEL_POINTS);
    for (int32_t i = 0; i < m->eff_n; i++) {
        if (!positive(m->eff_tokens[i]) || (i > 0 && m->eff_tokens[i] <= m->eff_tokens[i - 1]))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "%s: tile_tokens[%d] = %g, must be > 0 and increasing", field, i,
                                 m->eff_tokens[i]);
        if (!positive(m->eff_value[i]) || m->eff_value[i] > 1.0)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: efficiency[%d] = %g, must be in (0, 1]",
                                 field, i, m->eff_value[i]);
    }
    return DCP_OK;
}
