/* Builds without nvcc: no CUDA devices; every device call fails with DCP_ERR_UNSUPPORTED. */
#include "include/base/error.h"
#include "kernels/cuda/device.h"
#include "kernels/device.h"
#include "kernels/kernel.h"

static dcp_status_t no_cuda(const char *what)
{
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "%s: this build has no CUDA (nvcc was not found)",
                         what);
}

int dcp_cuda_built(void)
{
    return 0;
}

int dcp_cuda_device_count(void)
{
    return 0;
}

int dcp_cuda_selftest(void)
{
    return 0;
}

dcp_status_t dcp_cuda_set_device(int device)
{
    (void)device;
    return no_cuda("cuda set device");
}

void *dcp_cuda_alloc(int device, size_t bytes)
{
    (void)device, (void)bytes;
    return NULL;
}

void dcp_cuda_free(void *ptr)
{
    (void)ptr;
}

int dcp_cuda_is_device_ptr(const void *ptr, int device)
{
    (void)ptr, (void)device;
    return 0;
}

dcp_status_t dcp_cuda_stream_create(int device, void **stream_out)
{
    (void)device, (void)stream_out;
    return no_cuda("cuda stream");
}

void dcp_cuda_stream_destroy(void *stream)
{
    (void)stream;
}

dcp_status_t dcp_cuda_stream_sync(void *stream)
{
    (void)stream;
    return no_cuda("cuda stream");
}

void dcp_cuda_stream_drain(void *stream)
{
    (void)stream;
}

dcp_status_t dcp_cuda_memcpy(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)dst, (void)src, (void)bytes, (void)stream;
    return no_cuda("cuda copy");
}

dcp_status_t dcp_cuda_copy_bytes(void *dst, const void *src, size_t bytes, void *stream)
{
    (void)dst, (void)src, (void)bytes, (void)stream;
    return no_cuda("cuda copy");
}

void *dcp_cuda_host_alloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}

void dcp_cuda_host_free(void *ptr)
{
    (void)ptr;
}

dcp_status_t dcp_cuda_event_create(int device, void **event_out)
{
    (void)device, (void)event_out;
    return no_cuda("cuda event");
}

void dcp_cuda_event_destroy(void *event)
{
    (void)event;
}

dcp_status_t dcp_cuda_event_sync(void *event)
{
    (void)event;
    return no_cuda("cuda event");
}

dcp_status_t dcp_cuda_event_query(void *event, int *state_out)
{
    (void)event, (void)state_out;
    return no_cuda("cuda event");
}

dcp_status_t dcp_cuda_event_record(void *event, void *stream)
{
    (void)event, (void)stream;
    return no_cuda("cuda event");
}

dcp_status_t dcp_cuda_stream_wait(void *stream, void *event)
{
    (void)stream, (void)event;
    return no_cuda("cuda stream");
}

dcp_status_t dcp_cuda_spin(void *stream, double ms)
{
    (void)stream, (void)ms;
    return no_cuda("cuda spin");
}

int dcp_cuda_stream_idle(void *stream)
{
    (void)stream;
    return 1;
}

dcp_status_t dcp_cuda_graph_begin(void *stream)
{
    (void)stream;
    return no_cuda("cuda graph");
}

dcp_status_t dcp_cuda_graph_end(void *stream, void **graph_out)
{
    (void)stream, (void)graph_out;
    return no_cuda("cuda graph");
}

dcp_status_t dcp_cuda_graph_launch(void *graph, void *stream)
{
    (void)graph, (void)stream;
    return no_cuda("cuda graph");
}

void dcp_cuda_graph_destroy(void *graph)
{
    (void)graph;
}

int dcp_cuda_attn_warp_rows(void)
{
    return 32;
}

dcp_status_t dcp_cuda_fill_f32(float *dst, int64_t n, float value, void *stream)
{
    (void)dst, (void)n, (void)value, (void)stream;
    return no_cuda("cuda fill");
}

dcp_status_t dcp_cuda_timer_start(void *stream, void **timer_out)
{
    (void)stream, (void)timer_out;
    return no_cuda("cuda timer");
}

dcp_status_t dcp_cuda_timer_stop(void *timer, void *stream, double *ms_out)
{
    (void)timer, (void)stream, (void)ms_out;
    return no_cuda("cuda timer");
}

static dcp_status_t attn_none(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles)
{
    (void)env, (void)groups, (void)num_groups, (void)tiles;
    return no_cuda("cuda attention");
}

static dcp_status_t merge_none(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                               int64_t num_items, const dcp_merge_src_t *srcs)
{
    (void)env, (void)items, (void)num_items, (void)srcs;
    return no_cuda("cuda merge");
}

static dcp_status_t copy_none(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                              int64_t num_items)
{
    (void)env, (void)items, (void)num_items;
    return no_cuda("cuda copy");
}

static dcp_status_t attn_bwd_none(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                                  int64_t num_groups, const dcp_tile_t *tiles)
{
    (void)env, (void)groups, (void)num_groups, (void)tiles;
    return no_cuda("cuda attention backward");
}

static dcp_status_t delta_none(const dcp_kernel_env_t *env, int64_t rows)
{
    (void)env, (void)rows;
    return no_cuda("cuda delta");
}

static dcp_status_t accumulate_none(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                                    int64_t num_items)
{
    (void)env, (void)items, (void)num_items;
    return no_cuda("cuda accumulate");
}

static dcp_status_t delta_out_none(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                                   int64_t num_items)
{
    (void)env, (void)items, (void)num_items;
    return no_cuda("cuda delta out");
}

static dcp_status_t sinks_fwd_none(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                                   const float *sinks)
{
    (void)env, (void)tokens, (void)heads, (void)sinks;
    return no_cuda("cuda sinks");
}

static dcp_status_t sinks_bwd_none(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                                   const float *sinks, float *dsinks)
{
    (void)env, (void)tokens, (void)heads, (void)sinks, (void)dsinks;
    return no_cuda("cuda sinks backward");
}

static dcp_status_t max_none(const dcp_kernel_env_t *env, float *dst, const float *src, int32_t n)
{
    (void)env, (void)dst, (void)src, (void)n;
    return no_cuda("cuda max");
}

const dcp_kernels_t dcp_kernels_cuda = {
    .name = "cuda",
    .attn_fwd = attn_none,
    .merge = merge_none,
    .copy = copy_none,
    .attn_bwd = attn_bwd_none,
    .bwd_delta = delta_none,
    .accumulate = accumulate_none,
    .check_shape = dcp_cuda_shape_check,
    .delta_out = delta_out_none,
    .sinks_fwd = sinks_fwd_none,
    .sinks_bwd = sinks_bwd_none,
    .max_f32 = max_none,
};

static dcp_status_t set_device_none(int32_t device)
{
    return dcp_cuda_set_device(device);
}

static void *alloc_none(int32_t device, size_t bytes)
{
    return dcp_cuda_alloc(device, bytes);
}

static int addressable_none(const void *ptr, int32_t device)
{
    return dcp_cuda_is_device_ptr(ptr, device);
}

static dcp_status_t stream_create_none(int32_t device, void **stream_out)
{
    return dcp_cuda_stream_create(device, stream_out);
}

static dcp_status_t event_create_none(int32_t device, void **event_out)
{
    return dcp_cuda_event_create(device, event_out);
}

static void range_push_none(const char *name, int64_t payload)
{
    (void)name, (void)payload;
}

static void range_pop_none(void) {}

const dcp_device_t dcp_device_cuda = {
    .name = "cuda",
    .kernels = &dcp_kernels_cuda,
    .set_device = set_device_none,
    .alloc = alloc_none,
    .free = dcp_cuda_free,
    .host_alloc = dcp_cuda_host_alloc,
    .host_free = dcp_cuda_host_free,
    .addressable = addressable_none,
    .copy = dcp_cuda_copy_bytes,
    .fill_f32 = dcp_cuda_fill_f32,
    .stream_create = stream_create_none,
    .stream_destroy = dcp_cuda_stream_destroy,
    .stream_sync = dcp_cuda_stream_sync,
    .event_create = event_create_none,
    .event_destroy = dcp_cuda_event_destroy,
    .event_record = dcp_cuda_event_record,
    .stream_wait = dcp_cuda_stream_wait,
    .event_sync = dcp_cuda_event_sync,
    .timer_start = dcp_cuda_timer_start,
    .timer_stop = dcp_cuda_timer_stop,
    .event_query = dcp_cuda_event_query,
    .range_push = range_push_none,
    .range_pop = range_pop_none,
};
