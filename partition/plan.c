/* The planning pipeline (blocks -> placement -> schedule -> programs) and the plan object. */
#include "partition/plan.h"

#include "include/base/error.h"
#include "partition/place.h"
#include "partition/program.h"
#include "partition/wire.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

void dcp_plan_options_default(dcp_plan_options_t *opts_out)
{
    if (!opts_out) return;
    *opts_out = (dcp_plan_options_t){
        .block_size = 1024,
        .head_blocks = 1,
        .divisions = 4,
        .strategy = DCP_STRATEGY_METIS,
        .eps_inter = 0.05,
        .eps_intra = 0.05,
        .mem_cap_bytes = 0,
        .seed = 0,
        .expansion = DCP_EXPAND_CLIQUE,
        .net_cap = 12,
        .refine = 1,
        .comm_schedule = DCP_COMM_DIVISIONS,
        .coalesce = 1,
    };
}

/* Largest division count accepted; more would only add empty launches. */
#define DCP_MAX_DIVISIONS 1024

static dcp_status_t check_options(const dcp_plan_options_t *o)
{
    if (o->divisions < 1 || o->divisions > DCP_MAX_DIVISIONS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.divisions = %d, must be in [1, %d]",
                             o->divisions, DCP_MAX_DIVISIONS);
    if (!dcp_strategy_ops(o->strategy) && o->strategy != DCP_STRATEGY_AUTO)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.strategy = %d is not a strategy",
                             (int)o->strategy);
    if (!(o->eps_inter >= 0) || !isfinite(o->eps_inter))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.eps_inter = %g, must be >= 0",
                             o->eps_inter);
    if (!(o->eps_intra >= 0) || !isfinite(o->eps_intra))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.eps_intra = %g, must be >= 0",
                             o->eps_intra);
    if (o->mem_cap_bytes < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.mem_cap_bytes = %lld, must be >= 0",
                             (long long)o->mem_cap_bytes);
    if (o->expansion != DCP_EXPAND_CLIQUE && o->expansion != DCP_EXPAND_STAR)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.expansion = %d is not a dcp_expansion_t",
                             (int)o->expansion);
    if (o->net_cap < 0 || o->net_cap == 1 || o->net_cap > 4096)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.net_cap = %d, must be 0 (no cap) or in [2, 4096]",
                             o->net_cap);
    if (o->refine != 0 && o->refine != 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.refine = %d, must be 0 or 1", o->refine);
    if (o->comm_schedule != DCP_COMM_DIVISIONS && o->comm_schedule != DCP_COMM_ROUNDS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.comm_schedule = %d is not a dcp_comm_schedule_t",
                             (int)o->comm_schedule);
    if (o->coalesce < 1 || o->coalesce > 65536)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.coalesce = %d, must be in [1, 65536]",
                             o->coalesce);
    return DCP_OK;
}

dcp_status_t dcp_plan_alloc(dcp_plan_t **plan_out)
{
    return dcp_calloc(plan_out, 1, sizeof(dcp_plan_t), "plan");
}

void dcp_plan_destroy(dcp_plan_t *p)
{
    if (!p) return;
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

static dcp_status_t copy_i32(int32_t **dst, const int32_t *src, int64_t n, const char *what)
{
    DCP_CHECK(dcp_calloc(dst, n, sizeof(int32_t), what));
    if (n > 0) memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return DCP_OK;
}

/* Copies the inputs and the token blocks with their owners into the plan. */
static dcp_status_t plan_take_inputs(dcp_plan_t *p, const dcp_blocks_t *b,
                                     const dcp_placement_t *pl)
{
    p->shape = b->shape;
    p->qpg = b->qpg;
    p->kvpg = b->kvpg;
    p->num_seqs = b->num_seqs;
    DCP_CHECK(dcp_calloc(&p->seqs, b->num_seqs, sizeof *p->seqs, "plan sequences"));
    memcpy(p->seqs, b->seqs, (size_t)b->num_seqs * sizeof *p->seqs);
    DCP_CHECK(copy_i32(&p->custom_ranges, b->custom_ranges, b->custom_ints, "plan ranges"));
    p->custom_ints = b->custom_ints;
    for (int32_t s = 0; s < p->num_seqs; s++)
        if (p->seqs[s].mask.kind == DCP_MASK_CUSTOM)
            p->seqs[s].mask.ranges = p->custom_ranges + (b->seqs[s].mask.ranges - b->custom_ranges);
    p->num_blocks = b->num_blocks;
    DCP_CHECK(copy_i32(&p->blk_seq, b->blk_seq, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_start, b->blk_start, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_len, b->blk_len, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_owner, pl->blk_owner, b->num_blocks, "plan blocks"));
    return DCP_OK;
}

static dcp_status_t plan_build(dcp_plan_t *p, const dcp_batch_t *batch,
                               const dcp_attn_shape_t *shape, const dcp_cluster_t *cluster)
{
    const dcp_strategy_ops_t *ops = dcp_strategy_ops(p->opts.strategy);
    dcp_blocks_t b = {0};
    dcp_placement_t pl = {0};
    dcp_schedule_t s = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_blocks_init(&b, batch, shape, p->opts.block_size, p->opts.head_blocks), st,
                   out);
    DCP_CHECK_GOTO(dcp_blocks_cut(&b, ops->chunks(cluster->num_ranks)), st, out);
    DCP_CHECK_GOTO(dcp_blocks_tiles(&b), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&pl.blk_owner, b.num_blocks, sizeof(int32_t), "placement"), st, out);
    DCP_CHECK_GOTO(
        dcp_calloc(&pl.comp_exec, b.num_tiles * b.head_blocks, sizeof(int32_t), "placement"), st,
        out);
    const dcp_place_in_t in = {&b, cluster, &p->opts};
    DCP_CHECK_GOTO(ops->place(&in, &pl), st, out);
    DCP_CHECK_GOTO(dcp_schedule_build(&b, &pl, cluster->num_ranks, p->opts.divisions,
                                      p->opts.comm_schedule, p->opts.coalesce, &s),
                   st, out);
    p->fallback = pl.fallback;
    DCP_CHECK_GOTO(plan_take_inputs(p, &b, &pl), st, out);
    DCP_CHECK_GOTO(dcp_plan_derive_rows(p), st, out);
    DCP_CHECK_GOTO(dcp_program_emit(p, &b, &pl, &s), st, out);
    DCP_CHECK_GOTO(dcp_plan_finish(p, 0), st, out);
out:
    dcp_schedule_release(&s);
    free(pl.blk_owner);
    free(pl.comp_exec);
    dcp_blocks_release(&b);
    return st;
}

static dcp_status_t plan_one(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    dcp_plan_t *p;
    DCP_CHECK(dcp_plan_alloc(&p));
    p->num_ranks = cluster->num_ranks;
    p->num_nodes = cluster->num_nodes;
    p->devs_per_node = cluster->devs_per_node;
    p->perf = cluster->perf;
    p->opts = *o;
    const dcp_status_t st = plan_build(p, batch, shape, cluster);
    if (st != DCP_OK) {
        dcp_plan_destroy(p);
        return st;
    }
    *plan_out = p;
    return DCP_OK;
}

/* DCP_STRATEGY_AUTO: every concrete strategy at block sizes B/2, B and 2B; the plan with
 * the lowest predicted time wins (ties: the earlier candidate). */
static dcp_status_t plan_auto(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                              dcp_plan_t **plan_out)
{
    const int32_t blocks[3] = {o->block_size / 2 > 0 ? o->block_size / 2 : 1, o->block_size,
                               o->block_size <= INT32_MAX / 2 ? 2 * o->block_size : o->block_size};
    dcp_plan_t *best = NULL;
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
        for (int b = 0; b < 3; b++) {
            if (b > 0 && blocks[b] == blocks[b - 1]) continue;
            dcp_plan_options_t c = *o;
            c.strategy = (dcp_strategy_t)s;
            c.block_size = blocks[b];
            dcp_plan_t *p = NULL;
            const dcp_status_t st = plan_one(batch, shape, &c, cluster, &p);
            if (st == DCP_ERR_CAPACITY) continue; /* this candidate does not fit: others may */
            if (st != DCP_OK) {
                dcp_plan_destroy(best);
                return st;
            }
            if (!best || p->stats.predicted_ms < best->stats.predicted_ms) {
                dcp_plan_destroy(best);
                best = p;
            } else {
                dcp_plan_destroy(p);
            }
        }
    if (!best)
        return dcp_set_error(DCP_ERR_CAPACITY,
                             "options.mem_cap_bytes = %lld: no strategy fits the batch",
                             (long long)o->mem_cap_bytes);
    *plan_out = best;
    return DCP_OK;
}

dcp_status_t dcp_plan_create(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    const double t0 = dcp_now();
    if (!cluster || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", cluster ? "plan_out" : "cluster");
    dcp_plan_options_t o;
    if (opts)
        o = *opts;
    else
        dcp_plan_options_default(&o);
    DCP_CHECK(check_options(&o));
    dcp_plan_t *p = NULL;
    DCP_CHECK(o.strategy == DCP_STRATEGY_AUTO ? plan_auto(batch, shape, &o, cluster, &p)
                                              : plan_one(batch, shape, &o, cluster, &p));
    p->stats.plan_ms = (dcp_now() - t0) * 1e3;
    *plan_out = p;
    return DCP_OK;
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
    const int64_t hq = p->shape.num_heads, hkv = p->shape.num_kv_heads, d = p->shape.head_dim;
    for (int32_t r = 0; r < p->num_ranks; r++) {
        int64_t *e = p->buf_elems + (int64_t)r * DCP_BUF_COUNT;
        const int64_t n = p->rank_tokens[r];
        e[DCP_BUF_Q] = e[DCP_BUF_O] = e[DCP_BUF_ACC_O] = n * hq * d;
        e[DCP_BUF_K] = e[DCP_BUF_V] = n * hkv * d;
        e[DCP_BUF_LSE] = e[DCP_BUF_ACC_LSE] = n * hq;
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
    DCP_CHECK(dcp_plan_derive_rows(p));
    DCP_CHECK(derive_buffers(p));
    if (validate) DCP_CHECK(dcp_plan_check_programs(p));
    const uint32_t a = dcp_crc32c(p->blk_owner, (size_t)p->num_blocks * sizeof *p->blk_owner);
    const uint32_t b = dcp_crc32c(p->comm, (size_t)p->num_comm * sizeof *p->comm);
    p->fingerprint = a ^ (b * 0x9E3779B1u);
    static atomic_uint_fast64_t serials = 1;
    p->serial = atomic_fetch_add(&serials, 1);
    return dcp_plan_derive_stats(p);
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
