/*
 * The discrete-event engine of the step-time simulator (simulate.h).
 *
 * Transfers and kernels are fluid flows: `left` work (bytes, or seconds at full speed) drains
 * at `rate`, the smallest of its links' equal shares. A flow's rate depends only on the
 * counts of its own (at most two) links, so a start or an end re-rates just the flows on
 * those links; each re-rated flow gets a new end event and a new version, and stale events
 * are dropped when they surface. Events are ordered by (time, kind, id), so a simulation is
 * deterministic.
 */
#include "partition/sim/simulate.h"

#include "include/base/error.h"
#include "partition/plan/cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L_NOT = 0, L_LAUNCHED, L_STARTED, L_DONE };
enum { R_RUN = 0, R_KERNEL, R_WAIT, R_DONE };

typedef struct {
    double t;
    int64_t id; /* a transfer group that becomes ready to flow */
} event_t;

typedef struct {
    double cap;     /* bytes/s, or processors */
    int64_t *flows; /* the flows on it */
    int64_t n, alloc;
} link_t;

typedef struct {
    double left, rate, last, peak;
    int64_t link[2]; /* -1: none */
    int64_t pos[2];  /* index in each link's list */
    int32_t active;
} flow_t;

typedef struct {
    int64_t instr;   /* the COMM_LAUNCH */
    int64_t pending; /* operations not done */
    double ready;    /* the latest time one of its transfers had both sides started */
    int32_t rank, phase, state;
} launch_t;

/* The transfers of one launch from one rank to one peer: they start together (when both
 * launches have started), and only the whole launch's completion is waited for, so they
 * flow as one. */
typedef struct {
    int32_t src, dst, sides;
    int64_t rec[2]; /* launch records of the sends and of the receives */
    double bytes;
} xfer_t;

typedef struct {
    int64_t pc, end;
    int64_t first_rec, nlaunched, nstarted;
    int64_t wait_rec;
    int32_t state;
    double kstart, tblock;
    double compute, exposed, waiting, finish;
} rank_t;

typedef struct {
    const dcp_plan_t *p;
    const dcp_sim_machine_t *m;
    const dcp_sim_kernels_t *k;
    dcp_pass_t pass;
    int32_t nr;
    int64_t nx, nlinks, nrec; /* nx: transfer groups */
    rank_t *rk;
    launch_t *rec;
    int64_t *rec_xoff; /* [records + 1]: the groups of record c are rec_x[rec_xoff[c] ..] */
    int64_t *rec_x;
    int64_t *xgroup; /* [pass transfers]: the group of each */
    xfer_t *xf;
    flow_t *fl; /* [nx + nr]: transfer groups, then one kernel per rank */
    link_t *ln;
    int64_t *dirty; /* links whose flows are re-rated at the end of this instant */
    int64_t ndirty;
    char *is_dirty;
    event_t *heap; /* transfers becoming ready */
    int64_t nheap, heap_cap;
    double *fend;          /* [flows]: each running flow's end at its current rate */
    int64_t *fheap, *fpos; /* heap of running flows by (fend, id); fpos[id] = -1 if absent */
    int64_t nfheap;
    int64_t events;
    dcp_sim_trace_t *tr; /* NULL: nothing recorded */
    dcp_status_t st;
} sim_t;

/* ---- events ---- */

static int ev_less(const event_t *a, const event_t *b)
{
    return a->t != b->t ? a->t < b->t : a->id < b->id;
}

static void push(sim_t *s, double t, int64_t id)
{
    if (s->st != DCP_OK) return;
    if (s->nheap == s->heap_cap) {
        s->st = dcp_reserve(&s->heap, &s->heap_cap, s->nheap + 1, sizeof *s->heap, "simulator");
        if (s->st != DCP_OK) return;
    }
    int64_t i = s->nheap++;
    const event_t e = {t, id};
    while (i > 0 && ev_less(&e, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = e;
}

static event_t pop(sim_t *s)
{
    const event_t top = s->heap[0], last = s->heap[--s->nheap];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= s->nheap) break;
        if (c + 1 < s->nheap && ev_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!ev_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (s->nheap > 0) s->heap[i] = last;
    return top;
}

/* The running flows' ends: an indexed heap, so a re-rated flow moves instead of leaving a
 * stale entry behind (all-to-all phases re-rate every flow of a link at each start). */
static int fh_less(const sim_t *s, int64_t a, int64_t b)
{
    return s->fend[a] != s->fend[b] ? s->fend[a] < s->fend[b] : a < b;
}

static void fh_place(sim_t *s, int64_t i, int64_t id)
{
    s->fheap[i] = id;
    s->fpos[id] = i;
}

static void fh_sift(sim_t *s, int64_t i)
{
    const int64_t id = s->fheap[i];
    while (i > 0 && fh_less(s, id, s->fheap[(i - 1) / 2])) {
        fh_place(s, i, s->fheap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= s->nfheap) break;
        if (c + 1 < s->nfheap && fh_less(s, s->fheap[c + 1], s->fheap[c])) c++;
        if (!fh_less(s, s->fheap[c], id)) break;
        fh_place(s, i, s->fheap[c]);
        i = c;
    }
    fh_place(s, i, id);
}

static void fh_set(sim_t *s, int64_t id, double t)
{
    s->fend[id] = t;
    if (s->fpos[id] < 0) {
        s->fpos[id] = s->nfheap;
        s->fheap[s->nfheap++] = id;
    }
    fh_sift(s, s->fpos[id]);
}

static void fh_remove(sim_t *s, int64_t id)
{
    const int64_t i = s->fpos[id], last = s->fheap[--s->nfheap];
    s->fpos[id] = -1;
    if (last == id) return;
    fh_place(s, i, last);
    fh_sift(s, i);
}

/* ---- flows on links ---- */

static double flow_rate(const sim_t *s, const flow_t *f)
{
    double r = f->peak;
    for (int j = 0; j < 2; j++)
        if (f->link[j] >= 0) {
            const link_t *l = &s->ln[f->link[j]];
            r = fmin(r, l->cap / (double)l->n);
        }
    return r;
}

/* Drains the flows on link l up to `now` and re-rates them; a flow whose rate changed (or
 * that has none yet) gets a new end event. */
static void touch(sim_t *s, int64_t l, double now)
{
    for (int64_t i = 0; i < s->ln[l].n; i++) {
        const int64_t id = s->ln[l].flows[i];
        flow_t *f = &s->fl[id];
        if (f->rate > 0) f->left = fmax(0.0, f->left - f->rate * (now - f->last));
        f->last = now;
        const double r = flow_rate(s, f);
        if (r == f->rate) continue;
        f->rate = r;
        fh_set(s, id, now + f->left / r);
    }
}

/* Starts and ends at one instant change link counts; the flows on those links are re-rated
 * once, after the instant's last event (settle()), which is exact since no time passes. */
static void mark(sim_t *s, int64_t l)
{
    if (s->is_dirty[l]) return;
    s->is_dirty[l] = 1;
    s->dirty[s->ndirty++] = l;
}

static void settle(sim_t *s, double now)
{
    for (int64_t i = 0; i < s->ndirty; i++) {
        touch(s, s->dirty[i], now);
        s->is_dirty[s->dirty[i]] = 0;
    }
    s->ndirty = 0;
}

static void flow_start(sim_t *s, int64_t id, double left, double peak, int64_t l0, int64_t l1,
                       double now)
{
    flow_t *f = &s->fl[id];
    *f =
        (flow_t){.left = left, .rate = 0, .last = now, .peak = peak, .active = 1, .link = {l0, l1}};
    s->events++;
    for (int j = 0; j < 2; j++) {
        if (f->link[j] < 0) continue;
        link_t *l = &s->ln[f->link[j]];
        if (l->n == l->alloc) {
            s->st = dcp_reserve(&l->flows, &l->alloc, l->n + 1, sizeof *l->flows, "simulator");
            if (s->st != DCP_OK) return;
        }
        f->pos[j] = l->n;
        l->flows[l->n++] = id;
    }
    if (l0 < 0 && l1 < 0) {
        f->rate = peak;
        fh_set(s, id, now + left / peak);
        return;
    }
    for (int j = 0; j < 2; j++)
        if (f->link[j] >= 0) mark(s, f->link[j]);
}

static void flow_end(sim_t *s, int64_t id, double now)
{
    flow_t *f = &s->fl[id];
    f->active = 0;
    for (int j = 0; j < 2; j++) {
        if (f->link[j] < 0) continue;
        link_t *l = &s->ln[f->link[j]];
        const int64_t moved = l->flows[--l->n];
        if (moved != id) {
            flow_t *g = &s->fl[moved];
            const int k = g->link[0] == f->link[j] ? 0 : 1;
            g->pos[k] = f->pos[j];
            l->flows[f->pos[j]] = moved;
        }
    }
    for (int j = 0; j < 2; j++)
        if (f->link[j] >= 0) mark(s, f->link[j]);
    (void)now;
}

/* ---- the machine ---- */

static int32_t node_of(const sim_t *s, int32_t r)
{
    return r / s->p->devs_per_node;
}

static int64_t nic_link(const sim_t *s, int32_t r, int in)
{
    const int32_t g = s->p->devs_per_node, nics = s->m->nics_per_node;
    const int64_t nic = (int64_t)node_of(s, r) * nics + (int64_t)(r % g) * nics / g;
    return 2 * (int64_t)s->nr + (in ? (int64_t)s->p->num_nodes * nics : 0) + nic;
}

static int64_t compute_link(const sim_t *s, int32_t r)
{
    if (s->m->compute_slots <= 0) return -1;
    (void)r; /* one host's processors, shared by every rank */
    return 2 * (int64_t)s->nr + 2 * (int64_t)s->p->num_nodes * s->m->nics_per_node;
}

static void xfer_ready(sim_t *s, int64_t x, double now)
{
    const xfer_t *t = &s->xf[x];
    const int inter = node_of(s, t->src) != node_of(s, t->dst);
    const int64_t out = inter ? nic_link(s, t->src, 0) : t->src;
    const int64_t in = inter ? nic_link(s, t->dst, 1) : s->nr + t->dst;
    if (s->tr) s->tr->groups[x].start_s = now;
    flow_start(s, x, t->bytes, INFINITY, out, in, now);
}

/* ---- the record (dcp_sim_trace_run) ---- */

static void rec_instr(sim_t *s, int64_t instr, int end, double now)
{
    if (!s->tr) return;
    (end ? s->tr->t1 : s->tr->t0)[instr - s->tr->instr0] = now;
}

/* ---- ranks ---- */

static double table_rate(const void *ctx, double edge, int bwd)
{
    const dcp_sim_kernels_t *k = ctx;
    return 1e12 * dcp_cost_curve(k->n, k->tile, bwd ? k->bwd_tflops : k->fwd_tflops, edge);
}

/* Seconds at full speed of a kernel instruction. */
static double kernel_seconds(const sim_t *s, const dcp_instr_t *in)
{
    if (in->op == DCP_OP_ATTN) return dcp_cost_attn_seconds(s->p, in, table_rate, s->k);
    const int merge = in->op == DCP_OP_REDUCE && in->arg == DCP_PASS_FWD;
    return dcp_cost_memory_bytes(s->p, in) / ((merge ? s->k->merge_gbps : s->k->copy_gbps) * 1e9);
}

/* Starts launch record c: each transfer whose other side has started too becomes ready one
 * latency later. */
static void launch_start(sim_t *s, int64_t c, double now)
{
    launch_t *l = &s->rec[c];
    l->state = L_STARTED;
    if (s->tr) s->tr->launches[c].started_s = now;
    for (int64_t i = s->rec_xoff[c]; i < s->rec_xoff[c + 1]; i++) {
        const int64_t x = s->rec_x[i];
        xfer_t *t = &s->xf[x];
        if (++t->sides < 2) continue;
        if (s->tr) s->tr->groups[x].sides_s = now;
        s->rec[t->rec[0]].ready = fmax(s->rec[t->rec[0]].ready, now);
        s->rec[t->rec[1]].ready = fmax(s->rec[t->rec[1]].ready, now);
        const int inter = node_of(s, t->src) != node_of(s, t->dst);
        push(s, now + 1e-6 * (inter ? s->m->inter_lat_us : s->m->intra_lat_us), x);
    }
}

/* Starts rank r's launched records that may start: all of them, or in order one at a time. */
static void try_start(sim_t *s, int32_t r, double now)
{
    rank_t *k = &s->rk[r];
    while (k->nstarted < k->nlaunched && (!s->m->in_order || k->nstarted == 0 ||
                                          s->rec[k->first_rec + k->nstarted - 1].state == L_DONE))
        launch_start(s, k->first_rec + k->nstarted++, now);
}

/* Runs rank r from `now` until it starts a kernel, blocks in a wait or ends. */
static void advance(sim_t *s, int32_t r, double now)
{
    const dcp_plan_t *p = s->p;
    rank_t *k = &s->rk[r];
    for (; k->pc < k->end && s->st == DCP_OK; k->pc++) {
        const dcp_instr_t *in = &p->instrs[k->pc];
        rec_instr(s, k->pc, 0, now);
        rec_instr(s, k->pc, 1, now);
        if (in->op == DCP_OP_COMM_LAUNCH) {
            if (s->tr) s->tr->launches[k->first_rec + k->nlaunched].reached_s = now;
            launch_t *l = &s->rec[k->first_rec + k->nlaunched++];
            l->state = L_LAUNCHED;
            try_start(s, r, now);
        } else if (in->op == DCP_OP_COMM_WAIT) {
            int64_t c = k->first_rec + k->nlaunched - 1;
            while (c >= k->first_rec && s->rec[c].phase != in->arg) c--;
            if (c < k->first_rec) {
                s->st = dcp_set_error(DCP_ERR_INTERNAL,
                                      "simulator: rank %d waits for phase %d "
                                      "before launching it",
                                      r, in->arg);
                return;
            }
            if (s->tr) s->tr->wait_launch[k->pc - s->tr->instr0] = c;
            if (s->rec[c].state == L_DONE) continue;
            k->state = R_WAIT;
            k->wait_rec = c;
            k->tblock = now;
            return;
        } else {
            const double sec = kernel_seconds(s, in);
            if (sec <= 0) continue;
            k->state = R_KERNEL;
            k->kstart = now;
            flow_start(s, s->nx + r, sec, 1.0, compute_link(s, r), -1, now);
            return;
        }
    }
    k->state = R_DONE;
    k->finish = now;
}

static void launch_done(sim_t *s, int64_t c, int64_t last, double now)
{
    launch_t *l = &s->rec[c];
    l->state = L_DONE;
    if (s->tr) {
        s->tr->launches[c].done_s = now;
        s->tr->launches[c].last_group = last;
    }
    rank_t *k = &s->rk[l->rank];
    try_start(s, l->rank, now);
    if (k->state != R_WAIT || k->wait_rec != c) return;
    const double blocked = now - k->tblock;
    const double w = fmin(fmax(l->ready - k->tblock, 0.0), blocked);
    k->waiting += w;
    k->exposed += blocked - w;
    k->state = R_RUN;
    rec_instr(s, k->pc, 1, now);
    k->pc++;
    advance(s, l->rank, now);
}

static void on_flow_end(sim_t *s, int64_t id, double now)
{
    flow_end(s, id, now);
    if (id >= s->nx) { /* a kernel */
        const int32_t r = (int32_t)(id - s->nx);
        rank_t *k = &s->rk[r];
        k->compute += now - k->kstart;
        rec_instr(s, k->pc, 1, now);
        k->state = R_RUN;
        k->pc++;
        advance(s, r, now);
        return;
    }
    if (s->tr) s->tr->groups[id].end_s = now;
    for (int j = 0; j < 2; j++) {
        const int64_t c = s->xf[id].rec[j];
        if (--s->rec[c].pending == 0) launch_done(s, c, id, now);
    }
}

/* ---- set-up ---- */

/* Launch records in program order per rank. */
static dcp_status_t index_launches(sim_t *s)
{
    const dcp_plan_t *p = s->p;
    int64_t nrec = 0;
    for (int32_t r = 0; r < s->nr; r++)
        for (int64_t i = dcp_plan_prog_begin(p, s->pass, r); i < dcp_plan_prog_end(p, s->pass, r);
             i++)
            nrec += p->instrs[i].op == DCP_OP_COMM_LAUNCH;
    s->nrec = nrec;
    DCP_CHECK(dcp_calloc(&s->rec, nrec, sizeof *s->rec, "simulator launches"));
    int64_t c = 0;
    for (int32_t r = 0; r < s->nr; r++) {
        rank_t *k = &s->rk[r];
        k->pc = dcp_plan_prog_begin(p, s->pass, r);
        k->end = dcp_plan_prog_end(p, s->pass, r);
        k->first_rec = c;
        for (int64_t i = k->pc; i < k->end; i++)
            if (p->instrs[i].op == DCP_OP_COMM_LAUNCH)
                s->rec[c++] = (launch_t){.instr = i, .rank = r, .phase = p->instrs[i].arg};
    }
    return DCP_OK;
}

/* Groups the sends of each record by peer (xgroup[transfer] = group), then finds each
 * group's receiving record. */
static void group_transfers(sim_t *s, int64_t *xgroup, int64_t *stamp, int64_t *group_of)
{
    const dcp_plan_t *p = s->p;
    const int32_t base = p->pass_xfer[s->pass];
    for (int32_t q = 0; q < s->nr; q++) stamp[q] = -1;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t c = 0; c < s->nrec; c++) {
            const dcp_instr_t *in = &p->instrs[s->rec[c].instr];
            for (int64_t i = in->first; i < in->first + in->count; i++) {
                const dcp_comm_op_t *op = &p->comm[i];
                if (pass == 1) {
                    if (!op->send) s->xf[xgroup[op->transfer - base]].rec[1] = c;
                    continue;
                }
                if (!op->send) continue;
                if (stamp[op->peer] != c) {
                    stamp[op->peer] = c;
                    group_of[op->peer] = s->nx;
                    s->xf[s->nx++] =
                        (xfer_t){.src = s->rec[c].rank, .dst = op->peer, .rec = {c, -1}};
                }
                xgroup[op->transfer - base] = group_of[op->peer];
                s->xf[group_of[op->peer]].bytes +=
                    (double)op->elems * dcp_plan_elem_bytes(p, op->buf);
            }
        }
}

/* The groups of each record (CSR), each record's pending count. */
static dcp_status_t index_programs(sim_t *s)
{
    const dcp_plan_t *p = s->p;
    const int64_t nxfer = p->pass_xfer[s->pass + 1] - p->pass_xfer[s->pass];
    DCP_CHECK(index_launches(s));
    DCP_CHECK(dcp_calloc(&s->xf, nxfer, sizeof *s->xf, "simulator transfers"));
    DCP_CHECK(dcp_calloc(&s->rec_xoff, s->nrec + 1, sizeof *s->rec_xoff, "simulator launches"));
    int64_t *stamp = NULL, *group_of = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s->xgroup, nxfer, sizeof *s->xgroup, "simulator transfers"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&stamp, s->nr, sizeof *stamp, "simulator transfers"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&group_of, s->nr, sizeof *group_of, "simulator transfers"), st, out);
    group_transfers(s, s->xgroup, stamp, group_of);
    for (int64_t x = 0; x < s->nx; x++)
        for (int j = 0; j < 2; j++) s->rec_xoff[s->xf[x].rec[j] + 1]++;
    for (int64_t c = 0; c < s->nrec; c++) {
        s->rec[c].pending = s->rec_xoff[c + 1];
        s->rec_xoff[c + 1] += s->rec_xoff[c];
    }
    DCP_CHECK_GOTO(dcp_calloc(&s->rec_x, 2 * s->nx, sizeof *s->rec_x, "simulator transfers"), st,
                   out);
    for (int64_t x = 0; x < s->nx; x++)
        for (int j = 0; j < 2; j++) {
            const int64_t c = s->xf[x].rec[j];
            s->rec_x[s->rec_xoff[c] + --s->rec[c].pending] = x;
        }
    for (int64_t c = 0; c < s->nrec; c++) s->rec[c].pending = s->rec_xoff[c + 1] - s->rec_xoff[c];
    st = DCP_OK;
out:
    free(stamp);
    free(group_of);
    return st;
}

static dcp_status_t make_links(sim_t *s)
{
    const dcp_sim_machine_t *m = s->m;
    const int64_t nics = (int64_t)s->p->num_nodes * m->nics_per_node;
    s->nlinks = 2 * (int64_t)s->nr + 2 * nics + (m->compute_slots > 0);
    DCP_CHECK(dcp_calloc(&s->ln, s->nlinks, sizeof *s->ln, "simulator links"));
    DCP_CHECK(dcp_calloc(&s->dirty, s->nlinks, sizeof *s->dirty, "simulator links"));
    DCP_CHECK(dcp_calloc(&s->is_dirty, s->nlinks, sizeof *s->is_dirty, "simulator links"));
    for (int64_t i = 0; i < s->nlinks; i++)
        s->ln[i].cap = i < 2 * s->nr              ? m->intra_gbps * 1e9
                       : i < 2 * s->nr + 2 * nics ? m->nic_gbps * 1e9
                                                  : m->compute_slots;
    return DCP_OK;
}

static void finish(const sim_t *s, double *rank_ms_out, dcp_sim_result_t *res)
{
    int32_t slow = 0;
    double busiest = 0;
    for (int32_t r = 0; r < s->nr; r++) {
        if (s->rk[r].finish > s->rk[slow].finish) slow = r;
        busiest = fmax(busiest, s->rk[r].compute);
        if (rank_ms_out) rank_ms_out[r] = s->rk[r].finish * 1e3;
    }
    const rank_t *k = &s->rk[slow];
    *res = (dcp_sim_result_t){.ms = k->finish * 1e3,
                              .compute_ms = k->compute * 1e3,
                              .exposed_comm_ms = k->exposed * 1e3,
                              .wait_ms = k->waiting * 1e3,
                              .busiest_compute_ms = busiest * 1e3,
                              .slowest_rank = slow,
                              .events = s->events};
}

void dcp_sim_machine_from_cluster(const dcp_cluster_t *c, dcp_sim_machine_t *m_out)
{
    const int32_t nics = c->nics_per_node > 0 ? c->nics_per_node : c->devs_per_node;
    *m_out = (dcp_sim_machine_t){
        .intra_gbps = c->perf.intra_gbps,
        .intra_lat_us = c->perf.lat_us,
        .nic_gbps = c->perf.inter_gbps * c->devs_per_node / nics,
        .inter_lat_us = c->perf.lat_us,
        .nics_per_node = nics,
        .in_order = 1,
        .compute_slots = 0,
    };
}

dcp_status_t dcp_sim_machine_check(const dcp_sim_machine_t *m, int32_t devs_per_node)
{
    if (!(m->intra_gbps > 0) || !(m->nic_gbps > 0) || !isfinite(m->intra_gbps) ||
        !isfinite(m->nic_gbps))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "simulator machine: intra_gbps = %g, nic_gbps = %g, both must be > 0",
                             m->intra_gbps, m->nic_gbps);
    if (!(m->intra_lat_us >= 0) || !(m->inter_lat_us >= 0) || !isfinite(m->intra_lat_us) ||
        !isfinite(m->inter_lat_us))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "simulator machine: latencies %g and %g us must be >= 0",
                             m->intra_lat_us, m->inter_lat_us);
    if (m->nics_per_node < 1 || m->nics_per_node > devs_per_node)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "simulator machine: nics_per_node = %d, need 1..%d (devices per node)",
                             m->nics_per_node, devs_per_node);
    if (!(m->compute_slots >= 0) || !isfinite(m->compute_slots))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "simulator machine: compute_slots = %g, must be >= 0",
                             m->compute_slots);
    return DCP_OK;
}

void dcp_sim_trace_release(dcp_sim_trace_t *t)
{
    if (!t) return;
    free(t->t0);
    free(t->t1);
    free(t->wait_launch);
    free(t->launches);
    free(t->groups);
    free(t->finish_s);
    *t = (dcp_sim_trace_t){0};
}

/* The record's arrays, once the launches and groups are indexed. */
static dcp_status_t trace_init(sim_t *s, dcp_sim_trace_t *t)
{
    const dcp_plan_t *p = s->p;
    const int64_t i0 = dcp_plan_prog_begin(p, s->pass, 0);
    const int64_t ni = dcp_plan_prog_end(p, s->pass, s->nr - 1) - i0;
    *t = (dcp_sim_trace_t){.pass = s->pass,
                           .num_ranks = s->nr,
                           .num_steps = p->opts.divisions + 3,
                           .num_divs = p->opts.divisions,
                           .instr0 = i0,
                           .num_instrs = ni,
                           .num_launches = s->nrec,
                           .num_groups = s->nx};
    s->tr = t; /* released by the caller on failure */
    DCP_CHECK(dcp_calloc(&t->t0, ni, sizeof *t->t0, "simulator trace"));
    DCP_CHECK(dcp_calloc(&t->t1, ni, sizeof *t->t1, "simulator trace"));
    DCP_CHECK(dcp_calloc(&t->wait_launch, ni, sizeof *t->wait_launch, "simulator trace"));
    DCP_CHECK(dcp_calloc(&t->launches, s->nrec, sizeof *t->launches, "simulator trace"));
    DCP_CHECK(dcp_calloc(&t->groups, s->nx, sizeof *t->groups, "simulator trace"));
    DCP_CHECK(dcp_calloc(&t->finish_s, s->nr, sizeof *t->finish_s, "simulator trace"));
    for (int64_t i = 0; i < ni; i++) t->wait_launch[i] = -1;
    for (int32_t ph = p->pass_phase[s->pass]; ph < p->pass_phase[s->pass + 1]; ph++)
        if (p->phase_step[ph] + 1 > t->num_steps) t->num_steps = p->phase_step[ph] + 1;
    for (int64_t c = 0; c < s->nrec; c++) {
        const launch_t *l = &s->rec[c];
        const int32_t ph = p->instrs[l->instr].arg;
        t->launches[c] = (dcp_sim_launch_t){
            .rank = l->rank, .step = p->phase_step[ph], .instr = l->instr, .last_group = -1};
    }
    for (int64_t x = 0; x < s->nx; x++) {
        const xfer_t *g = &s->xf[x];
        t->groups[x] = (dcp_sim_group_t){.src = g->src,
                                         .dst = g->dst,
                                         .inter = node_of(s, g->src) != node_of(s, g->dst),
                                         .launch = {g->rec[0], g->rec[1]},
                                         .bytes = g->bytes};
    }
    return dcp_sim_group_kinds(p, t, s->xgroup);
}

static dcp_status_t sim_run(const dcp_plan_t *p, dcp_pass_t pass, const dcp_sim_machine_t *m,
                            const dcp_sim_kernels_t *k, double *rank_ms_out,
                            dcp_sim_result_t *res_out, dcp_sim_trace_t *trace_out)
{
    if (!p || !m || !k || !res_out || (pass != DCP_PASS_FWD && pass != DCP_PASS_BWD))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "simulator: plan, machine, kernels, result and "
                                                  "a pass are required");
    DCP_CHECK(dcp_sim_machine_check(m, p->devs_per_node));
    DCP_CHECK(dcp_sim_kernels_check(k));
    sim_t s = {.p = p, .m = m, .k = k, .pass = pass, .nr = p->num_ranks};
    dcp_sim_trace_t tr = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s.rk, s.nr, sizeof *s.rk, "simulator ranks"), st, out);
    DCP_CHECK_GOTO(index_programs(&s), st, out);
    const int64_t nflows = s.nx + s.nr;
    DCP_CHECK_GOTO(dcp_calloc(&s.fl, nflows, sizeof *s.fl, "simulator flows"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.fend, nflows, sizeof *s.fend, "simulator flows"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.fheap, nflows, sizeof *s.fheap, "simulator flows"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.fpos, nflows, sizeof *s.fpos, "simulator flows"), st, out);
    for (int64_t i = 0; i < nflows; i++) s.fpos[i] = -1;
    DCP_CHECK_GOTO(make_links(&s), st, out);
    if (trace_out) DCP_CHECK_GOTO(trace_init(&s, &tr), st, out);
    for (int32_t r = 0; r < s.nr && s.st == DCP_OK; r++) advance(&s, r, 0.0);
    settle(&s, 0.0);
    while ((s.nheap > 0 || s.nfheap > 0) && s.st == DCP_OK) {
        /* flow ends first at equal times: a link frees before a transfer joins it */
        double t;
        if (s.nfheap > 0 && (s.nheap == 0 || s.fend[s.fheap[0]] <= s.heap[0].t)) {
            const int64_t id = s.fheap[0];
            t = s.fend[id];
            fh_remove(&s, id);
            on_flow_end(&s, id, t);
        } else {
            const event_t e = pop(&s);
            t = e.t;
            xfer_ready(&s, e.id, t);
        }
        const double next = fmin(s.nfheap > 0 ? s.fend[s.fheap[0]] : INFINITY,
                                 s.nheap > 0 ? s.heap[0].t : INFINITY);
        if (next != t) settle(&s, t);
    }
    DCP_CHECK_GOTO(s.st, st, out);
    for (int32_t r = 0; r < s.nr; r++)
        if (s.rk[r].state != R_DONE) {
            st = dcp_set_error(DCP_ERR_INTERNAL,
                               "simulator: rank %d never finishes (stuck at "
                               "instruction %lld)",
                               r, (long long)(s.rk[r].pc - dcp_plan_prog_begin(p, pass, r)));
            goto out;
        }
    finish(&s, rank_ms_out, res_out);
    if (trace_out) {
        for (int32_t r = 0; r < s.nr; r++) tr.finish_s[r] = s.rk[r].finish;
        *trace_out = tr;
        s.tr = NULL;
    }
    st = DCP_OK;
out:
    dcp_sim_trace_release(s.tr);
    free(s.xgroup);
    if (s.ln)
        for (int64_t i = 0; i < s.nlinks; i++) free(s.ln[i].flows);
    free(s.ln);
    free(s.dirty);
    free(s.is_dirty);
    free(s.rec_xoff);
    free(s.rec_x);
    free(s.rk);
    free(s.fl);
    free(s.rec);
    free(s.xf);
    free(s.heap);
    free(s.fend);
    free(s.fheap);
    free(s.fpos);
    return st;
}

dcp_status_t dcp_sim_run(const dcp_plan_t *p, dcp_pass_t pass, const dcp_sim_machine_t *m,
                         const dcp_sim_kernels_t *k, double *rank_ms_out, dcp_sim_result_t *res_out)
{
    return sim_run(p, pass, m, k, rank_ms_out, res_out, NULL);
}

dcp_status_t dcp_sim_trace_run(const dcp_plan_t *p, dcp_pass_t pass, const dcp_sim_machine_t *m,
                               const dcp_sim_kernels_t *k, dcp_sim_result_t *res_out,
                               dcp_sim_trace_t *trace_out)
{
    if (!trace_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "simulator: trace_out is NULL");
    return sim_run(p, pass, m, k, NULL, res_out, trace_out);
}

dcp_status_t dcp_sim_model_step(const dcp_plan_t *p, const dcp_cluster_t *c, double *ms_out,
                                double *exposed_out)
{
    dcp_sim_machine_t m;
    dcp_sim_kernels_t k;
    dcp_sim_machine_from_cluster(c, &m);
    dcp_sim_kernels_from_perf(&c->perf, &k);
    const dcp_plan_t *root = dcp_plan_root(p);
    double ms = 0, exposed = 0;
    for (int32_t i = 0; i < root->num_kinds; i++) {
        const dcp_plan_t *v = dcp_plan_view_const(root, i);
        for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
            dcp_sim_result_t r = {0};
            DCP_CHECK(dcp_sim_run(v, (dcp_pass_t)pass, &m, &k, NULL, &r));
            ms += v->layers * r.ms;
            exposed += v->layers * r.exposed_comm_ms;
        }
    }
    *ms_out = ms;
    if (exposed_out) *exposed_out = exposed;
    return DCP_OK;
}
