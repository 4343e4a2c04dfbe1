#include "transport/select.h"

#include "include/base/error.h"

#include <string.h>

static const char *names[DCP_ENGINE_KIND_COUNT] = {"inproc", "ucx", "nccl"};

const char *dcp_engine_kind_name(dcp_engine_kind_t kind)
{
    return (unsigned)kind < DCP_ENGINE_KIND_COUNT ? names[kind] : "?";
}

dcp_status_t dcp_engine_kind_parse(const char *name, dcp_engine_kind_t *kind_out)
{
    for (int k = 0; k < DCP_ENGINE_KIND_COUNT; k++)
        if (name && !strcmp(name, names[k])) {
            *kind_out = (dcp_engine_kind_t)k;
            return DCP_OK;
        }
    return dcp_set_error(DCP_ERR_INVALID_ARG, "transport '%s': unknown (inproc, ucx, nccl)",
                         name ? name : "(null)");
}

/* Whether an engine can serve the link at all. */
static dcp_status_t check(const dcp_engine_env_t *env, dcp_link_class_t link, dcp_engine_kind_t k)
{
    const char *cls = link == DCP_LINK_INTRA ? "intra" : "inter";
    if (k == DCP_ENGINE_INPROC && !env->threads)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "transport %s = inproc: the ranks are not threads of one process",
                             cls);
    if (k == DCP_ENGINE_NCCL && !env->gpu_buffers)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "transport %s = %s: it moves device memory only",
                             cls, names[k]);
    if (k == DCP_ENGINE_NCCL && !env->have_nccl)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "transport %s = %s: not available here", cls,
                             names[k]);
    return DCP_OK;
}

dcp_status_t dcp_engine_choose(const dcp_engine_env_t *env, dcp_link_class_t link,
                               dcp_engine_kind_t *kind_out, const char **why_out)
{
    dcp_engine_kind_t k = DCP_ENGINE_UCX;
    const char *why;
    if (env->override[link]) {
        DCP_CHECK(dcp_engine_kind_parse(env->override[link], &k));
        why = "overridden";
    } else if (env->threads) {
        k = DCP_ENGINE_INPROC;
        why = "ranks are threads of one process";
    } else if (link == DCP_LINK_INTRA) {
        if (env->gpu_buffers && env->have_nccl) {
            k = DCP_ENGINE_NCCL;
            why = "GPUs of one node: NCCL (NVLink or PCIe peer-to-peer)";
        } else {
            k = DCP_ENGINE_UCX;
            why = "host memory in one node: UCX shared memory";
        }
    } else if (env->gpu_buffers && env->nic == DCP_NIC_EFA && env->have_nccl) {
        k = DCP_ENGINE_NCCL;
        why = "EFA: NCCL with its EFA plugin (UCX 1.13 has no EFA transport)";
    } else if (env->gpu_buffers && !env->ucx_cuda && env->have_nccl) {
        k = DCP_ENGINE_NCCL;
        why = "GPU buffers and a UCX built without CUDA: NCCL";
    } else {
        k = DCP_ENGINE_UCX;
        why = env->nic == DCP_NIC_ETH  ? "TCP: UCX"
              : env->nic == DCP_NIC_IB ? "InfiniBand/RoCE: UCX"
                                       : "EFA, host memory: UCX over TCP";
    }
    DCP_CHECK(check(env, link, k));
    *kind_out = k;
    if (why_out) *why_out = why;
    return DCP_OK;
}
