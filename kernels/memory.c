/* Buffers where a rank computes: the host or a GPU. */
#include "kernels/cuda/device.h"

#include <stdlib.h>

void *dcp_mem_alloc(int device, size_t bytes)
{
    if (device >= 0) return dcp_cuda_alloc(device, bytes);
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

void dcp_mem_free(int device, void *ptr)
{
    if (device >= 0)
        dcp_cuda_free(ptr);
    else
        free(ptr);
}
