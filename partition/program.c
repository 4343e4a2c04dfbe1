#include "partition/program.h"

#include "include/base/error.h"
#include "partition/slots.h"

#include <stdlib.h>

/* Slot allocators per work buffer, indexed by dcp_buf_t - DCP_BUF_STAGE. */
enum { SLOT_STAGE, SLOT_RQ, SLOT_RKV, SLOT_PART, SLOT_COUNT };

typedef struct {
    dcp_plan_t *p;
    const dcp_blocks_t *b;
    const dcp_placement_t *pl;
    const dcp_schedule_t *s;
    int64_t cap_instrs, cap_groups, cap_tiles, cap_merges, cap_srcs, cap_copies, cap_comm;

    /* per transfer: slot offset at the sender and at the receiver */
    int64_t *src_off, *dst_off;
    /* transfers touching each rank, in global (step) order: CSR */
    int64_t *touch_off;
    int32_t *touch;

    /* current rank */
    int32_t rank;
    int64_t next_touch; /* first transfer of the rank not yet launched */
    uint8_t *launched;  /* [T + 1] */
    dcp_slots_t slots[SLOT_COUNT];
} emitter_t;

/* ---- small builders ---------------------------------------------------------------------- */

static dcp_status_t push_instr(emitter_t *e, int32_t op, int32_t arg, int64_t first, int64_t n)
{
    dcp_plan_t *p = e->p;
    DCP_CHECK(
        dcp_reserve(&p->instrs, &e->cap_instrs, p->num_instrs + 1, sizeof *p->instrs, "program"));
    p->instrs[p->num_instrs++] = (dcp_instr_t){op, arg, first, n};
    return DCP_OK;
}

static dcp_status_t push_copy(emitter_t *e, dcp_view_t src, dcp_view_t dst, int32_t rows,
                              int32_t row_elems)
{
    dcp_plan_t *p = e->p;
    DCP_CHECK(
        dcp_reserve(&p->copies, &e->cap_copies, p->num_copies + 1, sizeof *p->copies, "copies"));
    p->copies[p->num_copies++] = (dcp_copy_item_t){src, dst, rows, row_elems};
    return DCP_OK;
}

static dcp_status_t push_comm(emitter_t *e, int32_t peer, int32_t send, int32_t x, int32_t buf,
                              int64_t off, int64_t elems)
{
    dcp_plan_t *p = e->p;
    DCP_CHECK(dcp_reserve(&p->comm, &e->cap_comm, p->num_comm + 1, sizeof *p->comm, "comm ops"));
    p->comm[p->num_comm++] = (dcp_comm_op_t){peer, send, x, buf, off, elems};
    return DCP_OK;
}

static dcp_view_t view(int32_t buf, int64_t off, int64_t stride)
{
    return (dcp_view_t){off, (int32_t)stride, buf};
}

/* ---- views of blocks ---------------------------------------------------------------------- */

static int64_t xfer_elems(const emitter_t *e, const dcp_transfer_t *x)
{
    return dcp_blocks_xfer_elems(e->b, (dcp_xfer_kind_t)x->kind, e->b->blk_len[x->block]);
}

/* Caller Q (or the ACC_O accumulator) rows of block t, head group h. */
static dcp_view_t q_rows(const emitter_t *e, int32_t buf, int32_t t, int32_t h)
{
    const int64_t hq = e->p->shape.num_heads, d = e->p->shape.head_dim;
    return view(buf, (e->p->blk_row[t] * hq + (int64_t)h * e->b->qpg) * d, hq * d);
}

static dcp_view_t kv_rows(const emitter_t *e, int32_t buf, int32_t t, int32_t h)
{
    const int64_t hkv = e->p->shape.num_kv_heads, d = e->p->shape.head_dim;
    return view(buf, (e->p->blk_row[t] * hkv + (int64_t)h * e->b->kvpg) * d, hkv * d);
}

static dcp_view_t acc_lse_rows(const emitter_t *e, int32_t t, int32_t h)
{
    const int64_t hq = e->p->shape.num_heads;
    return view(DCP_BUF_ACC_LSE, e->p->blk_row[t] * hq + (int64_t)h * e->b->qpg, hq);
}

/* A partial-output slot: O rows, then LSE rows. */
static void part_views(const emitter_t *e, int64_t off, int32_t len, dcp_view_t *o, dcp_view_t *lse)
{
    const int64_t w = (int64_t)e->b->qpg * e->p->shape.head_dim;
    *o = view(DCP_BUF_PART, off, w);
    *lse = view(DCP_BUF_PART, off + len * w, e->b->qpg);
}

/* ---- steps ---------------------------------------------------------------------------------- */

static dcp_status_t emit_launch(emitter_t *e, int32_t phase)
{
    const dcp_schedule_t *s = e->s;
    const int32_t r = e->rank;
    const int64_t end = e->touch_off[r + 1];
    int64_t first = e->next_touch, last = first;
    while (last < end && s->xfers[e->touch[last]].phase == phase) last++;
    e->next_touch = last;
    e->launched[phase] = first < last;
    if (first == last) return DCP_OK;

    const int64_t d = e->p->shape.head_dim;
    const int64_t copy0 = e->p->num_copies;
    for (int64_t i = first; i < last; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &s->xfers[xi];
        if (x->src != r || x->kind == DCP_XFER_PART) continue;
        DCP_CHECK(dcp_slots_alloc(&e->slots[SLOT_STAGE], xfer_elems(e, x), &e->src_off[xi]));
        const int32_t len = e->b->blk_len[x->block];
        if (x->kind == DCP_XFER_Q) {
            const int64_t w = e->b->qpg * d;
            DCP_CHECK(push_copy(e, q_rows(e, DCP_BUF_Q, x->block, x->head_group),
                                view(DCP_BUF_STAGE, e->src_off[xi], w), len, (int32_t)w));
        } else {
            const int64_t w = e->b->kvpg * d;
            DCP_CHECK(push_copy(e, kv_rows(e, DCP_BUF_K, x->block, x->head_group),
                                view(DCP_BUF_STAGE, e->src_off[xi], w), len, (int32_t)w));
            DCP_CHECK(push_copy(e, kv_rows(e, DCP_BUF_V, x->block, x->head_group),
                                view(DCP_BUF_STAGE, e->src_off[xi] + len * w, w), len, (int32_t)w));
        }
    }
    if (e->p->num_copies > copy0)
        DCP_CHECK(push_instr(e, DCP_OP_COPY, 0, copy0, e->p->num_copies - copy0));

    static const int32_t recv_buf[3] = {DCP_BUF_RQ, DCP_BUF_RKV, DCP_BUF_PART};
    static const int32_t recv_slot[3] = {SLOT_RQ, SLOT_RKV, SLOT_PART};
    const int64_t comm0 = e->p->num_comm;
    for (int64_t i = first; i < last; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &s->xfers[xi];
        const int64_t n = xfer_elems(e, x);
        if (x->src == r) {
            const int32_t buf = x->kind == DCP_XFER_PART ? DCP_BUF_PART : DCP_BUF_STAGE;
            DCP_CHECK(push_comm(e, x->dst, 1, xi, buf, e->src_off[xi], n));
        } else {
            DCP_CHECK(dcp_slots_alloc(&e->slots[recv_slot[x->kind]], n, &e->dst_off[xi]));
            DCP_CHECK(push_comm(e, x->src, 0, xi, recv_buf[x->kind], e->dst_off[xi], n));
        }
    }
    return push_instr(e, DCP_OP_COMM_LAUNCH, phase, comm0, e->p->num_comm - comm0);
}

/* Waits for a phase and frees the send-side slots it used. */
static dcp_status_t emit_wait(emitter_t *e, int32_t phase)
{
    if (!e->launched[phase]) return DCP_OK;
    DCP_CHECK(push_instr(e, DCP_OP_COMM_WAIT, phase, 0, 0));
    for (int64_t i = e->touch_off[e->rank]; i < e->next_touch; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &e->s->xfers[xi];
        if (x->phase != phase || x->src != e->rank) continue;
        const int slot = x->kind == DCP_XFER_PART ? SLOT_PART : SLOT_STAGE;
        DCP_CHECK(dcp_slots_free(&e->slots[slot], e->src_off[xi], xfer_elems(e, x)));
    }
    return DCP_OK;
}

/* Query and output views of a group (tq, h) in division d. */
static dcp_status_t group_io(emitter_t *e, int32_t tq, int32_t h, int32_t div, dcp_tile_group_t *g)
{
    const int32_t r = e->rank;
    if (e->pl->blk_owner[tq] == r) {
        g->q = q_rows(e, DCP_BUF_Q, tq, h);
        g->o = q_rows(e, DCP_BUF_ACC_O, tq, h);
        g->lse = acc_lse_rows(e, tq, h);
        g->accumulate = 1; /* accumulators start as O = 0, LSE = -inf */
        return DCP_OK;
    }
    const int32_t xq = dcp_schedule_find(e->s, r, DCP_XFER_Q, tq, h);
    const int32_t xp = dcp_schedule_find(e->s, r, DCP_XFER_PART, tq, h);
    if (xq < 0 || xp < 0)
        return dcp_set_error(DCP_ERR_INTERNAL, "program: rank %d lacks Q or partial of block %d", r,
                             tq);
    g->q = view(DCP_BUF_RQ, e->dst_off[xq], (int64_t)e->b->qpg * e->p->shape.head_dim);
    const dcp_transfer_t *x = &e->s->xfers[xp];
    g->accumulate = x->first_div != div;
    if (!g->accumulate)
        DCP_CHECK(dcp_slots_alloc(&e->slots[SLOT_PART], xfer_elems(e, x), &e->src_off[xp]));
    part_views(e, e->src_off[xp], e->b->blk_len[tq], &g->o, &g->lse);
    return DCP_OK;
}

static dcp_status_t push_tile(emitter_t *e, int64_t t, int32_t h)
{
    dcp_plan_t *p = e->p;
    const int32_t kv = e->b->tile_kv[t];
    dcp_tile_t tile = {.kv_block = kv,
                       .kv_pos = e->b->blk_start[kv],
                       .kv_len = e->b->blk_len[kv],
                       .full = e->b->tile_full[t]};
    if (e->pl->blk_owner[kv] == e->rank) {
        tile.k = kv_rows(e, DCP_BUF_K, kv, h);
        tile.v = kv_rows(e, DCP_BUF_V, kv, h);
    } else {
        const int32_t xk = dcp_schedule_find(e->s, e->rank, DCP_XFER_KV, kv, h);
        if (xk < 0)
            return dcp_set_error(DCP_ERR_INTERNAL, "program: rank %d lacks KV of block %d", e->rank,
                                 kv);
        const int64_t w = (int64_t)e->b->kvpg * p->shape.head_dim;
        tile.k = view(DCP_BUF_RKV, e->dst_off[xk], w);
        tile.v = view(DCP_BUF_RKV, e->dst_off[xk] + tile.kv_len * w, w);
    }
    DCP_CHECK(dcp_reserve(&p->tiles, &e->cap_tiles, p->num_tiles + 1, sizeof *p->tiles, "tiles"));
    p->tiles[p->num_tiles++] = tile;
    return DCP_OK;
}

/* Division `div` of the current rank: its blocks are order[c0..c1), sorted by (q block,
 * head, kv block), so each run of equal (q block, head) is one tile group. */
static dcp_status_t emit_attn(emitter_t *e, int32_t div, int64_t c0, int64_t c1)
{
    dcp_plan_t *p = e->p;
    const int32_t hb = e->b->head_blocks;
    const int64_t group0 = p->num_groups;
    for (int64_t i = c0; i < c1;) {
        const int64_t c = e->s->order[i];
        const int32_t tq = e->b->tile_q[c / hb], h = (int32_t)(c % hb);
        dcp_tile_group_t g = {.q_block = tq,
                              .head_group = h,
                              .seq = e->b->blk_seq[tq],
                              .q_pos = e->b->blk_start[tq],
                              .q_len = e->b->blk_len[tq],
                              .first_tile = (int32_t)p->num_tiles};
        DCP_CHECK(group_io(e, tq, h, div, &g));
        for (; i < c1; i++) {
            const int64_t ci = e->s->order[i];
            if (e->b->tile_q[ci / hb] != tq || ci % hb != h) break;
            DCP_CHECK(push_tile(e, ci / hb, h));
        }
        if (p->num_tiles > INT32_MAX)
            return dcp_set_error(DCP_ERR_UNSUPPORTED, "program: more than 2^31 - 1 tiles");
        g.num_tiles = (int32_t)(p->num_tiles - g.first_tile);
        DCP_CHECK(dcp_reserve(&p->groups, &e->cap_groups, p->num_groups + 1, sizeof *p->groups,
                              "tile groups"));
        p->groups[p->num_groups++] = g;
    }
    if (p->num_groups > group0)
        DCP_CHECK(push_instr(e, DCP_OP_ATTN, 0, group0, p->num_groups - group0));
    return DCP_OK;
}

/* Received inputs whose last reader was division `div` are dead once it has run. */
static dcp_status_t free_dead_inputs(emitter_t *e, int32_t div)
{
    for (int64_t i = e->touch_off[e->rank]; i < e->next_touch; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &e->s->xfers[xi];
        if (x->dst != e->rank || x->kind == DCP_XFER_PART || x->last_div != div) continue;
        DCP_CHECK(dcp_slots_free(&e->slots[x->kind == DCP_XFER_Q ? SLOT_RQ : SLOT_RKV],
                                 e->dst_off[xi], xfer_elems(e, x)));
    }
    return DCP_OK;
}

/* Partial outputs received in the last step, merged into the accumulators per (block, head).
 * Transfers are ordered by (step, src, dst, kind, block, head), so the receives of one
 * (block, head) are not adjacent: sort them first. */
typedef struct {
    int32_t block, head, src, xfer;
} part_in_t;

static int part_in_cmp(const void *a, const void *b)
{
    const part_in_t *x = a, *y = b;
    if (x->block != y->block) return x->block < y->block ? -1 : 1;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    return (x->src > y->src) - (x->src < y->src);
}

static dcp_status_t emit_reduce(emitter_t *e)
{
    dcp_plan_t *p = e->p;
    const int32_t r = e->rank;
    int64_t n = 0;
    for (int64_t i = e->touch_off[r]; i < e->touch_off[r + 1]; i++) {
        const dcp_transfer_t *x = &e->s->xfers[e->touch[i]];
        n += x->dst == r && x->kind == DCP_XFER_PART;
    }
    if (n == 0) return DCP_OK;
    part_in_t *in;
    DCP_CHECK(dcp_calloc(&in, n, sizeof *in, "reduce"));
    n = 0;
    for (int64_t i = e->touch_off[r]; i < e->touch_off[r + 1]; i++) {
        const dcp_transfer_t *x = &e->s->xfers[e->touch[i]];
        if (x->dst == r && x->kind == DCP_XFER_PART)
            in[n++] = (part_in_t){x->block, x->head_group, x->src, e->touch[i]};
    }
    qsort(in, (size_t)n, sizeof *in, part_in_cmp);
    dcp_status_t st = DCP_OK;
    const int64_t merge0 = p->num_merges;
    for (int64_t i = 0; i < n && st == DCP_OK;) {
        const int32_t t = in[i].block, h = in[i].head;
        dcp_merge_item_t m = {.o = q_rows(e, DCP_BUF_ACC_O, t, h),
                              .lse = acc_lse_rows(e, t, h),
                              .rows = e->b->blk_len[t],
                              .first_src = (int32_t)p->num_merge_srcs};
        for (; i < n && in[i].block == t && in[i].head == h; i++) {
            const int32_t xi = in[i].xfer;
            DCP_CHECK_GOTO(dcp_reserve(&p->merge_srcs, &e->cap_srcs, p->num_merge_srcs + 1,
                                       sizeof *p->merge_srcs, "merge sources"),
                           st, out);
            dcp_merge_src_t *src = &p->merge_srcs[p->num_merge_srcs++];
            part_views(e, e->dst_off[xi], m.rows, &src->o, &src->lse);
            DCP_CHECK_GOTO(dcp_slots_free(&e->slots[SLOT_PART], e->dst_off[xi],
                                          xfer_elems(e, &e->s->xfers[xi])),
                           st, out);
        }
        m.num_src = (int32_t)(p->num_merge_srcs - m.first_src);
        DCP_CHECK_GOTO(
            dcp_reserve(&p->merges, &e->cap_merges, p->num_merges + 1, sizeof *p->merges, "merges"),
            st, out);
        p->merges[p->num_merges++] = m;
    }
    st = push_instr(e, DCP_OP_REDUCE, 0, merge0, p->num_merges - merge0);
out:
    free(in);
    return st;
}

static dcp_status_t emit_copy_out(emitter_t *e, int64_t tokens)
{
    if (tokens == 0) return DCP_OK;
    const int64_t hq = e->p->shape.num_heads, w = hq * e->p->shape.head_dim;
    const int64_t copy0 = e->p->num_copies;
    DCP_CHECK(push_copy(e, view(DCP_BUF_ACC_O, 0, w), view(DCP_BUF_O, 0, w), (int32_t)tokens,
                        (int32_t)w));
    DCP_CHECK(push_copy(e, view(DCP_BUF_ACC_LSE, 0, hq), view(DCP_BUF_LSE, 0, hq), (int32_t)tokens,
                        (int32_t)hq));
    return push_instr(e, DCP_OP_COPY, 0, copy0, 2);
}

/* Every phase of a step, launched and waited one after the other. */
static dcp_status_t run_step_blocking(emitter_t *e, int32_t step)
{
    for (int32_t ph = e->s->phase_first[step]; ph < e->s->phase_first[step + 1]; ph++) {
        DCP_CHECK(emit_launch(e, ph));
        DCP_CHECK(emit_wait(e, ph));
    }
    return DCP_OK;
}

/* Divisions: step d+1 is launched as one phase before step d is waited for, so its
 * transfers run while division d-1 finishes and division d computes. */
static dcp_status_t emit_divisions(emitter_t *e, const int64_t *div_end)
{
    const dcp_schedule_t *s = e->s;
    const int32_t ndiv = s->num_divs;
    for (int32_t ph = s->phase_first[0]; ph < s->phase_first[1]; ph++)
        DCP_CHECK(emit_launch(e, ph));
    int64_t c = s->rank_off[e->rank];
    for (int32_t d = 0; d < ndiv; d++) {
        if (d + 1 < ndiv)
            for (int32_t ph = s->phase_first[d + 1]; ph < s->phase_first[d + 2]; ph++)
                DCP_CHECK(emit_launch(e, ph));
        for (int32_t ph = s->phase_first[d]; ph < s->phase_first[d + 1]; ph++)
            DCP_CHECK(emit_wait(e, ph));
        DCP_CHECK(emit_attn(e, d, c, div_end[d]));
        DCP_CHECK(free_dead_inputs(e, d));
        c = div_end[d];
    }
    return run_step_blocking(e, ndiv);
}

/* Where to cut [c0, c1) into n pieces of about equal FLOPs, at tile-group boundaries. */
static void split_division(const emitter_t *e, int64_t c0, int64_t c1, int32_t n, int64_t *cut)
{
    const int32_t hb = e->b->head_blocks;
    double total = 0;
    for (int64_t i = c0; i < c1; i++)
        total += (double)dcp_blocks_comp_flops(e->b, e->s->order[i] / hb);
    double done = 0;
    int32_t j = 1;
    cut[0] = c0;
    for (int64_t i = c0; i < c1 && j < n; i++) {
        const int64_t c = e->s->order[i];
        const int boundary =
            i > c0 && (e->b->tile_q[c / hb] != e->b->tile_q[e->s->order[i - 1] / hb] ||
                       c % hb != e->s->order[i - 1] % hb);
        if (boundary && done >= total * j / n) cut[j++] = i;
        done += (double)dcp_blocks_comp_flops(e->b, c / hb);
    }
    for (; j <= n; j++) cut[j] = c1;
}

/* Rounds: one round in flight at a time (each rank sends and receives at most one block
 * per round), interleaved with pieces of the previous division's compute. */
static dcp_status_t emit_rounds(emitter_t *e, const int64_t *div_end, int64_t *cut)
{
    const dcp_schedule_t *s = e->s;
    const int32_t ndiv = s->num_divs;
    DCP_CHECK(run_step_blocking(e, 0));
    int64_t c = s->rank_off[e->rank];
    for (int32_t d = 0; d < ndiv; d++) {
        const int32_t p0 = d + 1 < ndiv ? s->phase_first[d + 1] : 0;
        const int32_t np = d + 1 < ndiv ? s->phase_first[d + 2] - p0 : 0;
        const int32_t pieces = np > 1 ? np : 1;
        split_division(e, c, div_end[d], pieces, cut);
        for (int32_t j = 0; j < pieces; j++) {
            if (j < np) DCP_CHECK(emit_launch(e, p0 + j));
            DCP_CHECK(emit_attn(e, d, cut[j], cut[j + 1]));
            if (j < np) DCP_CHECK(emit_wait(e, p0 + j));
        }
        DCP_CHECK(free_dead_inputs(e, d));
        c = div_end[d];
    }
    return run_step_blocking(e, ndiv);
}

static dcp_status_t emit_rank(emitter_t *e, int32_t r, int64_t *div_end, int64_t *cut)
{
    const dcp_schedule_t *s = e->s;
    e->rank = r;
    e->next_touch = e->touch_off[r];
    for (int i = 0; i < SLOT_COUNT; i++) dcp_slots_release(&e->slots[i]);
    e->p->prog_off[r] = e->p->num_instrs;
    /* division d of this rank is order[div_end[d-1] .. div_end[d]) */
    int64_t c = s->rank_off[r];
    for (int32_t d = 0; d < s->num_divs; d++) {
        while (c < s->rank_off[r + 1] && s->comp_div[s->order[c]] == d) c++;
        div_end[d] = c;
    }
    if (e->p->opts.comm_schedule == DCP_COMM_ROUNDS)
        DCP_CHECK(emit_rounds(e, div_end, cut));
    else
        DCP_CHECK(emit_divisions(e, div_end));
    DCP_CHECK(emit_reduce(e));
    DCP_CHECK(emit_copy_out(e, e->p->rank_tokens[r]));
    for (int i = 0; i < SLOT_COUNT; i++)
        e->p->work_elems[(int64_t)r * DCP_BUF_COUNT + DCP_BUF_STAGE + i] = e->slots[i].top;
    return DCP_OK;
}

static dcp_status_t index_touches(emitter_t *e)
{
    const dcp_schedule_t *s = e->s;
    const int32_t nr = s->num_ranks;
    DCP_CHECK(dcp_calloc(&e->touch_off, nr + 1, sizeof *e->touch_off, "program"));
    DCP_CHECK(dcp_calloc(&e->touch, 2 * (int64_t)s->num_xfers, sizeof *e->touch, "program"));
    for (int32_t i = 0; i < s->num_xfers; i++) {
        e->touch_off[s->xfers[i].src + 1]++;
        e->touch_off[s->xfers[i].dst + 1]++;
    }
    for (int32_t r = 0; r < nr; r++) e->touch_off[r + 1] += e->touch_off[r];
    int64_t *fill;
    DCP_CHECK(dcp_calloc(&fill, nr, sizeof *fill, "program"));
    for (int32_t i = 0; i < s->num_xfers; i++) {
        const int32_t a = s->xfers[i].src, b = s->xfers[i].dst;
        e->touch[e->touch_off[a] + fill[a]++] = i;
        e->touch[e->touch_off[b] + fill[b]++] = i;
    }
    free(fill);
    return DCP_OK;
}

dcp_status_t dcp_program_emit(dcp_plan_t *p, const dcp_blocks_t *b, const dcp_placement_t *pl,
                              const dcp_schedule_t *s)
{
    emitter_t e = {.p = p, .b = b, .pl = pl, .s = s};
    int64_t *div_end = NULL, *cut = NULL;
    dcp_status_t st;
    p->num_xfers = s->num_xfers;
    DCP_CHECK_GOTO(dcp_calloc(&p->prog_off, p->num_ranks + 1, sizeof *p->prog_off, "program"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&p->work_elems, (int64_t)p->num_ranks * DCP_BUF_COUNT,
                              sizeof *p->work_elems, "program"),
                   st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.src_off, s->num_xfers, sizeof *e.src_off, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.dst_off, s->num_xfers, sizeof *e.dst_off, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.launched, s->num_phases + 1, 1, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&div_end, s->num_divs, sizeof *div_end, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&cut, s->num_phases + 2, sizeof *cut, "program"), st, out);
    DCP_CHECK_GOTO(index_touches(&e), st, out);
    p->num_phases = s->num_phases;
    DCP_CHECK_GOTO(dcp_calloc(&p->phase_step, s->num_phases, sizeof *p->phase_step, "program"), st,
                   out);
    for (int32_t step = 0; step <= s->num_divs; step++)
        for (int32_t ph = s->phase_first[step]; ph < s->phase_first[step + 1]; ph++)
            p->phase_step[ph] = step;
    for (int32_t r = 0; r < p->num_ranks; r++)
        DCP_CHECK_GOTO(emit_rank(&e, r, div_end, cut), st, out);
    p->prog_off[p->num_ranks] = p->num_instrs;
    st = DCP_OK;
out:
    for (int i = 0; i < SLOT_COUNT; i++) dcp_slots_release(&e.slots[i]);
    free(e.src_off);
    free(e.dst_off);
    free(e.launched);
    free(div_end);
    free(cut);
    free(e.touch_off);
    free(e.touch);
    return st;
}
