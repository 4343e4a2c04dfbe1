/* Ordering under delays: the 8-ranks-on-one-GPU check of the stream-ordered runtime, on the
 * CPU executor. Random sleeps at every ordering point (before kernels, launches, waits and
 * in-process copies; tests/unit/delay_hook.c) make peers overtake each other and blocks
 * land at the moments a GPU's asynchronous streams would; every run, forward and
 * backward, must give outputs bit-identical to an undelayed run of the same plan (the CPU
 * executor is deterministic), so any reuse of a slot before its transfer completed, or a
 * read before one landed, shows as a mismatch. */
#include "include/base/half.h"
#include "include/dcp.h"
#include "tests/unit/delay_hook.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Delayed runs per configuration. Under ASan a run is ~10x slower and the suite took 83 of
 * CI's 1340 s: there two runs per configuration look for memory errors on the delayed
 * paths, and the race hunt is the plain build's six. */
#if defined(__SANITIZE_ADDRESS__)
enum { REPEATS = 2 };
#else
enum { REPEATS = 6 };
#endif
enum { RANKS = 8, TENSORS = 9 };

/* Every rank's tensors: q k v o lse dout dq dk dv, one allocation each. */
typedef struct {
    void *t[RANKS][TENSORS];
    size_t bytes[RANKS][TENSORS];
    dcp_grad_tensors_t io[RANKS];
} rank_tensors_t;

static void tensors_make(const dcp_plan_t *p, const dcp_attn_shape_t *sh, rank_tensors_t *rt,
                         uint64_t seed)
{
    memset(rt, 0, sizeof *rt);
    dcpt_rng_t rng = {seed};
    const size_t es = sh->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    for (int r = 0; r < RANKS; r++) {
        int64_t tok = 0;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_local_layout(p, r, NULL, 0, NULL, &tok), DCP_OK);
        const int64_t q = tok * sh->num_heads * sh->head_dim,
                      kv = tok * sh->num_kv_heads * sh->head_dim;
        const size_t bytes[TENSORS] = {q * es, kv * es, kv * es, q * es, tok * sh->num_heads * 4,
                                       q * es, q * es,  kv * es, kv * es};
        for (int j = 0; j < TENSORS; j++) {
            rt->bytes[r][j] = bytes[j];
            rt->t[r][j] = calloc(1, bytes[j] + 16);
            /* inputs (q, k, v, dout) random; the 2-byte types get values they hold exactly */
            const int input = j < 3 || j == 5;
            for (size_t i = 0; input && i < bytes[j] / es; i++) {
                const float x = (float)dcpt_rng_normal(&rng);
                if (es == 4)
                    ((float *)rt->t[r][j])[i] = x;
                else
                    dcp_pack_half(sh->dtype, &x, (uint16_t *)rt->t[r][j] + i, 1);
            }
        }
        void **t = rt->t[r];
        rt->io[r] =
            (dcp_grad_tensors_t){{t[0], t[1], t[2], t[3], t[4], 0.0f}, t[5], t[6], t[7], t[8]};
    }
}

static void tensors_free(rank_tensors_t *rt)
{
    for (int r = 0; r < RANKS; r++)
        for (int j = 0; j < TENSORS; j++) free(rt->t[r][j]);
}

/* The outputs (o lse dq dk dv) of every rank, concatenated. */
static char *outputs(const rank_tensors_t *rt, size_t *n_out)
{
    static const int outs[] = {3, 4, 6, 7, 8};
    size_t n = 0;
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < 5; k++) n += rt->bytes[r][outs[k]];
    char *all = malloc(n ? n : 1), *at = all;
    for (int r = 0; r < RANKS; r++)
        for (int k = 0; k < 5; k++) {
            memcpy(at, rt->t[r][outs[k]], rt->bytes[r][outs[k]]);
            at += rt->bytes[r][outs[k]];
        }
    *n_out = n;
    return all;
}

/* Forward then backward on every rank as threads; the outputs. */
static char *run(const dcp_plan_t *p, rank_tensors_t *rt, size_t *n_out)
{
    dcp_tensors_t fwd[RANKS];
    for (int r = 0; r < RANKS; r++) fwd[r] = rt->io[r].fwd;
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, fwd, 30.0, NULL), DCP_OK);
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, rt->io, 30.0, NULL), DCP_OK);
    return outputs(rt, n_out);
}

/* The check, scaled to the CPU: 2x4 ranks, three sequences of odd lengths, GQA 4:2,
 * ring and zigzag (the strategies whose GPU runs failed), bf16 and fp16, full and causal. */
static void test_delays_never_change_outputs(void)
{
    const int32_t len[3] = {265, 816, 968};
    const dcp_strategy_t strategies[2] = {DCP_STRATEGY_RING, DCP_STRATEGY_ZIGZAG};
    const dcp_dtype_t dtypes[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    const char *masks[2] = {"full", "causal"};
    const int64_t seen0 = t_delays_seen();
    for (int si = 0; si < 2; si++)
        for (int di = 0; di < 2; di++)
            for (int mi = 0; mi < 2; mi++) {
                dcp_mask_t m[3];
                for (int s = 0; s < 3; s++)
                    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(masks[mi], &m[s]), DCP_OK);
                const dcp_attn_shape_t shape = {4, 2, 32, dtypes[di], 0.0f};
                dcp_plan_options_t o;
                dcp_plan_options_default(&o);
                o.strategy = strategies[si];
                o.block_size = 128;
                dcp_plan_t *p = t_plan_shape(len, 3, m, "2x4", &shape, &o);
                rank_tensors_t rt;
                tensors_make(p, &shape, &rt, 17 + si * 4 + di * 2 + mi);
                t_delays_set(0, 0);
                size_t n0, n;
                char *want = run(p, &rt, &n0);
                int mismatches = 0;
                for (int k = 0; k < REPEATS; k++) {
                    t_delays_set(1000 * (uint64_t)(si * 4 + di * 2 + mi) + k + 1, 300);
                    char *got = run(p, &rt, &n);
                    t_delays_set(0, 0);
                    if (n != n0 || memcmp(got, want, n0) != 0) mismatches++;
                    free(got);
                }
                if (mismatches)
                    fprintf(stderr, "ordering: %s %s %s: %d of %d delayed runs differ\n",
                            dcp_strategy_name(strategies[si]), di ? "fp16" : "bf16", masks[mi],
                            mismatches, REPEATS);
                CU_ASSERT_EQUAL(mismatches, 0);
                free(want);
                tensors_free(&rt);
                dcp_plan_destroy(p);
            }
    CU_ASSERT(t_delays_seen() > seen0); /* the hooks are in: the test would see nothing else */
}

int dcp_suite_ordering(void)
{
    static const dcp_test_t tests[] = {
        {"delays_never_change_outputs", test_delays_never_change_outputs},
        {NULL, NULL},
    };
    return dcp_add_suite("ordering", tests);
}
