/* The backward's row kernels on the CPU: its pre-pass delta = rowsum(dO * O), the REDUCE
 * of partial gradients (fp32 rows, or the engine's plan-dtype rows, added into fp32 rows) and
 * the attention engine's O from delta (kernel.h, dcp_delta_out_item_t). */
#include "kernels/cpu.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

dcp_status_t dcp_cpu_bwd_delta(const dcp_kernel_env_t *env, int64_t rows)
{
    if (!dcp_cpu_dtype_ok(env->dtype))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: dtype %d", (int)env->dtype);
    if (rows < 0 || dcp_env_dv(env) < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: %lld rows of %d elements",
                             (long long)rows, dcp_env_dv(env));
    if (rows == 0) return DCP_OK;
    const void *dout = env->bufs[DCP_BUF_DO], *o = env->bufs[DCP_BUF_O];
    float *delta = env->bufs[DCP_BUF_DELTA];
    if (!dout || !o || !delta)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta: dO, O or delta buffer missing");
    const dcp_dtype_t dty = dcp_buf_dtype(DCP_BUF_DO, env->dtype),
                      oty = dcp_buf_dtype(DCP_BUF_O, env->dtype);
    const int64_t d = dcp_env_dv(env); /* O and dO rows */
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
        if ((!dcp_buf_is_fp32(items[i].src.buf) && items[i].src.buf != DCP_BUF_SEG) ||
            !dcp_buf_is_fp32(items[i].dst.buf))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "cpu accumulate: item %lld adds buffer %d into %d; the "
                                 "destination must be fp32, the source fp32 or engine staging",
                                 (long long)i, items[i].src.buf, items[i].dst.buf);
    int32_t width = 0;
    for (int64_t i = 0; i < num_items; i++)
        if (items[i].row_elems > width) width = items[i].row_elems;
    float *acc = NULL;
    DCP_CHECK(dcp_calloc(&acc, width > 0 ? width : 1, sizeof *acc, "cpu accumulate"));
    for (int64_t i = 0; i < num_items;) {
        /* one sum: the items [i, j) that write the same rows, their sources added in order,
         * then added to the destination (descr.h) */
        int64_t j = i + 1;
        while (j < num_items && dcp_copy_same_dst(&items[j - 1], &items[j])) j++;
        const dcp_copy_item_t *c = &items[i];
        float *dst = (float *)env->bufs[c->dst.buf] + c->dst.off;
        for (int32_t r = 0; r < c->rows; r++) {
            for (int64_t m = i; m < j; m++) {
                const dcp_copy_item_t *e = &items[m];
                const int64_t s = e->src.off + (int64_t)r * e->src.stride;
                const void *src = env->bufs[e->src.buf];
                const dcp_dtype_t ty = dcp_buf_dtype(e->src.buf, env->dtype);
                if (ty == DCP_DTYPE_FP32) {
                    const float *f = (const float *)src + s;
                    for (int32_t x = 0; x < c->row_elems; x++)
                        acc[x] = m == i ? f[x] : acc[x] + f[x];
                } else {
                    for (int32_t x = 0; x < c->row_elems; x++) {
                        const float v = dcp_cpu_load(src, ty, s + x);
                        acc[x] = m == i ? v : acc[x] + v;
                    }
                }
            }
            float *t = dst + (int64_t)r * c->dst.stride;
            for (int32_t x = 0; x < c->row_elems; x++) t[x] += acc[x];
        }
        i = j;
    }
    free(acc);
    return DCP_OK;
}

/* o = delta dO / |dO|^2 per (row, head), computed as (delta / m) u / |u|^2 with u = dO / m,
 * m = max |dO|: no square underflows or overflows whatever dO's scale. */
dcp_status_t dcp_cpu_delta_out(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                               int64_t num_items)
{
    if (!dcp_cpu_dtype_ok(env->dtype))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu delta out: dtype %d", (int)env->dtype);
    const int32_t d = dcp_env_dv(env), heads = env->q_heads; /* O and dO rows */
    for (int64_t i = 0; i < num_items; i++) {
        const dcp_delta_out_item_t *it = &items[i];
        const dcp_dtype_t gty = dcp_buf_dtype(it->dout.buf, env->dtype),
                          oty = dcp_buf_dtype(it->o.buf, env->dtype);
        const void *g = env->bufs[it->dout.buf];
        void *o = env->bufs[it->o.buf];
        const float *delta = (const float *)env->bufs[it->delta.buf] + it->delta.off;
        for (int32_t r = 0; r < it->rows; r++)
            for (int32_t h = 0; h < heads; h++) {
                const int64_t gr = it->dout.off + (int64_t)r * it->dout.stride + (int64_t)h * d;
                const int64_t orow = it->o.off + (int64_t)r * it->o.stride + (int64_t)h * d;
                float m = 0.0f, n2 = 0.0f;
                for (int32_t x = 0; x < d; x++) m = fmaxf(m, fabsf(dcp_cpu_load(g, gty, gr + x)));
                for (int32_t x = 0; x < d; x++) {
                    const float u = m > 0.0f ? dcp_cpu_load(g, gty, gr + x) / m : 0.0f;
                    n2 += u * u;
                }
                const float dl = delta[(int64_t)r * it->delta.stride + h];
                const float f = m > 0.0f && n2 > 0.0f ? dl / m / n2 : 0.0f;
                for (int32_t x = 0; x < d; x++) {
                    const float u = m > 0.0f ? dcp_cpu_load(g, gty, gr + x) / m : 0.0f;
                    const float v = f * u;
                    if (oty == DCP_DTYPE_FP32)
                        ((float *)o)[orow + x] = v;
                    else
                        ((uint16_t *)o)[orow + x] = dcp_half_from_f32(oty, v);
                }
            }
    }
    return DCP_OK;
}
