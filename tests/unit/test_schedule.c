/*
 * Scheduler invariants, checked on the forward and backward programs of many plans:
 *  - every computation block runs exactly once;
 *  - every slot is written before it is read, and no slot is reused while its block is
 *    live (a simulator tracks which block each work-buffer element holds, and every read
 *    names the block it needs);
 *  - every send has its receive (and the validator accepts the plan);
 *  - with T > 1 the first division is local, and step d+1 is launched before step d is
 *    waited for;
 *  - every output row is published once, after the last write to its accumulator and the
 *    last wait.
 */
#include "include/base/error.h"
#include "partition/model/mask.h"
#include "partition/plan/plan.h"
#include "partition/program/schedule.h"
#include "tests/unit/mask_bf.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

/* What a slot holds: forward Q, K+V, O+LSE partial; backward Q+dO, LSE+delta, dQ and
 * dK+dV partials. */
enum { C_NONE = 0, C_Q, C_KV, C_P, C_BQ, C_ST, C_DQ, C_DKV };

typedef struct {
    int32_t kind, block, head;
} content_t;

static int same(content_t a, content_t b)
{
    return a.kind == b.kind && a.block == b.block && a.head == b.head;
}

typedef struct {
    const dcp_plan_t *p;
    dcp_pass_t pass;
    int32_t rank;
    int check; /* 0: first pass, only learn what each transfer carries */
    content_t *sent;
    content_t *cur[DCP_BUF_COUNT];
    int64_t *ready[DCP_BUF_COUNT], *pin[DCP_BUF_COUNT];
    int32_t *row_block;
    int64_t *wait_at; /* [num_phases] */
    int failures;
    const char *first_failure;
} sim_t;

static void fail(sim_t *s, const char *why)
{
    if (!s->check) return;
    if (!s->failures++) s->first_failure = why;
}

static int tracked(int32_t buf)
{
    return buf >= DCP_BUF_STAGE && buf < DCP_BUF_COUNT;
}

/* Elements of a view: rows x row_elems starting at v.off with stride. */
#define FOR_ELEMS(v, rows, row_elems, e)                                                           \
    for (int64_t r_ = 0; r_ < (rows); r_++)                                                        \
        for (int64_t e = (v).off + r_ * (v).stride, end_ = e + (row_elems); e < end_; e++)

static void write_view(sim_t *s, dcp_view_t v, int64_t rows, int64_t w, content_t c, int64_t i,
                       int64_t ready, int64_t pin)
{
    if (!tracked(v.buf)) return;
    FOR_ELEMS(v, rows, w, e)
    {
        if (s->pin[v.buf][e] > i) fail(s, "slot overwritten while a transfer uses it");
        s->cur[v.buf][e] = c;
        s->ready[v.buf][e] = ready;
        s->pin[v.buf][e] = pin;
    }
}

static void read_view(sim_t *s, dcp_view_t v, int64_t rows, int64_t w, content_t want, int64_t i)
{
    if (!tracked(v.buf)) return;
    FOR_ELEMS(v, rows, w, e)
    {
        if (s->ready[v.buf][e] > i) fail(s, "slot read before it is written");
        if (!same(s->cur[v.buf][e], want)) fail(s, "slot holds another block when read");
    }
}

/* The block and head group a caller-buffer (or accumulator) view starts at; `head_elems`
 * is the width of one head group in a row. */
static content_t caller_block(const sim_t *s, dcp_view_t v, int32_t kind, int64_t head_elems)
{
    const int64_t row = v.off / v.stride;
    const int32_t t = s->row_block[row];
    CU_ASSERT(s->p->blk_row[t] == row);
    return (content_t){kind, t, (int32_t)((v.off % v.stride) / head_elems)};
}

/* What a staging copy from a caller buffer packs, in the pass being simulated. */
static content_t staged(const sim_t *s, dcp_view_t src)
{
    const int64_t qw = (int64_t)s->p->qpg * s->p->shape.head_dim,
                  kw = (int64_t)s->p->kvpg * s->p->shape.head_dim;
    switch (src.buf) {
    case DCP_BUF_Q:
        return caller_block(s, src, s->pass == DCP_PASS_FWD ? C_Q : C_BQ, qw);
    case DCP_BUF_DO:
        return caller_block(s, src, C_BQ, qw);
    case DCP_BUF_LSE:
    case DCP_BUF_DELTA:
        return caller_block(s, src, C_ST, s->p->qpg);
    default:
        return caller_block(s, src, C_KV, kw);
    }
}

static void sim_copy(sim_t *s, const dcp_instr_t *in, int64_t i)
{
    for (int64_t k = in->first; k < in->first + in->count; k++) {
        const dcp_copy_item_t *c = &s->p->copies[k];
        if (c->dst.buf != DCP_BUF_STAGE && c->dst.buf != DCP_BUF_STAGE32) continue;
        write_view(s, c->dst, c->rows, c->row_elems, staged(s, c->src), i, i + 1, 0);
    }
}

/* A backward gradient partial: its slot holds nothing yet (zeroed when the pass starts) or
 * this partial already; kernels add to it. */
static void add_view(sim_t *s, dcp_view_t v, int64_t rows, int64_t w, content_t c, int64_t i)
{
    if (!tracked(v.buf)) return;
    FOR_ELEMS(v, rows, w, e)
    {
        if (s->cur[v.buf][e].kind != C_NONE && !same(s->cur[v.buf][e], c))
            fail(s, "gradient added to a slot of another block");
    }
    write_view(s, v, rows, w, c, i, i + 1, 0);
}

static void sim_launch(sim_t *s, const dcp_instr_t *in, int64_t i)
{
    const int64_t w = s->wait_at[in->arg];
    for (int64_t k = in->first; k < in->first + in->count; k++) {
        const dcp_comm_op_t *op = &s->p->comm[k];
        const dcp_view_t v = {op->off, (int32_t)op->elems, op->buf};
        if (!op->send) {
            write_view(s, v, 1, op->elems, s->sent[op->transfer], i, w + 1, w + 1);
            continue;
        }
        const content_t c = s->cur[op->buf][op->off];
        if (c.kind == C_NONE) fail(s, "sending a slot nothing wrote");
        read_view(s, v, 1, op->elems, c, i);
        FOR_ELEMS(v, 1, op->elems, e) s->pin[op->buf][e] = w + 1; /* in flight until WAIT */
        if (!s->check) s->sent[op->transfer] = c;
    }
}

static void sim_attn_bwd(sim_t *s, const dcp_instr_t *in, int64_t i)
{
    const dcp_plan_t *p = s->p;
    const int64_t qw = (int64_t)p->qpg * p->shape.head_dim,
                  kw = (int64_t)p->kvpg * p->shape.head_dim;
    for (int64_t g = in->first; g < in->first + in->count; g++) {
        const dcp_tile_group_t *gr = &p->groups[g];
        const content_t q = {C_BQ, gr->q_block, gr->head_group},
                        st = {C_ST, gr->q_block, gr->head_group},
                        dq = {C_DQ, gr->q_block, gr->head_group};
        read_view(s, gr->q, gr->q_len, qw, q, i);
        read_view(s, gr->dout, gr->q_len, qw, q, i);
        read_view(s, gr->lse, gr->q_len, p->qpg, st, i);
        read_view(s, gr->delta, gr->q_len, p->qpg, st, i);
        for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++) {
            const dcp_tile_t *tl = &p->tiles[t];
            const content_t kv = {C_KV, tl->kv_block, gr->head_group},
                            dkv = {C_DKV, tl->kv_block, gr->head_group};
            read_view(s, tl->k, tl->kv_len, kw, kv, i);
            read_view(s, tl->v, tl->kv_len, kw, kv, i);
            add_view(s, tl->dk, tl->kv_len, kw, dkv, i);
            add_view(s, tl->dv, tl->kv_len, kw, dkv, i);
        }
        add_view(s, gr->dq, gr->q_len, qw, dq, i);
    }
}

static void sim_attn(sim_t *s, const dcp_instr_t *in, int64_t i)
{
    const dcp_plan_t *p = s->p;
    const int64_t qw = (int64_t)p->qpg * p->shape.head_dim,
                  kw = (int64_t)p->kvpg * p->shape.head_dim;
    if (s->pass == DCP_PASS_BWD) {
        sim_attn_bwd(s, in, i);
        return;
    }
    for (int64_t g = in->first; g < in->first + in->count; g++) {
        const dcp_tile_group_t *gr = &p->groups[g];
        const content_t q = {C_Q, gr->q_block, gr->head_group},
                        part = {C_P, gr->q_block, gr->head_group};
        read_view(s, gr->q, gr->q_len, qw, q, i);
        for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++) {
            const dcp_tile_t *tl = &p->tiles[t];
            const content_t kv = {C_KV, tl->kv_block, gr->head_group};
            read_view(s, tl->k, tl->kv_len, kw, kv, i);
            read_view(s, tl->v, tl->kv_len, kw, kv, i);
        }
        if (gr->accumulate) {
            read_view(s, gr->o, gr->q_len, qw, part, i);
            read_view(s, gr->lse, gr->q_len, p->qpg, part, i);
        }
        write_view(s, gr->o, gr->q_len, qw, part, i, i + 1, 0);
        write_view(s, gr->lse, gr->q_len, p->qpg, part, i, i + 1, 0);
    }
}

/* What a merge or sum into `dst` needs its sources to hold: the partial of the accumulator's
 * block, or - into a hub's own partial (PART) - the partial that slot holds, which must be
 * written by then. */
static content_t reduce_dest(sim_t *s, dcp_view_t dst, int32_t kind, int64_t head_elems, int64_t i)
{
    if (dst.buf != DCP_BUF_PART) return caller_block(s, dst, kind, head_elems);
    const content_t c = s->cur[DCP_BUF_PART][dst.off];
    if (c.kind != kind) fail(s, "a hub merges into a slot that holds no partial of that kind");
    if (s->ready[DCP_BUF_PART][dst.off] > i) fail(s, "a hub merges into a slot not yet written");
    return c;
}

static void sim_reduce(sim_t *s, const dcp_instr_t *in, int64_t i)
{
    const dcp_plan_t *p = s->p;
    const int64_t qw = (int64_t)p->qpg * p->shape.head_dim,
                  kw = (int64_t)p->kvpg * p->shape.head_dim;
    if (s->pass == DCP_PASS_BWD) { /* sums of partials into the gradient accumulators */
        for (int64_t k = in->first; k < in->first + in->count; k++) {
            const dcp_copy_item_t *c = &p->copies[k];
            const int q =
                c->dst.buf == DCP_BUF_ACC_DQ ||
                (c->dst.buf == DCP_BUF_PART && s->cur[DCP_BUF_PART][c->dst.off].kind == C_DQ);
            read_view(s, c->src, c->rows, c->row_elems,
                      reduce_dest(s, c->dst, q ? C_DQ : C_DKV, q ? qw : kw, i), i);
        }
        return;
    }
    for (int64_t k = in->first; k < in->first + in->count; k++) {
        const dcp_merge_item_t *m = &p->merges[k];
        content_t want = reduce_dest(s, m->o, C_P, qw, i);
        for (int32_t j = m->first_src; j < m->first_src + m->num_src; j++) {
            read_view(s, p->merge_srcs[j].o, m->rows, qw, want, i);
            read_view(s, p->merge_srcs[j].lse, m->rows, p->qpg, want, i);
        }
    }
}

static void simulate_rank(sim_t *s)
{
    const dcp_plan_t *p = s->p;
    const int32_t r = s->rank;
    for (int b = DCP_BUF_STAGE; b < DCP_BUF_COUNT; b++) {
        const int64_t n = dcp_plan_buf_elems(p, r, b);
        s->cur[b] = calloc((size_t)n + 1, sizeof(content_t));
        s->ready[b] = calloc((size_t)n + 1, sizeof(int64_t));
        s->pin[b] = calloc((size_t)n + 1, sizeof(int64_t));
    }
    s->row_block = calloc((size_t)p->rank_tokens[r] + 1, sizeof(int32_t));
    s->wait_at = calloc((size_t)p->num_phases + 1, sizeof *s->wait_at);
    for (int32_t t = 0; t < p->num_blocks; t++)
        if (p->blk_owner[t] == r)
            for (int32_t k = 0; k < p->blk_len[t]; k++) s->row_block[p->blk_row[t] + k] = t;
    const int64_t i0 = dcp_plan_prog_begin(p, s->pass, r), i1 = dcp_plan_prog_end(p, s->pass, r);
    for (int64_t i = i0; i < i1; i++)
        if (p->instrs[i].op == DCP_OP_COMM_WAIT) s->wait_at[p->instrs[i].arg] = i;
    for (int64_t i = i0; i < i1; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        switch (in->op) {
        case DCP_OP_COPY:
            sim_copy(s, in, i);
            break;
        case DCP_OP_COMM_LAUNCH:
            sim_launch(s, in, i);
            break;
        case DCP_OP_ATTN:
            sim_attn(s, in, i);
            break;
        case DCP_OP_REDUCE:
            sim_reduce(s, in, i);
            break;
        default:
            break;
        }
    }
    for (int b = DCP_BUF_STAGE; b < DCP_BUF_COUNT; b++) {
        free(s->cur[b]);
        free(s->ready[b]);
        free(s->pin[b]);
    }
    free(s->row_block);
    free(s->wait_at);
}

/* Runs the simulator over every rank's programs; returns the number of violations, and
 * prints the first when `expect_none` (a broken plan made on purpose stays quiet). */
static int check_slots(const dcp_plan_t *p, int expect_none)
{
    sim_t s = {.p = p};
    s.sent = calloc((size_t)p->num_xfers + 1, sizeof *s.sent);
    /* two rounds learn what each transfer carries (a hub forwards what it receives), the
     * third checks */
    for (int round = 0; round < 3; round++) {
        s.check = round == 2;
        for (int k = 0; k < DCP_PASS_COUNT; k++)
            for (s.rank = 0, s.pass = (dcp_pass_t)k; s.rank < p->num_ranks; s.rank++)
                simulate_rank(&s);
    }
    if (s.failures && expect_none)
        fprintf(stderr, "slot check: %d violations, first: %s\n", s.failures, s.first_failure);
    free(s.sent);
    return s.failures;
}

typedef struct {
    int32_t q, kv, h;
} triple_t;

static int triple_cmp(const void *a, const void *b)
{
    const triple_t *x = a, *y = b;
    if (x->q != y->q) return x->q < y->q ? -1 : 1;
    if (x->kv != y->kv) return x->kv < y->kv ? -1 : 1;
    return (x->h > y->h) - (x->h < y->h);
}

/* In each pass each computation block runs exactly once, and together they cover every
 * allowed pair. */
static void check_exactly_once(const dcp_plan_t *p, dcp_pass_t pass, const int32_t *len,
                               const dcp_mask_t *m, int32_t nseq)
{
    triple_t *all = malloc((size_t)p->num_tiles * sizeof *all + 1);
    int64_t n = 0;
    for (int64_t i = 0; i < p->num_instrs; i++) {
        if (p->instrs[i].op != DCP_OP_ATTN || p->instrs[i].arg != (int32_t)pass) continue;
        for (int64_t g = p->instrs[i].first; g < p->instrs[i].first + p->instrs[i].count; g++)
            for (int32_t t = p->groups[g].first_tile;
                 t < p->groups[g].first_tile + p->groups[g].num_tiles; t++)
                all[n++] =
                    (triple_t){p->groups[g].q_block, p->tiles[t].kv_block, p->groups[g].head_group};
    }
    qsort(all, (size_t)n, sizeof *all, triple_cmp);
    for (int64_t i = 1; i < n; i++) CU_ASSERT(triple_cmp(&all[i - 1], &all[i]) != 0);
    CU_ASSERT_EQUAL(n, p->stats.num_comp_blocks);
    int64_t pairs = 0;
    for (int32_t s = 0; s < nseq; s++)
        for (int32_t i = 0; i < len[s]; i++)
            for (int32_t j = 0; j < len[s]; j++) pairs += bf_allowed(&m[s], len[s], i, j);
    const int64_t per_pair = pass == DCP_PASS_FWD ? 4 : 10; /* the backward: 2.5x */
    CU_ASSERT_EQUAL(pass == DCP_PASS_FWD ? p->stats.total_flops : p->stats.bwd_flops,
                    pairs * p->opts.head_blocks * per_pair * p->shape.head_dim * p->qpg);
    free(all);
}

/* 1 when rank r sends in phase ph from a slot it received into (a hub forwarding an input)
 * or from a PART slot that a REDUCE before the launch merged into (a hub's merged partial). */
static int forwards_in(const dcp_plan_t *p, int32_t r, int32_t ph)
{
    const dcp_pass_t pass = ph < p->pass_phase[DCP_PASS_BWD] ? DCP_PASS_FWD : DCP_PASS_BWD;
    int64_t merged_at = -1;
    for (int64_t i = dcp_plan_prog_begin(p, pass, r); i < dcp_plan_prog_end(p, pass, r); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op == DCP_OP_REDUCE) merged_at = i;
        if (in->op != DCP_OP_COMM_LAUNCH || in->arg != ph) continue;
        for (int64_t k = in->first; k < in->first + in->count; k++) {
            const dcp_comm_op_t *op = &p->comm[k];
            if (op->send &&
                (op->buf == DCP_BUF_RQ || op->buf == DCP_BUF_RKV || op->buf == DCP_BUF_RSTAT ||
                 (op->buf == DCP_BUF_PART && merged_at >= 0)))
                return 1;
        }
    }
    return 0;
}

/* 1 when the rank receives an input (not a partial) in phase ph (launched at launch_at[ph]). */
static int inputs_in(const dcp_plan_t *p, int32_t ph, const int64_t *launch_at)
{
    if (launch_at[ph] < 0) return 0;
    const dcp_instr_t *in = &p->instrs[launch_at[ph]];
    for (int64_t k = in->first; k < in->first + in->count; k++)
        if (!p->comm[k].send && p->comm[k].buf != DCP_BUF_PART) return 1;
    return 0;
}

/* Whether an ATTN lies strictly between instructions a and b. */
static int attn_between(const dcp_plan_t *p, int64_t a, int64_t b)
{
    for (int64_t i = a + 1; i < b; i++)
        if (p->instrs[i].op == DCP_OP_ATTN) return 1;
    return 0;
}

/* Division 0 (before any wait) reads only local rows. Divisions: step d+1 is launched
 * before step d is waited for, unless the rank forwards in it what step d brought (a hub);
 * a step that brings the rank no input is waited for after division d computes, just before
 * step d+2 is launched; never more than two steps in flight.
 * Rounds: one phase in flight at a time, and in each phase a
 * rank sends and receives at most `coalesce` blocks. */
static void check_overlap(const dcp_plan_t *p, dcp_pass_t pass)
{
    int64_t *launch_at = malloc(((size_t)p->num_phases + 1) * sizeof *launch_at);
    int64_t *wait_at = malloc(((size_t)p->num_phases + 1) * sizeof *wait_at);
    const int32_t ph0 = p->pass_phase[pass], ph1 = p->pass_phase[pass + 1];
    for (int32_t r = 0; r < p->num_ranks; r++) {
        for (int i = 0; i < p->num_phases; i++) launch_at[i] = wait_at[i] = -1;
        int waited = 0, in_flight = 0;
        for (int64_t i = dcp_plan_prog_begin(p, pass, r); i < dcp_plan_prog_end(p, pass, r); i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op == DCP_OP_COMM_LAUNCH) {
                launch_at[in->arg] = i;
                in_flight++;
                int sends = 0, recvs = 0;
                for (int64_t k = in->first; k < in->first + in->count; k++) {
                    sends += p->comm[k].send;
                    recvs += !p->comm[k].send;
                }
                CU_ASSERT(in_flight <= 2);
                if (p->opts.comm_schedule == DCP_COMM_ROUNDS) {
                    CU_ASSERT(in_flight == 1);
                    CU_ASSERT(sends <= p->opts.coalesce && recvs <= p->opts.coalesce);
                }
            }
            if (in->op == DCP_OP_COMM_WAIT) {
                wait_at[in->arg] = i;
                waited = 1;
                in_flight--;
            }
            if (in->op != DCP_OP_ATTN || waited || p->opts.divisions == 1) continue;
            for (int64_t g = in->first; g < in->first + in->count; g++) {
                CU_ASSERT_EQUAL(p->groups[g].q.buf, DCP_BUF_Q);
                for (int32_t t = p->groups[g].first_tile;
                     t < p->groups[g].first_tile + p->groups[g].num_tiles; t++)
                    CU_ASSERT_EQUAL(p->tiles[t].k.buf, DCP_BUF_K);
            }
        }
        if (p->opts.comm_schedule == DCP_COMM_DIVISIONS)
            for (int32_t a = ph0; a < ph1; a++)
                for (int32_t b = ph0; b < ph1; b++)
                    if (p->phase_step[b] == p->phase_step[a] + 1 &&
                        p->phase_step[b] < p->opts.divisions && wait_at[a] >= 0 &&
                        launch_at[b] >= 0 && !forwards_in(p, r, b)) {
                        CU_ASSERT(launch_at[b] < wait_at[a]);
                        /* inputs: waited for before division d computes; none: waited
                         * for after it, right before step d+2 is launched */
                        if (inputs_in(p, a, launch_at)) {
                            CU_ASSERT(!attn_between(p, launch_at[b], wait_at[a]));
                            continue;
                        }
                        for (int32_t c = ph0; c < ph1; c++)
                            if (p->phase_step[c] == p->phase_step[b] + 1 && launch_at[c] >= 0) {
                                CU_ASSERT(wait_at[a] < launch_at[c]);
                                CU_ASSERT(!attn_between(p, wait_at[a], launch_at[c]));
                            }
                    }
    }
    free(launch_at);
    free(wait_at);
}

/* Which accumulator elements a rank has published. */
typedef struct {
    uint8_t *done[DCP_BUF_COUNT]; /* per accumulator element: published */
    int64_t published[DCP_BUF_COUNT];
    int ok;
} publish_t;

/* The accumulator elements of a view's rows: published now (publish), or written, which
 * must come before they are published. */
static void acc_rows(publish_t *w, dcp_view_t v, int32_t rows, int32_t width, int publish)
{
    if (v.buf < DCP_BUF_ACC_O || v.buf > DCP_BUF_ACC_DV || v.buf == DCP_BUF_DELTA) return;
    for (int32_t r = 0; r < rows; r++)
        for (int32_t e = 0; e < width; e++) {
            uint8_t *d = &w->done[v.buf][v.off + (int64_t)r * v.stride + e];
            if (*d) w->ok = 0; /* published twice, or written after it was published */
            if (publish) {
                *d = 1;
                w->published[v.buf]++;
            }
        }
}

/* Every accumulator element of the rank's outputs is published (copied into the caller's
 * output) exactly once, after the last instruction that writes it and after the pass's last
 * wait: dcp.h promises outputs written only on success, and a transfer can fail until the
 * last wait has returned. */
static void check_publish(const dcp_plan_t *p, dcp_pass_t pass, int32_t r)
{
    const int64_t d = p->shape.head_dim, hq = p->shape.num_heads, hkv = p->shape.num_kv_heads;
    const int64_t rows = p->rank_tokens[r];
    const int64_t width[DCP_BUF_COUNT] = {[DCP_BUF_ACC_O] = hq * d,
                                          [DCP_BUF_ACC_LSE] = hq,
                                          [DCP_BUF_ACC_DQ] = hq * d,
                                          [DCP_BUF_ACC_DK] = hkv * d,
                                          [DCP_BUF_ACC_DV] = hkv * d};
    static const int32_t out_of[DCP_BUF_COUNT] = {[DCP_BUF_ACC_O] = DCP_BUF_O,
                                                  [DCP_BUF_ACC_LSE] = DCP_BUF_LSE,
                                                  [DCP_BUF_ACC_DQ] = DCP_BUF_DQ,
                                                  [DCP_BUF_ACC_DK] = DCP_BUF_DK,
                                                  [DCP_BUF_ACC_DV] = DCP_BUF_DV};
    publish_t w = {.ok = 1};
    for (int b = 0; b < DCP_BUF_COUNT; b++)
        if (width[b] > 0) w.done[b] = calloc((size_t)(rows * width[b]) + 1, 1);
    const int32_t qw = (int32_t)(p->qpg * d), kw = (int32_t)(p->kvpg * d);
    int64_t last_wait = -1, first_publish = -1;
    const int64_t i0 = dcp_plan_prog_begin(p, pass, r), i1 = dcp_plan_prog_end(p, pass, r);
    for (int64_t i = i0; i < i1; i++)
        if (p->instrs[i].op == DCP_OP_COMM_WAIT) last_wait = i;
    for (int64_t i = i0; i < i1; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        const int64_t end = in->first + in->count;
        if (in->op == DCP_OP_ATTN)
            for (int64_t g = in->first; g < end; g++) {
                const dcp_tile_group_t *gr = &p->groups[g];
                acc_rows(&w, pass == DCP_PASS_FWD ? gr->o : gr->dq, gr->q_len, qw, 0);
                if (pass == DCP_PASS_FWD) acc_rows(&w, gr->lse, gr->q_len, (int32_t)p->qpg, 0);
                for (int32_t t = gr->first_tile;
                     pass == DCP_PASS_BWD && t < gr->first_tile + gr->num_tiles; t++) {
                    acc_rows(&w, p->tiles[t].dk, p->tiles[t].kv_len, kw, 0);
                    acc_rows(&w, p->tiles[t].dv, p->tiles[t].kv_len, kw, 0);
                }
            }
        if (in->op == DCP_OP_REDUCE && pass == DCP_PASS_FWD)
            for (int64_t k = in->first; k < end; k++) {
                acc_rows(&w, p->merges[k].o, p->merges[k].rows, qw, 0);
                acc_rows(&w, p->merges[k].lse, p->merges[k].rows, (int32_t)p->qpg, 0);
            }
        if (in->op == DCP_OP_REDUCE && pass == DCP_PASS_BWD)
            for (int64_t k = in->first; k < end; k++)
                acc_rows(&w, p->copies[k].dst, p->copies[k].rows, p->copies[k].row_elems, 0);
        if (in->op == DCP_OP_COPY)
            for (int64_t k = in->first; k < end; k++) {
                const dcp_copy_item_t *c = &p->copies[k];
                if (c->src.buf < DCP_BUF_ACC_O || c->src.buf > DCP_BUF_ACC_DV ||
                    c->src.buf == DCP_BUF_DELTA)
                    continue; /* packing a send */
                CU_ASSERT_EQUAL(c->dst.buf, out_of[c->src.buf]);
                CU_ASSERT(c->dst.off == c->src.off && c->dst.stride == c->src.stride);
                acc_rows(&w, c->src, c->rows, c->row_elems, 1);
                if (first_publish < 0) first_publish = i;
            }
    }
    CU_ASSERT(w.ok);
    const int32_t outs[2][3] = {{DCP_BUF_ACC_O, DCP_BUF_ACC_LSE, -1},
                                {DCP_BUF_ACC_DQ, DCP_BUF_ACC_DK, DCP_BUF_ACC_DV}};
    for (int k = 0; k < 3 && outs[pass][k] >= 0; k++)
        CU_ASSERT_EQUAL(w.published[outs[pass][k]], rows * width[outs[pass][k]]);
    CU_ASSERT(first_publish < 0 || first_publish > last_wait);
    for (int b = 0; b < DCP_BUF_COUNT; b++) free(w.done[b]);
}

static void test_invariants_on_many_plans(void)
{
    static const char *clusters[] = {"1x1", "1x2", "1x3", "2x4"};
    static const int32_t divisions[] = {1, 2, 4, 8}; /* 8: local divisions at both ends */
    dcpt_rng_t rng = {31};
    int plans = 0, hubs = 0;
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
            for (int c = 0; c < 4; c++) {
                /* a 1-token sequence, short ones and one much longer */
                int32_t len[5] = {1, (int32_t)dcpt_rng_range(&rng, 2, 40), 260,
                                  (int32_t)dcpt_rng_range(&rng, 1, 70), 1};
                dcp_mask_t m[5];
                int32_t *store[5];
                for (int i = 0; i < 5; i++)
                    m[i] = t_random_mask(&rng, (dcp_mask_kind_t)kind, len[i], &store[i]);
                const int32_t div = divisions[(kind + s + c) % 4];
                const int32_t hb = 1 + (kind + c) % 2;
                const int32_t block = (int32_t)dcpt_rng_range(&rng, 8, 48);
                dcp_plan_options_t o;
                dcp_plan_options_default(&o);
                o.strategy = (dcp_strategy_t)s;
                o.block_size = block;
                o.divisions = div;
                o.head_blocks = hb;
                o.comm_schedule = (kind + c) % 3 == 2 ? DCP_COMM_ROUNDS : DCP_COMM_DIVISIONS;
                o.coalesce = 1 + (kind % 2);
                dcp_plan_t *p = t_plan_opts(len, 5, m, clusters[c], &o);
                CU_ASSERT_EQUAL(dcp_plan_check_inputs(p), DCP_OK);
                CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_OK);
                CU_ASSERT_EQUAL(check_slots(p, 1), 0);
                for (int k = 0; k < DCP_PASS_COUNT; k++) {
                    check_exactly_once(p, (dcp_pass_t)k, len, m, 5);
                    check_overlap(p, (dcp_pass_t)k);
                    for (int32_t r = 0; r < p->num_ranks; r++) check_publish(p, (dcp_pass_t)k, r);
                }
                for (int32_t r = 0; r < p->num_ranks; r++)
                    for (int32_t ph = 0; ph < p->num_phases; ph++) hubs += forwards_in(p, r, ph);
                dcp_plan_destroy(p);
                for (int i = 0; i < 5; i++) free(store[i]);
                plans++;
            }
    CU_ASSERT_EQUAL(plans, DCP_MASK_KIND_COUNT * DCP_STRATEGY_COUNT * 4);
    CU_ASSERT(hubs > 0); /* relays between the 2x4 plans' nodes are among the checked */
}

/* The orders' batch: 16 causal documents of 325-3183 tokens, block 128, 2 head groups,
 * placed by the default on `spec`; *c_out and *x_out are the caller's to release. */
static dcp_status_t place_orders_batch(const char *spec, dcp_plan_options_t *o_out,
                                       dcp_cluster_t **c_out, dcp_placed_t *x_out)
{
    static const int32_t lens[16] = {500, 501, 1268, 2131, 325, 1308, 609,  1068,
                                     799, 810, 3183, 1906, 871, 1739, 1632, 1553};
    dcp_mask_t m[16];
    for (int i = 0; i < 16; i++) m[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    const dcp_batch_t batch = {.num_seqs = 16, .lengths = lens, .masks = m};
    const dcp_attn_shape_t shape = {8, 2, 16, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_default(o_out);
    o_out->block_size = 128;
    o_out->head_blocks = 2;
    DCP_CHECK(dcp_cluster_from_spec(spec, c_out));
    const dcp_status_t st = dcp_place_batch(&batch, &shape, o_out, *c_out, x_out);
    if (st != DCP_OK) {
        dcp_cluster_destroy(*c_out);
        *c_out = NULL;
    }
    return st;
}

/* Remote blocks that read from other nodes take the middle remote divisions: on every rank,
 * no block that reads only inside its node lies strictly between the first and the last
 * division holding a block that reads from another node; and on 4x4 ranks (16 causal
 * sequences of 325-3183 tokens, block 128, METIS) some ranks have such near blocks both
 * before and after them. */
static void test_far_inputs_in_the_middle(void)
{
    dcp_plan_options_t o;
    dcp_cluster_t *c = NULL;
    dcp_placed_t x = {0};
    CU_ASSERT_EQUAL_FATAL(place_orders_batch("4x4", &o, &c, &x), DCP_OK);
    dcp_schedule_t s;
    CU_ASSERT_EQUAL_FATAL(dcp_schedule_build(&x.b, &x.pl, c->num_ranks, c->devs_per_node, 8,
                                             DCP_COMM_DIVISIONS, 1, DCP_PASS_FWD, DCP_ORDER_DEFAULT,
                                             &s),
                          DCP_OK);
    const int32_t hb = x.b.head_blocks, dv = c->devs_per_node;
    int both_sides = 0;
    for (int32_t r = 0; r < c->num_ranks; r++) {
        int32_t far_lo = INT32_MAX, far_hi = -1;
        for (int pass = 0; pass < 2; pass++) {
            int before = 0, after = 0;
            for (int64_t i = s.rank_off[r]; i < s.rank_off[r + 1]; i++) {
                const int64_t comp = s.order[i], t = comp / hb;
                const int32_t owners[2] = {x.pl.blk_owner[x.b.tile_q[t]],
                                           x.pl.blk_owner[x.b.tile_kv[t]]};
                int remote = 0, far = 0;
                for (int k = 0; k < 2; k++) {
                    remote |= owners[k] != r;
                    far |= owners[k] / dv != r / dv;
                }
                const int32_t d = s.comp_div[comp];
                if (pass == 0 && far) {
                    far_lo = d < far_lo ? d : far_lo;
                    far_hi = d > far_hi ? d : far_hi;
                }
                if (pass == 1 && remote && !far && far_hi >= 0) {
                    CU_ASSERT(d <= far_lo || d >= far_hi);
                    before += d < far_lo;
                    after += d > far_hi;
                }
            }
            both_sides += pass == 1 && before > 0 && after > 0;
        }
    }
    CU_ASSERT(both_sides > 0);
    dcp_schedule_release(&s);
    dcp_placed_release(&x);
    dcp_cluster_destroy(c);
}

/* Local FLOPs of a schedule's last division (the local tail), summed over ranks. */
static double tail_local_flops(const dcp_placed_t *x, const dcp_schedule_t *s)
{
    const int32_t hb = x->b.head_blocks;
    double f = 0;
    for (int32_t r = 0; r < s->num_ranks; r++)
        for (int64_t i = s->rank_off[r]; i < s->rank_off[r + 1]; i++) {
            const int64_t comp = s->order[i], t = comp / hb;
            if (s->comp_div[comp] == s->num_divs - 1 && x->pl.blk_owner[x->b.tile_q[t]] == r &&
                x->pl.blk_owner[x->b.tile_kv[t]] == r)
                f += (double)dcp_blocks_comp_flops(&x->b, t);
        }
    return f;
}

/* DCP_ORDER_LONG_TAIL: in the forward, on every rank, the remote blocks that read from
 * another node but return no partial there (the query block is on the rank's node) come in
 * no division before any other remote block's, and some ranks have them (the batch of
 * test_far_inputs_in_the_middle on 4x4, 8 divisions); in both passes the local tail computes
 * about 0.7 of the local FLOPs where the default's computes half. */
static void test_long_tail_order(void)
{
    dcp_plan_options_t o;
    dcp_cluster_t *c = NULL;
    dcp_placed_t x = {0};
    CU_ASSERT_EQUAL_FATAL(place_orders_batch("4x4", &o, &c, &x), DCP_OK);
    const int32_t hb = x.b.head_blocks, dv = c->devs_per_node;
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        dcp_schedule_t s[2];
        for (int k = 0; k < 2; k++)
            CU_ASSERT_EQUAL_FATAL(dcp_schedule_build(&x.b, &x.pl, c->num_ranks, dv, 8,
                                                     DCP_COMM_DIVISIONS, 1, (dcp_pass_t)pass,
                                                     k ? DCP_ORDER_LONG_TAIL : DCP_ORDER_DEFAULT,
                                                     &s[k]),
                                  DCP_OK);
        const double tail[2] = {tail_local_flops(&x, &s[0]), tail_local_flops(&x, &s[1])};
        CU_ASSERT(tail[0] > 0);
        CU_ASSERT(tail[1] > 1.25 * tail[0]);
        int ranks_with = 0;
        for (int32_t r = 0; pass == DCP_PASS_FWD && r < c->num_ranks; r++) {
            int32_t input_lo = INT32_MAX, other_hi = -1;
            for (int64_t i = s[1].rank_off[r]; i < s[1].rank_off[r + 1]; i++) {
                const int64_t comp = s[1].order[i], t = comp / hb;
                const int32_t q = x.pl.blk_owner[x.b.tile_q[t]],
                              kv = x.pl.blk_owner[x.b.tile_kv[t]], d = s[1].comp_div[comp];
                if (q == r && kv == r) continue;
                if (q / dv == r / dv && kv / dv != r / dv)
                    input_lo = d < input_lo ? d : input_lo;
                else
                    other_hi = d > other_hi ? d : other_hi;
            }
            if (input_lo == INT32_MAX) continue;
            ranks_with++;
            CU_ASSERT(input_lo >= other_hi);
        }
        if (pass == DCP_PASS_FWD) CU_ASSERT(ranks_with > 0);
        for (int k = 0; k < 2; k++) dcp_schedule_release(&s[k]);
    }
    dcp_placed_release(&x);
    dcp_cluster_destroy(c);
}

/* Ranks of schedule s whose blocks reading a query block from another node are not in runs
 * by (query block, head group): some such block of a later (query, head) comes in an earlier
 * division than one of an earlier (query, head). */
static int32_t ranks_out_of_query_runs(const dcp_placed_t *x, const dcp_schedule_t *s,
                                       int32_t devs_per_node)
{
    const int32_t hb = x->b.head_blocks;
    int32_t out = 0;
    for (int32_t r = 0; r < s->num_ranks; r++) {
        int bad = 0;
        for (int64_t i = s->rank_off[r]; i < s->rank_off[r + 1] && !bad; i++)
            for (int64_t j = s->rank_off[r]; j < s->rank_off[r + 1] && !bad; j++) {
                const int64_t a = s->order[i], b = s->order[j];
                const int32_t qa = x->b.tile_q[a / hb], qb = x->b.tile_q[b / hb];
                if (x->pl.blk_owner[qa] / devs_per_node == r / devs_per_node ||
                    x->pl.blk_owner[qb] / devs_per_node == r / devs_per_node)
                    continue;
                const int64_t ka = (int64_t)qa * hb + a % hb, kb = (int64_t)qb * hb + b % hb;
                bad = ka < kb && s->comp_div[a] > s->comp_div[b];
            }
        out += bad;
    }
    return out;
}

/* DCP_ORDER_QUERY_RUNS: in the forward, on every rank, the blocks whose query block lives on
 * another node run by (query block, head group), where the default's and the long tail's
 * orders leave some ranks' out of such runs, and the local tail is DCP_ORDER_LONG_TAIL's; the
 * backward is the default's, block for block (the batch of test_long_tail_order on 8x2). */
static void test_query_runs_order(void)
{
    dcp_plan_options_t o;
    dcp_cluster_t *c = NULL;
    dcp_placed_t x = {0};
    CU_ASSERT_EQUAL_FATAL(place_orders_batch("8x2", &o, &c, &x), DCP_OK);
    const int32_t dv = c->devs_per_node;
    const int64_t ncomp = x.b.num_tiles * x.b.head_blocks;
    static const dcp_order_t orders[3] = {DCP_ORDER_DEFAULT, DCP_ORDER_LONG_TAIL,
                                          DCP_ORDER_QUERY_RUNS};
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        dcp_schedule_t s[3];
        for (int k = 0; k < 3; k++)
            CU_ASSERT_EQUAL_FATAL(dcp_schedule_build(&x.b, &x.pl, c->num_ranks, dv, 8,
                                                     DCP_COMM_DIVISIONS, 1, (dcp_pass_t)pass,
                                                     orders[k], &s[k]),
                                  DCP_OK);
        if (pass == DCP_PASS_FWD) {
            CU_ASSERT(ranks_out_of_query_runs(&x, &s[0], dv) > 0);
            CU_ASSERT(ranks_out_of_query_runs(&x, &s[1], dv) > 0);
            CU_ASSERT_EQUAL(ranks_out_of_query_runs(&x, &s[2], dv), 0);
            CU_ASSERT_EQUAL(tail_local_flops(&x, &s[2]), tail_local_flops(&x, &s[1]));
        } else {
            int64_t same = 0;
            for (int64_t comp = 0; comp < ncomp; comp++)
                same += s[2].comp_div[comp] == s[0].comp_div[comp];
            CU_ASSERT_EQUAL(same, ncomp);
            CU_ASSERT_EQUAL(memcmp(s[2].order, s[0].order, ncomp * sizeof *s[0].order), 0);
        }
        for (int k = 0; k < 3; k++) dcp_schedule_release(&s[k]);
    }
    dcp_placed_release(&x);
    dcp_cluster_destroy(c);
}

/* The simulator itself must catch a broken program: reuse a received slot too early. */
static void test_simulator_catches_reuse(void)
{
    const int32_t len[1] = {256};
    const dcp_mask_t m[1] = {{.kind = DCP_MASK_CAUSAL}};
    dcp_plan_t *p = t_plan(len, 1, m, "1x4", DCP_STRATEGY_RING, 16, 2, 1);
    CU_ASSERT_EQUAL_FATAL(check_slots(p, 1), 0);
    /* point every received KV slot at offset 0: blocks now overwrite each other */
    int changed = 0;
    for (int64_t i = 0; i < p->num_comm; i++)
        if (!p->comm[i].send && p->comm[i].buf == DCP_BUF_RKV && p->comm[i].off != 0) {
            p->comm[i].off = 0;
            changed = 1;
        }
    CU_ASSERT_FATAL(changed);
    CU_ASSERT(check_slots(p, 0) > 0);
    dcp_plan_destroy(p);
}

/* Sends and receives pair up: per transfer exactly one each, same size, same step. */
static void test_every_send_has_its_receive(void)
{
    const int32_t len[3] = {300, 1, 77};
    const dcp_mask_t m[3] = {
        {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    dcp_plan_t *p = t_plan(len, 3, m, "2x4", DCP_STRATEGY_ZIGZAG, 16, 4, 2);
    int32_t *sends = calloc((size_t)p->num_xfers, sizeof *sends),
            *recvs = calloc((size_t)p->num_xfers, sizeof *recvs);
    int64_t sent = 0, recvd = 0;
    for (int64_t i = 0; i < p->num_instrs; i++) /* every program of both passes */
        if (p->instrs[i].op == DCP_OP_COMM_LAUNCH)
            for (int64_t k = p->instrs[i].first; k < p->instrs[i].first + p->instrs[i].count; k++) {
                const dcp_comm_op_t *op = &p->comm[k];
                (op->send ? sends : recvs)[op->transfer]++;
                if (op->send)
                    sent += op->elems;
                else
                    recvd += op->elems;
            }
    CU_ASSERT(p->num_xfers > 0);
    for (int32_t x = 0; x < p->num_xfers; x++) CU_ASSERT(sends[x] == 1 && recvs[x] == 1);
    CU_ASSERT_EQUAL(sent, recvd);
    free(sends);
    free(recvs);
    /* and the validator notices a receive that goes missing */
    for (int64_t i = 0; i < p->num_comm; i++)
        if (!p->comm[i].send) {
            p->comm[i].transfer = (p->comm[i].transfer + 1) % p->num_xfers;
            break;
        }
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    dcp_plan_destroy(p);
}

int dcp_suite_schedule(void)
{
    static const dcp_test_t tests[] = {
        {"invariants_on_many_plans", test_invariants_on_many_plans},
        {"far_inputs_in_the_middle", test_far_inputs_in_the_middle},
        {"long_tail_order", test_long_tail_order},
        {"query_runs_order", test_query_runs_order},
        {"simulator_catches_reuse", test_simulator_catches_reuse},
        {"every_send_has_its_receive", test_every_send_has_its_receive},
        {NULL, NULL},
    };
    return dcp_add_suite("schedule", tests);
}
