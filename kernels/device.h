/*
 * Where a rank computes, as one table of operations: memory, copies, fills, streams, events,
 * timers and profiler ranges, with the kernel table that runs there. The runtime and the tools call
 * through the table and never branch on the device (as UCX's perftest keeps one allocator
 * table per memory type).
 *
 * The CPU table (kernels/device_cpu.c) runs everything inline on the calling thread: its
 * streams are NULL, its events do nothing, a copy or fill is done when the call returns.
 * The CUDA table (kernels/cuda/device.cu; kernels/device_none.c without nvcc, where every
 * entry fails with DCP_ERR_UNSUPPORTED) queues work on streams and orders streams with
 * events, so code written against the table is correct on both: work queued on a stream
 * after event_record(e, s) on another stream and stream_wait(t, e) runs after what s held.
 * A stream, an event or a timer that cannot be made for lack of memory is DCP_ERR_NO_MEMORY,
 * as a failed allocation is; any other refusal of the runtime is DCP_ERR_SYSTEM.
 */
#ifndef DCP_KERNELS_DEVICE_H
#define DCP_KERNELS_DEVICE_H

#include "kernels/kernel.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name; /* "cpu", "cuda" */
    const dcp_kernels_t *kernels;
    int32_t host_memory; /* 1: the kernels read host memory (the plan's own descriptors) */
    /* Makes the calling thread's work go to `device` (CUDA: cudaSetDevice). */
    dcp_status_t (*set_device)(int32_t device);
    /* Zeroed memory of `bytes` (64-byte aligned on the host), NULL on failure; and release. */
    void *(*alloc)(int32_t device, size_t bytes);
    void (*free)(void *ptr);
    /* Page-locked host memory for copies that stay queued after the call (plain host
     * memory on the CPU); and release. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *ptr);
    /* 1 when the rank's kernels may address ptr (host memory on the CPU). */
    int (*addressable)(const void *ptr, int32_t device);
    /* bytes from src to dst, queued on `stream` (done at return on the CPU). */
    dcp_status_t (*copy)(void *dst, const void *src, size_t bytes, void *stream);
    /* n floats of dst set to value, queued on `stream`. */
    dcp_status_t (*fill_f32)(float *dst, int64_t n, float value, void *stream);
    /* A stream that does not wait for the legacy default stream; and release. */
    dcp_status_t (*stream_create)(int32_t device, void **stream_out);
    void (*stream_destroy)(void *stream);
    /* Waits for the work queued on `stream`; reports the device's first asynchronous
     * error. NULL: the legacy default stream. */
    dcp_status_t (*stream_sync)(void *stream);
    /* An ordering point (no timing); and release. */
    dcp_status_t (*event_create)(int32_t device, void **event_out);
    void (*event_destroy)(void *event);
    /* The event marks the work queued on `stream` so far. */
    dcp_status_t (*event_record)(void *event, void *stream);
    /* Work queued on `stream` later runs after the event's last record. */
    dcp_status_t (*stream_wait)(void *stream, void *event);
    /* Waits on the host for the event's last record. */
    dcp_status_t (*event_sync)(void *event);
    /* Elapsed time of the work queued on a stream between start and stop, in ms (wall time
     * on the CPU). stop waits for the stream and frees the timer. */
    dcp_status_t (*timer_start)(void *stream, void **timer_out);
    dcp_status_t (*timer_stop)(void *timer, void *stream, double *ms_out);
    /* Whether the event's last record has been reached, without waiting: *state_out 1 yes
     * (also for an event never recorded), 0 not yet, -1 it was recorded while its stream was
     * captured into a CUDA graph (it marks no work that runs: nothing to wait for). The CPU's
     * is always 1. */
    dcp_status_t (*event_query)(void *event, int *state_out);
    /* A named range of the calling thread's work, for Nsight Systems (NVTX on CUDA; nothing
     * on the CPU): `name` outlives the call (a literal), `payload` >= 0 is shown with it (-1:
     * none). Ranges nest; each push has its pop. Nothing is allocated, and without a tool
     * attached NVTX's calls return at once. */
    void (*range_push)(const char *name, int64_t payload);
    void (*range_pop)(void);
} dcp_device_t;

extern const dcp_device_t dcp_device_cpu;
extern const dcp_device_t dcp_device_cuda;

/* The table of a place of computation: -1 the CPU, else a CUDA ordinal. */
static inline const dcp_device_t *dcp_device_of(int32_t device)
{
    return device >= 0 ? &dcp_device_cuda : &dcp_device_cpu;
}

/* A place of computation by name: NULL or "cpu" -> -1; "cuda" -> local_rank % count;
 * "cuda:N" -> N. Errors name `field`; DCP_ERR_UNSUPPORTED where no GPU is usable. */
dcp_status_t dcp_device_parse(const char *name, int32_t local_rank, const char *field,
                              int32_t *device_out);

#ifdef __cplusplus
}
#endif

#endif
