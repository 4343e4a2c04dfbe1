#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

extern "C" int dcp_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: clear the sticky error */
        return 0;
    }
    return n;
}
