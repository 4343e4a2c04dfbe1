#include "partition/program/program.h"

#include "include/base/error.h"
#include "partition/program/slots.h"

#include <stdlib.h>

/* One slot allocator per planned work buffer, indexed by dcp_buf_t - DCP_BUF_STAGE. */
#define SLOT_COUNT (DCP_BUF_COUNT - DCP_BUF_STAGE)

typedef struct {
    dcp_plan_t *p;
    dcp_plan_t *view;  /* the object of the kind being emitted: its pass ranges are written */
    int64_t prog_base; /* the kind's first program */
    const dcp_blocks_t *b;
    const dcp_placement_t *pl;
    const dcp_schedule_t *s; /* the schedule of the pass being emitted */
    dcp_pass_t pass;
    int32_t xfer_base, phase_base; /* plan-wide numbers of the pass's first transfer, phase */
    int64_t cap_instrs, cap_groups, cap_tiles, cap_merges, cap_srcs, cap_copies, cap_comm;

    /* per transfer: slot offset at the sender and at the receiver; backward partials get
     * their sender slot at the first write (has_src) */
    int64_t *src_off, *dst_off;
    uint8_t *has_src;
    uint8_t *reduced; /* per transfer: a received partial already merged into the accumulators */
    uint8_t *borrows; /* per transfer: sends the staging slot of another send of its launch */
    struct stage_key *stage_keys; /* scratch: one launch's staged sends */
    int64_t cap_stage_keys;
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

/* Where a transfer of `kind` leaves from and lands in. */
static int32_t send_buf(int32_t kind)
{
    if (dcp_xfer_is_partial(kind)) return DCP_BUF_PART;
    return kind == DCP_XFER_BSTAT ? DCP_BUF_STAGE32 : DCP_BUF_STAGE;
}

static int32_t recv_buf(int32_t kind)
{
    if (dcp_xfer_is_partial(kind)) return DCP_BUF_PART;
    if (kind == DCP_XFER_KV) return DCP_BUF_RKV;
    return kind == DCP_XFER_BSTAT ? DCP_BUF_RSTAT : DCP_BUF_RQ;
}

static dcp_slots_t *slots_of(emitter_t *e, int32_t buf)
{
    return &e->slots[buf - DCP_BUF_STAGE];
}

static int64_t xfer_elems(const emitter_t *e, const dcp_transfer_t *x)
{
    return dcp_blocks_xfer_elems(e->b, (dcp_xfer_kind_t)x->kind, e->b->blk_len[x->block]);
}

/* Elements of a head group's row of buffer b: query heads (qw) or KV heads (kw), each
 * head_dim or head_dim_v wide as b holds the query/key or the value side. */
static int64_t qw(const emitter_t *e, int32_t buf)
{
    return (int64_t)e->b->qpg * dcp_plan_head_width(e->p, buf);
}

static int64_t kw(const emitter_t *e, int32_t buf)
{
    return (int64_t)e->b->kvpg * dcp_plan_head_width(e->p, buf);
}

/* Caller Q (or O, dO, or an accumulator of their layout) rows of block t, head group h. */
static dcp_view_t q_rows(const emitter_t *e, int32_t buf, int32_t t, int32_t h)
{
    const int64_t hq = e->p->shape.num_heads, d = dcp_plan_head_width(e->p, buf);
    return view(buf, (e->p->blk_row[t] * hq + (int64_t)h * e->b->qpg) * d, hq * d);
}

static dcp_view_t kv_rows(const emitter_t *e, int32_t buf, int32_t t, int32_t h)
{
    const int64_t hkv = e->p->shape.num_kv_heads, d = dcp_plan_head_width(e->p, buf);
    return view(buf, (e->p->blk_row[t] * hkv + (int64_t)h * e->b->kvpg) * d, hkv * d);
}

/* Rows of a per-(token, query head) fp32 buffer: LSE, ACC_LSE or DELTA. */
static dcp_view_t stat_rows(const emitter_t *e, int32_t buf, int32_t t, int32_t h)
{
    const int64_t hq = e->p->shape.num_heads;
    return view(buf, e->p->blk_row[t] * hq + (int64_t)h * e->b->qpg, hq);
}

/* A partial-output slot: O rows, then LSE rows. */
static void part_views(const emitter_t *e, int64_t off, int32_t len, dcp_view_t *o, dcp_view_t *lse)
{
    const int64_t w = qw(e, DCP_BUF_O);
    *o = view(DCP_BUF_PART, off, w);
    *lse = view(DCP_BUF_PART, off + len * w, e->b->qpg);
}

/* ---- steps ---------------------------------------------------------------------------------- */

/* The staging copies of block t, head group h, into the `kind` slot at `off`: each source
 * rows go after the previous one's (K then V, Q then dO: their widths may differ). */
static dcp_status_t push_stage(emitter_t *e, int32_t kind, int32_t t, int32_t h, int64_t off)
{
    const int64_t len = e->b->blk_len[t], sw = e->b->qpg;
    dcp_view_t src[2];
    int64_t w[2];
    int n = 2;
    switch (kind) {
    case DCP_XFER_Q:
        src[0] = q_rows(e, DCP_BUF_Q, t, h), w[0] = qw(e, DCP_BUF_Q), n = 1;
        break;
    case DCP_XFER_BQ:
        src[0] = q_rows(e, DCP_BUF_Q, t, h), src[1] = q_rows(e, DCP_BUF_DO, t, h);
        w[0] = qw(e, DCP_BUF_Q), w[1] = qw(e, DCP_BUF_DO);
        break;
    case DCP_XFER_BSTAT:
        src[0] = stat_rows(e, DCP_BUF_LSE, t, h), src[1] = stat_rows(e, DCP_BUF_DELTA, t, h);
        w[0] = w[1] = sw;
        break;
    default: /* DCP_XFER_KV */
        src[0] = kv_rows(e, DCP_BUF_K, t, h), src[1] = kv_rows(e, DCP_BUF_V, t, h);
        w[0] = kw(e, DCP_BUF_K), w[1] = kw(e, DCP_BUF_V);
        break;
    }
    for (int i = 0; i < n; i++)
        DCP_CHECK(push_copy(e, src[i], view(send_buf(kind), off + i * len * w[0], w[i]),
                            (int32_t)len, (int32_t)w[i]));
    return DCP_OK;
}

static dcp_status_t find_xfer(const emitter_t *e, int32_t kind, int32_t t, int32_t h, int32_t *x);

/* 1 for an input a hub forwards from its receive slot (no staging). */
static int forwarded(const dcp_transfer_t *x)
{
    return x->hop == DCP_HOP_SECOND && !dcp_xfer_is_partial(x->kind);
}

/* A staged send of one launch: its item (kind, head group, block) and its position among
 * the rank's touches. */
typedef struct stage_key {
    int32_t kind, head, block;
    int64_t at;
} stage_key_t;

static int stage_key_cmp(const void *a, const void *b)
{
    const stage_key_t *x = a, *y = b;
    const int64_t kx[4] = {x->kind, x->head, x->block, x->at};
    const int64_t ky[4] = {y->kind, y->head, y->block, y->at};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* Packs the blocks the rank sends in touches [first, last) into staging slots: one slot and
 * one copy per (kind, block, head group) however many peers get it in this launch (a block
 * read by several ranks of a node is packed once), the other sends borrowing it. */
static dcp_status_t stage_sends(emitter_t *e, int64_t first, int64_t last)
{
    const dcp_schedule_t *s = e->s;
    DCP_CHECK(dcp_reserve(&e->stage_keys, &e->cap_stage_keys, last - first + 1,
                          sizeof *e->stage_keys, "program"));
    stage_key_t *k = e->stage_keys;
    int64_t n = 0;
    for (int64_t i = first; i < last; i++) {
        const dcp_transfer_t *x = &s->xfers[e->touch[i]];
        if (x->src != e->rank || dcp_xfer_is_partial(x->kind) || forwarded(x)) continue;
        k[n++] = (stage_key_t){x->kind, x->head_group, x->block, i};
    }
    qsort(k, (size_t)n, sizeof *k, stage_key_cmp);
    for (int64_t j = 0; j < n; j++) {
        const int32_t xi = e->touch[k[j].at];
        const dcp_transfer_t *x = &s->xfers[xi];
        if (j > 0 && k[j].kind == k[j - 1].kind && k[j].head == k[j - 1].head &&
            k[j].block == k[j - 1].block) {
            e->src_off[xi] = e->src_off[e->touch[k[j - 1].at]];
            e->borrows[xi] = 1;
            continue;
        }
        DCP_CHECK(
            dcp_slots_alloc(slots_of(e, send_buf(x->kind)), xfer_elems(e, x), &e->src_off[xi]));
        DCP_CHECK(push_stage(e, x->kind, x->block, x->head_group, e->src_off[xi]));
    }
    return DCP_OK;
}

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

    const int64_t copy0 = e->p->num_copies;
    DCP_CHECK(stage_sends(e, first, last));
    if (e->p->num_copies > copy0)
        DCP_CHECK(push_instr(e, DCP_OP_COPY, 0, copy0, e->p->num_copies - copy0));

    const int64_t comm0 = e->p->num_comm;
    for (int64_t i = first; i < last; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &s->xfers[xi];
        const int64_t n = xfer_elems(e, x);
        const int32_t id = e->xfer_base + xi;
        if (x->src == r && forwarded(x)) { /* from the slot the hub received it in */
            int32_t xh;
            DCP_CHECK(find_xfer(e, x->kind, x->block, x->head_group, &xh));
            DCP_CHECK(push_comm(e, x->dst, 1, id, recv_buf(x->kind), e->dst_off[xh], n));
        } else if (x->src == r) {
            DCP_CHECK(push_comm(e, x->dst, 1, id, send_buf(x->kind), e->src_off[xi], n));
        } else {
            DCP_CHECK(dcp_slots_alloc(slots_of(e, recv_buf(x->kind)), n, &e->dst_off[xi]));
            DCP_CHECK(push_comm(e, x->src, 0, id, recv_buf(x->kind), e->dst_off[xi], n));
        }
    }
    return push_instr(e, DCP_OP_COMM_LAUNCH, e->phase_base + phase, comm0, e->p->num_comm - comm0);
}

/* Waits for a phase and frees the send-side slots it used, but a backward partial's: the
 * gradient slots must stay fresh memory until the last one is taken (grad_slot), so they
 * live to the end of the program. */
static dcp_status_t emit_wait(emitter_t *e, int32_t phase)
{
    if (!e->launched[phase]) return DCP_OK;
    DCP_CHECK(push_instr(e, DCP_OP_COMM_WAIT, e->phase_base + phase, 0, 0));
    for (int64_t i = e->touch_off[e->rank]; i < e->next_touch; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &e->s->xfers[xi];
        if (x->phase != phase || x->src != e->rank || forwarded(x) || e->borrows[xi]) continue;
        if (e->pass == DCP_PASS_BWD && dcp_xfer_is_partial(x->kind)) continue;
        DCP_CHECK(dcp_slots_free(slots_of(e, send_buf(x->kind)), e->src_off[xi], xfer_elems(e, x)));
    }
    return DCP_OK;
}

/* The sender slot of a backward partial (dQ, or dK + dV), taken at its first write. Such a
 * slot must be fresh memory: the executor zeroes PART when a backward starts and kernels add
 * into it, and no PART slot is freed before the last step, so there is never a hole. */
static dcp_status_t grad_slot(emitter_t *e, int32_t x, int64_t *off_out)
{
    if (!e->has_src[x]) {
        dcp_slots_t *a = slots_of(e, DCP_BUF_PART);
        if (a->num_holes != 0)
            return dcp_set_error(DCP_ERR_INTERNAL, "program: rank %d reuses a gradient slot",
                                 e->rank);
        DCP_CHECK(dcp_slots_alloc(a, xfer_elems(e, &e->s->xfers[x]), &e->src_off[x]));
        e->has_src[x] = 1;
    }
    *off_out = e->src_off[x];
    return DCP_OK;
}

static dcp_status_t find_xfer(const emitter_t *e, int32_t kind, int32_t t, int32_t h, int32_t *x)
{
    *x = dcp_schedule_find(e->s, e->rank, kind, t, h);
    if (*x < 0)
        return dcp_set_error(DCP_ERR_INTERNAL,
                             "program: rank %d lacks transfer kind %d of block %d", e->rank, kind,
                             t);
    return DCP_OK;
}

/* Backward views of a group (tq, h): Q, dO, LSE, delta in; dQ added to. */
static dcp_status_t group_io_bwd(emitter_t *e, int32_t tq, int32_t h, dcp_tile_group_t *g)
{
    if (e->pl->blk_owner[tq] == e->rank) {
        g->q = q_rows(e, DCP_BUF_Q, tq, h);
        g->dout = q_rows(e, DCP_BUF_DO, tq, h);
        g->lse = stat_rows(e, DCP_BUF_LSE, tq, h);
        g->delta = stat_rows(e, DCP_BUF_DELTA, tq, h);
        g->dq = q_rows(e, DCP_BUF_ACC_DQ, tq, h);
        return DCP_OK;
    }
    const int64_t len = e->b->blk_len[tq], w = qw(e, DCP_BUF_Q);
    int32_t xq, xs, xd;
    DCP_CHECK(find_xfer(e, DCP_XFER_BQ, tq, h, &xq));
    DCP_CHECK(find_xfer(e, DCP_XFER_BSTAT, tq, h, &xs));
    DCP_CHECK(find_xfer(e, DCP_XFER_DQ, tq, h, &xd));
    g->q = view(DCP_BUF_RQ, e->dst_off[xq], w);
    g->dout = view(DCP_BUF_RQ, e->dst_off[xq] + len * w, qw(e, DCP_BUF_DO));
    g->lse = view(DCP_BUF_RSTAT, e->dst_off[xs], e->b->qpg);
    g->delta = view(DCP_BUF_RSTAT, e->dst_off[xs] + len * e->b->qpg, e->b->qpg);
    int64_t off;
    DCP_CHECK(grad_slot(e, xd, &off));
    g->dq = view(DCP_BUF_PART, off, w);
    return DCP_OK;
}

/* Query and output views of a group (tq, h) in division d. */
static dcp_status_t group_io(emitter_t *e, int32_t tq, int32_t h, int32_t div, dcp_tile_group_t *g)
{
    if (e->pass == DCP_PASS_BWD) return group_io_bwd(e, tq, h, g);
    const int32_t r = e->rank;
    if (e->pl->blk_owner[tq] == r) {
        g->q = q_rows(e, DCP_BUF_Q, tq, h);
        g->o = q_rows(e, DCP_BUF_ACC_O, tq, h);
        g->lse = stat_rows(e, DCP_BUF_ACC_LSE, tq, h);
        g->accumulate = 1; /* accumulators start as O = 0, LSE = -inf */
        return DCP_OK;
    }
    int32_t xq, xp;
    DCP_CHECK(find_xfer(e, DCP_XFER_Q, tq, h, &xq));
    DCP_CHECK(find_xfer(e, DCP_XFER_PART, tq, h, &xp));
    g->q = view(DCP_BUF_RQ, e->dst_off[xq], qw(e, DCP_BUF_Q));
    const dcp_transfer_t *x = &e->s->xfers[xp];
    g->accumulate = x->first_div != div;
    if (!g->accumulate)
        DCP_CHECK(dcp_slots_alloc(slots_of(e, DCP_BUF_PART), xfer_elems(e, x), &e->src_off[xp]));
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
    const int bwd = e->pass == DCP_PASS_BWD;
    if (e->pl->blk_owner[kv] == e->rank) {
        tile.k = kv_rows(e, DCP_BUF_K, kv, h);
        tile.v = kv_rows(e, DCP_BUF_V, kv, h);
        if (bwd) {
            tile.dk = kv_rows(e, DCP_BUF_ACC_DK, kv, h);
            tile.dv = kv_rows(e, DCP_BUF_ACC_DV, kv, h);
        }
    } else {
        int32_t xk;
        DCP_CHECK(find_xfer(e, DCP_XFER_KV, kv, h, &xk));
        const int64_t wk = kw(e, DCP_BUF_K), wv = kw(e, DCP_BUF_V);
        tile.k = view(DCP_BUF_RKV, e->dst_off[xk], wk);
        tile.v = view(DCP_BUF_RKV, e->dst_off[xk] + tile.kv_len * wk, wv);
        if (bwd) {
            int32_t xd;
            int64_t off;
            DCP_CHECK(find_xfer(e, DCP_XFER_DKV, kv, h, &xd));
            DCP_CHECK(grad_slot(e, xd, &off));
            tile.dk = view(DCP_BUF_PART, off, wk);
            tile.dv = view(DCP_BUF_PART, off + tile.kv_len * wk, wv);
        }
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
        DCP_CHECK(push_instr(e, DCP_OP_ATTN, e->pass, group0, p->num_groups - group0));
    return DCP_OK;
}

/* Received inputs whose last reader was division `div` are dead once it has run. */
static dcp_status_t free_dead_inputs(emitter_t *e, int32_t div)
{
    for (int64_t i = e->touch_off[e->rank]; i < e->next_touch; i++) {
        const int32_t xi = e->touch[i];
        const dcp_transfer_t *x = &e->s->xfers[xi];
        if (x->dst != e->rank || dcp_xfer_is_partial(x->kind) || x->last_div != div) continue;
        DCP_CHECK(dcp_slots_free(slots_of(e, recv_buf(x->kind)), e->dst_off[xi], xfer_elems(e, x)));
    }
    return DCP_OK;
}

/* Partials received, sorted by (kind, block, head, source): the receives of one destination
 * are not adjacent in transfer order. `dest`: -1 for the accumulators, else the PART slot of
 * the hub's own partial they are merged into. */
typedef struct {
    int32_t kind, block, head, src, xfer;
    int64_t dest;
} part_in_t;

static int part_in_cmp(const void *a, const void *b)
{
    const part_in_t *x = a, *y = b;
    const int32_t kx[4] = {x->kind, x->block, x->head, x->src};
    const int32_t ky[4] = {y->kind, y->block, y->head, y->src};
    for (int i = 0; i < 4; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

static int same_dest(const part_in_t *a, const part_in_t *b)
{
    return a->kind == b->kind && a->block == b->block && a->head == b->head;
}

/* Which received partials a REDUCE takes: a hub's (MERGE_HUB), merged into its own partial
 * before it sends that in step `step` + 1; or the accumulators' (MERGE_ACC), every partial
 * that arrived by step `step` and no earlier REDUCE took. */
typedef enum { MERGE_HUB, MERGE_ACC } merge_into_t;

/* Whether the rank's transfer xi is a partial it merges now (*dest_out: the hub's slot). */
static dcp_status_t merged_now(const emitter_t *e, int32_t xi, merge_into_t into, int32_t step,
                               int *yes, int64_t *dest_out)
{
    const dcp_transfer_t *x = &e->s->xfers[xi];
    *yes = 0;
    *dest_out = -1;
    if (x->dst != e->rank || !dcp_xfer_is_partial(x->kind)) return DCP_OK;
    if (into == MERGE_ACC) {
        *yes = x->hop != DCP_HOP_FIRST && x->step <= step && !e->reduced[xi];
        return DCP_OK;
    }
    if (x->hop != DCP_HOP_FIRST) return DCP_OK;
    int32_t own;
    DCP_CHECK(find_xfer(e, x->kind, x->block, x->head_group, &own));
    *yes = e->s->xfers[own].step == step + 1;
    *dest_out = e->src_off[own];
    return DCP_OK;
}

static dcp_status_t collect_parts(emitter_t *e, merge_into_t into, int32_t step, part_in_t **in_out,
                                  int64_t *n_out)
{
    const int32_t r = e->rank;
    int64_t n = 0, dest;
    int yes;
    *in_out = NULL;
    for (int64_t i = e->touch_off[r]; i < e->touch_off[r + 1]; i++) {
        DCP_CHECK(merged_now(e, e->touch[i], into, step, &yes, &dest));
        n += yes;
    }
    *n_out = n;
    if (n == 0) return DCP_OK;
    part_in_t *in;
    DCP_CHECK(dcp_calloc(&in, n, sizeof *in, "reduce"));
    n = 0;
    for (int64_t i = e->touch_off[r]; i < e->touch_off[r + 1]; i++) {
        const dcp_transfer_t *x = &e->s->xfers[e->touch[i]];
        const dcp_status_t st = merged_now(e, e->touch[i], into, step, &yes, &dest);
        if (st != DCP_OK) {
            free(in);
            return st;
        }
        if (yes) in[n++] = (part_in_t){x->kind, x->block, x->head_group, x->src, e->touch[i], dest};
    }
    qsort(in, (size_t)n, sizeof *in, part_in_cmp);
    *in_out = in;
    return DCP_OK;
}

/* Forward: one n-way LSE merge per (block, head) into the accumulators, or a hub's partial. */
static dcp_status_t emit_merges(emitter_t *e, const part_in_t *in, int64_t n)
{
    dcp_plan_t *p = e->p;
    const int64_t merge0 = p->num_merges;
    for (int64_t i = 0; i < n;) {
        const int32_t t = in[i].block, h = in[i].head;
        dcp_merge_item_t m = {.o = q_rows(e, DCP_BUF_ACC_O, t, h),
                              .lse = stat_rows(e, DCP_BUF_ACC_LSE, t, h),
                              .rows = e->b->blk_len[t],
                              .first_src = (int32_t)p->num_merge_srcs};
        if (in[i].dest >= 0) part_views(e, in[i].dest, m.rows, &m.o, &m.lse);
        for (const int64_t i0 = i; i < n && same_dest(&in[i], &in[i0]); i++) {
            DCP_CHECK(dcp_reserve(&p->merge_srcs, &e->cap_srcs, p->num_merge_srcs + 1,
                                  sizeof *p->merge_srcs, "merge sources"));
            dcp_merge_src_t *src = &p->merge_srcs[p->num_merge_srcs++];
            part_views(e, e->dst_off[in[i].xfer], m.rows, &src->o, &src->lse);
        }
        m.num_src = (int32_t)(p->num_merge_srcs - m.first_src);
        DCP_CHECK(dcp_reserve(&p->merges, &e->cap_merges, p->num_merges + 1, sizeof *p->merges,
                              "merges"));
        p->merges[p->num_merges++] = m;
    }
    return push_instr(e, DCP_OP_REDUCE, DCP_PASS_FWD, merge0, p->num_merges - merge0);
}

/* Backward: fp32 sums of the received dQ and dK/dV partials into the accumulators (or a hub's
 * partial), one REDUCE: the sources of each destination are consecutive items, in the order
 * of their sending ranks (dK's, then dV's), so each destination is read and written once
 * and the order of the sums is fixed by the plan: results are the same on every device and
 * transport. */
static dcp_status_t emit_sums(emitter_t *e, const part_in_t *in, int64_t n)
{
    dcp_plan_t *p = e->p;
    const int64_t wq = qw(e, DCP_BUF_DQ), w[2] = {kw(e, DCP_BUF_DK), kw(e, DCP_BUF_DV)};
    const int64_t copy0 = p->num_copies;
    for (int64_t i = 0; i < n;) {
        const int64_t i0 = i;
        while (i < n && same_dest(&in[i], &in[i0])) i++;
        const int32_t t = in[i0].block, h = in[i0].head, len = e->b->blk_len[t];
        const int64_t to = in[i0].dest;
        if (in[i0].kind == DCP_XFER_DQ) {
            const dcp_view_t dq =
                to < 0 ? q_rows(e, DCP_BUF_ACC_DQ, t, h) : view(DCP_BUF_PART, to, wq);
            for (int64_t j = i0; j < i; j++)
                DCP_CHECK(push_copy(e, view(DCP_BUF_PART, e->dst_off[in[j].xfer], wq), dq, len,
                                    (int32_t)wq));
            continue;
        }
        const dcp_view_t acc[2] = {
            to < 0 ? kv_rows(e, DCP_BUF_ACC_DK, t, h) : view(DCP_BUF_PART, to, w[0]),
            to < 0 ? kv_rows(e, DCP_BUF_ACC_DV, t, h) : view(DCP_BUF_PART, to + len * w[0], w[1])};
        for (int side = 0; side < 2; side++)
            for (int64_t j = i0; j < i; j++)
                DCP_CHECK(push_copy(
                    e, view(DCP_BUF_PART, e->dst_off[in[j].xfer] + side * len * w[0], w[side]),
                    acc[side], len, (int32_t)w[side]));
    }
    return push_instr(e, DCP_OP_REDUCE, DCP_PASS_BWD, copy0, p->num_copies - copy0);
}

/* Merges the partials received (merged_now) and frees their slots - but a backward hub's
 * before its last division (gradient slots must stay fresh memory until the last is taken,
 * grad_slot; the accumulators' merges all come after it). */
static dcp_status_t emit_reduce(emitter_t *e, merge_into_t into, int32_t step)
{
    part_in_t *in;
    int64_t n;
    DCP_CHECK(collect_parts(e, into, step, &in, &n));
    if (n == 0) return DCP_OK;
    for (int64_t i = 0; i < n; i++) e->reduced[in[i].xfer] = into == MERGE_ACC;
    dcp_status_t st = e->pass == DCP_PASS_FWD ? emit_merges(e, in, n) : emit_sums(e, in, n);
    if (e->pass == DCP_PASS_BWD && into == MERGE_HUB && step < e->s->num_divs) n = 0;
    for (int64_t i = 0; i < n && st == DCP_OK; i++)
        st = dcp_slots_free(slots_of(e, DCP_BUF_PART), e->dst_off[in[i].xfer],
                            xfer_elems(e, &e->s->xfers[in[i].xfer]));
    free(in);
    return st;
}

/* The last COPY: accumulators published into the caller's outputs of the pass. */
static dcp_status_t emit_copy_out(emitter_t *e, int64_t tokens)
{
    if (tokens == 0) return DCP_OK;
    const int64_t hq = e->p->shape.num_heads, hkv = e->p->shape.num_kv_heads;
    static const int32_t fwd[2][2] = {{DCP_BUF_ACC_O, DCP_BUF_O}, {DCP_BUF_ACC_LSE, DCP_BUF_LSE}};
    static const int32_t bwd[3][2] = {
        {DCP_BUF_ACC_DQ, DCP_BUF_DQ}, {DCP_BUF_ACC_DK, DCP_BUF_DK}, {DCP_BUF_ACC_DV, DCP_BUF_DV}};
    const int bw = e->pass == DCP_PASS_BWD;
    const int n = bw ? 3 : 2;
    const int64_t copy0 = e->p->num_copies;
    for (int i = 0; i < n; i++) {
        const int32_t *pair = bw ? bwd[i] : fwd[i];
        const int64_t w = (pair[1] == DCP_BUF_DK || pair[1] == DCP_BUF_DV ? hkv : hq) *
                          dcp_plan_head_width(e->p, pair[1]);
        DCP_CHECK(
            push_copy(e, view(pair[0], 0, w), view(pair[1], 0, w), (int32_t)tokens, (int32_t)w));
    }
    return push_instr(e, DCP_OP_COPY, 0, copy0, n);
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

/* The phases of step `step`, launched (0) or waited for (1). */
static dcp_status_t emit_step(emitter_t *e, int32_t step, int wait)
{
    for (int32_t ph = e->s->phase_first[step]; ph < e->s->phase_first[step + 1]; ph++)
        DCP_CHECK(wait ? emit_wait(e, ph) : emit_launch(e, ph));
    return DCP_OK;
}

/* 1 when the rank sends in step d + 1 what step d brings it: an input it forwards as a hub,
 * or a partial it merges as one. The next phases to launch are step d + 1's. */
static int forwards_after(const emitter_t *e, int32_t d)
{
    for (int64_t i = e->next_touch; i < e->touch_off[e->rank + 1]; i++) {
        const dcp_transfer_t *x = &e->s->xfers[e->touch[i]];
        if (x->step != d + 1) break;
        if (x->src == e->rank && x->hop == DCP_HOP_SECOND) return 1;
    }
    return 0;
}

/* 1 when step d brings the rank an input (division d's, or one it forwards as a hub). */
static int brings_inputs(const emitter_t *e, int32_t d)
{
    for (int64_t i = e->touch_off[e->rank]; i < e->touch_off[e->rank + 1]; i++) {
        const dcp_transfer_t *x = &e->s->xfers[e->touch[i]];
        if (x->step > d) break;
        if (x->step == d && x->dst == e->rank && !dcp_xfer_is_partial(x->kind)) return 1;
    }
    return 0;
}

/* Waits for step d and does a hub's merges of it. */
static dcp_status_t finish_step(emitter_t *e, int32_t d)
{
    DCP_CHECK(emit_step(e, d, 1));
    return emit_reduce(e, MERGE_HUB, d);
}

/* Divisions: step d + 1 is launched before step d is waited for, so its transfers run while
 * division d - 1 finishes and division d computes - but where the rank forwards in step d + 1
 * what step d brings it (a hub's input, or the partials it merges), step d is waited for
 * and the merges done first (on an in-order transfer stream step d + 1 could not start
 * earlier anyway). A step that brings the rank no input (only partials, which nothing reads
 * before the merges after the last division) is waited for after division d computes, just
 * before step d + 2 is launched: the rank computes while a slower peer still has to take its
 * partials, and no more than two steps are ever in flight. After the last division, step T
 * returns the partials and step T + 1 the ones hubs merged from step T. */
static dcp_status_t emit_divisions(emitter_t *e, const int64_t *div_end)
{
    const int32_t ndiv = e->s->num_divs;
    DCP_CHECK(emit_step(e, 0, 0));
    int64_t c = e->s->rank_off[e->rank];
    int32_t owed = -1; /* a step waited for after its division */
    for (int32_t d = 0; d < ndiv; d++) {
        if (owed >= 0) DCP_CHECK(finish_step(e, owed));
        const int early = !forwards_after(e, d);
        owed = early && !brings_inputs(e, d) ? d : -1;
        if (early) DCP_CHECK(emit_step(e, d + 1, 0));
        if (owed < 0) DCP_CHECK(finish_step(e, d));
        if (!early) DCP_CHECK(emit_step(e, d + 1, 0));
        DCP_CHECK(emit_attn(e, d, c, div_end[d]));
        DCP_CHECK(free_dead_inputs(e, d));
        c = div_end[d];
    }
    if (owed >= 0) DCP_CHECK(finish_step(e, owed));
    /* the partials that came early are merged while later ones are on their way */
    DCP_CHECK(emit_reduce(e, MERGE_ACC, ndiv - 1));
    for (int32_t step = ndiv; step < ndiv + 2; step++) {
        DCP_CHECK(emit_step(e, step, 1));
        DCP_CHECK(emit_reduce(e, MERGE_HUB, step));
        DCP_CHECK(emit_step(e, step + 1, 0));
        DCP_CHECK(emit_reduce(e, MERGE_ACC, step));
    }
    return emit_step(e, ndiv + 2, 1);
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
    for (int32_t step = ndiv; step <= ndiv + 2; step++) DCP_CHECK(run_step_blocking(e, step));
    return DCP_OK;
}

static dcp_status_t emit_rank(emitter_t *e, int32_t r, int64_t *div_end, int64_t *cut)
{
    const dcp_schedule_t *s = e->s;
    e->rank = r;
    e->next_touch = e->touch_off[r];
    for (int i = 0; i < SLOT_COUNT; i++) dcp_slots_release(&e->slots[i]);
    e->p->prog_off[e->prog_base + (int64_t)e->pass * e->p->num_ranks + r] = e->p->num_instrs;
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
    DCP_CHECK(emit_reduce(e, MERGE_ACC, INT32_MAX));
    DCP_CHECK(emit_copy_out(e, e->p->rank_tokens[r]));
    /* the passes share the work buffers: each is as large as the larger pass needs */
    for (int i = 0; i < SLOT_COUNT; i++) {
        int64_t *w = &e->p->work_elems[(int64_t)r * DCP_BUF_COUNT + DCP_BUF_STAGE + i];
        if (e->slots[i].top > *w) *w = e->slots[i].top;
    }
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

/* Frees what one pass needed; the item capacities stay with the plan's arrays. */
static void emitter_end_pass(emitter_t *e)
{
    for (int i = 0; i < SLOT_COUNT; i++) dcp_slots_release(&e->slots[i]);
    free(e->src_off);
    free(e->dst_off);
    free(e->has_src);
    free(e->reduced);
    free(e->borrows);
    free(e->stage_keys);
    free(e->launched);
    free(e->touch_off);
    free(e->touch);
    e->src_off = e->dst_off = e->touch_off = NULL;
    e->has_src = e->launched = e->reduced = e->borrows = NULL;
    e->stage_keys = NULL;
    e->cap_stage_keys = 0;
    e->touch = NULL;
}

/* The programs of one pass, after those of the passes before it. */
static dcp_status_t emit_pass(emitter_t *ep, const dcp_schedule_t *s)
{
    emitter_t e = *ep;
    dcp_plan_t *p = e.p;
    e.s = s;
    e.pass = s->pass;
    e.xfer_base = p->num_xfers;
    e.phase_base = p->num_phases;
    int64_t *div_end = NULL, *cut = NULL;
    dcp_status_t st;
    if ((int64_t)p->num_xfers + s->num_xfers > INT32_MAX ||
        (int64_t)p->num_phases + s->num_phases > INT32_MAX)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "program: more than 2^31 - 1 transfers");
    DCP_CHECK_GOTO(dcp_calloc(&e.src_off, s->num_xfers, sizeof *e.src_off, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.dst_off, s->num_xfers, sizeof *e.dst_off, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.has_src, s->num_xfers, 1, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.reduced, s->num_xfers, 1, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.borrows, s->num_xfers, 1, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.launched, s->num_phases + 1, 1, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&div_end, s->num_divs, sizeof *div_end, "program"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&cut, s->num_phases + 2, sizeof *cut, "program"), st, out);
    DCP_CHECK_GOTO(index_touches(&e), st, out);
    DCP_CHECK_GOTO(dcp_resize(&p->phase_step, (int64_t)p->num_phases + s->num_phases + 1,
                              sizeof *p->phase_step, "program: phase steps"),
                   st, out);
    for (int32_t step = 0; step <= s->num_divs + 2; step++)
        for (int32_t ph = s->phase_first[step]; ph < s->phase_first[step + 1]; ph++)
            p->phase_step[e.phase_base + ph] = step;
    for (int32_t r = 0; r < p->num_ranks; r++)
        DCP_CHECK_GOTO(emit_rank(&e, r, div_end, cut), st, out);
    p->num_xfers += s->num_xfers;
    p->num_phases += s->num_phases;
    e.view->pass_xfer[s->pass + 1] = p->num_xfers;
    e.view->pass_phase[s->pass + 1] = p->num_phases;
    st = DCP_OK;
out:
    emitter_end_pass(&e);
    *ep = e;
    free(div_end);
    free(cut);
    return st;
}

/* The tiles and tile groups of a kind's programs reserved at once: every computation block is
 * one tile of each pass (`tiles` of them), and a group holds one tile or more: 0.25-0.7 x the
 * tiles on 4x8 and 8x8 batches, so half their count is reserved for the groups (dcp_reserve
 * zeroes it: memory touched), doubled where they need more. Grown an item at a time from 16,
 * both arrays were copied at every doubling and their fresh pages faulted in again: 14x the page
 * faults of plans of plan_bench.sh's WLB-LLM lambda batch (4x8, 128K tokens), a fifth of their
 * CPU time. */
static dcp_status_t reserve_items(emitter_t *e, int64_t tiles)
{
    dcp_plan_t *p = e->p;
    DCP_CHECK(
        dcp_reserve(&p->tiles, &e->cap_tiles, p->num_tiles + tiles, sizeof *p->tiles, "tiles"));
    return dcp_reserve(&p->groups, &e->cap_groups, p->num_groups + tiles / 2, sizeof *p->groups,
                       "tile groups");
}

dcp_status_t dcp_program_emit(dcp_plan_t *p, int32_t kind, const dcp_blocks_t *b,
                              const dcp_placement_t *pl,
                              const dcp_schedule_t *const s[DCP_PASS_COUNT])
{
    const int64_t nprog = (int64_t)DCP_PASS_COUNT * p->num_ranks;
    if (kind == 0) {
        DCP_CHECK(
            dcp_calloc(&p->prog_off, p->num_kinds * nprog + 1, sizeof *p->prog_off, "program"));
        DCP_CHECK(dcp_calloc(&p->work_elems, (int64_t)p->num_ranks * DCP_BUF_COUNT,
                             sizeof *p->work_elems, "program"));
        p->num_xfers = p->num_phases = 0;
    }
    /* the item arrays hold the kinds before this one: capacities start at their counts, so
     * that growing keeps them (dcp_reserve zeroes what lies past the capacity it is told) */
    emitter_t e = {.p = p,
                   .view = dcp_plan_view(p, kind),
                   .prog_base = kind * nprog,
                   .b = b,
                   .pl = pl,
                   .cap_instrs = p->num_instrs,
                   .cap_groups = p->num_groups,
                   .cap_tiles = p->num_tiles,
                   .cap_merges = p->num_merges,
                   .cap_srcs = p->num_merge_srcs,
                   .cap_copies = p->num_copies,
                   .cap_comm = p->num_comm};
    DCP_CHECK(reserve_items(&e, (int64_t)DCP_PASS_COUNT * b->num_tiles * b->head_blocks));
    e.view->pass_xfer[0] = p->num_xfers;
    e.view->pass_phase[0] = p->num_phases;
    for (int k = 0; k < DCP_PASS_COUNT; k++) {
        if (s[k]->pass != (dcp_pass_t)k)
            return dcp_set_error(DCP_ERR_INTERNAL, "program: schedule %d is of pass %d", k,
                                 (int)s[k]->pass);
        DCP_CHECK(emit_pass(&e, s[k]));
    }
    p->prog_off[(kind + 1) * nprog] = p->num_instrs;
    return DCP_OK;
}
