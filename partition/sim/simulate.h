/*
 * The step-time simulator: a discrete-event simulation of every rank's program of a plan on
 * a machine model, for studying step time at scales beyond the machines at hand.
 *
 * Unlike the cost model (partition/plan/cost.h), which times each phase by its busiest link, the
 * simulator shares bandwidth between the transfers that are in flight at each moment:
 *  - every rank runs its program in order on one compute stream: ATTN at the kernel table's
 *    TFLOP/s for the tile's edge (forward or backward curve), COPY at the copy bandwidth, a
 *    forward REDUCE at the merge bandwidth (a backward REDUCE is a sum, timed as a copy);
 *  - COMM_LAUNCH hands its operations to the rank's transfer queue. With `in_order` (one
 *    transfer stream per rank, as NCCL's grouped calls run) a launch starts only once the
 *    rank's previous launch has completed; otherwise at once. A transfer starts when both
 *    its sender's and its receiver's launches have started, and flows after one latency of
 *    its link class;
 *  - links are full duplex. Inside a node a transfer uses its sender's outgoing and its
 *    receiver's incoming device link (intra_gbps each); between nodes, the sender's NIC
 *    outgoing and the receiver's NIC incoming (nic_gbps each), the devices of a node sharing
 *    its NICs (device g of G uses NIC g * nics / G). A transfer flows at the smallest equal
 *    share of its two links (each link's bandwidth over the transfers on it), recomputed
 *    whenever a transfer starts or ends on either of them;
 *  - COMM_WAIT blocks the compute stream until every operation of that launch on this rank
 *    (sends and receives) has completed.
 * With compute_slots > 0 all ranks share that many processors (CPU ranks on one host: a
 * kernel runs at min(1, slots / running kernels) of its speed), as on a host that runs more
 * ranks than it has cores.
 */
#ifndef DCP_PARTITION_SIMULATE_H
#define DCP_PARTITION_SIMULATE_H

#include "partition/model/blocks.h"
#include "partition/plan/plan.h"
#include "topo/cluster.h"

/* Kernel speeds. Attention curves are TFLOP/s (exact allowed pairs x 4 x D x query heads
 * forward, 2.5x that backward) at tile edge tile[i] (tokens; geometric mean of the tile's
 * rows and keys), read as the cost model reads its curve (dcp_cost_curve: log-linear between
 * points, flat past the ends, padded to a 64-token block below it). */
typedef struct {
    int32_t n;
    double tile[DCP_MAX_KERNEL_POINTS];
    double fwd_tflops[DCP_MAX_KERNEL_POINTS];
    double bwd_tflops[DCP_MAX_KERNEL_POINTS];
    double merge_gbps; /* LSE merge: bytes read + written per second, GB/s */
    double copy_gbps;  /* gather/scatter copy and backward sums, GB/s */
} dcp_sim_kernels_t;

/* The machine: links per class (GB/s per direction, latency per transfer). */
typedef struct {
    double intra_gbps, intra_lat_us; /* each device's link inside its node */
    double nic_gbps, inter_lat_us;   /* each NIC, to other nodes */
    int32_t nics_per_node;           /* 1..devices per node */
    int32_t in_order;                /* 1: a rank's launches run one after another */
    double compute_slots;            /* 0: a device per rank; n: all ranks share n processors
                                        (fractional: the share of a busy host they get) */
} dcp_sim_machine_t;

/* One pass's simulated time. The split is of the rank that ends last, along its own
 * timeline: kernels (compute), blocked in COMM_WAIT while its transfers flowed (exposed
 * communication) and blocked before a peer had started its side (waiting: the peer was
 * behind). compute + exposed + waiting = ms. */
typedef struct {
    double ms;
    double compute_ms, exposed_comm_ms, wait_ms;
    double busiest_compute_ms; /* the most kernel time of any rank: the pass's floor */
    int32_t slowest_rank;
    int64_t events; /* transfers and kernels simulated */
} dcp_sim_result_t;

/* What one simulated pass did, recorded for explaining it (dcp_sim_trace_run): when every
 * instruction of every rank ran, when every launch was reached, started and done, and when
 * every transfer group (one launch's transfers from one rank to one peer, which flow as one)
 * had both sides started, began to flow (one latency later) and ended. Times in seconds from
 * the pass's common start. */
typedef struct {
    int32_t rank, step; /* step: of the pass's schedule, 0..T (phase_step of its phase) */
    int64_t instr;      /* the COMM_LAUNCH (plan-wide index) */
    double reached_s, started_s, done_s;
    int64_t last_group; /* the group whose end completed it; -1 for an empty launch */
} dcp_sim_launch_t;

typedef struct {
    int32_t src, dst, inter; /* inter: between nodes */
    int64_t launch[2];       /* the sender's and the receiver's launch records */
    double bytes;
    double kind_bytes[DCP_XFER_KIND_COUNT]; /* bytes by dcp_xfer_kind_t */
    double sides_s, start_s, end_s;
} dcp_sim_group_t;

typedef struct {
    dcp_pass_t pass;
    int32_t num_ranks, num_steps; /* steps 0..num_steps-1 */
    int32_t num_divs;             /* T: steps from T on return partials after the divisions */
    int64_t instr0, num_instrs;   /* the pass's instructions: instr0 .. instr0 + num_instrs */
    double *t0, *t1;              /* [num_instrs]: each instruction's start and end */
    int64_t *wait_launch;         /* [num_instrs]: the launch record a WAIT waited for, else -1 */
    int64_t num_launches, num_groups;
    dcp_sim_launch_t *launches; /* per rank in program order */
    dcp_sim_group_t *groups;
    double *finish_s; /* [num_ranks] */
} dcp_sim_trace_t;

/* The built-in tables, by name: "h100" (FlashAttention-2-class kernels on H100 SXM, bf16,
 * head dim 128, and dcp's merge and copy as measured there), "a100" (the same class on
 * A100-SXM4), and two measured on an H100: "h100-dcp" (dcp's attention engine) and
 * "h100-cudnn" (cuDNN's SDPA). Figures and sources in simulate_kernels.c. */
dcp_status_t dcp_sim_kernels_builtin(const char *name, dcp_sim_kernels_t *k_out);

/* The built-in table of the device whose dense peak is closest to `peak_tflops`. */
const char *dcp_sim_kernels_builtin_for(double peak_tflops);

/* A table from a cost model's figures (topo/cluster.h): the forward at peak x efficiency at
 * each of its edges, the backward at bwd_speed times that, merges and copies at the shares of
 * its memory bandwidth that dcp's merge and copy kernels reached on an H100 (1240 and 540 of
 * 3350 GB/s, as the built-in tables scale them). A preset's curve is its device's
 * (topo/device_kernels.h), so this table times attention, merges and copies exactly as the
 * built-in table of that device does: the planner judges plans as dcp-plan --simulate
 * reports them. */
void dcp_sim_kernels_from_perf(const dcp_perf_model_t *m, dcp_sim_kernels_t *k_out);

/* Checks a table's figures; messages name the field. */
dcp_status_t dcp_sim_kernels_check(const dcp_sim_kernels_t *k);

/* The machine of a cluster model: its link figures, one NIC per nics_per_node, in order
 * (GPU ranks). */
void dcp_sim_machine_from_cluster(const dcp_cluster_t *c, dcp_sim_machine_t *m_out);

dcp_status_t dcp_sim_machine_check(const dcp_sim_machine_t *m, int32_t devs_per_node);

/* Simulates the programs of `pass` of plan p (valid, rows and buffers derived). rank_ms_out
 * (optional, [num_ranks]) gets each rank's end time, ms from a common start. */
dcp_status_t dcp_sim_run(const dcp_plan_t *p, dcp_pass_t pass, const dcp_sim_machine_t *m,
                         const dcp_sim_kernels_t *k, double *rank_ms_out,
                         dcp_sim_result_t *res_out);

/* The simulated training step of plan p's model on cluster c, ms: layers x each kind's
 * forward + backward, summed over the kinds (what dcp_plan_stats_t.model_step_ms predicts),
 * on c's machine (dcp_sim_machine_from_cluster) with c's kernels
 * (dcp_sim_kernels_from_perf). exposed_out (optional) gets the part of it the slowest rank of
 * each pass spends blocked on transfers in flight (dcp_sim_result_t.exposed_comm_ms, summed the
 * same way). */
dcp_status_t dcp_sim_model_step(const dcp_plan_t *p, const dcp_cluster_t *c, double *ms_out,
                                double *exposed_out);

/* dcp_sim_run() that also records the run in *trace_out (released with
 * dcp_sim_trace_release(); untouched on failure). */
dcp_status_t dcp_sim_trace_run(const dcp_plan_t *p, dcp_pass_t pass, const dcp_sim_machine_t *m,
                               const dcp_sim_kernels_t *k, dcp_sim_result_t *res_out,
                               dcp_sim_trace_t *trace_out);

void dcp_sim_trace_release(dcp_sim_trace_t *t);

/* Fills the groups' kind_bytes of a trace from the pass's receive operations; group_of[x] is
 * the group of the pass's transfer x (simulate_explain.c, called by dcp_sim_trace_run). */
dcp_status_t dcp_sim_group_kinds(const dcp_plan_t *p, dcp_sim_trace_t *t, const int64_t *group_of);

/* Where a pass's time went (simulate_explain.c), from its trace:
 *  - exposed: the slowest rank's exposed communication (dcp_sim_result_t.exposed_comm_ms),
 *    each blocked stretch blamed on the transfer group whose end released it, split by that
 *    group's kinds (in proportion to their bytes), its link class and its step;
 *  - the critical path: from the last rank's end back to the start, through what each
 *    stretch waited for - a kernel on that rank, or the transfer group whose end released a
 *    wait, then whichever of its two launches started last (the rank that reached it, or
 *    the launch before it on a rank's in-order transfer stream). Its stretches add up to
 *    the pass's time: kernels (attention, merges/sums/copies), transfers (by kind, link class
 *    and step) and latencies. */
typedef struct {
    int32_t rank;
    int32_t what; /* dcp_sim_seg_kind_t */
    double t0_s, t1_s;
    int64_t group; /* for transfers and latencies: the trace's group, else -1 */
} dcp_sim_seg_t;

typedef enum {
    DCP_SIM_SEG_ATTN = 0,
    DCP_SIM_SEG_MEMORY, /* REDUCE and COPY */
    DCP_SIM_SEG_XFER,
    DCP_SIM_SEG_LATENCY,
    DCP_SIM_SEG_EXPOSED, /* blocked in a wait while its transfers flowed */
    DCP_SIM_SEG_WAITING, /* blocked in a wait before a peer had started its side */
} dcp_sim_seg_kind_t;

typedef struct {
    int32_t num_steps, num_divs;
    /* [step][kind][link class 0 intra, 1 inter], ms: the slowest rank's exposed time and the
     * critical path's transfer time */
    double *exposed_ms, *path_xfer_ms;
    double path_attn_ms, path_memory_ms, path_latency_ms;
    int32_t path_ranks; /* distinct ranks on the path */
    int64_t num_path;
    dcp_sim_seg_t *path; /* latest first */
} dcp_sim_explain_t;

/* Index of (step, kind, class) in the explain arrays. */
static inline int64_t dcp_sim_cell(int32_t step, int32_t kind, int32_t inter)
{
    return ((int64_t)step * DCP_XFER_KIND_COUNT + kind) * 2 + inter;
}

dcp_status_t dcp_sim_explain(const dcp_plan_t *p, const dcp_sim_trace_t *t,
                             const dcp_sim_result_t *res, dcp_sim_explain_t *out);

void dcp_sim_explain_release(dcp_sim_explain_t *e);

/* Rank r's timeline in a trace, in time order: kernels (ATTN, MEMORY) and blocked stretches
 * (WAITING, then EXPOSED, with the group whose end released the wait). *segs_out is
 * malloc'ed (free() it). */
dcp_status_t dcp_sim_rank_timeline(const dcp_plan_t *p, const dcp_sim_trace_t *t, int32_t r,
                                   dcp_sim_seg_t **segs_out, int64_t *n_out);

#endif
