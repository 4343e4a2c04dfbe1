#include "plugin/cli/support/sim_report.h"

#include "include/base/error.h"
#include "plugin/cli/support/sim_kernels.h"
#include "plugin/cli/support/svg.h"

#include <math.h>
#include <string.h>

dcp_status_t dcpt_sim_setup(const char *kernels, const dcp_cluster_t *cluster, int32_t head_dim,
                            double host_cores, dcpt_sim_t *sim_out, const char **flag_out)
{
    dcpt_sim_t s;
    memset(&s, 0, sizeof s);
    dcp_sim_machine_from_cluster(cluster, &s.machine);
    if (host_cores > 0) {
        s.machine.compute_slots = host_cores;
        s.machine.in_order = 0;
    }
    *flag_out = "cluster";
    DCP_CHECK(dcp_sim_machine_check(&s.machine, cluster->devs_per_node));
    if (kernels) {
        *flag_out = "sim-kernels";
        DCP_CHECK(dcpt_kernels_load(kernels, head_dim, &s.kernels));
        snprintf(s.kernels_name, sizeof s.kernels_name, "%s", kernels);
    } else { /* the cluster's own figures: the table the planner judges its plans with */
        dcp_sim_kernels_from_perf(&cluster->perf, &s.kernels);
        snprintf(s.kernels_name, sizeof s.kernels_name, "the cluster's (%s-class)",
                 dcp_sim_kernels_builtin_for(cluster->perf.peak_tflops));
    }
    *sim_out = s;
    return DCP_OK;
}

static int bucket(int32_t step, int32_t divs)
{
    return step == 0 ? DCPT_SIM_FIRST : step >= divs ? DCPT_SIM_LAST : DCPT_SIM_MIDDLE;
}

/* One table of (step, kind, class) cells folded into kinds, link classes and step buckets. */
static void fold(const double *cells, int32_t steps, int32_t divs, double *kind, double *link,
                 double *step)
{
    for (int32_t st = 0; st < steps; st++)
        for (int k = 0; k < DCP_XFER_KIND_COUNT; k++)
            for (int c = 0; c < 2; c++) {
                const double v = cells[dcp_sim_cell(st, k, c)];
                kind[k] += v;
                link[c] += v;
                step[bucket(st, divs)] += v;
            }
}

static void fold_pass(const dcp_sim_result_t *r, const dcp_sim_explain_t *e, dcpt_sim_pass_t *out)
{
    dcpt_sim_pass_t x = {.ms = r->ms,
                         .compute_ms = r->compute_ms,
                         .exposed_ms = r->exposed_comm_ms,
                         .wait_ms = r->wait_ms,
                         .busiest_ms = r->busiest_compute_ms,
                         .path_attn_ms = e->path_attn_ms,
                         .path_memory_ms = e->path_memory_ms,
                         .path_latency_ms = e->path_latency_ms,
                         .path_ranks = e->path_ranks};
    fold(e->exposed_ms, e->num_steps, e->num_divs, x.exposed_kind, x.exposed_link, x.exposed_step);
    fold(e->path_xfer_ms, e->num_steps, e->num_divs, x.path_kind, x.path_link, x.path_step);
    *out = x;
}

/* Every member of dcpt_sim_pass_t is a double, so a sum runs over them as an array. */
_Static_assert(sizeof(dcpt_sim_pass_t) % sizeof(double) == 0, "dcpt_sim_pass_t: doubles only");

static void add_pass(dcpt_sim_pass_t *sum, const dcpt_sim_pass_t *x)
{
    double *a = (double *)sum;
    const double *b = (const double *)x;
    for (size_t i = 0; i < sizeof *x / sizeof(double); i++) a[i] += b[i];
}

dcp_status_t dcpt_sim_plan(const dcpt_sim_t *sim, const dcp_plan_t *p, const char *svg,
                           int32_t svg_rank, const char *title, dcpt_sim_row_t *row_out,
                           dcpt_sim_agg_t *agg)
{
    dcp_sim_result_t r[DCP_PASS_COUNT];
    dcp_sim_trace_t tr[DCP_PASS_COUNT] = {{0}};
    dcp_sim_explain_t ex[DCP_PASS_COUNT] = {{0}};
    dcpt_sim_row_t row = {0};
    dcp_status_t st = DCP_OK;
    const double t0 = dcp_now();
    for (int pass = 0; pass < DCP_PASS_COUNT && st == DCP_OK; pass++) {
        st = dcp_sim_trace_run(p, (dcp_pass_t)pass, &sim->machine, &sim->kernels, &r[pass],
                               &tr[pass]);
        if (st == DCP_OK) st = dcp_sim_explain(p, &tr[pass], &r[pass], &ex[pass]);
        if (st == DCP_OK) fold_pass(&r[pass], &ex[pass], &row.pass[pass]);
    }
    row.run_ms = (dcp_now() - t0) * 1e3;
    if (st == DCP_OK && svg) {
        const int32_t rank = svg_rank >= 0 ? svg_rank : r[DCP_PASS_BWD].slowest_rank;
        st = dcpt_svg_timeline(p, tr, ex, rank, svg, title);
    }
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        dcp_sim_trace_release(&tr[pass]);
        dcp_sim_explain_release(&ex[pass]);
    }
    DCP_CHECK(st);
    row.fwd_ms = r[0].ms;
    row.bwd_ms = r[1].ms;
    row.compute_ms = r[0].compute_ms + r[1].compute_ms;
    row.exposed_comm_ms = r[0].exposed_comm_ms + r[1].exposed_comm_ms;
    row.wait_ms = r[0].wait_ms + r[1].wait_ms;
    agg->sum.fwd_ms += row.fwd_ms;
    agg->sum.bwd_ms += row.bwd_ms;
    agg->sum.compute_ms += row.compute_ms;
    agg->sum.exposed_comm_ms += row.exposed_comm_ms;
    agg->sum.wait_ms += row.wait_ms;
    agg->sum.run_ms += row.run_ms;
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++)
        add_pass(&agg->sum.pass[pass], &row.pass[pass]);
    agg->n++;
    *row_out = row;
    return DCP_OK;
}

static const char *const kind_keys[DCP_XFER_KIND_COUNT] = {"q",     "kv", "part", "q_do",
                                                           "stats", "dq", "dkv"};

/* kinds of a pass, links, step buckets as JSON objects */
static void json_split(dcpt_json_t *j, const char *key, const double *kind, const double *link,
                       const double *step, int bwd)
{
    static const int fwd_kinds[] = {DCP_XFER_Q, DCP_XFER_KV, DCP_XFER_PART, -1};
    static const int bwd_kinds[] = {DCP_XFER_BQ, DCP_XFER_BSTAT, DCP_XFER_KV,
                                    DCP_XFER_DQ, DCP_XFER_DKV,   -1};
    dcpt_json_object(j, key);
    dcpt_json_object(j, "by_kind");
    for (const int *k = bwd ? bwd_kinds : fwd_kinds; *k >= 0; k++)
        dcpt_json_num(j, kind_keys[*k], kind[*k]);
    dcpt_json_close(j);
    dcpt_json_object(j, "by_link");
    dcpt_json_num(j, "intra", link[0]);
    dcpt_json_num(j, "inter", link[1]);
    dcpt_json_close(j);
    dcpt_json_object(j, "by_step");
    dcpt_json_num(j, "first", step[DCPT_SIM_FIRST]);
    dcpt_json_num(j, "middle", step[DCPT_SIM_MIDDLE]);
    dcpt_json_num(j, "last", step[DCPT_SIM_LAST]);
    dcpt_json_close(j);
    dcpt_json_close(j);
}

static void json_pass(dcpt_json_t *j, const char *key, const dcpt_sim_pass_t *x, int bwd)
{
    dcpt_json_object(j, key);
    dcpt_json_num(j, "ms", x->ms);
    dcpt_json_num(j, "compute_ms", x->compute_ms);
    dcpt_json_num(j, "busiest_compute_ms", x->busiest_ms);
    dcpt_json_num(j, "exposed_comm_ms", x->exposed_ms);
    dcpt_json_num(j, "wait_ms", x->wait_ms);
    json_split(j, "exposed", x->exposed_kind, x->exposed_link, x->exposed_step, bwd);
    dcpt_json_object(j, "path");
    dcpt_json_num(j, "attn_ms", x->path_attn_ms);
    dcpt_json_num(j, "memory_ms", x->path_memory_ms);
    dcpt_json_num(j, "latency_ms", x->path_latency_ms);
    dcpt_json_num(j, "ranks", x->path_ranks);
    json_split(j, "xfer", x->path_kind, x->path_link, x->path_step, bwd);
    dcpt_json_close(j);
    dcpt_json_close(j);
}

void dcpt_sim_json(dcpt_json_t *j, const dcpt_sim_row_t *row)
{
    dcpt_json_num(j, "sim_fwd_ms", row->fwd_ms);
    dcpt_json_num(j, "sim_bwd_ms", row->bwd_ms);
    dcpt_json_num(j, "sim_compute_ms", row->compute_ms);
    dcpt_json_num(j, "sim_exposed_comm_ms", row->exposed_comm_ms);
    dcpt_json_num(j, "sim_wait_ms", row->wait_ms);
    dcpt_json_num(j, "sim_run_ms", row->run_ms);
    json_pass(j, "sim_fwd", &row->pass[DCP_PASS_FWD], 0);
    json_pass(j, "sim_bwd", &row->pass[DCP_PASS_BWD], 1);
}

void dcpt_sim_header(FILE *f, const dcpt_sim_t *sim)
{
    const dcp_sim_machine_t *m = &sim->machine;
    fprintf(f,
            "# simulator: kernels %s; links %.4g GB/s (%.3g us) in a node, %d network link(s) "
            "per node at %.4g GB/s (%.3g us), full duplex; ",
            sim->kernels_name, m->intra_gbps, m->intra_lat_us, m->nics_per_node, m->nic_gbps,
            m->inter_lat_us);
    if (m->compute_slots > 0)
        fprintf(f, "CPU ranks sharing %.3g cores of one host\n", m->compute_slots);
    else
        fprintf(f, "a device per rank, launches in order\n");
}

static const dcpt_col_t cols[] = {
    {"strategy", -8},    {"sim-fwd(ms)", 11}, {"sim-bwd(ms)", 11}, {"step(ms)", 9},
    {"compute(ms)", 11}, {"exposed(ms)", 11}, {"wait(ms)", 9},     {"x-ring", 7},
    {"x-zigzag", 8},     {"fwd-x-best", 10},  {"sim(ms)", 8},
};
#define NCOLS ((int)(sizeof cols / sizeof cols[0]))

static double mean_of(const dcpt_sim_agg_t *a, double v)
{
    return a->n ? v / a->n : NAN;
}

static void ratio(char cell[32], double base, double v)
{
    if (isfinite(base) && v > 0)
        snprintf(cell, 32, "%.2f", base / v);
    else
        snprintf(cell, 32, "-");
}

void dcpt_sim_table(FILE *f, const dcp_strategy_t *strategies, const char *const *labels,
                    const dcpt_sim_agg_t *aggs, int32_t n)
{
    double ring = NAN, zigzag = NAN, best_fwd = NAN;
    for (int32_t i = 0; i < n; i++) {
        const dcpt_sim_agg_t *a = &aggs[i];
        if (!a->n) continue;
        const double step = mean_of(a, a->sum.fwd_ms + a->sum.bwd_ms),
                     fwd = mean_of(a, a->sum.fwd_ms);
        if (strategies[i] == DCP_STRATEGY_RING) ring = step;
        if (strategies[i] == DCP_STRATEGY_ZIGZAG) zigzag = step;
        if (strategies[i] == DCP_STRATEGY_RING || strategies[i] == DCP_STRATEGY_ZIGZAG)
            best_fwd = isfinite(best_fwd) ? fmin(best_fwd, fwd) : fwd;
    }
    dcpt_table_header(f, cols, NCOLS);
    for (int32_t i = 0; i < n; i++) {
        const dcpt_sim_agg_t *a = &aggs[i];
        if (!a->n) continue;
        const double step = mean_of(a, a->sum.fwd_ms + a->sum.bwd_ms);
        char cell[NCOLS][32];
        snprintf(cell[0], 32, "%s", labels[i]);
        snprintf(cell[1], 32, "%.3f", mean_of(a, a->sum.fwd_ms));
        snprintf(cell[2], 32, "%.3f", mean_of(a, a->sum.bwd_ms));
        snprintf(cell[3], 32, "%.3f", step);
        snprintf(cell[4], 32, "%.3f", mean_of(a, a->sum.compute_ms));
        snprintf(cell[5], 32, "%.3f", mean_of(a, a->sum.exposed_comm_ms));
        snprintf(cell[6], 32, "%.3f", mean_of(a, a->sum.wait_ms));
        ratio(cell[7], ring, step);
        ratio(cell[8], zigzag, step);
        ratio(cell[9], best_fwd, mean_of(a, a->sum.fwd_ms));
        snprintf(cell[10], 32, "%.1f", mean_of(a, a->sum.run_ms));
        dcpt_table_row(f, cols, NCOLS, cell);
    }
}

static const dcpt_col_t explain_cols[] = {
    {"strategy", -8}, {"pass", -4},     {"time(ms)", 9},    {"compute", 8},  {"busiest", 8},
    {"exposed", 8},   {"wait", 7},      {"exp-in", 7},      {"exp-back", 8}, {"exp-intra", 9},
    {"exp-inter", 9}, {"exp-first", 9}, {"exp-mid", 8},     {"exp-last", 8}, {"path-kern", 9},
    {"path-in", 8},   {"path-back", 9}, {"path-inter", 10}, {"path-lat", 8}, {"path-ranks", 10},
};
#define NEXPLAIN ((int)(sizeof explain_cols / sizeof explain_cols[0]))

/* Inputs in and partials back of a per-kind array. */
static void in_back(const double *kind, double *in, double *back)
{
    *in = *back = 0;
    for (int k = 0; k < DCP_XFER_KIND_COUNT; k++) *(dcp_xfer_is_partial(k) ? back : in) += kind[k];
}

void dcpt_sim_explain_table(FILE *f, const char *const *labels, const dcpt_sim_agg_t *aggs,
                            int32_t n)
{
    dcpt_table_header(f, explain_cols, NEXPLAIN);
    for (int32_t i = 0; i < n; i++) {
        const dcpt_sim_agg_t *a = &aggs[i];
        if (!a->n) continue;
        for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
            const dcpt_sim_pass_t *x = &a->sum.pass[pass];
            double ein, eback, pin, pback;
            in_back(x->exposed_kind, &ein, &eback);
            in_back(x->path_kind, &pin, &pback);
            const double v[NEXPLAIN - 2] = {x->ms,
                                            x->compute_ms,
                                            x->busiest_ms,
                                            x->exposed_ms,
                                            x->wait_ms,
                                            ein,
                                            eback,
                                            x->exposed_link[0],
                                            x->exposed_link[1],
                                            x->exposed_step[DCPT_SIM_FIRST],
                                            x->exposed_step[DCPT_SIM_MIDDLE],
                                            x->exposed_step[DCPT_SIM_LAST],
                                            x->path_attn_ms + x->path_memory_ms,
                                            pin,
                                            pback,
                                            x->path_link[1],
                                            x->path_latency_ms,
                                            x->path_ranks};
            char cell[NEXPLAIN][32];
            snprintf(cell[0], 32, "%s", labels[i]);
            snprintf(cell[1], 32, "%s", pass == DCP_PASS_FWD ? "fwd" : "bwd");
            for (int c = 2; c < NEXPLAIN; c++)
                snprintf(cell[c], 32, c == NEXPLAIN - 1 ? "%.1f" : "%.3f", mean_of(a, v[c - 2]));
            dcpt_table_row(f, explain_cols, NEXPLAIN, cell);
        }
    }
}
