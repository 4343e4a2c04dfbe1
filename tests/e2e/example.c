/* The README's example, built and run by `make test` against the installed-style API only. */
#include <dcp.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    /* a batch: three sequences, causal masks */
    const int32_t lengths[3] = {3000, 700, 1};
    dcp_mask_t masks[3];
    for (int i = 0; i < 3; i++) dcp_mask_parse("causal", &masks[i]);
    const dcp_batch_t batch = {3, lengths, masks};
    const dcp_attn_shape_t shape = {
        .num_heads = 8, .num_kv_heads = 2, .head_dim = 64, .dtype = DCP_DTYPE_FP32};
    dcp_plan_options_t opts;
    dcp_plan_options_default(&opts);
    opts.block_size = 256;

    dcp_cluster_t *cluster = NULL;
    dcp_plan_t *plan = NULL;
    if (dcp_cluster_from_spec("2x4", &cluster) != DCP_OK ||
        dcp_plan_create(&batch, &shape, &opts, cluster, &plan) != DCP_OK) {
        fprintf(stderr, "dcp: %s\n", dcp_last_error());
        return 1;
    }
    dcp_plan_stats_t st;
    dcp_plan_get_stats(plan, &st);
    printf("%d ranks, %.1f MB moved (%.1f MB between nodes), compute imbalance %.1f%%\n",
           st.num_ranks, st.comm_bytes / 1e6, st.inter_node_bytes / 1e6,
           100 * st.compute_imbalance);

    /* each rank's rows, in the order dcp_plan_local_layout() gives */
    dcp_tensors_t io[8];
    for (int r = 0; r < st.num_ranks; r++) {
        int64_t n;
        dcp_plan_local_layout(plan, r, NULL, 0, NULL, &n);
        float *q = calloc((size_t)n * 8 * 64 + 1, sizeof(float));
        float *kv = calloc((size_t)n * 2 * 64 + 1, sizeof(float));
        float *o = calloc((size_t)n * 8 * 64 + 1, sizeof(float));
        float *lse = calloc((size_t)n * 8 + 1, sizeof(float));
        /* ... fill q and kv with this rank's tokens ... */
        io[r] = (dcp_tensors_t){q, kv, kv, o, lse};
    }
    const dcp_status_t s = dcp_forward_inproc(plan, io, 0 /* default timeout */, NULL /* CPU */);
    printf("forward: %s\n", dcp_status_string(s));
    for (int r = 0; r < st.num_ranks; r++) {
        free((void *)io[r].q);
        free((void *)io[r].k);
        free(io[r].o);
        free(io[r].lse);
    }
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(cluster);
    return s == DCP_OK ? 0 : 1;
}
