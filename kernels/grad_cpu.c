/* The backward's row kernels on the CPU: its pre-pass delta = rowsum(dO * O) and the REDUCE
 * of partial gradients (fp32 rows added into fp32 rows). */
#include "kernels/cpu.h"

#include "include/base/error.h"

dcp_status_t dcp_cpu_bwd_delta(const dcp_kernel_env_t *env, int64_t rows)
{
    if (!dcp_cpu_dtype_ok(env->dtype))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: dtype %d", (int)env->dtype);
    if (rows < 0 || env->head_dim < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: %lld rows of %d elements",
                             (long long)rows, env->head_dim);
    if (rows == 0) return DCP_OK;
    const void *dout = env->bufs[DCP_BUF_DO], *o = env->bufs[DCP_BUF_O];
    float *delta = env->bufs[DCP_BUF_DELTA];
    if (!dout || !o || !delta)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: dO, O or delta buffer missing");
    const dcp_dtype_t dty = dcp_buf_dtype(DCP_BUF_DO, env->dtype),
                      oty = dcp_buf_dtype(DCP_BUF_O, env->dtype);
    const int64_t d = env->head_dim;
    for (int64_t i = 0; i < rows; i++) {
        float s = 0.0f;
        for (int64_t x = i * d; x < (i + 1) * d; x++)
            s += dcp_cpu_load(dout, dty, x) * dcp_cpu_load(o, oty, x);
        delta[i] = s;
    }
    return DCP_OK;
}

dcp_status_t dcp_cpu_accumulate(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                                int64_t num_items)
{
    for (int64_t i = 0; i < num_items; i++)
        if (!dcp_buf_is_fp32(items[i].src.buf) || !dcp_buf_is_fp32(items[i].dst.buf))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "cpu accumulate: item %lld adds buffer %d into %d; both must "
                                 "be fp32 buffers",
                                 (long long)i, items[i].src.buf, items[i].dst.buf);
    for (int64_t i = 0; i < num_items; i++) {
        const dcp_copy_item_t *c = &items[i];
        const float *src = (const float *)env->bufs[c->src.buf] + c->src.off;
        float *dst = (float *)env->bufs[c->dst.buf] + c->dst.off;
        for (int32_t r = 0; r < c->rows; r++) {
            const float *s = src + (int64_t)r * c->src.stride;
            float *t = dst + (int64_t)r * c->dst.stride;
            for (int32_t x = 0; x < c->row_elems; x++) t[x] += s[x];
        }
    }
    return DCP_OK;
}
