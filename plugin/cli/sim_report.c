#include "plugin/cli/sim_report.h"

#include "include/base/error.h"
#include "plugin/cli/args.h"
#include "plugin/cli/sim_kernels.h"

#include <math.h>
#include <string.h>

void dcpt_sim_setup(const char *tool, const char *kernels, const dcp_cluster_t *cluster,
                    int32_t head_dim, double host_cores, dcpt_sim_t *sim_out)
{
    dcpt_sim_t s;
    memset(&s, 0, sizeof s);
    dcp_sim_machine_from_cluster(cluster, &s.machine);
    if (host_cores > 0) {
        s.machine.compute_slots = host_cores;
        s.machine.in_order = 0;
    }
    if (dcp_sim_machine_check(&s.machine, cluster->devs_per_node) != DCP_OK)
        dcpt_args_fail(tool, "cluster", "%s", dcp_last_error());
    const char *name = kernels ? kernels : dcp_sim_kernels_builtin_for(cluster->perf.peak_tflops);
    dcp_status_t st;
    if (!strcmp(name, "h100") || !strcmp(name, "a100"))
        st = dcp_sim_kernels_builtin(name, &s.kernels);
    else
        st = dcpt_sim_kernels_read(name, head_dim, &s.kernels);
    if (st != DCP_OK) dcpt_args_fail(tool, "sim-kernels", "%s", dcp_last_error());
    snprintf(s.kernels_name, sizeof s.kernels_name, "%s", name);
    *sim_out = s;
}

dcp_status_t dcpt_sim_plan(const dcpt_sim_t *sim, const dcp_plan_t *p, dcpt_sim_row_t *row_out,
                           dcpt_sim_agg_t *agg)
{
    dcp_sim_result_t r[DCP_PASS_COUNT];
    const double t0 = dcp_now();
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++)
        DCP_CHECK(dcp_sim_run(p, (dcp_pass_t)pass, &sim->machine, &sim->kernels, NULL, &r[pass]));
    const dcpt_sim_row_t row = {
        .fwd_ms = r[0].ms,
        .bwd_ms = r[1].ms,
        .compute_ms = r[0].compute_ms + r[1].compute_ms,
        .exposed_comm_ms = r[0].exposed_comm_ms + r[1].exposed_comm_ms,
        .wait_ms = r[0].wait_ms + r[1].wait_ms,
        .run_ms = (dcp_now() - t0) * 1e3,
    };
    agg->sum.fwd_ms += row.fwd_ms;
    agg->sum.bwd_ms += row.bwd_ms;
    agg->sum.compute_ms += row.compute_ms;
    agg->sum.exposed_comm_ms += row.exposed_comm_ms;
    agg->sum.wait_ms += row.wait_ms;
    agg->sum.run_ms += row.run_ms;
    agg->n++;
    *row_out = row;
    return DCP_OK;
}

void dcpt_sim_json(dcpt_json_t *j, const dcpt_sim_row_t *row)
{
    dcpt_json_num(j, "sim_fwd_ms", row->fwd_ms);
    dcpt_json_num(j, "sim_bwd_ms", row->bwd_ms);
    dcpt_json_num(j, "sim_compute_ms", row->compute_ms);
    dcpt_json_num(j, "sim_exposed_comm_ms", row->exposed_comm_ms);
    dcpt_json_num(j, "sim_wait_ms", row->wait_ms);
    dcpt_json_num(j, "sim_run_ms", row->run_ms);
}

void dcpt_sim_header(FILE *f, const dcpt_sim_t *sim)
{
    const dcp_sim_machine_t *m = &sim->machine;
    fprintf(f,
            "# simulator: kernels %s; links %.4g GB/s (%.3g us) in a node, %d NIC(s) per node "
            "at %.4g GB/s (%.3g us), full duplex; ",
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

void dcpt_sim_table(FILE *f, const dcp_strategy_t *strategies, const dcpt_sim_agg_t *aggs,
                    int32_t n)
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
        snprintf(cell[0], 32, "%s", dcp_strategy_name(strategies[i]));
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
