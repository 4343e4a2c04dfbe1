/* Uploads a plan's descriptors (tile groups, tiles, merges, copies, sequences and custom
 * mask ranges) into one device allocation, packed on the host first so that one copy moves
 * them all. */
#include "plugin/device_plan.h"

#include "include/base/error.h"
#include "partition/plan/plan.h"

#include <stdlib.h>
#include <string.h>

enum { ALIGN = 256 };

static size_t up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

typedef struct {
    const void *src;
    size_t bytes;
    size_t off;
} piece_t;

/* Most rows of any item of each kernel instruction: the launch's grid height. */
static dcp_status_t instr_rows(dcp_dev_plan_t *d, const dcp_plan_t *p)
{
    DCP_CHECK(dcp_reserve(&d->rows, &d->rows_cap, p->num_instrs, sizeof *d->rows, "device plan"));
    for (int64_t i = 0; i < p->num_instrs; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        int32_t m = 1;
        for (int64_t k = in->first; k < in->first + in->count; k++) {
            /* a backward REDUCE sums copy items */
            const int merge = in->op == DCP_OP_REDUCE && in->arg == DCP_PASS_FWD;
            const int copy = in->op == DCP_OP_COPY || (in->op == DCP_OP_REDUCE && !merge);
            const int32_t r = in->op == DCP_OP_ATTN ? p->groups[k].q_len
                              : merge               ? p->merges[k].rows
                              : copy                ? p->copies[k].rows
                                                    : 1;
            m = r > m ? r : m;
        }
        d->rows[i] = m;
    }
    return DCP_OK;
}

/* Sequence s of layer kind k: its view's. */
static const dcp_seq_info_t *kind_seq(const dcp_plan_t *p, int32_t k, int32_t s)
{
    return &(p->views ? p->views[k] : p)->seqs[s];
}

dcp_status_t dcp_dev_plan_sync(dcp_dev_plan_t *d, const dcp_plan_t *plan, const dcp_device_t *dev,
                               int32_t device, void *stream)
{
    const dcp_plan_t *p = dcp_plan_root(plan); /* every layer kind: seqs kind by kind */
    if (d->serial == p->serial) return DCP_OK;
    const int64_t nseq = (int64_t)p->num_kinds * p->num_seqs;
    enum { GROUPS, TILES, MERGES, SRCS, COPIES, SEQS, FIXED };
    piece_t pc[FIXED] = {
        {p->groups, (size_t)p->num_groups * sizeof *p->groups, 0},
        {p->tiles, (size_t)p->num_tiles * sizeof *p->tiles, 0},
        {p->merges, (size_t)p->num_merges * sizeof *p->merges, 0},
        {p->merge_srcs, (size_t)p->num_merge_srcs * sizeof *p->merge_srcs, 0},
        {p->copies, (size_t)p->num_copies * sizeof *p->copies, 0},
        {NULL, (size_t)nseq * sizeof *p->seqs, 0}, /* filled kind by kind below */
    };
    size_t total = 0;
    for (int i = 0; i < FIXED; i++) {
        pc[i].off = total;
        total += up(pc[i].bytes);
    }
    const size_t ranges_at = total; /* custom ranges follow, one run per such sequence */
    for (int64_t i = 0; i < nseq; i++) {
        const dcp_seq_info_t *q = kind_seq(p, (int32_t)(i / p->num_seqs), i % p->num_seqs);
        if (q->mask.kind == DCP_MASK_CUSTOM) total += up((size_t)q->len * 4 * sizeof(int32_t));
    }
    if (total == 0) total = ALIGN;

    d->serial = 0; /* until the copy below is queued */
    DCP_CHECK(dcp_dev_blob_staging(&d->blob, dev, device, total));
    char *host = d->blob.staging;
    memset(host, 0, total);
    for (int i = 0; i < FIXED; i++)
        if (pc[i].src && pc[i].bytes) memcpy(host + pc[i].off, pc[i].src, pc[i].bytes);
    for (int32_t k = 0; k < p->num_kinds; k++)
        memcpy(host + pc[SEQS].off + (size_t)k * p->num_seqs * sizeof *p->seqs, kind_seq(p, k, 0),
               (size_t)p->num_seqs * sizeof *p->seqs);
    dcp_status_t st = instr_rows(d, p);
    if (st == DCP_OK) st = dcp_dev_blob_reserve(&d->blob, dev, device, total, stream);
    if (st == DCP_OK) {
        char *mem = d->blob.mem;
        dcp_seq_info_t *seqs = (dcp_seq_info_t *)(host + pc[SEQS].off);
        size_t at = ranges_at;
        for (int64_t i = 0; i < nseq; i++) {
            if (seqs[i].mask.kind != DCP_MASK_CUSTOM) continue;
            const size_t n = (size_t)seqs[i].len * 4 * sizeof(int32_t);
            memcpy(host + at, kind_seq(p, (int32_t)(i / p->num_seqs), i % p->num_seqs)->mask.ranges,
                   n);
            seqs[i].mask.ranges = (const int32_t *)(mem + at);
            at += up(n);
        }
        st = dcp_dev_blob_send(&d->blob, dev, total, stream);
    }
    if (st == DCP_OK) {
        char *mem = d->blob.mem;
        d->groups = (dcp_tile_group_t *)(mem + pc[GROUPS].off);
        d->tiles = (dcp_tile_t *)(mem + pc[TILES].off);
        d->merges = (dcp_merge_item_t *)(mem + pc[MERGES].off);
        d->srcs = (dcp_merge_src_t *)(mem + pc[SRCS].off);
        d->copies = (dcp_copy_item_t *)(mem + pc[COPIES].off);
        d->seqs = (dcp_seq_info_t *)(mem + pc[SEQS].off);
        d->serial = p->serial;
    }
    return st;
}

void dcp_dev_plan_free(dcp_dev_plan_t *d, const dcp_device_t *dev)
{
    dcp_dev_blob_free(&d->blob, dev);
    free(d->rows);
    memset(d, 0, sizeof *d);
}
