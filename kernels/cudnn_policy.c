/* Which cuDNN versions run which segment classes (kernels/cudnn.h): pure functions, built
 * with or without CUDA, so the policy is tested everywhere. */
#include "kernels/cudnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dcp_cudnn_version_string(int64_t v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lld.%lld.%lld", (long long)(v / 10000), (long long)(v / 100 % 100),
             (long long)(v % 100));
}

int32_t dcp_cudnn_policy(int64_t v, int backward, const char **why)
{
    *why = "";
    if (v == 91000 || v == 91001) {
        *why = "9.10.0 and 9.10.1 have known fp16/bf16 SDPA defects (cuDNN's frontend refuses "
               "them)";
        return 0;
    }
    if (!backward) {
        if (v < 91500) {
            *why = "the fused SDPA forward with per-sequence lengths needs cuDNN 9.15.0";
            return 0;
        }
        if (v < 92100) {
            *why = "causal segments need the SDPA score-modifier subgraph of cuDNN 9.21.0: they "
                   "run on dcp's kernel";
            return DCP_SEG_BIT(DCP_SEG_FULL);
        }
        return DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL);
    }
    /* The fused backward operation is in the 9.17 headers, but cuDNN's heuristics propose its
     * engines from 9.27.0 on, and with packed (ragged) layouts, per-sequence lengths and
     * score-modifier subgraphs from 9.28.0 (cuDNN frontend, SDPA backward support surface). */
    if (v < 92800) {
        *why = "the fused SDPA backward takes packed entries with per-sequence lengths from cuDNN "
               "9.28.0: the backward runs on dcp's kernels";
        return 0;
    }
    return DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL);
}

int32_t dcp_cudnn_classes(int64_t v, int backward, const char **why)
{
    const int32_t classes = dcp_cudnn_policy(v, backward, why);
    const char *env = getenv("DCP_CUDNN_UNGATED");
    if (!env || !*env || !strcmp(env, "0") || v == 91000 || v == 91001) return classes;
    *why = "DCP_CUDNN_UNGATED: every class is tried on this cuDNN, whatever its version";
    return DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL);
}
