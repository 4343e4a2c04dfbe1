/* The plan object: allocation, derived data (local rows, buffer sizes, statistics, the
 * fingerprint) and the local layout. partition/planner.c builds plans; plan_io.c loads them. */
#include "partition/plan/plan.h"

#include "include/base/error.h"
#include "partition/plan/wire.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_plan_alloc(dcp_plan_t **plan_out)
{
    DCP_CHECK(dcp_calloc(plan_out, 1, sizeof(dcp_plan_t), "plan"));
    (*plan_out)->num_kinds = 1;
    (*plan_out)->layers = 1;
    return DCP_OK;
}

void dcp_plan_destroy(dcp_plan_t *p)
{
    if (!p || p->root) return; /* a view belongs to its plan */
    dcp_plan_kinds_free(p);
    free(p->seqs);
    free(p->custom_ranges);
    free(p->blk_seq);
    free(p->blk_start);
    free(p->blk_len);
    free(p->blk_owner);
    free(p->work_elems);
    free(p->phase_step);
    free(p->prog_off);
    free(p->instrs);
    free(p->groups);
    free(p->tiles);
    free(p->merges);
    free(p->merge_srcs);
    free(p->copies);
    free(p->comm);
    free(p->blk_row);
    free(p->rank_tokens);
    free(p->buf_elems);
    free(p->rank_stats);
    free(p);
}

dcp_status_t dcp_plan_derive_rows(dcp_plan_t *p)
{
    free(p->blk_row);
    free(p->rank_tokens);
    p->blk_row = NULL;
    p->rank_tokens = NULL;
    DCP_CHECK(dcp_calloc(&p->blk_row, p->num_blocks, sizeof(int64_t), "plan rows"));
    DCP_CHECK(dcp_calloc(&p->rank_tokens, p->num_ranks, sizeof(int64_t), "plan rows"));
    for (int32_t t = 0; t < p->num_blocks; t++) {
        const int32_t r = p->blk_owner[t];
        p->blk_row[t] = p->rank_tokens[r];
        p->rank_tokens[r] += p->blk_len[t];
    }
    return DCP_OK;
}

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

/* Blocks are sorted by (sequence, start): consecutive owned blocks of one sequence that
 * touch form one span. Counts the spans, and writes them when `spans` is not NULL. */
static int32_t layout_spans(const dcp_plan_t *plan, int32_t rank, dcp_token_span_t *spans)
{
    int32_t n = 0;
    dcp_token_span_t cur = {-1, 0, 0};
    for (int32_t t = 0; t < plan->num_blocks; t++) {
        if (plan->blk_owner[t] != rank) continue;
        if (n > 0 && cur.seq == plan->blk_seq[t] && cur.start + cur.len == plan->blk_start[t]) {
            cur.len += plan->blk_len[t];
            continue;
        }
        if (n > 0 && spans) spans[n - 1] = cur;
        cur = (dcp_token_span_t){plan->blk_seq[t], plan->blk_start[t], plan->blk_len[t]};
        n++;
    }
    if (n > 0 && spans) spans[n - 1] = cur;
    return n;
}

dcp_status_t dcp_plan_local_layout(const dcp_plan_t *plan, int32_t rank, dcp_token_span_t *spans,
                                   int32_t capacity, int32_t *num_spans_out,
                                   int64_t *num_tokens_out)
{
    if (!plan) return dcp_set_error(DCP_ERR_INVALID_ARG, "plan is NULL");
    if (rank < 0 || rank >= plan->num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "rank = %d, must be in [0, %d)", rank,
                             plan->num_ranks);
    if (capacity < 0 || (capacity > 0 && !spans))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "spans is NULL with capacity = %d", capacity);
    const int32_t n = layout_spans(plan, rank, NULL);
    if (capacity > 0 && n > capacity)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "capacity = %d, rank %d has %d spans", capacity,
                             rank, n);
    if (capacity > 0) layout_spans(plan, rank, spans);
    if (num_spans_out) *num_spans_out = n;
    if (num_tokens_out) *num_tokens_out = plan->rank_tokens[rank];
    return DCP_OK;
}
