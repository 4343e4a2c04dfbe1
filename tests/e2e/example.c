/* The README's example, built and run by `make test` against the installed-style API only:
 * plan a batch, gather each rank's rows from packed global tensors in the order
 * dcp_plan_local_layout() gives, run the forward on 8 in-process ranks, and check one
 * output row against attention computed directly. */
#include <dcp.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEQ = 3, HQ = 8, HKV = 2, D = 64, RANKS = 8 };

/* a deterministic value in [-1, 1) for element i of tensor t */
static float value(int t, int64_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)t * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    return (float)((x >> 40) & 0xFFFF) / 32768.0f - 1.0f;
}

/* token `token` of a packed global [tokens, heads, D] tensor into row `row` of a local one */
static void gather(float *local, int64_t row, const float *global, int64_t token, int heads)
{
    memcpy(local + row * heads * D, global + token * heads * D, (size_t)heads * D * sizeof(float));
}

/* O of query `pos` of a causal sequence starting at global row `first`, head h, in double */
static double naive_max_diff(const float *q, const float *k, const float *v, int64_t first,
                             int32_t pos, int h, const float *o_row)
{
    const int kvh = h / (HQ / HKV); /* GQA: consecutive query heads share a KV head */
    const float *qi = q + ((first + pos) * HQ + h) * D;
    double *s = malloc((size_t)(pos + 1) * sizeof *s), m = -INFINITY, sum = 0, worst = 0;
    for (int32_t j = 0; j <= pos; j++) {
        double dot = 0;
        for (int d = 0; d < D; d++) dot += (double)qi[d] * k[((first + j) * HKV + kvh) * D + d];
        s[j] = dot / sqrt((double)D);
        if (s[j] > m) m = s[j];
    }
    for (int32_t j = 0; j <= pos; j++) sum += (s[j] = exp(s[j] - m));
    for (int d = 0; d < D; d++) {
        double out = 0;
        for (int32_t j = 0; j <= pos; j++) out += s[j] / sum * v[((first + j) * HKV + kvh) * D + d];
        if (fabs(out - o_row[d]) > worst) worst = fabs(out - o_row[d]);
    }
    free(s);
    return worst;
}

int main(void)
{
    /* a batch: three sequences, causal masks */
    const int32_t lengths[NSEQ] = {3000, 700, 1};
    dcp_mask_t masks[NSEQ];
    for (int i = 0; i < NSEQ; i++) dcp_mask_parse("causal", &masks[i]);
    const dcp_batch_t batch = {.num_seqs = NSEQ, .lengths = lengths, .masks = masks};
    const dcp_attn_shape_t shape = {
        .num_heads = HQ, .num_kv_heads = HKV, .head_dim = D, .dtype = DCP_DTYPE_FP32};
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

    /* the whole batch as packed global tensors: sequence s starts at row offset[s] */
    int64_t offset[NSEQ + 1] = {0};
    for (int s = 0; s < NSEQ; s++) offset[s + 1] = offset[s] + lengths[s];
    const int64_t total = offset[NSEQ];
    float *q = malloc((size_t)total * HQ * D * sizeof(float));
    float *k = malloc((size_t)total * HKV * D * sizeof(float));
    float *v = malloc((size_t)total * HKV * D * sizeof(float));
    for (int64_t i = 0; i < total * HQ * D; i++) q[i] = value(0, i);
    for (int64_t i = 0; i < total * HKV * D; i++) k[i] = value(1, i), v[i] = value(2, i);

    /* each rank's rows: the concatenation of its spans, in the order given */
    dcp_tensors_t io[RANKS];
    dcp_token_span_t *spans[RANKS];
    int32_t nspans[RANKS];
    for (int r = 0; r < RANKS; r++) {
        int64_t n;
        dcp_plan_local_layout(plan, r, NULL, 0, &nspans[r], &n); /* size query */
        spans[r] = malloc((size_t)nspans[r] * sizeof(dcp_token_span_t) + 1);
        dcp_plan_local_layout(plan, r, spans[r], nspans[r], &nspans[r], &n);
        float *lq = malloc((size_t)n * HQ * D * sizeof(float) + 1);
        float *lk = malloc((size_t)n * HKV * D * sizeof(float) + 1);
        float *lv = malloc((size_t)n * HKV * D * sizeof(float) + 1);
        int64_t row = 0;
        for (int i = 0; i < nspans[r]; i++)
            for (int32_t p = 0; p < spans[r][i].len; p++, row++) {
                const int64_t token = offset[spans[r][i].seq] + spans[r][i].start + p;
                gather(lq, row, q, token, HQ);
                gather(lk, row, k, token, HKV);
                gather(lv, row, v, token, HKV);
            }
        io[r] = (dcp_tensors_t){.q = lq,
                                .k = lk,
                                .v = lv,
                                .o = malloc((size_t)n * HQ * D * sizeof(float) + 1),
                                .lse = malloc((size_t)n * HQ * sizeof(float) + 1)};
    }
    const dcp_status_t s = dcp_forward_inproc(plan, io, 0 /* default timeout */, NULL /* CPU */);
    printf("forward: %s\n", dcp_status_string(s));

    /* where did the last token of sequence 0 land? find its rank and local row, check head 5 */
    const int32_t seq = 0, pos = lengths[0] - 1, head = 5;
    double diff = -1;
    for (int r = 0; r < RANKS && s == DCP_OK; r++) {
        int64_t row = 0;
        for (int i = 0; i < nspans[r]; row += spans[r][i].len, i++) {
            const dcp_token_span_t *sp = &spans[r][i];
            if (sp->seq != seq || pos < sp->start || pos >= sp->start + sp->len) continue;
            const float *o_row = (const float *)io[r].o + ((row + pos - sp->start) * HQ + head) * D;
            diff = naive_max_diff(q, k, v, offset[seq], pos, head, o_row);
            printf("token %d of sequence %d is row %lld of rank %d; head %d: max |O - naive| = "
                   "%.1e\n",
                   pos, seq, (long long)(row + pos - sp->start), r, head, diff);
        }
    }
    for (int r = 0; r < RANKS; r++) {
        free((void *)io[r].q);
        free((void *)io[r].k);
        free((void *)io[r].v);
        free(io[r].o);
        free(io[r].lse);
        free(spans[r]);
    }
    free(q);
    free(k);
    free(v);
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(cluster);
    return s == DCP_OK && diff >= 0 && diff <= 1e-5 ? 0 : 1;
}
