/* The plan object: allocation, destruction (its layer kinds' views too), local rows and the
 * local layout. partition/planner.c builds plans, plan_io.c loads them, plan_finish.c derives
 * the rest. */
#include "partition/plan/plan.h"

#include "include/base/error.h"

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

void dcp_plan_kinds_free(dcp_plan_t *p)
{
    if (!p->views) return;
    for (int32_t k = 1; k < p->num_kinds; k++) {
        dcp_plan_t *v = p->views[k];
        if (!v) continue;
        free(v->seqs);
        free(v->custom_ranges);
        free(v->rank_stats);
        free(v);
    }
    free(p->views);
    p->views = NULL;
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
