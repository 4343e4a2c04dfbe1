/* The cost model's figures of a machine (perf_model.c): set by a cluster spec's presets, a node
 * file, a kernel table or hwloc's view of a node, and carried by every plan. A leaf of topo/:
 * the cluster model (cluster.h) and every reader of figures (node_file.h, node_figures.h,
 * device_kernels.h) sit on it. */
#ifndef DCP_TOPO_PERF_MODEL_H
#define DCP_TOPO_PERF_MODEL_H

#include "include/dcp.h"

#define DCP_MAX_KERNEL_POINTS 32

/* What the cost model knows about the machine. */
typedef struct {
    double intra_gbps;  /* GB/s per direction per device between devices of one node */
    double inter_gbps;  /* GB/s per direction per device to other nodes */
    double lat_us;      /* per-transfer latency, microseconds */
    double peak_tflops; /* dense peak of one device in the plan's dtype, TFLOP/s */
    double hbm_gbps;    /* device memory bandwidth, GB/s (copies and merges) */
    double bwd_speed;   /* the backward's FLOP/s over the forward's on the same tile (1 on
                           GPUs' fused kernels; a CPU's backward runs faster per FLOP) */
    int32_t eff_n;      /* kernel efficiency curve: fraction of peak on a tile whose */
    double eff_tokens[DCP_MAX_KERNEL_POINTS]; /* geometric-mean edge is eff_tokens[i] */
    double eff_value[DCP_MAX_KERNEL_POINTS];
} dcp_perf_model_t;

/* The default figures (a generic NVLink node, the default kernel curve). */
void dcp_perf_model_default(dcp_perf_model_t *m);

/* Checks a model's figures; `field` names it in messages. */
dcp_status_t dcp_perf_model_check(const dcp_perf_model_t *m, const char *field);

#endif
