#include "plugin/cli/support/mem.h"

#include "kernels/cuda/device.h"
#include "kernels/device.h"

void *dcpt_mem_alloc(int32_t device, size_t bytes)
{
    return dcp_device_of(device)->alloc(device, bytes);
}

void dcpt_mem_free(int32_t device, void *ptr)
{
    if (ptr) dcp_device_of(device)->free(ptr);
}

dcp_status_t dcpt_mem_copy(int32_t device, void *dst, const void *src, size_t bytes)
{
    const dcp_device_t *d = dcp_device_of(device);
    const dcp_status_t st = d->copy(dst, src, bytes, NULL); /* the legacy default stream */
    return st == DCP_OK ? d->stream_sync(NULL) : st;
}

dcp_status_t dcpt_mem_fill_f32(int32_t device, float *dst, int64_t n, float value)
{
    const dcp_device_t *d = dcp_device_of(device);
    const dcp_status_t st = d->fill_f32(dst, n, value, NULL);
    return st == DCP_OK ? d->stream_sync(NULL) : st;
}

int dcpt_gpu_count(void)
{
    return dcp_cuda_device_count();
}

int dcpt_cuda_built(void)
{
    return dcp_cuda_built();
}

dcp_status_t dcpt_gpu_select(int32_t device)
{
    return dcp_device_of(device)->set_device(device);
}
