#include "kernels/cuda/device.h"

#include <cuda_runtime.h>

extern "C" int dcp_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: clear the error */
        return 0;
    }
    return n;
}

static __global__ void pattern_kernel(int *out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 3 * i + 1;
}

extern "C" int dcp_cuda_selftest(void)
{
    enum { N = 4096 };
    static int host[N];
    int *dev = NULL;
    if (dcp_cuda_device_count() < 1 || cudaSetDevice(0) != cudaSuccess) return 0;
    if (cudaMalloc(&dev, N * sizeof(int)) != cudaSuccess) return 0;
    pattern_kernel<<<(N + 255) / 256, 256>>>(dev, N);
    int ok = cudaGetLastError() == cudaSuccess &&
             cudaMemcpy(host, dev, N * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    for (int i = 0; ok && i < N; i++) ok = host[i] == 3 * i + 1;
    cudaFree(dev);
    return ok;
}

extern "C" void *dcp_cuda_alloc(int device, size_t bytes)
{
    void *p = NULL;
    if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (cudaMemset(p, 0, bytes) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

extern "C" void dcp_cuda_free(void *ptr)
{
    if (ptr) cudaFree(ptr);
}
