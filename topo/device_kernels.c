/*
 * Figures (topo/README.md): FlashAttention-2 on H100 SXM, bf16, head dim 128, reaches
 * about 370 TFLOP/s forward and 335 backward on 8K-32K sequences (MagiAttention's uniform
 * benchmark; the FA3 paper's 370 / 320), and much less on short tiles (FA3's causal forward
 * at 1K is 0.43x its 8K figure); the curve scales the 8K figure by 0.13, 0.25, 0.43, 0.65,
 * 0.85, 1.0 at edges 256 .. 8192. On A100 FA2 reaches 50-73% of the 312 TFLOP/s peak:
 * 220 forward and 180 backward at 8K, on the same curve. dcp's merge and copy kernels ran
 * at 1.24 and 0.54 TB/s on H100; A100 gets them scaled by the HBM bandwidths (1555 / 3350).
 */
#include "topo/device_kernels.h"

#include <math.h>
#include <string.h>

const double dcp_device_curve_tile[DCP_DEVICE_CURVE_POINTS] = {256, 512, 1024, 2048, 4096, 8192};
const double dcp_device_curve_shape[DCP_DEVICE_CURVE_POINTS] = {0.13, 0.25, 0.43, 0.65, 0.85, 1.0};

static const dcp_device_kernels_t devices[] = {
    {"h100", 989.0, 370.0, 335.0, 1240.0, 540.0},
    {"a100", 312.0, 220.0, 180.0, 1240.0 * 1555 / 3350, 540.0 * 1555 / 3350},
};
#define NUM_DEVICES ((int)(sizeof devices / sizeof devices[0]))

const dcp_device_kernels_t *dcp_device_kernels(const char *name)
{
    for (int i = 0; name && i < NUM_DEVICES; i++)
        if (!strcmp(name, devices[i].name)) return &devices[i];
    return NULL;
}

const dcp_device_kernels_t *dcp_device_kernels_for_peak(double peak_tflops)
{
    int best = 0;
    for (int i = 1; i < NUM_DEVICES; i++)
        if (fabs(devices[i].peak_tflops - peak_tflops) <
            fabs(devices[best].peak_tflops - peak_tflops))
            best = i;
    return &devices[best];
}

void dcp_device_kernels_perf(const dcp_device_kernels_t *d, dcp_perf_model_t *perf)
{
    perf->peak_tflops = d->peak_tflops;
    perf->bwd_speed = d->bwd_tflops / d->fwd_tflops;
    perf->eff_n = DCP_DEVICE_CURVE_POINTS;
    for (int i = 0; i < DCP_DEVICE_CURVE_POINTS; i++) {
        perf->eff_tokens[i] = dcp_device_curve_tile[i];
        perf->eff_value[i] = d->fwd_tflops * dcp_device_curve_shape[i] / d->peak_tflops;
    }
}
