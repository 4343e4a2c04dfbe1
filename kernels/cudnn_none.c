/* cuDNN in a build without CUDA (kernels/cudnn.h): nothing loads, every entry says so. */
#include "kernels/cudnn.h"

#include "include/base/error.h"

#include <string.h>

static dcp_status_t no_cudnn(void)
{
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: this build has no CUDA (nvcc was not found)");
}

dcp_status_t dcp_cudnn_open(int32_t device, int deterministic, dcp_cudnn_t **out)
{
    (void)device, (void)deterministic;
    *out = NULL;
    return no_cudnn();
}

void dcp_cudnn_close(dcp_cudnn_t *c)
{
    (void)c;
}

int64_t dcp_cudnn_version(const dcp_cudnn_t *c)
{
    (void)c;
    return 0;
}

void dcp_cudnn_stats(const dcp_cudnn_t *c, dcp_cudnn_stats_t *out)
{
    (void)c;
    memset(out, 0, sizeof *out);
}

dcp_status_t dcp_cudnn_prepare(dcp_cudnn_t *c, int slot, const dcp_seg_prog_t *prog,
                               const dcp_kernel_env_t *env, const int32_t *ints)
{
    (void)c, (void)slot, (void)prog, (void)env, (void)ints;
    return no_cudnn();
}

int32_t dcp_cudnn_failed_classes(const dcp_cudnn_t *c, int slot)
{
    (void)c, (void)slot;
    return 0;
}

static dcp_status_t run_none(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                             int64_t call, const int32_t *ints)
{
    (void)state, (void)env, (void)prog, (void)call, (void)ints;
    return no_cudnn();
}

dcp_dense_engine_t dcp_cudnn_engine(dcp_cudnn_t *c, int slot)
{
    (void)c, (void)slot;
    return (dcp_dense_engine_t){"cudnn", NULL, run_none};
}

dcp_status_t dcp_cudnn_probe(dcp_cudnn_t *c, const dcp_cudnn_key_t *key, dcp_cudnn_probe_t *out)
{
    (void)c, (void)key;
    memset(out, 0, sizeof *out);
    out->engine = -1;
    return no_cudnn();
}

dcp_status_t dcp_cudnn_check_graph(const dcp_cudnn_key_t *key, char **trace_out,
                                   int64_t *version_out)
{
    (void)key;
    if (trace_out) *trace_out = NULL;
    *version_out = 0;
    return no_cudnn();
}
