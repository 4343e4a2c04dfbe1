/* Builds without nvcc: no CUDA devices. */
#include "kernels/cuda/device.h"

int dcp_cuda_device_count(void)
{
    return 0;
}

int dcp_cuda_selftest(void)
{
    return 0;
}

void *dcp_cuda_alloc(int device, size_t bytes)
{
    (void)device, (void)bytes;
    return NULL;
}

void dcp_cuda_free(void *ptr)
{
    (void)ptr;
}
