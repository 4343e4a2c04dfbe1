/* n-way LSE merge of partial outputs on the CPU: for every row and head, the destination
 * (O, LSE) and each source are combined with the weights of kernels/lse.h, which keep a NaN
 * partial (a row that met NaN or Inf inputs) NaN in the result. Sources are fp32, or the
 * plan dtype in the attention engine's staging (the dense engine writes O in it). */
#include "kernels/cpu.h"

#include "include/base/error.h"
#include "kernels/lse.h"

#include <stdlib.h>

dcp_status_t dcp_cpu_merge(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                           int64_t num_items, const dcp_merge_src_t *srcs)
{
    int32_t most = 0;
    for (int64_t i = 0; i < num_items; i++)
        most = items[i].num_src > most ? items[i].num_src : most;
    float *l, *w;
    DCP_CHECK(dcp_calloc(&l, most + 1, sizeof *l, "merge scratch"));
    dcp_status_t st = dcp_calloc(&w, most + 1, sizeof *w, "merge scratch");
    if (st != DCP_OK) {
        free(l);
        return st;
    }
    const int32_t d = dcp_env_dv(env), heads = env->q_heads; /* O rows */
    for (int64_t i = 0; i < num_items; i++) {
        const dcp_merge_item_t *m = &items[i];
        const dcp_merge_src_t *src = srcs + m->first_src;
        float *o = (float *)env->bufs[m->o.buf] + m->o.off;
        float *lse = (float *)env->bufs[m->lse.buf] + m->lse.off;
        for (int32_t r = 0; r < m->rows; r++)
            for (int32_t h = 0; h < heads; h++) {
                float *od = o + (size_t)r * m->o.stride + (size_t)h * d;
                float *ld = lse + (size_t)r * m->lse.stride + h;
                l[0] = *ld;
                for (int32_t k = 0; k < m->num_src; k++)
                    l[k + 1] = ((const float *)
                                    env->bufs[src[k].lse.buf])[src[k].lse.off +
                                                               (int64_t)r * src[k].lse.stride + h];
                *ld = dcp_lse_weights(l, m->num_src + 1, w);
                for (int32_t x = 0; x < d; x++) od[x] *= w[0];
                for (int32_t k = 0; k < m->num_src; k++) {
                    if (w[k + 1] == 0.0f) continue;
                    const dcp_dtype_t ty = dcp_buf_dtype(src[k].o.buf, env->dtype);
                    const void *ob = env->bufs[src[k].o.buf];
                    const int64_t os =
                        src[k].o.off + (int64_t)r * src[k].o.stride + (int64_t)h * d;
                    for (int32_t x = 0; x < d; x++) od[x] += w[k + 1] * dcp_cpu_load(ob, ty, os + x);
                }
            }
    }
    free(l);
    free(w);
    return DCP_OK;
}
