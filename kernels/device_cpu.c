/* The CPU as a place of computation: work runs inline on the calling thread, so streams
 * are NULL, events order nothing (program order already does) and timers read the clock.
 * Also the parsing of device names, shared by contexts and tools. */
#include "include/base/error.h"
#include "include/base/test_hook.h"
#include "kernels/cpu.h"
#include "kernels/cuda/device.h"
#include "kernels/device.h"

#include <stdlib.h>
#include <string.h>

static dcp_status_t cpu_set_device(int32_t device)
{
    (void)device;
    return DCP_OK;
}

/* The table's allocations are the library's too: they pass the allocation hook points of
 * include/base/test_hook.h with their caller as the site. */
static void *aligned_zeroed(size_t bytes, const void *site)
{
    const size_t size = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *p = DCP_TEST_ALLOC_FAILS(site) ? NULL : aligned_alloc(64, size);
    if (!p) return NULL;
    memset(p, 0, size);
    DCP_TEST_ALLOC_MADE(0, p, size, site);
    return p;
}

__attribute__((noinline)) static void *cpu_alloc(int32_t device, size_t bytes)
{
    (void)device;
    return aligned_zeroed(bytes, DCP_ALLOC_SITE());
}

__attribute__((noinline)) static void *cpu_host_alloc(size_t bytes)
{
    return aligned_zeroed(bytes, DCP_ALLOC_SITE());
}

/* Streams and events are NULL here, but their creation can fail on a GPU: in test builds the
 * hook may fail it, so that the callers' unwinding runs on the CPU too. */
static dcp_status_t handle_create(const char *what, const void *site, void **handle_out)
{
    if (DCP_TEST_ALLOC_FAILS(site))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "cpu: cannot create %s", what);
    *handle_out = NULL;
    return DCP_OK;
}

static void cpu_free(void *ptr)
{
    free(ptr);
}

static int cpu_addressable(const void *ptr, int32_t device)
{
    (void)device;
    return ptr != NULL;
}

static dcp_status_t cpu_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)stream;
    if (bytes) memmove(dst, src, bytes);
    return DCP_OK;
}

static dcp_status_t cpu_fill_f32(float *dst, int64_t n, float value, void *stream)
{
    (void)stream;
    if (value == 0.0f && n > 0) memset(dst, 0, (size_t)n * sizeof *dst);
    for (int64_t i = 0; value != 0.0f && i < n; i++) dst[i] = value;
    return DCP_OK;
}

__attribute__((noinline)) static dcp_status_t cpu_stream_create(int32_t device, void **stream_out)
{
    (void)device;
    return handle_create("a stream", DCP_ALLOC_SITE(), stream_out);
}

static void cpu_release(void *handle)
{
    (void)handle;
}

static dcp_status_t cpu_stream_sync(void *stream)
{
    (void)stream;
    return DCP_OK;
}

__attribute__((noinline)) static dcp_status_t cpu_event_create(int32_t device, void **event_out)
{
    (void)device;
    return handle_create("an event", DCP_ALLOC_SITE(), event_out);
}

static dcp_status_t cpu_event_record(void *event, void *stream)
{
    (void)event, (void)stream;
    return DCP_OK;
}

static dcp_status_t cpu_stream_wait(void *stream, void *event)
{
    (void)stream, (void)event;
    return DCP_OK;
}

typedef struct {
    double t0;
} cpu_timer_t;

static dcp_status_t cpu_timer_start(void *stream, void **timer_out)
{
    (void)stream;
    cpu_timer_t *t;
    DCP_CHECK(dcp_calloc(&t, 1, sizeof *t, "timer"));
    t->t0 = dcp_now();
    *timer_out = t;
    return DCP_OK;
}

static dcp_status_t cpu_timer_stop(void *timer, void *stream, double *ms_out)
{
    (void)stream;
    cpu_timer_t *t = timer;
    *ms_out = (dcp_now() - t->t0) * 1e3;
    free(t);
    return DCP_OK;
}

static dcp_status_t cpu_event_query(void *event, int *state_out)
{
    (void)event;
    *state_out = 1; /* the work before a record was done when the record returned */
    return DCP_OK;
}

/* No profiler ranges on the CPU: a call's work is on the calling thread, seen by any sampler. */
static void cpu_range_push(const char *name, int64_t payload)
{
    (void)name, (void)payload;
}

static void cpu_range_pop(void) {}

const dcp_device_t dcp_device_cpu = {
    .name = "cpu",
    .kernels = &dcp_kernels_cpu,
    .host_memory = 1,
    .set_device = cpu_set_device,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_free,
    .addressable = cpu_addressable,
    .copy = cpu_copy,
    .fill_f32 = cpu_fill_f32,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_release,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_release,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_stream_sync,
    .timer_start = cpu_timer_start,
    .timer_stop = cpu_timer_stop,
    .event_query = cpu_event_query,
    .range_push = cpu_range_push,
    .range_pop = cpu_range_pop,
};

dcp_status_t dcp_device_parse(const char *name, int32_t local_rank, const char *field,
                              int32_t *device_out)
{
    if (!name || strcmp(name, "cpu") == 0) {
        *device_out = -1;
        return DCP_OK;
    }
    long ordinal = -1;
    int ok = strncmp(name, "cuda", 4) == 0 && (name[4] == '\0' || name[4] == ':');
    if (ok && name[4] == ':') {
        char *end;
        ordinal = strtol(name + 5, &end, 10);
        ok = end != name + 5 && *end == '\0' && ordinal >= 0;
    }
    if (!ok)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s = \"%s\": expected \"cpu\", \"cuda\" or \"cuda:N\"", field, name);
    const int n = dcp_cuda_device_count();
    if (n == 0)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "%s = \"%s\": %s", field, name,
                             dcp_cuda_built() ? "no CUDA device is visible"
                                              : "this build has no CUDA (nvcc was not found)");
    if (ordinal >= n)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s = \"%s\": this process sees %d CUDA device(s)", field, name, n);
    *device_out = ordinal >= 0 ? (int32_t)ordinal : local_rank % n;
    return DCP_OK;
}
