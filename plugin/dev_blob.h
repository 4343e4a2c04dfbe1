/* Descriptors that GPU kernels read, uploaded as one device allocation: packed on the host in
 * a page-locked staging buffer and copied on the context's stream, so that an upload never
 * waits for the GPU unless the previous one has not left the staging buffer yet, or the
 * device memory must grow while queued work may still read it. Used by the plan's
 * descriptors (device_plan.c) and the attention engine's programs (attn_engine.c). */
#ifndef DCP_PLUGIN_DEV_BLOB_H
#define DCP_PLUGIN_DEV_BLOB_H

#include "kernels/device.h"

#include <stddef.h>

typedef struct {
    void *mem; /* device memory */
    size_t cap;
    void *staging; /* page-locked host copy of mem's contents */
    size_t staging_cap;
    void *staged; /* event: the last upload has read the staging buffer */
} dcp_dev_blob_t;

/* Page-locked staging of at least `total` bytes that no queued upload still reads. */
dcp_status_t dcp_dev_blob_staging(dcp_dev_blob_t *b, const dcp_device_t *dev, int32_t device,
                                  size_t total);

/* Device memory of at least `total` bytes; growing waits for the work queued on `stream` (the
 * first plans of a run, not every batch). */
dcp_status_t dcp_dev_blob_reserve(dcp_dev_blob_t *b, const dcp_device_t *dev, int32_t device,
                                  size_t total, void *stream);

/* The staging buffer's first `total` bytes into the device memory, queued on `stream`. */
dcp_status_t dcp_dev_blob_send(dcp_dev_blob_t *b, const dcp_device_t *dev, size_t total,
                               void *stream);

void dcp_dev_blob_free(dcp_dev_blob_t *b, const dcp_device_t *dev);

#endif
