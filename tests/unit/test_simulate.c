/* The step-time simulator on timelines computed by hand, its link model, its scale, and the
 * kernel table reader of dcp-plan --simulate. */
#include "partition/place/place.h"
#include "partition/plan/cost.h"
#include "partition/program/schedule.h"
#include "partition/sim/simulate.h"
#include "plugin/cli/support/sim_kernels.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dcp_plan_t *make_plan(const char *cluster, int32_t len, const char *mask, dcp_strategy_t s,
                             int32_t block, int32_t num_heads)
{
    dcp_mask_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(mask, &m), DCP_OK);
    const dcp_batch_t batch = {.num_seqs = 1, .lengths = &len, .masks = &m};
    const dcp_attn_shape_t shape = {num_heads, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = block;
    o.divisions = 1;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

/* One curve point: every tile at `tflops`, forward and backward alike. */
static dcp_sim_kernels_t flat_kernels(double tflops, double merge, double copy)
{
    dcp_sim_kernels_t k = {.n = 1, .merge_gbps = merge, .copy_gbps = copy};
    k.tile[0] = 64;
    k.fwd_tflops[0] = k.bwd_tflops[0] = tflops;
    return k;
}

/* Shape 4/2 heads x 8, one head group: a pair costs 4 x 8 x 4 = 128 FLOPs forward. */
#define PAIR_FLOPS 128.0

/* 10 GB/s and 2 us inside a node (1 GB/s and 7 us between nodes, unused), launches in order. */
static dcp_sim_machine_t two_rank_machine(void)
{
    return (dcp_sim_machine_t){.intra_gbps = 10.0,
                               .intra_lat_us = 2.0,
                               .nic_gbps = 1.0,
                               .inter_lat_us = 7.0,
                               .nics_per_node = 1,
                               .in_order = 1};
}

/* Two ranks on one node, ring, causal, 128 tokens in blocks of 64. Rank 0 owns block 0,
 * rank 1 block 1 and needs block 0's K and V (2 x 64 rows x 16 fp32 = 8192 bytes):
 *   rank 0: pack K,V (COPY, 2 x 8192 bytes) | launch | attention 0 | wait: link | publish
 *   rank 1: launch at 0 | wait: rank 0's pack, latency, link       | attention 1 | publish
 * (rank 0 receives nothing, so it computes before it waits for its send). Publishing 64 rows
 * reads and writes 64 x 32 + 64 x 4 fp32 elements. */
static void test_two_rank_timeline(void)
{
    dcp_plan_t *p = make_plan("1x2", 128, "causal", DCP_STRATEGY_RING, 64, 4);
    const dcp_sim_kernels_t k = flat_kernels(2.0, 50.0, 4.0);
    const dcp_sim_machine_t m = two_rank_machine();
    const double pack = 2.0 * 8192 / 4e9, lat = 2e-6, link = 8192 / 10e9;
    const double attn0 = 64 * 65 / 2 * PAIR_FLOPS / 2e12;
    const double attn1 = (64 * 65 / 2 + 64 * 64) * PAIR_FLOPS / 2e12;
    const double out = 2.0 * (64 * 32 + 64 * 4) * 4 / 4e9;
    const double r0 = pack + fmax(lat + link, attn0) + out;
    const double r1 = pack + lat + link + attn1 + out;
    double ms[2];
    dcp_sim_result_t res;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &k, ms, &res), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(ms[0], r0 * 1e3, r0 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(ms[1], r1 * 1e3, r1 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(res.ms, r1 * 1e3, r1 * 1e-9);
    CU_ASSERT_EQUAL(res.slowest_rank, 1);
    /* rank 1 waited for rank 0 to pack and launch, then for the latency and the link */
    CU_ASSERT_DOUBLE_EQUAL(res.compute_ms, (attn1 + out) * 1e3, r1 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(res.wait_ms, pack * 1e3, r1 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(res.exposed_comm_ms, (lat + link) * 1e3, r1 * 1e-9);
    /* the backward runs too, and costs 2.5x the forward's FLOPs on the same tiles */
    dcp_sim_result_t bwd;
    CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_BWD, &m, &k, NULL, &bwd), DCP_OK);
    CU_ASSERT(bwd.compute_ms > 2.5 * attn1 * 1e3);
    CU_ASSERT_DOUBLE_EQUAL(bwd.ms, bwd.compute_ms + bwd.exposed_comm_ms + bwd.wait_ms, 1e-9);
    dcp_plan_destroy(p);
}

/* Sum of an explanation's (step, kind, class) table over some kinds (-1: all). */
static double cells_sum(const dcp_sim_explain_t *e, const double *v, int kind)
{
    double sum = 0;
    for (int32_t st = 0; st < e->num_steps; st++)
        for (int k = 0; k < DCP_XFER_KIND_COUNT; k++)
            for (int c = 0; c < 2; c++)
                if (kind < 0 || k == kind) sum += v[dcp_sim_cell(st, k, c)];
    return sum;
}

/* The same two ranks, explained: rank 1's exposed time is the K+V transfer of step 0 inside
 * the node; the critical path is rank 0's pack, the latency, the link, then rank 1's
 * attention and publish, on two ranks, and adds up to the pass. Rank 1's timeline shows the
 * wait split as the simulator splits it. */
static void test_two_rank_explained(void)
{
    dcp_plan_t *p = make_plan("1x2", 128, "causal", DCP_STRATEGY_RING, 64, 4);
    const dcp_sim_kernels_t k = flat_kernels(2.0, 50.0, 4.0);
    const dcp_sim_machine_t m = two_rank_machine();
    const double pack = 2.0 * 8192 / 4e9, lat = 2e-6, link = 8192 / 10e9;
    const double attn1 = (64 * 65 / 2 + 64 * 64) * PAIR_FLOPS / 2e12;
    const double out = 2.0 * (64 * 32 + 64 * 4) * 4 / 4e9;
    dcp_sim_result_t res;
    dcp_sim_trace_t t;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_trace_run(p, DCP_PASS_FWD, &m, &k, &res, &t), DCP_OK);
    CU_ASSERT_EQUAL(t.num_groups, 1);
    CU_ASSERT_DOUBLE_EQUAL(t.groups[0].kind_bytes[DCP_XFER_KV], 8192, 0);
    CU_ASSERT_EQUAL(t.groups[0].inter, 0);
    dcp_sim_explain_t e;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_explain(p, &t, &res, &e), DCP_OK);
    const double tol = 1e-9 * res.ms;
    CU_ASSERT_DOUBLE_EQUAL(e.exposed_ms[dcp_sim_cell(0, DCP_XFER_KV, 0)], (lat + link) * 1e3, tol);
    CU_ASSERT_DOUBLE_EQUAL(cells_sum(&e, e.exposed_ms, -1), res.exposed_comm_ms, tol);
    CU_ASSERT_DOUBLE_EQUAL(e.path_memory_ms, (pack + out) * 1e3, tol);
    CU_ASSERT_DOUBLE_EQUAL(e.path_attn_ms, attn1 * 1e3, tol);
    CU_ASSERT_DOUBLE_EQUAL(e.path_latency_ms, lat * 1e3, tol);
    CU_ASSERT_DOUBLE_EQUAL(e.path_xfer_ms[dcp_sim_cell(0, DCP_XFER_KV, 0)], link * 1e3, tol);
    CU_ASSERT_EQUAL(e.path_ranks, 2);
    dcp_sim_seg_t *segs;
    int64_t n;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_rank_timeline(p, &t, 1, &segs, &n), DCP_OK);
    double waiting = 0, exposed = 0, kernels = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = (segs[i].t1_s - segs[i].t0_s) * 1e3;
        if (segs[i].what == DCP_SIM_SEG_WAITING) waiting += d;
        if (segs[i].what == DCP_SIM_SEG_EXPOSED) exposed += d;
        if (segs[i].what == DCP_SIM_SEG_ATTN || segs[i].what == DCP_SIM_SEG_MEMORY) kernels += d;
        if (i > 0) CU_ASSERT(segs[i].t0_s >= segs[i - 1].t1_s - 1e-15);
    }
    CU_ASSERT_DOUBLE_EQUAL(waiting, res.wait_ms, tol);
    CU_ASSERT_DOUBLE_EQUAL(exposed, res.exposed_comm_ms, tol);
    CU_ASSERT_DOUBLE_EQUAL(kernels, res.compute_ms, tol);
    free(segs);
    CU_ASSERT_EQUAL(dcp_sim_rank_timeline(p, &t, 2, &segs, &n), DCP_ERR_INVALID_ARG);
    dcp_sim_explain_release(&e);
    dcp_sim_trace_release(&t);
    dcp_plan_destroy(p);
}

/* The batches of kinds_and_path_add_up: 16 causal sequences, 8/2 heads x 16 in two head
 * groups, block 128, one METIS try on 4 x 4 ranks. In the first a hub sums dQ partials, in
 * the second dK + dV partials. */
typedef struct {
    dcp_mask_t masks[16];
    dcp_batch_t batch;
    dcp_attn_shape_t shape;
    dcp_plan_options_t o;
    dcp_cluster_t *c;
} kinds_case_t;

static void kinds_case(kinds_case_t *k, int which)
{
    static const int32_t lens[2][16] = {
        {374, 2962, 2414, 1351, 2582, 2336, 2822, 389, 898, 653, 929, 1807, 2887, 2691, 2187, 929},
        {500, 501, 1268, 2131, 325, 1308, 609, 1068, 799, 810, 3183, 1906, 871, 1739, 1632, 1553}};
    dcp_mask_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("causal", &m), DCP_OK);
    for (int i = 0; i < 16; i++) k->masks[i] = m;
    k->batch = (dcp_batch_t){.num_seqs = 16, .lengths = lens[which], .masks = k->masks};
    k->shape = (dcp_attn_shape_t){8, 2, 16, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_default(&k->o);
    k->o.block_size = 128;
    k->o.head_blocks = 2;
    k->o.metis_tries = 1;
    k->o.hierarchy = 0; /* METIS's global plan: these documents pack into the nodes */
    k->c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4x4", &k->c), DCP_OK);
}

/* Bytes of the backward's transfers of one kind, from the schedule the plan was made from
 * (METIS's placement with the same seed). */
static double schedule_kind_bytes(kinds_case_t *k, dcp_xfer_kind_t kind)
{
    dcp_placed_t x = {0};
    CU_ASSERT_EQUAL_FATAL(dcp_place_batch(&k->batch, &k->shape, &k->o, k->c, &x), DCP_OK);
    dcp_schedule_t s;
    CU_ASSERT_EQUAL_FATAL(dcp_schedule_build(&x.b, &x.pl, k->c->num_ranks, k->c->devs_per_node,
                                             k->o.divisions, k->o.comm_schedule, k->o.coalesce,
                                             DCP_PASS_BWD, DCP_ORDER_DEFAULT, &s),
                          DCP_OK);
    double bytes = 0;
    for (int32_t i = 0; i < s.num_xfers; i++)
        if (s.xfers[i].kind == (int32_t)kind) bytes += (double)s.xfers[i].bytes;
    dcp_schedule_release(&s);
    dcp_placed_release(&x);
    return bytes;
}

/* A hub's backward sums into its own partial, by kind: dQ ([0]) and dK + dV ([1]). */
static void hub_sums(const dcp_plan_t *p, int n[2])
{
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, 0);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, p->num_ranks - 1); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_REDUCE) continue;
        for (int64_t k = in->first; k < in->first + in->count; k++)
            if (p->copies[k].dst.buf == DCP_BUF_PART)
                n[p->copies[k].row_elems != p->qpg * p->shape.head_dim]++;
    }
}

static void kinds_plan_add_up(kinds_case_t *kc0, int hubs[2]);

/* Two metis plans with partials both ways on 4 x 4 ranks, hubs summing both kinds of
 * backward partials on the way: every group's bytes are split among kinds without a
 * remainder, the backward's dQ and dK+dV partials are told apart exactly as the schedule
 * made them, the exposed split adds up to the slowest rank's exposed time, and the critical
 * path adds up to the pass, both passes. */
static void test_kinds_and_path_add_up(void)
{
    int hubs[2] = {0, 0};
    for (int which = 0; which < 2; which++) {
        kinds_case_t kc;
        kinds_case(&kc, which);
        kinds_plan_add_up(&kc, hubs);
        dcp_cluster_destroy(kc.c);
    }
    CU_ASSERT(hubs[0] > 0 && hubs[1] > 0);
}

static void kinds_plan_add_up(kinds_case_t *kc0, int hubs[2])
{
    kinds_case_t kc = *kc0;
    dcp_cluster_t *c = kc.c;
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&kc.batch, &kc.shape, &kc.o, c, &p), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(p->stats.strategy, DCP_STRATEGY_METIS);
    dcp_sim_machine_t mach;
    dcp_sim_machine_from_cluster(c, &mach);
    dcp_sim_kernels_t k;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_kernels_builtin("h100", &k), DCP_OK);
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        dcp_sim_result_t res;
        dcp_sim_trace_t t;
        dcp_sim_explain_t e;
        CU_ASSERT_EQUAL_FATAL(dcp_sim_trace_run(p, (dcp_pass_t)pass, &mach, &k, &res, &t), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_sim_explain(p, &t, &res, &e), DCP_OK);
        double kinds[DCP_XFER_KIND_COUNT] = {0};
        int whole = 1;
        for (int64_t g = 0; g < t.num_groups; g++) {
            double sum = 0;
            for (int q = 0; q < DCP_XFER_KIND_COUNT; q++) {
                sum += t.groups[g].kind_bytes[q];
                kinds[q] += t.groups[g].kind_bytes[q];
            }
            whole &= fabs(sum - t.groups[g].bytes) <= 1e-9 * t.groups[g].bytes;
        }
        CU_ASSERT(whole);
        if (pass == DCP_PASS_BWD) {
            hub_sums(p, hubs);
            const double dq = schedule_kind_bytes(&kc, DCP_XFER_DQ);
            const double dkv = schedule_kind_bytes(&kc, DCP_XFER_DKV);
            CU_ASSERT(dq > 0 && dkv > 0);
            CU_ASSERT_DOUBLE_EQUAL(kinds[DCP_XFER_DQ], dq, 0);
            CU_ASSERT_DOUBLE_EQUAL(kinds[DCP_XFER_DKV], dkv, 0);
            CU_ASSERT_DOUBLE_EQUAL(kinds[DCP_XFER_Q] + kinds[DCP_XFER_PART], 0, 0);
        } else {
            CU_ASSERT(kinds[DCP_XFER_PART] > 0 && kinds[DCP_XFER_Q] > 0);
            CU_ASSERT_DOUBLE_EQUAL(kinds[DCP_XFER_DQ] + kinds[DCP_XFER_DKV], 0, 0);
        }
        const double tol = 1e-9 * res.ms;
        CU_ASSERT_DOUBLE_EQUAL(cells_sum(&e, e.exposed_ms, -1), res.exposed_comm_ms, tol);
        const double path = e.path_attn_ms + e.path_memory_ms + e.path_latency_ms +
                            cells_sum(&e, e.path_xfer_ms, -1);
        CU_ASSERT_DOUBLE_EQUAL(path, res.ms, tol);
        double segs = 0;
        for (int64_t i = 0; i < e.num_path; i++) segs += (e.path[i].t1_s - e.path[i].t0_s) * 1e3;
        CU_ASSERT_DOUBLE_EQUAL(segs, res.ms, tol);
        CU_ASSERT(e.path_ranks >= 1 && e.path_ranks <= 8);
        CU_ASSERT(res.busiest_compute_ms >= res.compute_ms - tol);
        dcp_sim_explain_release(&e);
        dcp_sim_trace_release(&t);
    }
    dcp_plan_destroy(p);
}

/* The inter-node traffic of a plan, per direction: bytes node 0 sends node 1 and back. */
static void inter_bytes(const dcp_plan_t *p, double out[2])
{
    out[0] = out[1] = 0;
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_FWD, r);
             i < dcp_plan_prog_end(p, DCP_PASS_FWD, r); i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t j = in->first; j < in->first + in->count; j++) {
                const dcp_comm_op_t *op = &p->comm[j];
                if (!op->send || r / p->devs_per_node == op->peer / p->devs_per_node) continue;
                out[r / p->devs_per_node] += (double)op->elems * 4;
            }
        }
}

/* Kernels and the links inside nodes nearly free, no latency: a pass takes as long as the
 * busiest NIC direction needs for its bytes. Two devices per node share one NIC of 1 GB/s
 * (all of node 0's outgoing bytes through it), or each has its own; the two directions of
 * a NIC do not slow each other (the full mask sends both ways, causal one way). */
static void test_nic_sharing_full_duplex(void)
{
    const dcp_sim_kernels_t k = flat_kernels(1e9, 1e9, 1e9);
    dcp_sim_machine_t m = {.intra_gbps = 1e9, .nic_gbps = 1.0, .nics_per_node = 1};
    for (int full = 0; full < 2; full++) {
        dcp_plan_t *p = make_plan("2x2", 256, full ? "full" : "causal", DCP_STRATEGY_RING, 64, 4);
        double bytes[2];
        inter_bytes(p, bytes);
        CU_ASSERT(bytes[0] > 0);
        CU_ASSERT((bytes[1] > 0) == full);
        dcp_sim_result_t one, two;
        m.nics_per_node = 1;
        CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &k, NULL, &one), DCP_OK);
        const double want = fmax(bytes[0], bytes[1]) / 1e9 * 1e3;
        CU_ASSERT_DOUBLE_EQUAL(one.ms, want, want * 1e-3);
        /* a NIC per device: each device's share of the bytes at the full 1 GB/s */
        m.nics_per_node = 2;
        CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &k, NULL, &two), DCP_OK);
        CU_ASSERT(two.ms < 0.8 * one.ms);
        CU_ASSERT(two.ms >= want / 2 * (1 - 1e-3));
        dcp_plan_destroy(p);
    }
}

/* Bad machines, tables and specs are refused with the field named. */
static void test_bad_inputs_named(void)
{
    dcp_plan_t *p = make_plan("1x2", 128, "causal", DCP_STRATEGY_RING, 64, 4);
    dcp_sim_kernels_t k;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_kernels_builtin("h100", &k), DCP_OK);
    CU_ASSERT_EQUAL(dcp_sim_kernels_builtin("v100", &k), DCP_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(dcp_sim_kernels_builtin_for(312.0), "a100");
    CU_ASSERT_STRING_EQUAL(dcp_sim_kernels_builtin_for(989.0), "h100");
    dcp_sim_machine_t m = {.intra_gbps = 10, .nic_gbps = 1, .nics_per_node = 3};
    dcp_sim_result_t r;
    CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &k, NULL, &r), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "nics_per_node"));
    m.nics_per_node = 1;
    dcp_sim_kernels_t bad = k;
    bad.tile[1] = bad.tile[0];
    CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &bad, NULL, &r), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "tile[1]"));
    bad = k;
    bad.copy_gbps = 0;
    CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &bad, NULL, &r), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "copy_gbps"));
    CU_ASSERT_EQUAL(dcp_sim_run(p, DCP_PASS_FWD, &m, &k, NULL, &r), DCP_OK);
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x8:nics=9", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "nics"));
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4xa100-1nic", &c), DCP_OK);
    dcp_sim_machine_from_cluster(c, &m);
    CU_ASSERT_EQUAL(m.nics_per_node, 1);
    CU_ASSERT_DOUBLE_EQUAL(m.nic_gbps, 12.5, 1e-12); /* 100 Gb/s shared by 8 A100s */
    dcp_cluster_destroy(c);
    dcp_plan_destroy(p);
}

/* A preset's cost model prices the kernels as the simulator's built-in table of its device
 * does, forward and backward, at every edge: the planner chooses with the figures its plans
 * are judged by. */
static void test_presets_price_the_simulators_kernels(void)
{
    static const char *const specs[] = {"2xh100-ib", "2xa100-efa", "2xp4de", "2xa100-1nic"};
    for (int i = 0; i < 4; i++) {
        dcp_cluster_t *c = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(specs[i], &c), DCP_OK);
        const dcp_perf_model_t *pm = &c->perf;
        dcp_sim_kernels_t k;
        CU_ASSERT_EQUAL_FATAL(
            dcp_sim_kernels_builtin(dcp_sim_kernels_builtin_for(pm->peak_tflops), &k), DCP_OK);
        for (double edge = 16; edge <= 16384; edge *= 1.5) {
            const double fwd = pm->peak_tflops * dcp_cost_efficiency(pm, edge);
            const double want = dcp_cost_curve(k.n, k.tile, k.fwd_tflops, edge);
            const double want_bwd = dcp_cost_curve(k.n, k.tile, k.bwd_tflops, edge);
            CU_ASSERT_DOUBLE_EQUAL(fwd, want, 1e-9 * want);
            CU_ASSERT_DOUBLE_EQUAL(fwd * pm->bwd_speed, want_bwd, 1e-9 * want_bwd);
        }
        dcp_cluster_destroy(c);
    }
}

/* dcp_sim_model_step: layers x each kind's simulated forward + backward, summed, with the
 * cluster's machine and the kernels of its cost model. */
static void test_model_step_sums_kinds(void)
{
    const int32_t lens[3] = {3000, 1200, 700};
    dcp_mask_t causal[3], window[3];
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("causal", &causal[i]), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("window:256", &window[i]), DCP_OK);
    }
    const dcp_layer_kind_t kinds[2] = {{causal, 1}, {window, 5}};
    const dcp_batch_t batch = {.num_seqs = 3, .lengths = lens, .num_kinds = 2, .kinds = kinds};
    const dcp_attn_shape_t shape = {8, 2, 64, DCP_DTYPE_BF16, 0.0f};
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_sim_machine_t m;
    dcp_sim_kernels_t k;
    dcp_sim_machine_from_cluster(c, &m);
    dcp_sim_kernels_from_perf(&c->perf, &k);
    CU_ASSERT_DOUBLE_EQUAL(k.copy_gbps, c->perf.hbm_gbps * 540.0 / 3350.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(k.bwd_tflops[2], k.fwd_tflops[2] * c->perf.bwd_speed, 1e-12);
    double want = 0;
    for (int32_t kind = 0; kind < 2; kind++) {
        const dcp_plan_t *v = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_kind(p, kind, &v), DCP_OK);
        for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
            dcp_sim_result_t r;
            CU_ASSERT_EQUAL_FATAL(dcp_sim_run(v, (dcp_pass_t)pass, &m, &k, NULL, &r), DCP_OK);
            want += kinds[kind].layers * r.ms;
        }
    }
    double ms = 0;
    CU_ASSERT_EQUAL(dcp_sim_model_step(p, c, &ms, NULL), DCP_OK);
    CU_ASSERT(want > 0);
    CU_ASSERT_DOUBLE_EQUAL(ms, want, 1e-12 * want);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(c);
}

/* 256 ranks (32 nodes of 8 H100s): a 512K-token causal batch, both passes finish, every
 * rank ends, and the forward is no faster than the busiest rank's kernels alone. */
static void test_scaling_256_ranks(void)
{
    dcp_mask_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("causal", &m), DCP_OK);
    int32_t lens[42]; /* 512K tokens: two long sequences and 40 of 8K */
    dcp_mask_t masks[42];
    for (int i = 0; i < 42; i++) {
        lens[i] = i == 0 ? 131072 : i == 1 ? 65536 : 8192;
        masks[i] = m;
    }
    const dcp_batch_t batch = {.num_seqs = 42, .lengths = lens, .masks = masks};
    const dcp_attn_shape_t shape = {32, 8, 128, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = DCP_STRATEGY_LPT;
    o.block_size = 2048;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("32xh100-ib", &c), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_sim_machine_t mach;
    dcp_sim_machine_from_cluster(c, &mach);
    dcp_sim_kernels_t k;
    CU_ASSERT_EQUAL_FATAL(dcp_sim_kernels_builtin("h100", &k), DCP_OK);
    double *ms = calloc(256, sizeof *ms);
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        dcp_sim_result_t r;
        CU_ASSERT_EQUAL_FATAL(dcp_sim_run(p, (dcp_pass_t)pass, &mach, &k, ms, &r), DCP_OK);
        int all_ended = 1;
        for (int i = 0; i < 256; i++) all_ended &= ms[i] > 0 && ms[i] <= r.ms;
        CU_ASSERT(all_ended);
        CU_ASSERT(r.events > 256);
        CU_ASSERT(r.ms >= r.compute_ms);
        CU_ASSERT_DOUBLE_EQUAL(r.ms, r.compute_ms + r.exposed_comm_ms + r.wait_ms, r.ms * 1e-9);
    }
    free(ms);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(c);
}

/* dcp-kernel-bench --json lines: medians per tile, head dim 128 preferred; rows with an error
 * skipped ("error": null is none); a file without bwd rows is refused by name. */
static void test_kernel_table_reader(void)
{
    char path[] = "/tmp/dcp-sim-kernels-XXXXXX";
    const int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"kernel\": \"attn\", \"mask\": \"full\", \"tile\": 1024, \"head_dim\": 128, "
          "\"tflops\": 300, \"gbps\": null, \"error\": null}\n"
          "{\"kernel\": \"attn\", \"mask\": \"causal\", \"tile\": 1024, \"head_dim\": 128, "
          "\"tflops\": 200, \"gbps\": null}\n"
          "{\"kernel\": \"attn\", \"mask\": \"full\", \"tile\": 1024, \"head_dim\": 64, "
          "\"tflops\": 100, \"gbps\": null}\n"
          "{\"kernel\": \"attn\", \"mask\": \"full\", \"tile\": 2048, \"head_dim\": 128, "
          "\"tflops\": 400, \"gbps\": null}\n"
          "{\"kernel\": \"bwd\", \"mask\": \"full\", \"tile\": 1024, \"head_dim\": 128, "
          "\"tflops\": 250, \"gbps\": null}\n"
          "{\"kernel\": \"bwd\", \"mask\": \"full\", \"tile\": 2048, \"head_dim\": 128, "
          "\"tflops\": 0, \"gbps\": null, \"error\": \"not built\"}\n"
          "{\"kernel\": \"merge\", \"mask\": \"-\", \"tile\": 1024, \"head_dim\": 128, "
          "\"tflops\": null, \"gbps\": 1200}\n"
          "{\"kernel\": \"copy\", \"mask\": \"-\", \"tile\": 1024, \"head_dim\": 128, "
          "\"tflops\": null, \"gbps\": 500}\n",
          f);
    fclose(f);
    dcp_sim_kernels_t k;
    CU_ASSERT_EQUAL_FATAL(dcpt_sim_kernels_read(path, 128, &k), DCP_OK);
    CU_ASSERT_EQUAL(k.n, 1); /* 2048 has no backward figure */
    CU_ASSERT_DOUBLE_EQUAL(k.tile[0], 1024, 0);
    CU_ASSERT_DOUBLE_EQUAL(k.fwd_tflops[0], 300, 0); /* upper median of 200, 300 */
    CU_ASSERT_DOUBLE_EQUAL(k.bwd_tflops[0], 250, 0);
    CU_ASSERT_DOUBLE_EQUAL(k.merge_gbps, 1200, 0);
    CU_ASSERT_DOUBLE_EQUAL(k.copy_gbps, 500, 0);
    CU_ASSERT_EQUAL(dcpt_sim_kernels_read(path, 64, &k), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(k.fwd_tflops[0], 100, 0);
    f = fopen(path, "w");
    fputs("{\"kernel\": \"attn\", \"tile\": 1024, \"head_dim\": 128, \"tflops\": 300}\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(dcpt_sim_kernels_read(path, 128, &k), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), path));
    unlink(path);
    CU_ASSERT_EQUAL(dcpt_sim_kernels_read(path, 128, &k), DCP_ERR_INVALID_ARG);
}

int dcp_suite_simulate(void)
{
    static const dcp_test_t tests[] = {
        {"two_rank_timeline", test_two_rank_timeline},
        {"two_rank_explained", test_two_rank_explained},
        {"kinds_and_path_add_up", test_kinds_and_path_add_up},
        {"nic_sharing_full_duplex", test_nic_sharing_full_duplex},
        {"bad_inputs_named", test_bad_inputs_named},
        {"presets_price_the_simulators_kernels", test_presets_price_the_simulators_kernels},
        {"model_step_sums_kinds", test_model_step_sums_kinds},
        {"scaling_256_ranks", test_scaling_256_ranks},
        {"kernel_table_reader", test_kernel_table_reader},
        {NULL, NULL},
    };
    return dcp_add_suite("simulate", tests);
}
