#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>

dcp_mask_t t_random_mask(dcpt_rng_t *rng, dcp_mask_kind_t kind, int32_t len, int32_t **ranges_out)
{
    dcp_mask_t m = {.kind = kind};
    *ranges_out = NULL;
    static const double fracs[] = {0.0, 0.2, 0.5, 1.0, 0.37};
    switch (kind) {
    case DCP_MASK_WINDOW:
        m.window = (int32_t)dcpt_rng_range(rng, 1, len + 5);
        break;
    case DCP_MASK_LAMBDA:
        m.sink = (int32_t)dcpt_rng_range(rng, 0, len + 3);
        m.window = (int32_t)dcpt_rng_range(rng, 1, len + 5);
        break;
    case DCP_MASK_BLOCKWISE:
        m.block = (int32_t)dcpt_rng_range(rng, 1, len / 3 + 2);
        m.k = (int32_t)dcpt_rng_range(rng, 0, 4);
        break;
    case DCP_MASK_SHARED_QUESTION:
        m.question_frac = fracs[dcpt_rng_range(rng, 0, 4)];
        m.answers = (int32_t)dcpt_rng_range(rng, 1, 6);
        break;
    case DCP_MASK_CUSTOM: {
        int32_t *r = malloc((size_t)len * 4 * sizeof *r);
        for (int32_t i = 0; i < len; i++)
            for (int j = 0; j < 2; j++) {
                int32_t a = (int32_t)dcpt_rng_range(rng, 0, len),
                        b = (int32_t)dcpt_rng_range(rng, 0, len);
                if (dcpt_rng_range(rng, 0, 5) == 0) b = a; /* empty */
                r[4 * i + 2 * j] = a < b ? a : b;
                r[4 * i + 2 * j + 1] = a < b ? b : a;
            }
        m.ranges = r;
        m.num_rows = len;
        *ranges_out = r;
        break;
    }
    default:
        break;
    }
    return m;
}

dcp_plan_t *t_plan(const int32_t *lengths, int32_t n, const dcp_mask_t *masks, const char *cluster,
                   dcp_strategy_t strategy, int32_t block, int32_t divisions, int32_t head_blocks)
{
    dcp_plan_options_t opts;
    dcp_plan_options_default(&opts);
    opts.strategy = strategy;
    opts.block_size = block;
    opts.divisions = divisions;
    opts.head_blocks = head_blocks;
    return t_plan_opts(lengths, n, masks, cluster, &opts);
}

dcp_plan_t *t_plan_opts(const int32_t *lengths, int32_t n, const dcp_mask_t *masks,
                        const char *cluster, const dcp_plan_options_t *opts)
{
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    return t_plan_shape(lengths, n, masks, cluster, &shape, opts);
}

dcp_plan_t *t_plan_shape(const int32_t *lengths, int32_t n, const dcp_mask_t *masks,
                         const char *cluster, const dcp_attn_shape_t *shape,
                         const dcp_plan_options_t *opts)
{
    const dcp_batch_t batch = {.num_seqs = n, .lengths = lengths, .masks = masks};
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    dcp_plan_t *p = NULL;
    const dcp_status_t st = dcp_plan_create(&batch, shape, opts, c, &p);
    if (st != DCP_OK) fprintf(stderr, "t_plan: %s\n", dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}
