/* CUDA devices visible to this process (0 without a driver, a device, or CUDA support in
 * this build). Safe to call from C. */
#ifndef DCP_KERNELS_CUDA_DEVICE_H
#define DCP_KERNELS_CUDA_DEVICE_H

#ifdef __cplusplus
extern "C" {
#endif

int dcp_cuda_device_count(void);

#ifdef __cplusplus
}
#endif

#endif
