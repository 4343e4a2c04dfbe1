/*
 * The step-time simulator: a discrete-event simulation of every rank's program of a plan on
 * a machine model, for studying step time at scales beyond the machines at hand.
 *
 * Unlike the cost model (partition/cost.h), which times each phase by its busiest link, the
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

#include "partition/plan.h"
#include "topo/cluster.h"

/* Kernel speeds. Attention curves are TFLOP/s (exact allowed pairs x 4 x D x query heads
 * forward, 2.5x that backward) at tile edge tile[i] (tokens; geometric mean of the tile's
 * rows and keys), log-linear between points and clamped at the ends. */
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
    int32_t slowest_rank;
    int64_t events; /* transfers and kernels simulated */
} dcp_sim_result_t;

/* The built-in tables, by name: "h100" (FlashAttention-2-class kernels on H100 SXM, bf16,
 * head dim 128, and dcp's merge and copy as measured there) and "a100" (the same class on
 * A100-SXM4). Figures and sources in simulate_kernels.c. */
dcp_status_t dcp_sim_kernels_builtin(const char *name, dcp_sim_kernels_t *k_out);

/* The built-in table of the device whose dense peak is closest to `peak_tflops`. */
const char *dcp_sim_kernels_builtin_for(double peak_tflops);

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

#endif
