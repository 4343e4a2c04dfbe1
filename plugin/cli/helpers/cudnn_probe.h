/* The GPU report's probe of cuDNN (dcp-kernel-bench --engine cudnn --probe): every graph the
 * loaded version runs, built once outside any cache, one line each. */
#ifndef DCPT_CLI_CUDNN_PROBE_H
#define DCPT_CLI_CUDNN_PROBE_H

#include "kernels/cudnn.h"

#include <stdio.h>

/* Builds forward and backward x full, causal, band, left x head dims 64 and 128 x GQA 1 and 4
 * (32 query heads) in bf16, one fp16 row per class, the deterministic backward, MLA's 192/128
 * and the fused full forward, and prints per graph: built or not, build ms, the engine chosen,
 * its workspace, cuDNN's error text (a table, or JSON lines). Returns the graphs that did not
 * build. */
int dcpt_cudnn_probe(FILE *out, dcp_cudnn_t *c, int json);

#endif
