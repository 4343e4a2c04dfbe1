/* The README's process-rank example, compiled as an MPI user would: dcp.h, libdcp.so and
 * libdcp_mpi. Every rank plans the same batch, runs its part and checks that it got rows
 * back; run with mpirun -np 2 (or more). Exit status 0 on success on every rank. */
#include <dcp.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    dcp_bootstrap_t bs;
    dcp_context_t *ctx = NULL;
    dcp_cluster_t *cluster = NULL;
    dcp_plan_t *plan = NULL;
    float *buf = NULL;
    const dcp_context_config_t cfg = {.bootstrap = &bs};
    dcp_status_t st = dcp_bootstrap_mpi(&bs);
    if (st == DCP_OK) st = dcp_context_create(&cfg, &ctx);
    /* plan for the cluster the ranks form; every rank gets the same plan */
    const dcp_cluster_t *found = NULL;
    char spec[32];
    if (st == DCP_OK && dcp_context_cluster(ctx, &found) == DCP_OK)
        snprintf(spec, sizeof spec, "%dx%d", dcp_cluster_num_nodes(found),
                 dcp_cluster_num_ranks(found) / dcp_cluster_num_nodes(found));
    else
        snprintf(spec, sizeof spec, "1x%d", bs.size);
    const int32_t lengths[3] = {1500, 300, 1};
    dcp_mask_t masks[3];
    for (int i = 0; i < 3; i++) dcp_mask_parse("causal", &masks[i]);
    const dcp_batch_t batch = {.num_seqs = 3, .lengths = lengths, .masks = masks};
    const dcp_attn_shape_t shape = {
        .num_heads = 4, .num_kv_heads = 2, .head_dim = 32, .dtype = DCP_DTYPE_FP32};
    dcp_plan_options_t opts;
    dcp_plan_options_default(&opts);
    opts.block_size = 128;
    if (st == DCP_OK) st = dcp_cluster_from_spec(spec, &cluster);
    if (st == DCP_OK) st = dcp_plan_create(&batch, &shape, &opts, cluster, &plan);
    /* this rank's rows: Q, K, V of its tokens (here all 0.01), O and LSE back */
    int64_t tokens = 0;
    if (st == DCP_OK) st = dcp_plan_local_layout(plan, bs.rank, NULL, 0, NULL, &tokens);
    const int64_t nq = tokens * 4 * 32, nkv = tokens * 2 * 32;
    if (st == DCP_OK && !(buf = calloc((size_t)(2 * nq + 2 * nkv + tokens * 4 + 1), sizeof *buf)))
        st = DCP_ERR_NO_MEMORY;
    if (st == DCP_OK) {
        for (int64_t i = 0; i < nq + 2 * nkv; i++) buf[i] = 0.01f;
        const dcp_tensors_t io = {.q = buf,
                                  .k = buf + nq,
                                  .v = buf + nq + nkv,
                                  .o = buf + nq + 2 * nkv,
                                  .lse = buf + 2 * nq + 2 * nkv};
        st = dcp_forward(ctx, plan, &io, NULL);
    }
    /* equal inputs: every output equals V */
    int ok = st == DCP_OK;
    for (int64_t i = 0; ok && i < nq; i++)
        ok = buf[nq + 2 * nkv + i] > 0.0099f && buf[nq + 2 * nkv + i] < 0.0101f;
    if (bs.rank == 0 || !ok)
        printf("rank %d of %d (cluster %s, engines %s/%s): %lld tokens, forward %s%s%s\n", bs.rank,
               bs.size, spec, dcp_context_transport(ctx, 0), dcp_context_transport(ctx, 1),
               (long long)tokens, dcp_status_string(st), st ? ": " : "",
               st ? dcp_last_error() : "");
    free(buf);
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(cluster);
    dcp_context_destroy(ctx);
    MPI_Finalize();
    return ok ? 0 : 1;
}
