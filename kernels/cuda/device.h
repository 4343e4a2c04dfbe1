/* CUDA devices, memory, streams and events as seen from C: the entries of the CUDA device
 * table (kernels/device.h) and the facts about the build and the machine that the tools
 * and tests need. Builds without nvcc link kernels/device_none.c instead, where there are
 * no devices and every call fails with DCP_ERR_UNSUPPORTED. */
#ifndef DCP_KERNELS_CUDA_DEVICE_H
#define DCP_KERNELS_CUDA_DEVICE_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this build has CUDA code (nvcc was found), 0 otherwise. */
int dcp_cuda_built(void);

/* 0 without a driver, a device, or CUDA in this build. */
int dcp_cuda_device_count(void);

/* Launches a kernel on device 0 that writes a pattern, copies it back and checks it:
 * 1 when the build's device code runs on this GPU, 0 otherwise (no device included). */
int dcp_cuda_selftest(void);

/* Makes `device` current for the calling thread. */
dcp_status_t dcp_cuda_set_device(int device);

/* Device memory on `device` (zeroed), NULL on failure or without CUDA; and its release. */
void *dcp_cuda_alloc(int device, size_t bytes);
void dcp_cuda_free(void *ptr);

/* Page-locked host memory (cudaMallocHost), NULL on failure; and its release. */
void *dcp_cuda_host_alloc(size_t bytes);
void dcp_cuda_host_free(void *ptr);

/* 1 when ptr is device (or managed) memory that kernels on `device` may address. */
int dcp_cuda_is_device_ptr(const void *ptr, int device);

/* A non-blocking stream on `device` (it does not wait for the legacy default stream). */
dcp_status_t dcp_cuda_stream_create(int device, void **stream_out);
void dcp_cuda_stream_destroy(void *stream);
/* Waits for the stream's work; reports the first asynchronous error of the device. */
dcp_status_t dcp_cuda_stream_sync(void *stream);
/* The same on failure paths: waits, records nothing. */
void dcp_cuda_stream_drain(void *stream);

/* bytes from src to dst (host or device, any device), queued on `stream`; memcpy also waits
 * for it (tools and tests). */
dcp_status_t dcp_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream);
dcp_status_t dcp_cuda_copy_bytes(void *dst, const void *src, size_t bytes, void *stream);

/* Events that order streams (no timing); record marks the work queued on `stream` so far,
 * wait makes later work on `stream` wait for the event's last record. */
dcp_status_t dcp_cuda_event_create(int device, void **event_out);
void dcp_cuda_event_destroy(void *event);
dcp_status_t dcp_cuda_event_record(void *event, void *stream);
dcp_status_t dcp_cuda_stream_wait(void *stream, void *event);
dcp_status_t dcp_cuda_event_sync(void *event);
/* Without waiting: *state_out 1 the event's last record is reached, 0 not yet, -1 it was
 * recorded in a stream capture (the table's event_query, kernels/device.h). */
dcp_status_t dcp_cuda_event_query(void *event, int *state_out);

/* n floats of dst set to value, queued on `stream`. */
dcp_status_t dcp_cuda_fill_f32(float *dst, int64_t n, float value, void *stream);

/* Tests: a kernel that spins for `ms` milliseconds on `stream`; whether a stream has no
 * work left (1) or still runs some (0). */
dcp_status_t dcp_cuda_spin(void *stream, double ms);
int dcp_cuda_stream_idle(void *stream);

/* Tests: CUDA-graph capture of the work a caller queues on `stream` (relaxed mode, so
 * other threads may keep using CUDA meanwhile): begin, then end into an instantiated
 * graph; launch queues one replay on a stream; destroy frees it (NULL: no-op). */
dcp_status_t dcp_cuda_graph_begin(void *stream);
dcp_status_t dcp_cuda_graph_end(void *stream, void **graph_out);
dcp_status_t dcp_cuda_graph_launch(void *graph, void *stream);
void dcp_cuda_graph_destroy(void *graph);

/* The attention forward's shape: query rows per warp, 32 (FlashAttention-2's 4 warps, the
 * default) or 16 (8 warps per CTA; $DCP_ATTN_WARP_ROWS=16), read once per process
 * (attn_fwd.cu; 32 without CUDA). */
int dcp_cuda_attn_warp_rows(void);

/* Timing: an event pair around work queued on a stream; milliseconds between them. */
dcp_status_t dcp_cuda_timer_start(void *stream, void **timer_out);
dcp_status_t dcp_cuda_timer_stop(void *timer, void *stream, double *ms_out);

#ifdef __cplusplus
}
#endif

#endif
