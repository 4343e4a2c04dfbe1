/* One device allocation of descriptors and its page-locked staging (dev_blob.h). */
#include "plugin/dev_blob.h"

#include "include/base/error.h"

#include <string.h>

dcp_status_t dcp_dev_blob_staging(dcp_dev_blob_t *b, const dcp_device_t *dev, int32_t device,
                                  size_t total)
{
    if (!b->staged) DCP_CHECK(dev->event_create(device, &b->staged));
    if (b->staging) DCP_CHECK(dev->event_sync(b->staged));
    if (total <= b->staging_cap) return DCP_OK;
    dev->host_free(b->staging);
    b->staging_cap = 0;
    if (!(b->staging = dev->host_alloc(total)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "device descriptors: %zu bytes of staging", total);
    b->staging_cap = total;
    return DCP_OK;
}

dcp_status_t dcp_dev_blob_reserve(dcp_dev_blob_t *b, const dcp_device_t *dev, int32_t device,
                                  size_t total, void *stream)
{
    if (total <= b->cap) return DCP_OK;
    DCP_CHECK(dev->stream_sync(stream));
    dev->free(b->mem);
    b->cap = 0;
    if (!(b->mem = dev->alloc(device, total)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "device descriptors: %zu bytes on GPU %d", total,
                             device);
    b->cap = total;
    return DCP_OK;
}

dcp_status_t dcp_dev_blob_send(dcp_dev_blob_t *b, const dcp_device_t *dev, size_t total,
                               void *stream)
{
    DCP_CHECK(dev->copy(b->mem, b->staging, total, stream));
    return dev->event_record(b->staged, stream);
}

void dcp_dev_blob_free(dcp_dev_blob_t *b, const dcp_device_t *dev)
{
    if (b->staged) (void)dev->event_sync(b->staged);
    dev->event_destroy(b->staged);
    dev->host_free(b->staging);
    dev->free(b->mem);
    memset(b, 0, sizeof *b);
}
