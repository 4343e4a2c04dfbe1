/* Row gather/scatter between buffers on the CPU: rows of one storage type are moved as
 * bytes; fp32 accumulator rows published into bf16/fp16 outputs are rounded to nearest
 * even on the way. */
#include "kernels/cpu.h"

#include "include/base/error.h"
#include "include/base/half.h"

#include <string.h>

dcp_status_t dcp_cpu_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                          int64_t num_items)
{
    if (env->dtype != DCP_DTYPE_FP32 && env->dtype != DCP_DTYPE_BF16 &&
        env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu copy: dtype %d", (int)env->dtype);
    for (int64_t i = 0; i < num_items; i++) {
        const dcp_copy_item_t *c = &items[i];
        const size_t ses = (size_t)dcp_buf_elem_bytes(c->src.buf, env->dtype),
                     des = (size_t)dcp_buf_elem_bytes(c->dst.buf, env->dtype);
        const char *src = (const char *)env->bufs[c->src.buf] + (size_t)c->src.off * ses;
        char *dst = (char *)env->bufs[c->dst.buf] + (size_t)c->dst.off * des;
        if (ses != des) { /* fp32 -> the plan's 2-byte type */
            for (int32_t r = 0; r < c->rows; r++)
                dcp_pack_half(env->dtype, (const float *)(src + (size_t)r * c->src.stride * ses),
                              (uint16_t *)(dst + (size_t)r * c->dst.stride * des), c->row_elems);
            continue;
        }
        const size_t row = (size_t)c->row_elems * ses;
        if (c->src.stride == c->row_elems && c->dst.stride == c->row_elems) {
            memcpy(dst, src, row * (size_t)c->rows);
            continue;
        }
        for (int32_t r = 0; r < c->rows; r++)
            memcpy(dst + (size_t)r * c->dst.stride * des, src + (size_t)r * c->src.stride * ses,
                   row);
    }
    return DCP_OK;
}
