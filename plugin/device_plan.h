/* A plan's kernel descriptors in device memory: what the CUDA kernels read. One upload per
 * plan, queued on the context's stream from a page-locked staging buffer (no host wait
 * unless the previous upload has not left the staging buffer yet), kept while the context
 * runs the same plan object (batches reuse it). */
#ifndef DCP_PLUGIN_DEVICE_PLAN_H
#define DCP_PLUGIN_DEVICE_PLAN_H

#include "include/base/descr.h"
#include "kernels/device.h"
#include "plugin/dev_blob.h"

typedef struct {
    uint64_t serial;     /* the plan uploaded (dcp_plan_t.serial); 0: none */
    dcp_dev_blob_t blob; /* one device allocation holding every array below */
    dcp_tile_group_t *groups;
    dcp_tile_t *tiles;
    dcp_merge_item_t *merges;
    dcp_merge_src_t *srcs;
    dcp_copy_item_t *copies;
    dcp_seq_info_t *seqs; /* every layer kind's, kind by kind; CUSTOM masks point at their
                             ranges inside mem */
    int32_t *rows;        /* host: per instruction of the plan, most rows of an item */
    int64_t rows_cap;
} dcp_dev_plan_t;

/* Makes d hold `plan`'s descriptors on `device` for the work queued on `stream` after the
 * call (a no-op when it already does). The caller has made sure no queued work still reads
 * d's previous descriptors when d's memory has to grow. */
dcp_status_t dcp_dev_plan_sync(dcp_dev_plan_t *d, const dcp_plan_t *plan, const dcp_device_t *dev,
                               int32_t device, void *stream);
void dcp_dev_plan_free(dcp_dev_plan_t *d, const dcp_device_t *dev);

#endif
