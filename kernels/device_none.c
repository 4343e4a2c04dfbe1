/* Builds without nvcc have no CUDA devices. */
#include "kernels/cuda/device.h"

int dcp_cuda_device_count(void)
{
    return 0;
}
