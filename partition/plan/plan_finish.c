/* A plan made final: its rows, buffer sizes, fingerprint and serial derived, its views synced,
 * its statistics computed; a plan read from bytes checked first (plan_check.c). The last step
 * of making a plan (partition/planner.c) and of loading one (plan_io.c). */
#include "partition/plan/plan.h"

#include "include/base/error.h"
#include "partition/plan/wire.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Caller buffers follow from the local token count; work buffers were planned. */
static dcp_status_t derive_buffers(dcp_plan_t *p)
{
    free(p->buf_elems);
    p->buf_elems = NULL;
    DCP_CHECK(dcp_calloc(&p->buf_elems, (int64_t)p->num_ranks * DCP_BUF_COUNT, sizeof(int64_t),
                         "plan buffers"));
    const int64_t hq = p->shape.num_heads, hkv = p->shape.num_kv_heads;
    for (int32_t r = 0; r < p->num_ranks; r++) {
        int64_t *e = p->buf_elems + (int64_t)r * DCP_BUF_COUNT;
        const int64_t n = p->rank_tokens[r];
        /* rows of every query head (Q, O, dO, dQ, LSE, delta) or of every KV head */
        static const int q_like[] = {DCP_BUF_Q,   DCP_BUF_O,       DCP_BUF_DO,
                                     DCP_BUF_DQ,  DCP_BUF_ACC_O,   DCP_BUF_ACC_DQ,
                                     DCP_BUF_LSE, DCP_BUF_ACC_LSE, DCP_BUF_DELTA};
        static const int kv_like[] = {DCP_BUF_K,  DCP_BUF_V,      DCP_BUF_DK,
                                      DCP_BUF_DV, DCP_BUF_ACC_DK, DCP_BUF_ACC_DV};
        for (int i = 0; i < 9; i++) e[q_like[i]] = n * hq * dcp_plan_head_width(p, q_like[i]);
        for (int i = 0; i < 6; i++) e[kv_like[i]] = n * hkv * dcp_plan_head_width(p, kv_like[i]);
        for (int b = DCP_BUF_STAGE; b < DCP_BUF_COUNT; b++)
            e[b] = p->work_elems[(int64_t)r * DCP_BUF_COUNT + b];
    }
    return DCP_OK;
}

dcp_status_t dcp_plan_finish(dcp_plan_t *p, int validate)
{
    if (validate) DCP_CHECK(dcp_plan_check_inputs(p));
    p->qpg = p->shape.num_heads / p->opts.head_blocks;
    p->kvpg = p->shape.num_kv_heads / p->opts.head_blocks;
    if (!p->blk_row) DCP_CHECK(dcp_plan_derive_rows(p)); /* the planner derived them already */
    DCP_CHECK(derive_buffers(p));
    const uint32_t a = dcp_crc32c(p->blk_owner, (size_t)p->num_blocks * sizeof *p->blk_owner);
    const uint32_t b = dcp_crc32c(p->comm, (size_t)p->num_comm * sizeof *p->comm);
    p->fingerprint = a ^ (b * 0x9E3779B1u);
    static atomic_uint_fast64_t serials = 1;
    p->serial = atomic_fetch_add(&serials, 1);
    dcp_plan_kinds_sync(p);
    if (validate) DCP_CHECK(dcp_plan_check_programs(p));
    for (int32_t r = 0; r < p->num_ranks && !validate; r++)
        if (dcp_plan_work_bytes(p, r) > DCP_PLAN_MAX_WORK_BYTES)
            return dcp_set_error(DCP_ERR_CAPACITY,
                                 "plan: rank %d would need %.1f GiB of work buffers, more than "
                                 "the 64 GiB (2^36 bytes) a plan may hold; spread the batch over "
                                 "more ranks or plan fewer tokens per batch",
                                 r, (double)dcp_plan_work_bytes(p, r) / (1 << 30));
    return dcp_plan_kinds_stats(p);
}
