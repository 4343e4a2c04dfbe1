/* CUDA devices visible to this process, and a launch check of this build's device code.
 * Both are callable from C; builds without nvcc link kernels/device_none.c instead. */
#ifndef DCP_KERNELS_CUDA_DEVICE_H
#define DCP_KERNELS_CUDA_DEVICE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 without a driver, a device, or CUDA in this build. */
int dcp_cuda_device_count(void);

/* Device memory on `device` (zeroed), NULL on failure or without CUDA; and its release. */
void *dcp_cuda_alloc(int device, size_t bytes);
void dcp_cuda_free(void *ptr);

/* Launches a kernel on device 0 that writes a pattern, copies it back and checks it:
 * 1 when the build's device code runs on this GPU, 0 otherwise (no device included). */
int dcp_cuda_selftest(void);

#ifdef __cplusplus
}
#endif

#endif
