/*
 * Memory where a rank computes, for the tools' own buffers (transfer benches, copy rates):
 * host memory (device -1) or a GPU's, through the library's device table, so that one code
 * path serves both. Copies and fills are done when the call returns.
 */
#ifndef DCPT_SUPPORT_MEM_H
#define DCPT_SUPPORT_MEM_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

/* Zeroed memory of `bytes` on `device` (-1: the host, 64-byte aligned), NULL on failure; and
 * release (NULL: no-op). */
void *dcpt_mem_alloc(int32_t device, size_t bytes);
void dcpt_mem_free(int32_t device, void *ptr);

/* bytes from src to dst, either of them memory of `device` or the host's. */
dcp_status_t dcpt_mem_copy(int32_t device, void *dst, const void *src, size_t bytes);

/* n floats of dst (memory of `device`) set to value. */
dcp_status_t dcpt_mem_fill_f32(int32_t device, float *dst, int64_t n, float value);

/* The GPUs this process sees (0 without CUDA); whether this build has CUDA; and makes the
 * calling thread's GPU work go to `device`. */
int dcpt_gpu_count(void);
int dcpt_cuda_built(void);
dcp_status_t dcpt_gpu_select(int32_t device);

#endif
