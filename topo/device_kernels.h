/*
 * What the kernels reach on the GPU models dcp knows: fused attention forward and backward
 * by tile edge, the LSE merge and the copies. One table per device, read by both models of
 * a step: the cost model of the cluster presets (topo/cluster.c: its efficiency curve and
 * backward speed) and the step-time simulator's built-in kernel tables
 * (partition/sim/simulate_kernels.c). The planner then chooses among plans with the kernels that
 * the simulator judges them by. (With the preset's own curve, 0.60-0.68 of H100's peak on
 * 1K-4K tiles, the cost model put the kernels at 3.7x the simulator's rate, so it priced
 * communication and the plan's shape against a fraction of the real compute.)
 */
#ifndef DCP_TOPO_DEVICE_KERNELS_H
#define DCP_TOPO_DEVICE_KERNELS_H

#include "topo/perf_model.h"

/* The curve's tile edges (tokens) and the rate at each, as a share of the rate at the last. */
#define DCP_DEVICE_CURVE_POINTS 6
extern const double dcp_device_curve_tile[DCP_DEVICE_CURVE_POINTS];
extern const double dcp_device_curve_shape[DCP_DEVICE_CURVE_POINTS];

typedef struct {
    const char *name;              /* "h100", "a100" */
    double peak_tflops;            /* dense bf16 peak */
    double fwd_tflops, bwd_tflops; /* attention at the curve's last edge (8K) */
    double merge_gbps, copy_gbps;  /* bytes read + written per second */
} dcp_device_kernels_t;

/* The device named `name`; NULL if none. */
const dcp_device_kernels_t *dcp_device_kernels(const char *name);

/* The device whose dense peak is closest to `peak_tflops`. */
const dcp_device_kernels_t *dcp_device_kernels_for_peak(double peak_tflops);

/* The cost model's kernel figures of device d in *perf: its peak, the forward's efficiency
 * curve (rate / peak at each edge) and the backward's speed (backward rate / forward rate);
 * the links and the memory bandwidth are left as they are. */
void dcp_device_kernels_perf(const dcp_device_kernels_t *d, dcp_perf_model_t *perf);

#endif
