/* dcp-plan --simulate: runs each plan's programs through the step-time simulator
 * (partition/sim/simulate.h) and reports simulated times per strategy. */
#ifndef DCP_CLI_SIM_REPORT_H
#define DCP_CLI_SIM_REPORT_H

#include "partition/sim/simulate.h"
#include "plugin/cli/support/report.h"

typedef struct {
    char kernels_name[64]; /* built-in table name, or the file's */
    dcp_sim_machine_t machine;
    dcp_sim_kernels_t kernels;
} dcpt_sim_t;

/* Step buckets of an attribution: step 0 (the first division's inputs), steps 1..T-1 (the
 * inputs of later divisions and the partials that leave while divisions compute), steps T
 * and on (the partials of the last divisions, and what hubs merged of them). */
enum { DCPT_SIM_FIRST = 0, DCPT_SIM_MIDDLE, DCPT_SIM_LAST, DCPT_SIM_BUCKETS };

/* Where one pass's time went (partition/sim/simulate.h's explanation, folded): the slowest rank's
 * exposed communication and the critical path's transfers, each by kind, link class (0
 * intra, 1 inter) and step bucket, in ms. */
typedef struct {
    double ms, compute_ms, exposed_ms, wait_ms;
    double busiest_ms; /* the most kernel time of any rank */
    double exposed_kind[DCP_XFER_KIND_COUNT], exposed_link[2], exposed_step[DCPT_SIM_BUCKETS];
    double path_attn_ms, path_memory_ms, path_latency_ms, path_ranks;
    double path_kind[DCP_XFER_KIND_COUNT], path_link[2], path_step[DCPT_SIM_BUCKETS];
} dcpt_sim_pass_t;

/* One plan's figures; compute, exposed and wait are the forward's plus the backward's. */
typedef struct {
    double fwd_ms, bwd_ms, compute_ms, exposed_comm_ms, wait_ms;
    double run_ms; /* wall time the simulation took */
    dcpt_sim_pass_t pass[DCP_PASS_COUNT];
} dcpt_sim_row_t;

/* Per strategy, sums over batches. */
typedef struct {
    dcpt_sim_row_t sum;
    int32_t n;
} dcpt_sim_agg_t;

/* The machine of `cluster` and the kernel table `kernels` (a dcp-kernel-bench JSON file,
 * "h100", "a100", or NULL for the built-in table nearest the cluster's peak). host_cores > 0
 * models CPU ranks: every rank on one host of that many cores, launches not ordered (the
 * in-process and UCX engines start each launch at once). On bad input, the status with
 * *flag_out naming the flag at fault ("cluster" or "sim-kernels"). */
dcp_status_t dcpt_sim_setup(const char *kernels, const dcp_cluster_t *cluster, int32_t head_dim,
                            double host_cores, dcpt_sim_t *sim_out, const char **flag_out);

/* Simulates both passes of p and explains them; adds the row to agg. With `svg`, also
 * draws rank `svg_rank`'s timeline of both passes there (-1: the slowest rank of the
 * backward), titled `title`. */
dcp_status_t dcpt_sim_plan(const dcpt_sim_t *sim, const dcp_plan_t *p, const char *svg,
                           int32_t svg_rank, const char *title, dcpt_sim_row_t *row_out,
                           dcpt_sim_agg_t *agg);

/* The row's sim_* fields. */
void dcpt_sim_json(dcpt_json_t *j, const dcpt_sim_row_t *row);

/* The table: per strategy, mean simulated forward, backward and step (both) times, the
 * critical rank's split, and the step's speed-up over ring and zigzag where they ran. */
void dcpt_sim_table(FILE *f, const dcp_strategy_t *strategies, const char *const *labels,
                    const dcpt_sim_agg_t *aggs, int32_t n);

/* The attribution table: per strategy and pass, the mean time, its split, the exposed
 * communication by direction (inputs in, partials back), link class and step bucket, and
 * the critical path's kernels, transfers and latencies. */
void dcpt_sim_explain_table(FILE *f, const char *const *labels, const dcpt_sim_agg_t *aggs,
                            int32_t n);

/* The configuration line of the table. */
void dcpt_sim_header(FILE *f, const dcpt_sim_t *sim);

#endif
