/* Row gather/scatter between buffers on the CPU (fp32 plans: every element is 4 bytes). */
#include "kernels/cpu.h"

#include "include/base/error.h"

#include <string.h>

dcp_status_t dcp_cpu_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                          int64_t num_items)
{
    if (env->dtype != DCP_DTYPE_FP32)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "cpu copy: dtype %d, the CPU runs fp32",
                             (int)env->dtype);
    for (int64_t i = 0; i < num_items; i++) {
        const dcp_copy_item_t *c = &items[i];
        const float *src = (const float *)env->bufs[c->src.buf] + c->src.off;
        float *dst = (float *)env->bufs[c->dst.buf] + c->dst.off;
        const size_t row = (size_t)c->row_elems * sizeof(float);
        if (c->src.stride == c->row_elems && c->dst.stride == c->row_elems) {
            memcpy(dst, src, row * (size_t)c->rows);
            continue;
        }
        for (int32_t r = 0; r < c->rows; r++)
            memcpy(dst + (size_t)r * c->dst.stride, src + (size_t)r * c->src.stride, row);
    }
    return DCP_OK;
}
