/*
 * A CUDA runtime that answers "device 0 is an H100 (sm_90)" on a machine without a GPU, so that
 * cudnn-frontend's graph validation (which reads cudaDeviceProp.major) and its lowering to
 * cuDNN backend descriptors run here. Only the queries the frontend makes while building an
 * operation graph are answered; everything else stays with the real libcudart (or fails).
 *
 * Used two ways (see README.md): LD_PRELOAD=libcuda_shim.so for a program linked against
 * libcudart, or as a file named libcudart.so.13 first on LD_LIBRARY_PATH for a frontend built
 * with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (that frontend dlopens libcudart.so.12/.13 and
 * looks symbols up in that handle only, so a preloaded library is never asked).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void shim_note(const char *what)
{
    if (getenv("CUDA_SHIM_TRACE")) fprintf(stderr, "cuda_shim: %s\n", what);
}

cudaError_t cudaGetDeviceCount(int *count)
{
    shim_note("cudaGetDeviceCount -> 1");
    if (!count) return cudaErrorInvalidValue;
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    shim_note("cudaGetDevice -> 0");
    if (!device) return cudaErrorInvalidValue;
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    shim_note("cudaSetDevice");
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

/* The H100 80GB HBM3 (SXM5) figures NVIDIA publishes for sm_90. */
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    shim_note("cudaGetDeviceProperties -> H100 sm_90");
    if (!prop) return cudaErrorInvalidValue;
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "NVIDIA H100 80GB HBM3");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->totalGlobalMem = (size_t)79 * 1024 * 1024 * 1024 + (size_t)647 * 1024 * 1024;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->memoryBusWidth = 5120;
    prop->totalConstMem = 64 * 1024;
    prop->textureAlignment = 512;
    prop->unifiedAddressing = 1;
    prop->concurrentKernels = 1;
    prop->pciBusID = 0x19;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    shim_note("cudaDeviceGetAttribute");
    if (!value) return cudaErrorInvalidValue;
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor:
        *value = 9;
        return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
        *value = 0;
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *value = 132;
        return cudaSuccess;
    default:
        return cudaErrorNotSupported;
    }
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}
cudaError_t cudaPeekAtLastError(void)
{
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
    return error == cudaSuccess ? "no error" : "cuda_shim: not available without a GPU";
}

const char *cudaGetErrorName(cudaError_t error)
{
    return error == cudaSuccess ? "cudaSuccess" : "cudaErrorNotSupported";
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v) return cudaErrorInvalidValue;
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v) return cudaErrorInvalidValue;
    *v = CUDART_VERSION;
    return cudaSuccess;
}
