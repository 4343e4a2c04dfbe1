/*
 * Where a simulated pass's time went (simulate.h): the kinds of the transfer groups of a
 * trace, the slowest rank's exposed communication by (step, kind, link class), and the
 * critical path across ranks.
 *
 * The plan's operations carry no kind; a received block's kind follows from the buffer it
 * lands in and the pass (as program.c chose it), and a backward partial is a dK + dV exactly
 * when two of the receiver's sums read it (dK rows, then dV rows), a dQ when one does.
 */
#include "include/base/error.h"
#include "partition/sim/simulate.h"

#include <stdlib.h>
#include <string.h>

/* The kind of a received input from the buffer it lands in, and of a forward partial. */
static int32_t recv_kind(dcp_pass_t pass, const dcp_comm_op_t *op)
{
    switch (op->buf) {
    case DCP_BUF_RKV:
        return DCP_XFER_KV;
    case DCP_BUF_RQ:
        return pass == DCP_PASS_BWD ? DCP_XFER_BQ : DCP_XFER_Q;
    case DCP_BUF_RSTAT:
        return DCP_XFER_BSTAT;
    default:
        return pass == DCP_PASS_BWD ? DCP_XFER_DQ : DCP_XFER_PART; /* DQ: see below */
    }
}

/* Received backward partials by the PART offset they land at: open addressing with linear
 * probing over one rank's receives. A cell is empty (xfer -1), holds a partial not yet
 * summed (xfer >= 0) or one that was (-2: the slot may be reused, the key stays). */
typedef struct {
    int64_t *off, *elems;
    int32_t *xfer;
    int64_t cap; /* a power of two, at least twice the receives */
} part_map_t;

static int64_t map_cell(const part_map_t *m, int64_t off)
{
    int64_t i = (int64_t)(((uint64_t)off * 0x9e3779b97f4a7c15ull) >> 17) & (m->cap - 1);
    while (m->xfer[i] != -1 && m->off[i] != off) i = (i + 1) & (m->cap - 1);
    return i;
}

/* Rank r's backward partials received into PART that are dK + dV (dkv[transfer - base] = 1):
 * a dQ is summed in one copy that covers its slot, a dK + dV in two (dK rows, then dV rows
 * from the middle of the slot) - into the accumulators or, at a hub, into its own partial.
 * Slots are reused once summed, so the program is walked in order and each receive is
 * matched with the first sum that starts at its offset after it. */
static void mark_dkv(const dcp_plan_t *p, int32_t r, int32_t base, part_map_t *m, uint8_t *dkv)
{
    for (int64_t i = 0; i < m->cap; i++) m->xfer[i] = -1;
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, r);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, r); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        for (int64_t j = in->first; in->op == DCP_OP_COMM_LAUNCH && j < in->first + in->count;
             j++) {
            const dcp_comm_op_t *op = &p->comm[j];
            if (op->send || op->buf != DCP_BUF_PART) continue;
            const int64_t c = map_cell(m, op->off);
            m->off[c] = op->off;
            m->elems[c] = op->elems;
            m->xfer[c] = op->transfer;
        }
        for (int64_t j = in->first; in->op == DCP_OP_REDUCE && j < in->first + in->count; j++) {
            const dcp_copy_item_t *cp = &p->copies[j];
            if (cp->src.buf != DCP_BUF_PART) continue;
            const int64_t c = map_cell(m, cp->src.off);
            if (m->xfer[c] < 0) continue; /* a dV copy, from inside a slot */
            dkv[m->xfer[c] - base] = (int64_t)cp->rows * cp->row_elems < m->elems[c];
            m->xfer[c] = -2;
        }
    }
}

dcp_status_t dcp_sim_group_kinds(const dcp_plan_t *p, dcp_sim_trace_t *t, const int64_t *group_of)
{
    const int32_t base = p->pass_xfer[t->pass];
    const int bwd = t->pass == DCP_PASS_BWD;
    part_map_t m = {0};
    uint8_t *dkv = NULL;
    dcp_status_t st = DCP_OK;
    if (bwd) {
        int64_t most = 0;
        for (int32_t r = 0; r < t->num_ranks; r++) {
            int64_t n = 0;
            for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, r);
                 i < dcp_plan_prog_end(p, DCP_PASS_BWD, r); i++)
                if (p->instrs[i].op == DCP_OP_COMM_LAUNCH) n += p->instrs[i].count;
            most = n > most ? n : most;
        }
        for (m.cap = 16; m.cap < 2 * most; m.cap *= 2) {
        }
        DCP_CHECK_GOTO(dcp_calloc(&m.off, m.cap, sizeof *m.off, "simulator kinds"), st, out);
        DCP_CHECK_GOTO(dcp_calloc(&m.elems, m.cap, sizeof *m.elems, "simulator kinds"), st, out);
        DCP_CHECK_GOTO(dcp_calloc(&m.xfer, m.cap, sizeof *m.xfer, "simulator kinds"), st, out);
        DCP_CHECK_GOTO(
            dcp_calloc(&dkv, p->pass_xfer[DCP_PASS_BWD + 1] - base + 1, 1, "simulator kinds"), st,
            out);
    }
    for (int32_t r = 0; r < t->num_ranks; r++) {
        if (bwd) mark_dkv(p, r, base, &m, dkv);
        for (int64_t i = dcp_plan_prog_begin(p, t->pass, r); i < dcp_plan_prog_end(p, t->pass, r);
             i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t j = in->first; j < in->first + in->count; j++) {
                const dcp_comm_op_t *op = &p->comm[j];
                if (op->send) continue;
                int32_t kind = recv_kind(t->pass, op);
                if (kind == DCP_XFER_DQ && dkv[op->transfer - base]) kind = DCP_XFER_DKV;
                t->groups[group_of[op->transfer - base]].kind_bytes[kind] +=
                    (double)op->elems * dcp_plan_elem_bytes(p, op->buf);
            }
        }
    }
out:
    free(m.off);
    free(m.elems);
    free(m.xfer);
    free(dkv);
    return st;
}

/* ---- explaining a trace ---------------------------------------------------------------- */

typedef struct {
    const dcp_plan_t *p;
    const dcp_sim_trace_t *t;
    dcp_sim_explain_t *e;
    int64_t cap_path;
    char *on_path; /* [ranks] */
} explainer_t;

/* Adds `ms` of group g to table v (ms per (step, kind, class)), split by its kinds' bytes. */
static void blame(const dcp_sim_trace_t *t, int64_t g, int32_t step, double ms, double *v)
{
    const dcp_sim_group_t *G = &t->groups[g];
    if (!(G->bytes > 0)) return;
    for (int k = 0; k < DCP_XFER_KIND_COUNT; k++)
        v[dcp_sim_cell(step, k, G->inter)] += ms * G->kind_bytes[k] / G->bytes;
}

static dcp_status_t add_seg(explainer_t *x, int32_t rank, int32_t what, double t0, double t1,
                            int64_t group)
{
    dcp_sim_explain_t *e = x->e;
    if (!(t1 > t0)) return DCP_OK;
    DCP_CHECK(
        dcp_reserve(&e->path, &x->cap_path, e->num_path + 1, sizeof *e->path, "simulator path"));
    e->path[e->num_path++] = (dcp_sim_seg_t){rank, what, t0, t1, group};
    if (rank >= 0 && !x->on_path[rank]) {
        x->on_path[rank] = 1;
        e->path_ranks++;
    }
    const double ms = (t1 - t0) * 1e3;
    if (what == DCP_SIM_SEG_ATTN) e->path_attn_ms += ms;
    if (what == DCP_SIM_SEG_MEMORY) e->path_memory_ms += ms;
    if (what == DCP_SIM_SEG_LATENCY) e->path_latency_ms += ms;
    return DCP_OK;
}

/* Each launch's ready time: the latest moment one of its groups had both sides started. */
static dcp_status_t launch_ready(const dcp_sim_trace_t *t, double **ready_out)
{
    double *ready;
    DCP_CHECK(dcp_calloc(&ready, t->num_launches + 1, sizeof *ready, "simulator explain"));
    for (int64_t g = 0; g < t->num_groups; g++)
        for (int j = 0; j < 2; j++) {
            double *rd = &ready[t->groups[g].launch[j]];
            if (t->groups[g].sides_s > *rd) *rd = t->groups[g].sides_s;
        }
    *ready_out = ready;
    return DCP_OK;
}

/* The part of a blocked wait (instruction li) spent before a peer had started its side, as
 * the simulator splits it. */
static double waiting_part(const dcp_sim_trace_t *t, int64_t li, const double *ready)
{
    const double blocked = t->t1[li] - t->t0[li];
    const double w = ready[t->wait_launch[li]] - t->t0[li];
    return w < 0 ? 0 : w > blocked ? blocked : w;
}

/* The slowest rank's blocked stretches, less their waiting part, blamed on the group that
 * ended each. */
static void explain_exposed(explainer_t *x, int32_t slow, const double *ready)
{
    const dcp_plan_t *p = x->p;
    const dcp_sim_trace_t *t = x->t;
    for (int64_t i = dcp_plan_prog_begin(p, t->pass, slow); i < dcp_plan_prog_end(p, t->pass, slow);
         i++) {
        const int64_t li = i - t->instr0, c = t->wait_launch[li];
        if (c < 0 || !(t->t1[li] > t->t0[li])) continue;
        const double exposed = t->t1[li] - t->t0[li] - waiting_part(t, li, ready);
        const dcp_sim_launch_t *l = &t->launches[c];
        if (l->last_group >= 0) blame(t, l->last_group, l->step, exposed * 1e3, x->e->exposed_ms);
    }
}

dcp_status_t dcp_sim_rank_timeline(const dcp_plan_t *p, const dcp_sim_trace_t *t, int32_t r,
                                   dcp_sim_seg_t **segs_out, int64_t *n_out)
{
    if (!p || !t || !segs_out || !n_out || r < 0 || r >= t->num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "simulator timeline: rank %d of %d", r,
                             t ? t->num_ranks : 0);
    const int64_t i0 = dcp_plan_prog_begin(p, t->pass, r), i1 = dcp_plan_prog_end(p, t->pass, r);
    double *ready;
    DCP_CHECK(launch_ready(t, &ready));
    dcp_sim_seg_t *segs = NULL;
    const dcp_status_t st =
        dcp_calloc(&segs, 2 * (i1 - i0) + 1, sizeof *segs, "simulator timeline");
    int64_t n = 0;
    for (int64_t i = i0; i < i1 && st == DCP_OK; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        const int64_t li = i - t->instr0;
        const double t0 = t->t0[li], t1 = t->t1[li];
        if (!(t1 > t0)) continue;
        if (in->op == DCP_OP_COMM_WAIT) {
            const double w = waiting_part(t, li, ready);
            const int64_t g = t->launches[t->wait_launch[li]].last_group;
            if (w > 0) segs[n++] = (dcp_sim_seg_t){r, DCP_SIM_SEG_WAITING, t0, t0 + w, g};
            if (t0 + w < t1) segs[n++] = (dcp_sim_seg_t){r, DCP_SIM_SEG_EXPOSED, t0 + w, t1, g};
        } else {
            const int32_t what = in->op == DCP_OP_ATTN ? DCP_SIM_SEG_ATTN : DCP_SIM_SEG_MEMORY;
            segs[n++] = (dcp_sim_seg_t){r, what, t0, t1, -1};
        }
    }
    free(ready);
    if (st != DCP_OK) return st;
    *segs_out = segs;
    *n_out = n;
    return DCP_OK;
}

/* Follows a launch's completion back to the moment the path returns to a rank's program:
 * through its last group (flow, latency), then the later-started of that group's two
 * launches; a launch that started when the one before it on its rank's transfer stream
 * completed leads on to that one. Leaves the rank, its instruction to continue before and
 * the time in *rank, *instr, *now. */
static dcp_status_t follow_launch(explainer_t *x, int64_t c, int32_t *rank, int64_t *instr,
                                  double *now)
{
    const dcp_sim_trace_t *t = x->t;
    for (;;) {
        const dcp_sim_launch_t *l = &t->launches[c];
        const int64_t g = l->last_group;
        const dcp_sim_group_t *G = &t->groups[g];
        DCP_CHECK(add_seg(x, G->dst, DCP_SIM_SEG_XFER, G->start_s, G->end_s, g));
        DCP_CHECK(add_seg(x, G->dst, DCP_SIM_SEG_LATENCY, G->sides_s, G->start_s, g));
        blame(t, g, l->step, (G->end_s - G->start_s) * 1e3, x->e->path_xfer_ms);
        const dcp_sim_launch_t *a = &t->launches[G->launch[0]], *b = &t->launches[G->launch[1]];
        const int64_t later = b->started_s > a->started_s ? G->launch[1] : G->launch[0];
        const dcp_sim_launch_t *L = &t->launches[later];
        if (L->started_s > L->reached_s && later > 0 && t->launches[later - 1].rank == L->rank) {
            c = later - 1; /* queued behind the launch before it */
            continue;
        }
        *rank = L->rank;
        *instr = L->instr;
        *now = L->reached_s;
        return DCP_OK;
    }
}

static dcp_status_t explain_path(explainer_t *x, int32_t slow)
{
    const dcp_plan_t *p = x->p;
    const dcp_sim_trace_t *t = x->t;
    int32_t r = slow;
    int64_t i = dcp_plan_prog_end(p, t->pass, r) - 1;
    double now = t->finish_s[r];
    while (i >= dcp_plan_prog_begin(p, t->pass, r)) {
        const dcp_instr_t *in = &p->instrs[i];
        const int64_t li = i - t->instr0;
        const double t0 = t->t0[li], t1 = t->t1[li];
        if (in->op == DCP_OP_COMM_WAIT && t1 > t0) {
            DCP_CHECK(follow_launch(x, t->wait_launch[li], &r, &i, &now));
        } else if (in->op == DCP_OP_ATTN || in->op == DCP_OP_REDUCE || in->op == DCP_OP_COPY) {
            DCP_CHECK(add_seg(x, r, in->op == DCP_OP_ATTN ? DCP_SIM_SEG_ATTN : DCP_SIM_SEG_MEMORY,
                              t0, t1, -1));
        }
        i--;
    }
    return DCP_OK;
}

void dcp_sim_explain_release(dcp_sim_explain_t *e)
{
    if (!e) return;
    free(e->exposed_ms);
    free(e->path_xfer_ms);
    free(e->path);
    *e = (dcp_sim_explain_t){0};
}

dcp_status_t dcp_sim_explain(const dcp_plan_t *p, const dcp_sim_trace_t *t,
                             const dcp_sim_result_t *res, dcp_sim_explain_t *out)
{
    if (!p || !t || !res || !out || res->slowest_rank < 0 || res->slowest_rank >= t->num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "simulator explain: plan, trace, result and output are required");
    dcp_sim_explain_t e = {.num_steps = t->num_steps, .num_divs = t->num_divs};
    explainer_t x = {.p = p, .t = t, .e = &e};
    const int64_t cells = dcp_sim_cell(t->num_steps, 0, 0);
    double *ready = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&e.exposed_ms, cells, sizeof *e.exposed_ms, "simulator explain"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&e.path_xfer_ms, cells, sizeof *e.path_xfer_ms, "simulator explain"),
                   st, out);
    DCP_CHECK_GOTO(dcp_calloc(&x.on_path, t->num_ranks, 1, "simulator explain"), st, out);
    DCP_CHECK_GOTO(launch_ready(t, &ready), st, out);
    explain_exposed(&x, res->slowest_rank, ready);
    DCP_CHECK_GOTO(explain_path(&x, res->slowest_rank), st, out);
    *out = e;
    e = (dcp_sim_explain_t){0};
    st = DCP_OK;
out:
    dcp_sim_explain_release(&e);
    free(x.on_path);
    free(ready);
    return st;
}
