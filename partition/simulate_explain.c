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
#include "partition/simulate.h"

#include <stdlib.h>
#include <string.h>

/* Rank r's backward sums from PART slots: their source offsets, sorted. A received partial
 * is a dK + dV when two sums read it (dK rows, then dV rows), a dQ when one does - whether
 * they add into the accumulators or, at a hub, into its own partial. */
static int off_cmp(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t sum_sources(const dcp_plan_t *p, int32_t r, int64_t *out)
{
    int64_t n = 0;
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, r);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, r); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_REDUCE) continue;
        for (int64_t j = in->first; j < in->first + in->count; j++)
            if (p->copies[j].src.buf == DCP_BUF_PART) out[n++] = p->copies[j].src.off;
    }
    qsort(out, (size_t)n, sizeof *out, off_cmp);
    return n;
}

/* Sums reading [off, off + elems) among the sorted sources. */
static int64_t reads_of(const int64_t *src, int64_t n, int64_t off, int64_t elems)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (src[mid] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64_t k = 0;
    while (lo + k < n && src[lo + k] < off + elems) k++;
    return k;
}

static int32_t recv_kind(dcp_pass_t pass, const dcp_comm_op_t *op, const int64_t *src, int64_t n)
{
    const int bwd = pass == DCP_PASS_BWD;
    switch (op->buf) {
    case DCP_BUF_RKV:
        return DCP_XFER_KV;
    case DCP_BUF_RQ:
        return bwd ? DCP_XFER_BQ : DCP_XFER_Q;
    case DCP_BUF_RSTAT:
        return DCP_XFER_BSTAT;
    default:
        break;
    }
    if (!bwd) return DCP_XFER_PART;
    return reads_of(src, n, op->off, op->elems) >= 2 ? DCP_XFER_DKV : DCP_XFER_DQ;
}

dcp_status_t dcp_sim_group_kinds(const dcp_plan_t *p, dcp_sim_trace_t *t, const int64_t *group_of)
{
    const int32_t base = p->pass_xfer[t->pass];
    int64_t most = 0;
    /* the copy items of one rank's backward REDUCEs bound its sums */
    for (int32_t r = 0; r < t->num_ranks && t->pass == DCP_PASS_BWD; r++) {
        int64_t n = 0;
        for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, r);
             i < dcp_plan_prog_end(p, DCP_PASS_BWD, r); i++)
            if (p->instrs[i].op == DCP_OP_REDUCE) n += p->instrs[i].count;
        most = n > most ? n : most;
    }
    int64_t *src = NULL;
    if (most > 0) DCP_CHECK(dcp_calloc(&src, most, sizeof *src, "simulator kinds"));
    for (int32_t r = 0; r < t->num_ranks; r++) {
        const int64_t n = t->pass == DCP_PASS_BWD ? sum_sources(p, r, src) : 0;
        for (int64_t i = dcp_plan_prog_begin(p, t->pass, r); i < dcp_plan_prog_end(p, t->pass, r);
             i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t j = in->first; j < in->first + in->count; j++) {
                const dcp_comm_op_t *op = &p->comm[j];
                if (op->send) continue;
                dcp_sim_group_t *g = &t->groups[group_of[op->transfer - base]];
                g->kind_bytes[recv_kind(t->pass, op, src, n)] +=
                    (double)op->elems * dcp_plan_elem_bytes(p, op->buf);
            }
        }
    }
    free(src);
    return DCP_OK;
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
    dcp_sim_explain_t e = {.num_steps = t->num_steps};
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
