/*
 * Structural validation of a plan. A plan that passes can be executed without any
 * out-of-bounds access, without writing to the caller's inputs, and without deadlock:
 *  - every view and region lies inside its rank's buffer, and each pass touches only its own
 *    buffers (a forward never reads dO, a backward never writes O);
 *  - every transfer id has exactly one send and one receive, between the right ranks, of
 *    the same size, in the same step;
 *  - each rank launches steps in increasing order, waits for them in increasing order, each
 *    after its launch, and waits for all of them (so the smallest step anyone waits on has
 *    been launched by every rank in it).
 * Bounded memory for untrusted bytes: everything the checks allocate is proportional to
 * arrays present in the bytes (the transfer count must be half the comm op count before the
 * pairing table exists); ranks x phases (the cost model's tables) is at most
 * DCP_PLAN_MAX_RANK_PHASES; and the work buffers a rank would allocate to run the plan
 * (accumulators, staging, received blocks, partials) are at most DCP_PLAN_MAX_WORK_BYTES.
 * Canonical bytes: the instructions of all programs, in order, name every item exactly once
 * and in the order the items are stored (tile groups' tiles and merges' sources likewise),
 * and a tile is marked full exactly when the mask allows every pair, so that no stored
 * field is ignored and one plan has one byte string.
 */
#include "include/base/error.h"
#include "partition/model/blocks.h"
#include "partition/model/mask.h"
#include "partition/place/place.h"
#include "partition/plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CORRUPT(...) dcp_set_error(DCP_ERR_PLAN_CORRUPT, __VA_ARGS__)

/* The most bytes of work buffers (every buffer from DCP_BUF_FIRST_WORK on) one rank of a
 * loaded plan may need: 64 GiB, beyond any device's memory left beside the model. */
/* The most ranks x phases of a loaded plan (the cost model keeps a cell of each). */
#define DCP_PLAN_MAX_RANK_PHASES ((int64_t)1 << 26)

/* ---- inputs ------------------------------------------------------------------------------- */

static dcp_status_t check_meta(const dcp_plan_t *p)
{
    const dcp_attn_shape_t *s = &p->shape;
    const dcp_plan_options_t *o = &p->opts;
    if (p->num_ranks < 1 || p->num_nodes < 1 || p->devs_per_node < 1 ||
        (int64_t)p->num_nodes * p->devs_per_node != p->num_ranks)
        return CORRUPT("plan: %d ranks do not form %d nodes x %d devices", p->num_ranks,
                       p->num_nodes, p->devs_per_node);
    if (s->num_heads < 1 || s->num_kv_heads < 1 || s->num_heads % s->num_kv_heads != 0 ||
        s->head_dim < 1 || s->head_dim > 4096 || s->head_dim_v < 1 || s->head_dim_v > 4096 ||
        (int64_t)s->num_heads * s->head_dim > (1 << 24) ||
        (int64_t)s->num_heads * s->head_dim_v > (1 << 24))
        return CORRUPT("plan: attention shape %d/%d heads x %d/%d is invalid", s->num_heads,
                       s->num_kv_heads, s->head_dim, s->head_dim_v);
    if ((unsigned)s->dtype > DCP_DTYPE_FP16 || !(s->scale > 0.0f) || !isfinite(s->scale))
        return CORRUPT("plan: dtype or scale is invalid");
    if (!(s->softcap >= 0.0f) || !isfinite(s->softcap) || signbit(s->softcap))
        return CORRUPT("plan: softcap %g is invalid", (double)s->softcap);
    if (o->block_size < 1 || o->head_blocks < 1 || s->num_kv_heads % o->head_blocks != 0 ||
        o->divisions < 1 || o->divisions > 1024 || !dcp_strategy_ops(o->strategy) ||
        !(o->eps_inter >= 0) || !(o->eps_intra >= 0) || o->mem_cap_bytes < 0 ||
        (unsigned)o->expansion > DCP_EXPAND_STAR || o->net_cap < 0 || (o->refine & ~1) ||
        (unsigned)o->comm_schedule > DCP_COMM_ROUNDS || o->coalesce < 1 || o->metis_tries < 1 ||
        o->metis_tries > DCP_MAX_METIS_TRIES)
        return CORRUPT("plan: options are invalid");
    if (dcp_perf_model_check(&p->perf, "plan cost model") != DCP_OK || (p->fallback & ~1))
        return CORRUPT("plan: cost model figures are invalid");
    if (p->num_phases < 0 || p->num_phases > (1 << 24))
        return CORRUPT("plan: %d phases", p->num_phases);
    if (p->num_xfers < 0) return CORRUPT("plan: transfer count is negative");
    if ((int64_t)p->num_ranks * p->num_phases > DCP_PLAN_MAX_RANK_PHASES)
        return CORRUPT("plan: %d ranks x %d phases, more than 2^26", p->num_ranks, p->num_phases);
    return DCP_OK;
}

/* The sequences seqs[p->num_seqs] (the plan's, or a layer kind's). */
static dcp_status_t check_seqs(const dcp_plan_t *p, const dcp_seq_info_t *seqs)
{
    if (p->num_seqs < 1) return CORRUPT("plan: no sequences");
    int64_t total = 0;
    /* the planner's size limits (partition/model/blocks.h), so counts fit int64 */
    double pairs = 0;
    for (int32_t s = 0; s < p->num_seqs; s++) {
        const dcp_seq_info_t *q = &seqs[s];
        total += q->len;
        pairs += (double)q->len * (double)q->len;
        if (q->len < 1 || total > INT32_MAX)
            return CORRUPT("plan: sequence %d has length %d", s, q->len);
        if (dcp_mask_validate(&q->mask, q->len, "mask") != DCP_OK) {
            char why[256];
            dcp_error_save(why, sizeof why);
            return CORRUPT("plan: sequence %d: %s", s, why);
        }
    }
    if (pairs * (double)dcp_shape_pair_flops(&p->shape) * p->shape.num_heads >
            (double)DCP_MAX_FLOPS ||
        dcp_shape_token_bytes(&p->shape, total) > DCP_MAX_BATCH_BYTES)
        return CORRUPT("plan: %lld tokens of %d heads x %d are past the size limits",
                       (long long)total, p->shape.num_heads, p->shape.head_dim);
    return DCP_OK;
}

/* Token blocks must tile every sequence in order: starting at 0, contiguous, ending at L. */
static dcp_status_t check_blocks(const dcp_plan_t *p)
{
    int32_t seq = 0, pos = 0;
    for (int32_t t = 0; t < p->num_blocks; t++) {
        if (p->blk_owner[t] < 0 || p->blk_owner[t] >= p->num_ranks)
            return CORRUPT("plan: block %d has owner %d", t, p->blk_owner[t]);
        if (p->blk_seq[t] != seq) {
            if (pos != p->seqs[seq].len || p->blk_seq[t] != seq + 1)
                return CORRUPT("plan: block %d breaks the tiling of sequence %d", t, seq);
            seq++;
            pos = 0;
        }
        if (p->blk_start[t] != pos || p->blk_len[t] < 1 || p->blk_len[t] > p->opts.block_size ||
            p->blk_len[t] > p->seqs[seq].len - pos)
            return CORRUPT("plan: block %d [%d, +%d) breaks the tiling of sequence %d", t,
                           p->blk_start[t], p->blk_len[t], seq);
        pos += p->blk_len[t];
    }
    if (p->num_blocks == 0 || seq != p->num_seqs - 1 || pos != p->seqs[seq].len)
        return CORRUPT("plan: token blocks do not cover every sequence");
    return DCP_OK;
}

/* Layer kinds: every kind's masks valid for the plan's lengths, layer counts in range. */
static dcp_status_t check_kinds(const dcp_plan_t *p)
{
    if (p->num_kinds == 1) return p->layers == 1 ? DCP_OK : CORRUPT("plan: layer count is invalid");
    for (int32_t k = 0; k < p->num_kinds; k++) {
        const dcp_plan_t *v = dcp_plan_view_const(p, k);
        if (v->layers < 1 || v->layers > 1024)
            return CORRUPT("plan: kind %d has %d layers", k, v->layers);
        if (k == 0) continue;
        if (v->num_seqs != p->num_seqs)
            return CORRUPT("plan: kind %d has %d sequences, the plan %d", k, v->num_seqs,
                           p->num_seqs);
        for (int32_t s = 0; s < p->num_seqs; s++)
            if (v->seqs[s].len != p->seqs[s].len)
                return CORRUPT("plan: kind %d gives sequence %d another length", k, s);
        DCP_CHECK(check_seqs(p, v->seqs));
    }
    return DCP_OK;
}

/* Each kind's transfers and phases follow the last kind's, pass by pass, and cover the plan's;
 * phase steps rise within each pass. */
static dcp_status_t check_pass_ranges(const dcp_plan_t *p)
{
    int32_t xfer = 0, phase = 0;
    for (int32_t k = 0; k < p->num_kinds; k++) {
        const dcp_plan_t *v = dcp_plan_view_const(p, k);
        const int32_t *px = v->pass_xfer, *pp = v->pass_phase;
        if (px[0] != xfer || pp[0] != phase)
            return CORRUPT("plan: pass ranges do not cover the transfers and phases");
        for (int i = 0; i < DCP_PASS_COUNT; i++)
            if (px[i] < 0 || px[i + 1] < px[i] || pp[i] < 0 || pp[i + 1] < pp[i] ||
                px[i + 1] > p->num_xfers || pp[i + 1] > p->num_phases)
                return CORRUPT("plan: pass %d transfer or phase ranges are invalid", i);
        for (int i = 0; i < DCP_PASS_COUNT; i++)
            for (int32_t ph = pp[i]; ph < pp[i + 1]; ph++)
                /* steps run to T + 2: a relay's forward after the last division */
                if (p->phase_step[ph] < 0 || p->phase_step[ph] > p->opts.divisions + 2 ||
                    (ph > pp[i] && p->phase_step[ph] < p->phase_step[ph - 1]))
                    return CORRUPT("plan: phase %d has step %d", ph, p->phase_step[ph]);
        xfer = px[DCP_PASS_COUNT];
        phase = pp[DCP_PASS_COUNT];
    }
    if (xfer != p->num_xfers || phase != p->num_phases)
        return CORRUPT("plan: pass ranges do not cover the transfers and phases");
    return DCP_OK;
}

dcp_status_t dcp_plan_check_inputs(const dcp_plan_t *p)
{
    DCP_CHECK(check_meta(p));
    DCP_CHECK(check_seqs(p, p->seqs));
    DCP_CHECK(check_kinds(p));
    DCP_CHECK(check_blocks(p));
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int b = 0; b < DCP_BUF_COUNT; b++) {
            const int64_t e = p->work_elems[(int64_t)r * DCP_BUF_COUNT + b];
            if (e < 0 || (b < DCP_BUF_STAGE && e != 0) || e > ((int64_t)1 << 50))
                return CORRUPT("plan: rank %d buffer %d has %lld elements", r, b, (long long)e);
        }
    DCP_CHECK(check_pass_ranges(p));
    /* every transfer is one send and one receive: the pairing table stays within the comm
     * ops present in the bytes */
    if (2 * (int64_t)p->num_xfers != p->num_comm)
        return CORRUPT("plan: %d transfers for %lld comm ops", p->num_xfers,
                       (long long)p->num_comm);
    const int64_t nprog = (int64_t)p->num_kinds * DCP_PASS_COUNT * p->num_ranks;
    if (p->prog_off[0] != 0 || p->prog_off[nprog] != p->num_instrs)
        return CORRUPT("plan: program offsets do not span the instructions");
    for (int64_t i = 0; i < nprog; i++)
        if (p->prog_off[i + 1] < p->prog_off[i])
            return CORRUPT("plan: program offsets decrease at program %lld", (long long)i);
    return DCP_OK;
}

/* ---- programs ----------------------------------------------------------------------------- */

typedef struct {
    const dcp_plan_t *p;
    dcp_pass_t pass;
    int32_t rank;
    int64_t instr;
    int64_t *extent; /* [DCP_BUF_COUNT]: furthest element any view of the rank reaches */
} where_t;

static dcp_status_t bad(const where_t *w, const char *what)
{
    return CORRUPT("plan: rank %d %s instruction %lld: %s", w->rank,
                   w->pass == DCP_PASS_FWD ? "forward" : "backward",
                   (long long)(w->instr - dcp_plan_prog_begin(w->p, w->pass, w->rank)), what);
}

static int range_ok(int64_t first, int64_t count, int64_t n)
{
    return first >= 0 && count >= 0 && first <= n && count <= n - first;
}

#define BIT(b) (1u << (b))

/* The buffers each pass may touch: the executor binds only these. */
static const unsigned pass_bufs[DCP_PASS_COUNT] = {
    BIT(DCP_BUF_Q) | BIT(DCP_BUF_K) | BIT(DCP_BUF_V) | BIT(DCP_BUF_O) | BIT(DCP_BUF_LSE) |
        BIT(DCP_BUF_ACC_O) | BIT(DCP_BUF_ACC_LSE) | BIT(DCP_BUF_STAGE) | BIT(DCP_BUF_RQ) |
        BIT(DCP_BUF_RKV) | BIT(DCP_BUF_PART),
    BIT(DCP_BUF_Q) | BIT(DCP_BUF_K) | BIT(DCP_BUF_V) | BIT(DCP_BUF_LSE) | BIT(DCP_BUF_DO) |
        BIT(DCP_BUF_DQ) | BIT(DCP_BUF_DK) | BIT(DCP_BUF_DV) | BIT(DCP_BUF_DELTA) |
        BIT(DCP_BUF_ACC_DQ) | BIT(DCP_BUF_ACC_DK) | BIT(DCP_BUF_ACC_DV) | BIT(DCP_BUF_STAGE) |
        BIT(DCP_BUF_STAGE32) | BIT(DCP_BUF_RQ) | BIT(DCP_BUF_RKV) | BIT(DCP_BUF_RSTAT) |
        BIT(DCP_BUF_PART)};

/* rows x row_elems elements at v, within the buffer, from one of the allowed buffers. */
static int view_ok(const where_t *w, dcp_view_t v, int64_t rows, int64_t row_elems,
                   unsigned allowed)
{
    allowed &= pass_bufs[w->pass];
    if (v.buf < 0 || v.buf >= DCP_BUF_COUNT || !(allowed & (1u << v.buf))) return 0;
    if (rows < 0 || row_elems < 1 || v.off < 0) return 0;
    if (rows == 0) return 1;
    if (rows > 1 && v.stride < row_elems) return 0;
    const int64_t size = dcp_plan_buf_elems(w->p, w->rank, v.buf);
    const int64_t span = (rows - 1) * (int64_t)v.stride + row_elems;
    if (v.off > size || span > size - v.off) return 0;
    if (v.off + span > w->extent[v.buf]) w->extent[v.buf] = v.off + span;
    return 1;
}

static dcp_status_t check_block_ref(const where_t *w, int32_t blk, int32_t seq, int32_t pos,
                                    int32_t len)
{
    const dcp_plan_t *p = w->p;
    if (blk < 0 || blk >= p->num_blocks || p->blk_seq[blk] != seq || p->blk_start[blk] != pos ||
        p->blk_len[blk] != len)
        return bad(w, "tile does not match its token block");
    return DCP_OK;
}

typedef struct {
    int32_t buf;
    int64_t off;
} out_key_t;

static int out_key_cmp(const void *a, const void *b)
{
    const out_key_t *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

/* A group's views in its pass: the forward writes O and LSE; the backward reads Q, dO, LSE
 * and delta and adds to dQ. */
static int group_views_ok(const where_t *w, const dcp_tile_group_t *g)
{
    const dcp_plan_t *p = w->p;
    const int64_t qw = (int64_t)p->qpg * p->shape.head_dim, n = g->q_len;
    const int64_t vw = (int64_t)p->qpg * dcp_shape_dv(&p->shape); /* O and dO rows */
    if (!view_ok(w, g->q, n, qw, BIT(DCP_BUF_Q) | BIT(DCP_BUF_RQ))) return 0;
    if (w->pass == DCP_PASS_FWD)
        return view_ok(w, g->o, n, vw, BIT(DCP_BUF_ACC_O) | BIT(DCP_BUF_PART)) &&
               view_ok(w, g->lse, n, p->qpg, BIT(DCP_BUF_ACC_LSE) | BIT(DCP_BUF_PART));
    return view_ok(w, g->dout, n, vw, BIT(DCP_BUF_DO) | BIT(DCP_BUF_RQ)) &&
           view_ok(w, g->lse, n, p->qpg, BIT(DCP_BUF_LSE) | BIT(DCP_BUF_RSTAT)) &&
           view_ok(w, g->delta, n, p->qpg, BIT(DCP_BUF_DELTA) | BIT(DCP_BUF_RSTAT)) &&
           view_ok(w, g->dq, n, qw, BIT(DCP_BUF_ACC_DQ) | BIT(DCP_BUF_PART));
}

static int tile_views_ok(const where_t *w, const dcp_tile_t *t)
{
    const int64_t kw = (int64_t)w->p->kvpg * w->p->shape.head_dim, n = t->kv_len;
    const int64_t vw = (int64_t)w->p->kvpg * dcp_shape_dv(&w->p->shape);
    if (!view_ok(w, t->k, n, kw, BIT(DCP_BUF_K) | BIT(DCP_BUF_RKV)) ||
        !view_ok(w, t->v, n, vw, BIT(DCP_BUF_V) | BIT(DCP_BUF_RKV)))
        return 0;
    return w->pass == DCP_PASS_FWD ||
           (view_ok(w, t->dk, n, kw, BIT(DCP_BUF_ACC_DK) | BIT(DCP_BUF_PART)) &&
            view_ok(w, t->dv, n, vw, BIT(DCP_BUF_ACC_DV) | BIT(DCP_BUF_PART)));
}

typedef struct {
    int32_t buf;
    int64_t off, tile;
} grad_key_t;

static int grad_key_cmp(const void *a, const void *b)
{
    const grad_key_t *x = a, *y = b;
    if (x->buf != y->buf) return x->buf < y->buf ? -1 : 1;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return (x->tile > y->tile) - (x->tile < y->tile);
}

/* Tiles [t0, t1) of a backward launch: two that share a dk or a dv view add into the same
 * rows in every respect (dcp_tile_same_grads, descr.h), so that the deterministic kernels
 * can sum each destination's tiles in tile order. */
static dcp_status_t check_grad_dsts(const where_t *w, int64_t t0, int64_t t1)
{
    const dcp_plan_t *p = w->p;
    const int64_t n = t1 - t0;
    grad_key_t *keys;
    DCP_CHECK(dcp_calloc(&keys, n, sizeof *keys, "plan check"));
    dcp_status_t st = DCP_OK;
    for (int dv = 0; dv < 2 && st == DCP_OK; dv++) {
        for (int64_t i = 0; i < n; i++) {
            const dcp_view_t *v = dv ? &p->tiles[t0 + i].dv : &p->tiles[t0 + i].dk;
            keys[i] = (grad_key_t){v->buf, v->off, t0 + i};
        }
        qsort(keys, (size_t)n, sizeof *keys, grad_key_cmp);
        for (int64_t i = 1; i < n && st == DCP_OK; i++) {
            if (keys[i].buf != keys[i - 1].buf || keys[i].off != keys[i - 1].off) continue;
            const dcp_tile_t *a = &p->tiles[keys[i - 1].tile], *b = &p->tiles[keys[i].tile];
            if (!dcp_tile_same_grads(a, b) || a->dk.stride != b->dk.stride ||
                a->dv.stride != b->dv.stride || a->kv_block != b->kv_block)
                st = bad(w, "tiles of one launch share part of a gradient destination");
        }
    }
    free(keys);
    return st;
}

static dcp_status_t check_attn(const where_t *w, const dcp_instr_t *in)
{
    const dcp_plan_t *p = w->p;
    if (in->arg != (int32_t)w->pass || !range_ok(in->first, in->count, p->num_groups) ||
        in->count < 1)
        return bad(w, "ATTN names no valid tile groups");
    out_key_t *keys;
    DCP_CHECK(dcp_calloc(&keys, in->count, sizeof *keys, "plan check"));
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; i < in->count && st == DCP_OK; i++) {
        const dcp_tile_group_t *g = &p->groups[in->first + i];
        if (g->seq < 0 || g->seq >= p->num_seqs || g->head_group < 0 ||
            g->head_group >= p->opts.head_blocks || (g->accumulate & ~1) ||
            !range_ok(g->first_tile, g->num_tiles, p->num_tiles) || g->num_tiles < 1) {
            st = bad(w, "tile group fields out of range");
            break;
        }
        /* the GPU kernels find a tile's group by its index: a launch's tiles are its
         * groups' runs, back to back */
        if (i > 0 && g->first_tile != g[-1].first_tile + g[-1].num_tiles) {
            st = bad(w, "tile groups of one launch do not own consecutive tiles");
            break;
        }
        if ((st = check_block_ref(w, g->q_block, g->seq, g->q_pos, g->q_len)) != DCP_OK) break;
        if (!group_views_ok(w, g)) {
            st = bad(w, "tile group view out of bounds");
            break;
        }
        const dcp_view_t out = w->pass == DCP_PASS_FWD ? g->o : g->dq;
        keys[i] = (out_key_t){out.buf, out.off};
        const dcp_seq_info_t *s = &p->seqs[g->seq];
        for (int32_t t = g->first_tile; t < g->first_tile + g->num_tiles && st == DCP_OK; t++) {
            const dcp_tile_t *tl = &p->tiles[t];
            if ((st = check_block_ref(w, tl->kv_block, g->seq, tl->kv_pos, tl->kv_len)) != DCP_OK)
                break;
            if (!tile_views_ok(w, tl)) {
                st = bad(w, "tile view out of bounds");
                break;
            }
            /* a tile marked full skips mask evaluation in the kernels: it must be full */
            int64_t pairs;
            const dcp_tile_class_t cls =
                dcp_mask_classify(&s->mask, s->len, g->q_pos, g->q_pos + g->q_len, tl->kv_pos,
                                  tl->kv_pos + tl->kv_len, &pairs);
            if ((tl->full & ~1) || tl->full != (cls == DCP_TILE_FULL))
                st = bad(w, "tile's full mark differs from its mask");
        }
    }
    if (st == DCP_OK) { /* groups of one launch run in parallel: distinct outputs */
        qsort(keys, (size_t)in->count, sizeof *keys, out_key_cmp);
        for (int64_t i = 1; i < in->count && st == DCP_OK; i++)
            if (!out_key_cmp(&keys[i - 1], &keys[i]))
                st = bad(w, "two tile groups share an output");
    }
    free(keys);
    if (st == DCP_OK && w->pass == DCP_PASS_BWD) {
        const dcp_tile_group_t *g0 = &p->groups[in->first], *g1 = g0 + in->count - 1;
        st = check_grad_dsts(w, g0->first_tile, (int64_t)g1->first_tile + g1->num_tiles);
    }
    return st;
}

static dcp_status_t check_merges(const where_t *w, const dcp_instr_t *in)
{
    const dcp_plan_t *p = w->p;
    const int64_t qw = (int64_t)p->qpg * dcp_shape_dv(&p->shape); /* O rows */
    if (!range_ok(in->first, in->count, p->num_merges) || in->count < 1)
        return bad(w, "REDUCE names no valid merges");
    for (int64_t i = in->first; i < in->first + in->count; i++) {
        const dcp_merge_item_t *m = &p->merges[i];
        if (m->rows < 1 || !range_ok(m->first_src, m->num_src, p->num_merge_srcs) ||
            m->num_src < 1 ||
            !view_ok(w, m->o, m->rows, qw, BIT(DCP_BUF_ACC_O) | BIT(DCP_BUF_PART)) ||
            !view_ok(w, m->lse, m->rows, p->qpg, BIT(DCP_BUF_ACC_LSE) | BIT(DCP_BUF_PART)))
            return bad(w, "merge out of bounds");
        for (int32_t j = m->first_src; j < m->first_src + m->num_src; j++)
            if (!view_ok(w, p->merge_srcs[j].o, m->rows, qw, BIT(DCP_BUF_PART)) ||
                !view_ok(w, p->merge_srcs[j].lse, m->rows, p->qpg, BIT(DCP_BUF_PART)))
                return bad(w, "merge source out of bounds");
    }
    return DCP_OK;
}

/* Backward sums: PART rows added into a gradient accumulator; the items of one destination
 * are consecutive (one sum, descr.h) and the sums' destinations distinct (they run in
 * parallel on a GPU). */
static dcp_status_t check_sums(const where_t *w, const dcp_instr_t *in)
{
    const dcp_plan_t *p = w->p;
    if (!range_ok(in->first, in->count, p->num_copies) || in->count < 1)
        return bad(w, "REDUCE names no valid sums");
    out_key_t *keys;
    DCP_CHECK(dcp_calloc(&keys, in->count, sizeof *keys, "plan check"));
    dcp_status_t st = DCP_OK;
    int64_t nsums = 0;
    for (int64_t i = 0; i < in->count && st == DCP_OK; i++) {
        const dcp_copy_item_t *c = &p->copies[in->first + i];
        const unsigned acc =
            BIT(DCP_BUF_ACC_DQ) | BIT(DCP_BUF_ACC_DK) | BIT(DCP_BUF_ACC_DV) | BIT(DCP_BUF_PART);
        if (c->rows < 1 || !view_ok(w, c->src, c->rows, c->row_elems, BIT(DCP_BUF_PART)) ||
            !view_ok(w, c->dst, c->rows, c->row_elems, acc))
            st = bad(w, "sum out of bounds");
        if (i == 0 || !dcp_copy_same_dst(c - 1, c))
            keys[nsums++] = (out_key_t){c->dst.buf, c->dst.off};
    }
    if (st == DCP_OK) {
        qsort(keys, (size_t)nsums, sizeof *keys, out_key_cmp);
        for (int64_t i = 1; i < nsums && st == DCP_OK; i++)
            if (!out_key_cmp(&keys[i - 1], &keys[i])) st = bad(w, "two sums share a destination");
    }
    free(keys);
    return st;
}

static dcp_status_t check_reduce(const where_t *w, const dcp_instr_t *in)
{
    if (in->arg != (int32_t)w->pass) return bad(w, "REDUCE of the other pass");
    return w->pass == DCP_PASS_FWD ? check_merges(w, in) : check_sums(w, in);
}

static dcp_status_t check_copy(const where_t *w, const dcp_instr_t *in)
{
    const dcp_plan_t *p = w->p;
    if (in->arg != 0 || !range_ok(in->first, in->count, p->num_copies) || in->count < 1)
        return bad(w, "COPY names no valid copies");
    for (int64_t i = in->first; i < in->first + in->count; i++) {
        const dcp_copy_item_t *c = &p->copies[i];
        /* the only copies there are: pack inputs for sending, and publish the outputs (the
         * pass's buffer sets keep each to its own pass) */
        unsigned dst;
        switch (c->src.buf) {
        case DCP_BUF_Q:
        case DCP_BUF_K:
        case DCP_BUF_V:
        case DCP_BUF_DO:
            dst = BIT(DCP_BUF_STAGE);
            break;
        case DCP_BUF_LSE:
        case DCP_BUF_DELTA:
            dst = BIT(DCP_BUF_STAGE32);
            break;
        case DCP_BUF_ACC_O:
            dst = BIT(DCP_BUF_O);
            break;
        case DCP_BUF_ACC_LSE:
            dst = BIT(DCP_BUF_LSE);
            break;
        case DCP_BUF_ACC_DQ:
            dst = BIT(DCP_BUF_DQ);
            break;
        case DCP_BUF_ACC_DK:
            dst = BIT(DCP_BUF_DK);
            break;
        case DCP_BUF_ACC_DV:
            dst = BIT(DCP_BUF_DV);
            break;
        default:
            return bad(w, "copy from a buffer that is never copied");
        }
        if (!view_ok(w, c->src, c->rows, c->row_elems, BIT(c->src.buf)) ||
            !view_ok(w, c->dst, c->rows, c->row_elems, dst))
            return bad(w, "copy out of bounds");
    }
    return DCP_OK;
}

/* Per transfer id: who sends and who receives it, in which step, how many elements. */
typedef struct {
    int32_t send_rank, send_peer, send_step, recv_rank, recv_peer, recv_step;
    int64_t send_elems, recv_elems;
} pairing_t;

static dcp_status_t check_launch(const where_t *w, const dcp_instr_t *in, pairing_t *pair)
{
    const dcp_plan_t *p = w->p;
    if (!range_ok(in->first, in->count, p->num_comm) || in->count < 1)
        return bad(w, "COMM_LAUNCH names no valid ops");
    for (int64_t i = in->first; i < in->first + in->count; i++) {
        const dcp_comm_op_t *op = &p->comm[i];
        if (op->peer < 0 || op->peer >= p->num_ranks || op->peer == w->rank || (op->send & ~1) ||
            op->transfer < p->pass_xfer[w->pass] || op->transfer >= p->pass_xfer[w->pass + 1] ||
            op->elems < 1)
            return bad(w, "comm op fields out of range");
        /* a hub forwards an input from the slot it received it in */
        const unsigned recv =
            BIT(DCP_BUF_RQ) | BIT(DCP_BUF_RKV) | BIT(DCP_BUF_RSTAT) | BIT(DCP_BUF_PART);
        const unsigned bufs = op->send ? recv | BIT(DCP_BUF_STAGE) | BIT(DCP_BUF_STAGE32) : recv;
        if (!view_ok(w, (dcp_view_t){op->off, 0, op->buf}, 1, op->elems, bufs))
            return bad(w, "comm region out of bounds");
        pairing_t *x = &pair[op->transfer];
        int32_t *rank = op->send ? &x->send_rank : &x->recv_rank;
        if (*rank != -1) return bad(w, "transfer id used twice");
        *rank = w->rank;
        if (op->send) {
            x->send_peer = op->peer;
            x->send_step = in->arg;
            x->send_elems = op->elems;
        } else {
            x->recv_peer = op->peer;
            x->recv_step = in->arg;
            x->recv_elems = op->elems;
        }
    }
    return DCP_OK;
}

/* One program of rank r. launched[phase]: 0 not yet, 1 launched, 2 waited. */
static dcp_status_t check_program(const dcp_plan_t *p, dcp_pass_t pass, int32_t r, pairing_t *pair,
                                  uint8_t *launched, int64_t *extent)
{
    int32_t last_launch = -1, last_wait = -1;
    const int32_t ph0 = p->pass_phase[pass], ph1 = p->pass_phase[pass + 1];
    memset(launched, 0, (size_t)p->num_phases);
    for (int64_t i = dcp_plan_prog_begin(p, pass, r); i < dcp_plan_prog_end(p, pass, r); i++) {
        const where_t w = {p, pass, r, i, extent};
        const dcp_instr_t *in = &p->instrs[i];
        switch (in->op) {
        case DCP_OP_ATTN:
            DCP_CHECK(check_attn(&w, in));
            break;
        case DCP_OP_REDUCE:
            DCP_CHECK(check_reduce(&w, in));
            break;
        case DCP_OP_COPY:
            DCP_CHECK(check_copy(&w, in));
            break;
        case DCP_OP_COMM_LAUNCH:
            if (in->arg <= last_launch || in->arg < ph0 || in->arg >= ph1)
                return bad(&w, "phases must be launched once each, in increasing order");
            last_launch = in->arg;
            launched[in->arg] = 1;
            DCP_CHECK(check_launch(&w, in, pair));
            break;
        case DCP_OP_COMM_WAIT:
            if (in->arg <= last_wait || in->arg < ph0 || in->arg >= ph1 || !launched[in->arg])
                return bad(&w, "wait for a phase not launched, or out of order");
            last_wait = in->arg;
            launched[in->arg] = 2;
            break;
        default:
            return bad(&w, "unknown opcode");
        }
    }
    for (int32_t s = ph0; s < ph1; s++)
        if (launched[s] == 1) return CORRUPT("plan: rank %d never waits for phase %d", r, s);
    return DCP_OK;
}

static dcp_status_t check_rank(const dcp_plan_t *p, int32_t r, pairing_t *pair, uint8_t *launched)
{
    int64_t extent[DCP_BUF_COUNT] = {0};
    for (int32_t kind = 0; kind < p->num_kinds; kind++) /* every kind through its view */
        for (int k = 0; k < DCP_PASS_COUNT; k++)
            DCP_CHECK(check_program(dcp_plan_view_const(p, kind), (dcp_pass_t)k, r, pair, launched,
                                    extent));
    /* work buffers are no larger than what the programs address (slot-aligned), so a plan
     * cannot make a rank allocate memory it never uses */
    for (int b = DCP_BUF_STAGE; b < DCP_BUF_COUNT; b++) {
        const int64_t need = (extent[b] + DCP_SLOT_ALIGN - 1) / DCP_SLOT_ALIGN * DCP_SLOT_ALIGN;
        if (dcp_plan_buf_elems(p, r, b) > need)
            return CORRUPT("plan: rank %d buffer %d holds %lld elements, its programs use %lld", r,
                           b, (long long)dcp_plan_buf_elems(p, r, b), (long long)need);
    }
    return DCP_OK;
}

/* Canonical order: the instructions, in array order, name consecutive item ranges of their
 * kind that cover each item array exactly (COPY and backward REDUCE share the copies); tile
 * groups own consecutive tiles covering the tiles, merges consecutive sources. */
static dcp_status_t check_item_order(const dcp_plan_t *p)
{
    int64_t next[4] = {0, 0, 0, 0}; /* groups, merges, copies, comm ops */
    const int64_t total[4] = {p->num_groups, p->num_merges, p->num_copies, p->num_comm};
    for (int64_t i = 0; i < p->num_instrs; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        int k = -1;
        if (in->op == DCP_OP_ATTN) k = 0;
        if (in->op == DCP_OP_REDUCE) k = in->arg == DCP_PASS_FWD ? 1 : 2;
        if (in->op == DCP_OP_COPY) k = 2;
        if (in->op == DCP_OP_COMM_LAUNCH) k = 3;
        if (k < 0) continue;
        if (in->first != next[k] || in->count < 1 || in->count > total[k] - next[k])
            return CORRUPT("plan: instruction %lld names items [%lld, +%lld), the next are %lld",
                           (long long)i, (long long)in->first, (long long)in->count,
                           (long long)next[k]);
        next[k] += in->count;
    }
    for (int k = 0; k < 4; k++)
        if (next[k] != total[k])
            return CORRUPT("plan: %lld of %lld stored items of kind %d are never used",
                           (long long)(total[k] - next[k]), (long long)total[k], k);
    int64_t tile = 0, src = 0;
    for (int64_t g = 0; g < p->num_groups; g++) {
        if (p->groups[g].first_tile != tile || p->groups[g].num_tiles < 1)
            return CORRUPT("plan: tile group %lld does not own the next tiles", (long long)g);
        tile += p->groups[g].num_tiles;
    }
    for (int64_t m = 0; m < p->num_merges; m++) {
        if (p->merges[m].first_src != src || p->merges[m].num_src < 1)
            return CORRUPT("plan: merge %lld does not own the next sources", (long long)m);
        src += p->merges[m].num_src;
    }
    if (tile != p->num_tiles || src != p->num_merge_srcs)
        return CORRUPT("plan: stored tiles or merge sources are never used");
    return DCP_OK;
}

/* The work buffers of each rank (what a context allocates to run the plan) within
 * DCP_PLAN_MAX_WORK_BYTES; sizes are bounded (token counts below 2^31, heads x D below
 * 2^24, stored sizes below 2^50), so the sums cannot overflow. */
static dcp_status_t check_work_bytes(const dcp_plan_t *p)
{
    for (int32_t r = 0; r < p->num_ranks; r++) {
        const int64_t bytes = dcp_plan_work_bytes(p, r);
        if (bytes > DCP_PLAN_MAX_WORK_BYTES)
            return CORRUPT("plan: rank %d needs %lld bytes of work buffers, more than 2^36", r,
                           (long long)bytes);
    }
    return DCP_OK;
}

dcp_status_t dcp_plan_check_programs(const dcp_plan_t *p)
{
    DCP_CHECK(check_item_order(p));
    DCP_CHECK(check_work_bytes(p));
    pairing_t *pair = NULL;
    uint8_t *launched = NULL;
    DCP_CHECK(dcp_calloc(&pair, p->num_xfers, sizeof *pair, "plan check"));
    dcp_status_t st = dcp_calloc(&launched, p->num_phases, 1, "plan check");
    for (int32_t x = 0; x < p->num_xfers; x++) pair[x].send_rank = pair[x].recv_rank = -1;
    for (int32_t r = 0; r < p->num_ranks && st == DCP_OK; r++)
        st = check_rank(p, r, pair, launched);
    for (int32_t x = 0; x < p->num_xfers && st == DCP_OK; x++) {
        const pairing_t *q = &pair[x];
        if (q->send_rank < 0 || q->recv_rank < 0 || q->send_peer != q->recv_rank ||
            q->recv_peer != q->send_rank || q->send_step != q->recv_step ||
            q->send_elems != q->recv_elems)
            st = CORRUPT("plan: transfer %d has no matching send and receive", x);
    }
    free(pair);
    free(launched);
    return st;
}
