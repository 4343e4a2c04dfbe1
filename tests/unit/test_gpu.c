/*
 * GPU suite, registered only when a CUDA device is visible: the CUDA kernels against the
 * double-precision reference with FlashAttention's rule (max error at most twice that of the
 * plain low-precision computation plus one rounding step; LSE within 1e-3) over every mask,
 * ragged tiles, 1-token sequences, fully masked rows, GQA 1/4/8, head dims 64/128, bf16 and
 * fp16; accumulation; merge and copy against the CPU; the GPU executor end to end, and the
 * attention variants through it (head dims 96, 192, 256, MLA's 192/128, softcap, sinks, max
 * logit).
 * Backward: dQ, dK, dV against the double reference backward by FlashAttention-2's gradient
 * rule (at most three times the plain low-precision error plus a rounding step) over the same
 * cases, exact zeros where no pair contributes; delta and gradient accumulation against the
 * host.
 */
#include "include/base/error.h"
#include "include/base/half.h"
#include "kernels/cpu.h"
#include "kernels/cuda/device.h"
#include "partition/model/mask.h"
#include "plugin/cli/support/harness.h"
#include "plugin/cli/support/reference.h"
#include "plugin/cli/support/tile_case.h"
#include "tests/unit/shm_bootstrap.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"
#include "transport/nccl.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The build's device code (sm_80 / sm_90a) loads and runs on this GPU. */
static void test_device_code_runs(void)
{
    CU_ASSERT_EQUAL(dcp_cuda_selftest(), 1);
}

/* Host floats to a new device buffer in dtype (fp32 kept as is). */
static void *upload(const float *host, int64_t n, dcp_dtype_t dtype)
{
    const size_t es = dtype == DCP_DTYPE_FP32 ? 4 : 2;
    void *dev = dcp_cuda_alloc(0, (size_t)n * es + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
    if (es == 4) {
        CU_ASSERT_EQUAL(dcp_cuda_memcpy(dev, host, (size_t)n * 4, NULL), DCP_OK);
        return dev;
    }
    uint16_t *tmp = malloc((size_t)n * 2 + 2);
    dcp_pack_half(dtype, host, tmp, n);
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(dev, tmp, (size_t)n * 2, NULL), DCP_OK);
    free(tmp);
    return dev;
}

static void *upload_bytes(const void *host, size_t bytes)
{
    void *dev = dcp_cuda_alloc(0, bytes + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(dev, host, bytes, NULL), DCP_OK);
    return dev;
}

static void download(float *host, const void *dev, int64_t n)
{
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(host, dev, (size_t)n * 4, NULL), DCP_OK);
}

typedef struct {
    dcpt_tile_case_t tc;
    dcp_dtype_t dtype;
    float *q, *k, *v, *o, *lse, *low;
    double *ro, *rlse;
    void *dev[DCP_BUF_COUNT];
    void *groups, *tiles, *seq, *ranges;
    dcp_kernel_env_t env;
} gcase_t;

static float *randn(dcpt_rng_t *rng, int64_t n, dcp_dtype_t dtype)
{
    float *x = malloc((size_t)n * sizeof *x + 4);
    for (int64_t i = 0; i < n; i++) x[i] = dcp_round_to(dtype, (float)dcpt_rng_normal(rng));
    return x;
}

static void gcase_init(gcase_t *c, const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq,
                       int32_t hkv, int32_t d, dcp_dtype_t dtype, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->dtype = dtype;
    CU_ASSERT_EQUAL_FATAL(dcpt_tile_case_build(mask, total, tile, hq, hkv, d, &c->tc), DCP_OK);
    dcpt_rng_t rng = {seed};
    const int64_t nq = (int64_t)total * hq * d, nkv = (int64_t)total * hkv * d;
    c->q = randn(&rng, nq, dtype);
    c->k = randn(&rng, nkv, dtype);
    c->v = randn(&rng, nkv, dtype);
    c->o = malloc((size_t)nq * 4);
    c->lse = malloc((size_t)total * hq * 4);
    c->low = malloc((size_t)nq * 4);
    c->ro = malloc((size_t)nq * 8);
    c->rlse = malloc((size_t)total * hq * 8);
    const dcp_attn_shape_t shape = {hq, hkv, d, dtype, 0.0f};
    CU_ASSERT_EQUAL(dcpt_reference_attention(&c->tc.seq, 1, &shape, c->q, c->k, c->v, c->ro,
                                             c->rlse, c->low, 2),
                    DCP_OK);
    for (int64_t i = 0; i < nq; i++) c->o[i] = NAN;
    for (int64_t i = 0; i < (int64_t)total * hq; i++) c->lse[i] = NAN;
    c->dev[DCP_BUF_Q] = upload(c->q, nq, dtype);
    c->dev[DCP_BUF_K] = upload(c->k, nkv, dtype);
    c->dev[DCP_BUF_V] = upload(c->v, nkv, dtype);
    c->dev[DCP_BUF_ACC_O] = upload(c->o, nq, DCP_DTYPE_FP32);
    c->dev[DCP_BUF_ACC_LSE] = upload(c->lse, (int64_t)total * hq, DCP_DTYPE_FP32);
    dcp_seq_info_t seq = c->tc.seq;
    if (seq.mask.kind == DCP_MASK_CUSTOM) {
        c->ranges = upload_bytes(seq.mask.ranges, (size_t)total * 16);
        seq.mask.ranges = c->ranges;
    }
    c->seq = upload_bytes(&seq, sizeof seq);
    c->groups = upload_bytes(c->tc.groups, (size_t)c->tc.num_groups * sizeof *c->tc.groups);
    c->tiles = upload_bytes(c->tc.tiles, (size_t)c->tc.num_tiles * sizeof *c->tc.tiles + 1);
    c->env = (dcp_kernel_env_t){.seqs = c->seq,
                                .q_heads = hq,
                                .kv_heads = hkv,
                                .head_dim = d,
                                .scale = (float)(1.0 / sqrt((double)d)),
                                .dtype = dtype,
                                .max_rows = tile};
    memcpy(c->env.bufs, c->dev, sizeof c->dev);
}

static void gcase_free(gcase_t *c)
{
    for (int b = 0; b < DCP_BUF_COUNT; b++) dcp_cuda_free(c->dev[b]);
    dcp_cuda_free(c->groups), dcp_cuda_free(c->tiles), dcp_cuda_free(c->seq);
    dcp_cuda_free(c->ranges);
    free(c->q), free(c->k), free(c->v), free(c->o), free(c->lse), free(c->low);
    free(c->ro), free(c->rlse);
    dcpt_tile_case_free(&c->tc);
}

/* FlashAttention's rule on the fetched outputs; returns 1 when it holds. */
static int gcase_check(gcase_t *c, const char *what)
{
    const int64_t rows = (int64_t)c->tc.total * c->tc.hq, d = c->tc.d;
    download(c->o, c->dev[DCP_BUF_ACC_O], rows * d);
    download(c->lse, c->dev[DCP_BUF_ACC_LSE], rows);
    double err = 0, low = 0, ref = 0, lse = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (isinf(c->rlse[i])) {
            bad += !(isinf(c->lse[i]) && c->lse[i] < 0);
            for (int64_t x = 0; x < d; x++) bad += c->o[i * d + x] != 0.0f;
            continue;
        }
        bad += !isfinite(c->lse[i]);
        lse = fmax(lse, fabs(c->lse[i] - c->rlse[i]) / fmax(1.0, fabs(c->rlse[i])));
        for (int64_t x = 0; x < d; x++) {
            const double r = c->ro[i * d + x];
            bad += !isfinite(c->o[i * d + x]);
            err = fmax(err, fabs(c->o[i * d + x] - r));
            low = fmax(low, fabs(c->low[i * d + x] - r));
            ref = fmax(ref, fabs(r));
        }
    }
    const int ok = bad == 0 && dcpt_lowp_rule_holds(c->dtype, err, low, ref, lse);
    if (!ok)
        fprintf(stderr,
                "gpu %s: total %d tile %d heads %d/%d D %d %s: err %.3g plain %.3g max %.3g "
                "lse %.3g bad %lld\n",
                what, c->tc.total, c->tc.tile, c->tc.hq, c->tc.hkv, c->tc.d,
                c->dtype == DCP_DTYPE_BF16 ? "bf16" : "fp16", err, low, ref, lse, (long long)bad);
    return ok;
}

static void attn_case(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq, int32_t hkv,
                      int32_t d, dcp_dtype_t dtype, uint64_t seed)
{
    gcase_t c;
    gcase_init(&c, mask, total, tile, hq, hkv, d, dtype, seed);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_fwd(&c.env, c.groups, c.tc.num_groups, c.tiles), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
    CU_ASSERT(gcase_check(&c, "attention"));
    gcase_free(&c);
}

static void test_attention_every_mask(void)
{
    dcpt_rng_t rng = {404};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 2; rep++) {
            const int32_t total = (int32_t)dcpt_rng_range(&rng, 200, 1500); /* ragged tiles */
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, total, &store);
            const int32_t tile = rep ? 384 : 128;
            attn_case(&m, total, tile, 8, 2, rep ? 128 : 64, rep ? DCP_DTYPE_FP16 : DCP_DTYPE_BF16,
                      dcpt_rng_next(&rng));
            free(store);
        }
}

static void test_attention_gqa_dims_and_edges(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const dcp_dtype_t types[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int t = 0; t < 2; t++)
        for (int dd = 0; dd < 2; dd++) {
            const int32_t d = dd ? 128 : 64;
            attn_case(&causal, 777, 256, 4, 4, d, types[t], 1);   /* GQA 1 */
            attn_case(&causal, 777, 256, 8, 2, d, types[t], 2);   /* GQA 4 */
            attn_case(&causal, 777, 256, 8, 1, d, types[t], 3);   /* GQA 8 */
            attn_case(&causal, 1, 64, 8, 2, d, types[t], 4);      /* a 1-token sequence */
            attn_case(&causal, 2100, 2048, 8, 2, d, types[t], 5); /* 2K tiles, ragged end */
        }
}

/* Odd queries see nothing: O = 0 and LSE = -inf; even ones a prefix. */
static void test_fully_masked_rows(void)
{
    const int32_t len = 300;
    int32_t *r = calloc(4 * len, sizeof *r);
    for (int32_t i = 0; i < len; i += 2) r[4 * i + 1] = i + 1;
    const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = len};
    attn_case(&m, len, 128, 8, 2, 64, DCP_DTYPE_BF16, 7);
    free(r);
}

/* Tiles split over two launches, the second accumulating, equal one launch. */
static void test_accumulate(void)
{
    const dcp_mask_t m = {.kind = DCP_MASK_LAMBDA, .sink = 16, .window = 200};
    gcase_t c;
    gcase_init(&c, &m, 900, 128, 8, 2, 128, DCP_DTYPE_BF16, 11);
    dcp_tile_group_t *g = calloc((size_t)c.tc.num_groups, sizeof *g);
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < c.tc.num_groups; i++) {
            g[i] = c.tc.groups[i];
            const int32_t half = g[i].num_tiles / 2;
            g[i].first_tile += pass ? half : 0;
            g[i].num_tiles = pass ? g[i].num_tiles - half : half;
            g[i].accumulate = pass;
        }
        void *dg = upload_bytes(g, (size_t)c.tc.num_groups * sizeof *g);
        CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_fwd(&c.env, dg, c.tc.num_groups, c.tiles), DCP_OK);
        CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
        dcp_cuda_free(dg);
    }
    CU_ASSERT(gcase_check(&c, "accumulate"));
    free(g);
    gcase_free(&c);
}

/* One merge item of ns partials against the CPU's merge: the partials' O in src_buf (PART:
 * fp32; SEG: the engine's bf16 staging), their LSEs in SEG32 with some -inf, the destination
 * in ACC_O with some -inf, row 0 empty everywhere; every view `shift` elements off
 * the buffers' starts (1: rows off 16-byte boundaries, the element path). */
static void merge_case(int32_t rows, int32_t H, int32_t D, int32_t ns, int src_buf, int shift)
{
    dcpt_rng_t rng = {77 + (uint64_t)ns};
    const dcp_dtype_t sty = dcp_buf_dtype(src_buf, DCP_DTYPE_BF16);
    const int64_t w = (int64_t)H * D, no = rows * w, nl = (int64_t)rows * H;
    float *so = randn(&rng, ns * no + shift, sty),
          *sl = randn(&rng, ns * nl + shift, DCP_DTYPE_FP32);
    float *acc = randn(&rng, no + nl + 2 * shift, DCP_DTYPE_FP32);
    float *dl = acc + no + 2 * shift;
    for (int64_t i = 0; i < ns * nl; i++)
        if (i % 7 == 0 || i % nl < H) sl[shift + i] = -INFINITY;
    for (int64_t i = 0; i < nl; i++)
        if (i % 5 == 0 || i < H) dl[i] = -INFINITY;
    dcp_merge_item_t item = {
        {shift, (int32_t)w, DCP_BUF_ACC_O}, {no + 2 * shift, H, DCP_BUF_ACC_O}, rows, 0, ns};
    dcp_merge_src_t *srcs = malloc((size_t)ns * sizeof *srcs);
    for (int64_t s = 0; s < ns; s++)
        srcs[s] = (dcp_merge_src_t){{shift + s * no, (int32_t)w, src_buf},
                                    {shift + s * nl, H, DCP_BUF_SEG32}};
    dcp_kernel_env_t cpu = {.q_heads = H, .kv_heads = H, .head_dim = D, .dtype = DCP_DTYPE_BF16};
    const size_t acc_bytes = (size_t)(no + nl + 2 * shift) * 4;
    float *cpu_acc = malloc(acc_bytes), *cpu_so = malloc((size_t)(ns * no + shift) * 4);
    memcpy(cpu_acc, acc, acc_bytes);
    memcpy(cpu_so, so, (size_t)(ns * no + shift) * 4);
    if (sty != DCP_DTYPE_FP32) dcp_pack_half(sty, so, (uint16_t *)cpu_so, ns * no + shift);
    cpu.bufs[src_buf] = cpu_so;
    cpu.bufs[DCP_BUF_SEG32] = sl;
    cpu.bufs[DCP_BUF_ACC_O] = cpu_acc;
    CU_ASSERT_EQUAL(dcp_cpu_merge(&cpu, &item, 1, srcs), DCP_OK);

    dcp_kernel_env_t gpu = cpu;
    gpu.max_rows = rows;
    void *dso = upload(so, ns * no + shift, sty),
         *dsl = upload(sl, ns * nl + shift, DCP_DTYPE_FP32);
    void *dacc = upload(acc, no + nl + 2 * shift, DCP_DTYPE_FP32);
    gpu.bufs[src_buf] = dso;
    gpu.bufs[DCP_BUF_SEG32] = dsl;
    gpu.bufs[DCP_BUF_ACC_O] = dacc;
    void *ditem = upload_bytes(&item, sizeof item), *dsrcs = upload_bytes(srcs, ns * sizeof *srcs);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.merge(&gpu, ditem, 1, dsrcs), DCP_OK);
    float *got = malloc(acc_bytes);
    download(got, dacc, no + nl + 2 * shift);
    double err = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < no + nl + 2 * shift; i++) {
        if (isinf(cpu_acc[i]) || isinf(got[i]) || isnan(cpu_acc[i]) || isnan(got[i]))
            bad += memcmp(&cpu_acc[i], &got[i], 4) != 0;
        else
            err = fmax(err, fabs(got[i] - cpu_acc[i]) / fmax(1.0, fabs(cpu_acc[i])));
    }
    for (int32_t h = 0; h < H; h++) bad += got[no + 2 * shift + h] != -INFINITY; /* row 0 */
    if (bad || err >= 1e-5)
        printf(
            "\n  merge %d rows, %d heads, D %d, %d partials (%s), shift %d: %lld bad, err %.3g\n",
            rows, H, D, ns, sty == DCP_DTYPE_FP32 ? "fp32" : "bf16", shift, (long long)bad, err);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(err < 1e-5);
    dcp_cuda_free(dso), dcp_cuda_free(dsl), dcp_cuda_free(dacc), dcp_cuda_free(ditem),
        dcp_cuda_free(dsrcs);
    free(so), free(sl), free(acc), free(srcs), free(cpu_acc), free(cpu_so), free(got);
}

/* rows x n elements from src_buf at src_off (stride sstride) to dst_buf at dst_off (stride
 * dstride), against the CPU's copy bit for bit: same types, or fp32 into bf16. */
static void copy_case(int src_buf, int64_t src_off, int32_t sstride, int dst_buf, int64_t dst_off,
                      int32_t dstride, int32_t rows, int32_t n)
{
    dcpt_rng_t rng = {(uint64_t)(rows * 31 + n)};
    const dcp_dtype_t sty = dcp_buf_dtype(src_buf, DCP_DTYPE_BF16);
    const dcp_dtype_t dty = dcp_buf_dtype(dst_buf, DCP_DTYPE_BF16);
    const int des = dty == DCP_DTYPE_FP32 ? 4 : 2;
    const int64_t sn = src_off + (int64_t)rows * sstride, dn = dst_off + (int64_t)rows * dstride;
    float *x = randn(&rng, sn, sty), *y = randn(&rng, dn, dty);
    const dcp_copy_item_t item = {
        {src_off, sstride, src_buf}, {dst_off, dstride, dst_buf}, rows, n};
    dcp_kernel_env_t cpu = {.q_heads = 1, .kv_heads = 1, .head_dim = n, .dtype = DCP_DTYPE_BF16};
    void *hs = malloc((size_t)sn * 4), *hd = malloc((size_t)dn * 4);
    if (sty == DCP_DTYPE_FP32)
        memcpy(hs, x, (size_t)sn * 4);
    else
        dcp_pack_half(sty, x, hs, sn);
    if (dty == DCP_DTYPE_FP32)
        memcpy(hd, y, (size_t)dn * 4);
    else
        dcp_pack_half(dty, y, hd, dn);
    cpu.bufs[src_buf] = hs;
    cpu.bufs[dst_buf] = hd;
    CU_ASSERT_EQUAL(dcp_cpu_copy(&cpu, &item, 1), DCP_OK);

    dcp_kernel_env_t gpu = cpu;
    gpu.max_rows = rows;
    gpu.bufs[src_buf] = upload(x, sn, sty);
    gpu.bufs[dst_buf] = upload(y, dn, dty);
    void *ditem = upload_bytes(&item, sizeof item);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.copy(&gpu, ditem, 1), DCP_OK);
    char *got = malloc((size_t)dn * 4);
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(got, gpu.bufs[dst_buf], (size_t)dn * des, NULL), DCP_OK);
    const int diff = memcmp(got, hd, (size_t)dn * des) != 0; /* rows and what lies between */
    if (diff)
        printf("\n  copy %d x %d, buffer %d at %lld -> buffer %d at %lld differs\n", rows, n,
               src_buf, (long long)src_off, dst_buf, (long long)dst_off);
    CU_ASSERT_EQUAL(diff, 0);
    dcp_cuda_free(gpu.bufs[src_buf]), dcp_cuda_free(gpu.bufs[dst_buf]), dcp_cuda_free(ditem);
    free(x), free(y), free(hs), free(hd), free(got);
}

/* The GPU merge and copy against the CPU's, on the 16-byte path and the element path. */
static void test_merge_and_copy(void)
{
    merge_case(300, 4, 64, 3, DCP_BUF_PART, 0); /* fp32 partials, 16-byte steps */
    merge_case(40, 3, 64, 35, DCP_BUF_PART, 1); /* more partials than lanes, element steps */
    merge_case(50, 4, 128, 5, DCP_BUF_SEG, 0);  /* the engine's bf16 staging, 8-byte steps */
    merge_case(20, 2, 128, 2, DCP_BUF_SEG, 1);  /* bf16 staging, element steps */
    enum { W = 4 * 64 };
    copy_case(DCP_BUF_Q, W, W, DCP_BUF_STAGE, 0, W, 299, W);          /* bf16, 16-byte moves */
    copy_case(DCP_BUF_Q, 1, W, DCP_BUF_STAGE, 3, W + 1, 77, W - 3);   /* bf16, element moves */
    copy_case(DCP_BUF_ACC_O, 0, W, DCP_BUF_O, 0, W, 300, W);          /* fp32 -> bf16 by 4 */
    copy_case(DCP_BUF_ACC_O, 2, W + 2, DCP_BUF_O, 1, W, 33, W - 1);   /* fp32 -> bf16 by 1 */
    copy_case(DCP_BUF_ACC_LSE, 0, 4, DCP_BUF_STAGE32, 8, 4, 1000, 4); /* fp32 rows of 16 bytes */
    copy_case(DCP_BUF_ACC_LSE, 1, 3, DCP_BUF_STAGE32, 0, 3, 1001, 3); /* fp32 elements */
}

/* A backward case: a forward case plus dO, the forward's final O (rounded to the dtype) and
 * LSE as the executor hands them over, zeroed delta and gradient accumulators, and the
 * double reference backward with its plain low-precision twin. */
typedef struct {
    gcase_t c;
    float *dout;
    double *ref[3]; /* dq, dk, dv */
    float *low[3];
} bcase_t;

static const int grad_buf[3] = {DCP_BUF_ACC_DQ, DCP_BUF_ACC_DK, DCP_BUF_ACC_DV};
static const char *const grad_name[3] = {"dq", "dk", "dv"};

static int64_t grad_elems(const gcase_t *c, int which)
{
    return (int64_t)c->tc.total * (which == 0 ? c->tc.hq : c->tc.hkv) * c->tc.d;
}

static void bcase_init(bcase_t *b, const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq,
                       int32_t hkv, int32_t d, dcp_dtype_t dtype, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    gcase_t *c = &b->c;
    gcase_init(c, mask, total, tile, hq, hkv, d, dtype, seed);
    const int64_t nq = (int64_t)total * hq * d, rows = (int64_t)total * hq;
    dcpt_rng_t rng = {seed ^ 0x9e3779b97f4a7c15ull};
    b->dout = randn(&rng, nq, dtype);
    for (int w = 0; w < 3; w++) {
        b->ref[w] = malloc((size_t)grad_elems(c, w) * sizeof(double));
        b->low[w] = malloc((size_t)grad_elems(c, w) * sizeof(float));
    }
    const dcp_attn_shape_t shape = {hq, hkv, d, dtype, 0.0f};
    CU_ASSERT_EQUAL(dcpt_reference_backward(&c->tc.seq, 1, &shape, c->q, c->k, c->v, b->dout,
                                            b->ref[0], b->ref[1], b->ref[2], b->low[0], b->low[1],
                                            b->low[2], 4),
                    DCP_OK);
    for (int64_t i = 0; i < nq; i++) c->o[i] = (float)c->ro[i];
    for (int64_t i = 0; i < rows; i++) c->lse[i] = (float)c->rlse[i];
    c->dev[DCP_BUF_O] = upload(c->o, nq, dtype);
    c->dev[DCP_BUF_DO] = upload(b->dout, nq, dtype);
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(c->dev[DCP_BUF_ACC_LSE], c->lse, (size_t)rows * 4, NULL),
                    DCP_OK);
    c->dev[DCP_BUF_DELTA] = dcp_cuda_alloc(0, (size_t)rows * 4 + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c->dev[DCP_BUF_DELTA]);
    for (int w = 0; w < 3; w++) {
        c->dev[grad_buf[w]] = dcp_cuda_alloc(0, (size_t)grad_elems(c, w) * 4 + 16); /* zeroed */
        CU_ASSERT_PTR_NOT_NULL_FATAL(c->dev[grad_buf[w]]);
    }
    memcpy(c->env.bufs, c->dev, sizeof c->dev);
}

static void bcase_free(bcase_t *b)
{
    for (int w = 0; w < 3; w++) free(b->ref[w]), free(b->low[w]);
    free(b->dout);
    gcase_free(&b->c);
}

/* delta on the GPU (all local rows, every query head), then the backward of every group. */
static void bcase_run(bcase_t *b)
{
    gcase_t *c = &b->c;
    CU_ASSERT_EQUAL(dcp_kernels_cuda.bwd_delta(&c->env, (int64_t)c->tc.total * c->tc.hq), DCP_OK);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&c->env, c->groups, c->tc.num_groups, c->tiles),
                    DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
}

/* 1 when no pair of the case's mask touches token t: as a query (dq) or as a key (dk, dv). */
static int untouched(const gcase_t *c, int which, int32_t t)
{
    const dcp_mask_t *m = &c->tc.seq.mask;
    const int32_t n = c->tc.total;
    return which == 0 ? dcp_mask_pairs(m, n, t, t + 1, 0, n) == 0
                      : dcp_mask_pairs(m, n, 0, n, t, t + 1) == 0;
}

/* FlashAttention-2's rule on the fetched dq, dk, dv, and an exact zero wherever no pair
 * contributes (masked rows, unseen keys); 1 when all hold. A reference that is zero by
 * cancellation (a row that sees one key: dS = P (dP - delta) = 0) is held to the rule only:
 * the GPU's dP and delta are sums in different orders and differ in the last bits. */
static int bcase_check(bcase_t *b, const char *what)
{
    const gcase_t *c = &b->c;
    int ok = 1;
    for (int w = 0; w < 3; w++) {
        const int64_t n = grad_elems(c, w), per_token = n / c->tc.total;
        float *got = malloc((size_t)n * 4);
        download(got, c->dev[grad_buf[w]], n);
        double err = 0, low = 0, ref = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const double r = b->ref[w][i];
            bad += !isfinite(got[i]) ||
                   (got[i] != 0.0f && r == 0.0 && untouched(c, w, (int32_t)(i / per_token)));
            err = fmax(err, fabs(got[i] - r));
            low = fmax(low, fabs(b->low[w][i] - r));
            ref = fmax(ref, fabs(r));
        }
        free(got);
        /* the rule's rounding step scales with the reference's peak, which is 0 where every
         * entry cancels (one token): there fp32's rounding of dP - delta (|dP| ~ sqrt(D) for
         * unit normals) is the bound */
        const int rule = dcpt_lowp_grad_rule_holds(c->dtype, err, low, ref) || err <= 1e-5;
        if (bad == 0 && rule) continue;
        ok = 0;
        fprintf(stderr,
                "gpu %s %s: total %d tile %d heads %d/%d D %d %s: err %.3g plain %.3g max %.3g "
                "bad %lld\n",
                what, grad_name[w], c->tc.total, c->tc.tile, c->tc.hq, c->tc.hkv, c->tc.d,
                c->dtype == DCP_DTYPE_BF16 ? "bf16" : "fp16", err, low, ref, (long long)bad);
    }
    return ok;
}

static void bwd_case(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq, int32_t hkv,
                     int32_t d, dcp_dtype_t dtype, uint64_t seed)
{
    bcase_t b;
    bcase_init(&b, mask, total, tile, hq, hkv, d, dtype, seed);
    bcase_run(&b);
    CU_ASSERT(bcase_check(&b, "backward"));
    bcase_free(&b);
}

static void test_backward_every_mask(void)
{
    dcpt_rng_t rng = {505};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 2; rep++) {
            const int32_t total = (int32_t)dcpt_rng_range(&rng, 200, 1500); /* ragged tiles */
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, total, &store);
            const int32_t tile = rep ? 384 : 128;
            bwd_case(&m, total, tile, 8, 2, rep ? 128 : 64, rep ? DCP_DTYPE_FP16 : DCP_DTYPE_BF16,
                     dcpt_rng_next(&rng));
            free(store);
        }
}

static void test_backward_gqa_dims_and_edges(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const dcp_dtype_t types[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int t = 0; t < 2; t++)
        for (int dd = 0; dd < 2; dd++) {
            const int32_t d = dd ? 128 : 64;
            bwd_case(&causal, 777, 256, 4, 4, d, types[t], 1);   /* GQA 1 */
            bwd_case(&causal, 777, 256, 8, 2, d, types[t], 2);   /* GQA 4 */
            bwd_case(&causal, 1, 64, 8, 2, d, types[t], 4);      /* a 1-token sequence */
            bwd_case(&causal, 1100, 1024, 8, 2, d, types[t], 5); /* long tiles, ragged end */
        }
}

/* Odd queries see nothing: their dQ stays exactly 0 (never NaN); even ones a prefix. */
static void test_backward_fully_masked_rows(void)
{
    const int32_t len = 300;
    int32_t *r = calloc(4 * len, sizeof *r);
    for (int32_t i = 0; i < len; i += 2) r[4 * i + 1] = i + 1;
    const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = len};
    bwd_case(&m, len, 128, 8, 2, 64, DCP_DTYPE_BF16, 7);
    bwd_case(&m, len, 128, 4, 4, 128, DCP_DTYPE_FP16, 8);
    free(r);
}

/* The deterministic pair of kernels (env.deterministic) over one case: within the rule, and
 * the same bits in each of three runs. A tile case has every query block against each KV
 * block, so the tiles of a KV block share its dK, dV rows across groups (where the atomic
 * kernel's adds race) and each group's tiles its dQ rows. */
static void det_case(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq, int32_t hkv,
                     int32_t d, dcp_dtype_t dtype, uint64_t seed)
{
    bcase_t b;
    bcase_init(&b, mask, total, tile, hq, hkv, d, dtype, seed);
    b.c.env.deterministic = 1;
    float *first[3] = {NULL, NULL, NULL};
    for (int run = 0; run < 3; run++) {
        for (int w = 0; w < 3; w++)
            CU_ASSERT_EQUAL(
                dcp_cuda_fill_f32(b.c.dev[grad_buf[w]], grad_elems(&b.c, w), 0.0f, NULL), DCP_OK);
        bcase_run(&b);
        if (run == 0) CU_ASSERT(bcase_check(&b, "deterministic backward"));
        for (int w = 0; w < 3; w++) {
            const int64_t n = grad_elems(&b.c, w);
            float *got = malloc((size_t)n * 4);
            download(got, b.c.dev[grad_buf[w]], n);
            if (run == 0) {
                first[w] = got;
                continue;
            }
            const int same = memcmp(got, first[w], (size_t)n * 4) == 0;
            if (!same)
                fprintf(stderr, "gpu deterministic backward %s: run %d differs from run 0\n",
                        grad_name[w], run);
            CU_ASSERT(same);
            free(got);
        }
    }
    for (int w = 0; w < 3; w++) free(first[w]);
    bcase_free(&b);
}

static void test_backward_deterministic(void)
{
    dcpt_rng_t rng = {707};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        const int32_t total = (int32_t)dcpt_rng_range(&rng, 300, 1500); /* ragged tiles */
        int32_t *store;
        const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, total, &store);
        const int odd = kind % 2;
        det_case(&m, total, odd ? 256 : 128, 8, 2, odd ? 128 : 64,
                 odd ? DCP_DTYPE_FP16 : DCP_DTYPE_BF16, dcpt_rng_next(&rng));
        free(store);
    }
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    det_case(&causal, 1100, 1024, 8, 2, 128, DCP_DTYPE_BF16, 21); /* long tiles, ragged end */
    det_case(&causal, 777, 256, 4, 4, 64, DCP_DTYPE_FP16, 22);    /* GQA 1 */
    det_case(&causal, 1, 64, 8, 2, 128, DCP_DTYPE_BF16, 23);      /* a 1-token sequence */
}

static void adds_across_launches(int deterministic)
{
    const dcp_mask_t m = {.kind = DCP_MASK_LAMBDA, .sink = 16, .window = 200};
    bcase_t b;
    bcase_init(&b, &m, 900, 128, 8, 2, 128, DCP_DTYPE_BF16, 11);
    gcase_t *c = &b.c;
    c->env.deterministic = deterministic;
    CU_ASSERT_EQUAL(dcp_kernels_cuda.bwd_delta(&c->env, (int64_t)c->tc.total * c->tc.hq), DCP_OK);
    const int64_t half = c->tc.num_groups / 2;
    const dcp_tile_group_t *g = c->groups;
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&c->env, g, half, c->tiles), DCP_OK);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&c->env, g + half, c->tc.num_groups - half, c->tiles),
                    DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
    CU_ASSERT(bcase_check(&b, deterministic ? "deterministic backward in two launches"
                                            : "backward in two launches"));
    bcase_free(&b);
}

/* The groups over two launches (the second adding to what the first left, tiles' dk/dv
 * shared across them) equal one launch, with the atomic kernel and the deterministic pair. */
static void test_backward_adds_across_launches(void)
{
    for (int det = 0; det < 2; det++) adds_across_launches(det);
}

/* delta = rowsum(dO * O) against the host in double: element pairs (D even) and single
 * elements (D odd), bf16 and fp16. */
static void test_bwd_delta(void)
{
    const int32_t dims[2] = {128, 37};
    const dcp_dtype_t types[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    dcpt_rng_t rng = {99};
    for (int i = 0; i < 2; i++) {
        const int64_t rows = 1000, n = rows * dims[i];
        float *dout = randn(&rng, n, types[i]), *o = randn(&rng, n, types[i]);
        dcp_kernel_env_t env = {.head_dim = dims[i], .dtype = types[i], .max_rows = 1};
        env.bufs[DCP_BUF_DO] = upload(dout, n, types[i]);
        env.bufs[DCP_BUF_O] = upload(o, n, types[i]);
        env.bufs[DCP_BUF_DELTA] = dcp_cuda_alloc(0, (size_t)rows * 4);
        CU_ASSERT_PTR_NOT_NULL_FATAL(env.bufs[DCP_BUF_DELTA]);
        CU_ASSERT_EQUAL(dcp_kernels_cuda.bwd_delta(&env, rows), DCP_OK);
        float *got = malloc((size_t)rows * 4);
        download(got, env.bufs[DCP_BUF_DELTA], rows);
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            double want = 0, mag = 0;
            for (int64_t x = 0; x < dims[i]; x++) {
                want += (double)dout[r * dims[i] + x] * o[r * dims[i] + x];
                mag += fabs((double)dout[r * dims[i] + x] * o[r * dims[i] + x]);
            }
            bad += !(fabs(got[r] - want) <= 1e-5 * mag + 1e-30);
        }
        CU_ASSERT_EQUAL(bad, 0);
        dcp_cuda_free(env.bufs[DCP_BUF_DO]), dcp_cuda_free(env.bufs[DCP_BUF_O]);
        dcp_cuda_free(env.bufs[DCP_BUF_DELTA]);
        free(dout), free(o), free(got);
    }
}

/* fp32 dst rows += src rows: 16-byte rows, odd widths and offsets, and two items adding
 * into the same destination rows in one launch. */
static void test_accumulate_grads(void)
{
    enum { ROWS = 300, W = 256 };
    dcpt_rng_t rng = {123};
    const int64_t n = ROWS * W;
    float *src = randn(&rng, 2 * n, DCP_DTYPE_FP32), *dst = randn(&rng, n, DCP_DTYPE_FP32);
    const dcp_copy_item_t items[3] = {
        {{0, W, DCP_BUF_PART}, {0, W, DCP_BUF_ACC_DK}, ROWS / 2, W},     /* aligned */
        {{n + 1, W, DCP_BUF_PART}, {0, W, DCP_BUF_ACC_DK}, ROWS / 2, W}, /* same rows */
        {{W * (ROWS / 2), W, DCP_BUF_PART},
         {W * (ROWS / 2) + 3, W, DCP_BUF_ACC_DK},
         ROWS / 2,
         W - 5}, /* odd offset and width */
    };
    float *want = malloc((size_t)n * 4);
    memcpy(want, dst, (size_t)n * 4);
    for (int i = 0; i < 3; i++)
        for (int32_t r = 0; r < items[i].rows; r++)
            for (int32_t x = 0; x < items[i].row_elems; x++)
                want[items[i].dst.off + (int64_t)r * W + x] +=
                    src[items[i].src.off + (int64_t)r * W + x];
    dcp_kernel_env_t env = {.dtype = DCP_DTYPE_BF16, .max_rows = ROWS / 2};
    env.bufs[DCP_BUF_PART] = upload(src, 2 * n, DCP_DTYPE_FP32);
    env.bufs[DCP_BUF_ACC_DK] = upload(dst, n, DCP_DTYPE_FP32);
    void *ditems = upload_bytes(items, sizeof items);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.accumulate(&env, ditems, 3), DCP_OK);
    float *got = malloc((size_t)n * 4);
    download(got, env.bufs[DCP_BUF_ACC_DK], n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) /* two adds in either order: one rounding apart */
        bad += !(fabs(got[i] - want[i]) <= 1e-6 * (fabs(want[i]) + 4.0));
    CU_ASSERT_EQUAL(bad, 0);
    dcp_cuda_free(env.bufs[DCP_BUF_PART]), dcp_cuda_free(env.bufs[DCP_BUF_ACC_DK]);
    dcp_cuda_free(ditems);
    free(src), free(dst), free(want), free(got);
}

/* The backward refuses head dims and types it has no kernel for, naming them. */
static void test_backward_refusals(void)
{
    static const dcp_tile_group_t g[1]; /* refused before any descriptor is read */
    dcp_kernel_env_t env = {
        .q_heads = 8, .kv_heads = 2, .head_dim = 80, .dtype = DCP_DTYPE_BF16, .max_rows = 64};
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&env, g, 1, NULL), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "head dims 80/80"));
    env.head_dim = 128;
    env.head_dim_v = 64; /* MLA's 192/128 only */
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&env, g, 1, NULL), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_fwd(&env, g, 1, NULL), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "head dims 128/64"));
    env.head_dim_v = 0;
    env.head_dim = 64;
    env.dtype = DCP_DTYPE_FP32;
    CU_ASSERT_EQUAL(dcp_kernels_cuda.attn_bwd(&env, g, 1, NULL), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "dtype"));
    CU_ASSERT_EQUAL(dcp_kernels_cuda.bwd_delta(&env, 10), DCP_ERR_UNSUPPORTED);
}

/* Plans on 4 in-process ranks sharing the GPU: every mask, two strategies, bf16. */
static void test_executor_on_one_gpu(void)
{
    const int32_t lengths[4] = {1500, 700, 2100, 1};
    dcpt_rng_t rng = {5};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        dcp_mask_t masks[4];
        int32_t *store[4];
        for (int s = 0; s < 4; s++)
            masks[s] = t_random_mask(&rng, (dcp_mask_kind_t)kind, lengths[s], &store[s]);
        const dcp_attn_shape_t shape = {8, 2, 128, DCP_DTYPE_BF16, 0.0f};
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(lengths, 4, masks, &shape, 9, &h), DCP_OK);
        CU_ASSERT_EQUAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        for (int strat = DCP_STRATEGY_ZIGZAG; strat <= DCP_STRATEGY_METIS; strat += 2) {
            dcp_plan_options_t o;
            dcp_plan_options_default(&o);
            o.block_size = 256;
            o.strategy = (dcp_strategy_t)strat;
            dcp_plan_t *p = t_plan_shape(lengths, 4, masks, "2x2", &shape, &o);
            CU_ASSERT_PTR_NOT_NULL_FATAL(p);
            dcpt_harness_result_t r;
            CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 60.0, 1e-5, "cuda:0", &r), DCP_OK);
            CU_ASSERT(r.passed);
            if (!r.passed)
                fprintf(stderr,
                        "gpu executor: mask %d strategy %d: abs %.3g plain %.3g lse %.3g "
                        "bad %lld\n",
                        kind, strat, r.max_abs_err, r.low_abs_err, r.max_lse_err,
                        (long long)r.bad_values);
            dcp_plan_destroy(p);
        }
        dcpt_harness_destroy(h);
        for (int s = 0; s < 4; s++) free(store[s]);
    }
}

/* The attention variants on the GPU kernels, through the executor on 4 in-process ranks
 * sharing the GPU (2x2, the default strategy) and on one (zigzag): head dims 64, 96, 128, 192,
 * 256 and MLA's 192/128, a softcap, learnable sinks, the max logit, bf16 and fp16, every mask,
 * forward and backward, by FlashAttention's rules (harness.h: d sinks and the max logit too);
 * deterministic mode on one of them. Sized for the GPU report's suite step (the host's double
 * reference dominates: 858 tokens a case). */
static void test_variants_on_one_gpu(void)
{
    static const struct {
        int32_t d, dv;
        float softcap;
        int sinks;
        dcp_dtype_t dtype;
    } cases[] = {
        {64, 0, 0.0f, 1, DCP_DTYPE_BF16},     {96, 0, 0.0f, 0, DCP_DTYPE_FP16},
        {128, 0, 30.0f, 1, DCP_DTYPE_BF16},   {192, 0, 0.0f, 0, DCP_DTYPE_BF16},
        {256, 0, 50.0f, 0, DCP_DTYPE_FP16},   {192, 128, 0.0f, 1, DCP_DTYPE_BF16},
        {192, 128, 20.0f, 0, DCP_DTYPE_FP16}, {256, 0, 0.0f, 1, DCP_DTYPE_BF16},
    };
    const int32_t lengths[3] = {600, 1, 257};
    dcpt_rng_t rng = {2024};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
        for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
            dcp_mask_t masks[3];
            int32_t *store[3];
            for (int s = 0; s < 3; s++)
                masks[s] = t_random_mask(&rng, (dcp_mask_kind_t)kind, lengths[s], &store[s]);
            const dcp_attn_shape_t shape = {
                8, 2, cases[ci].d, cases[ci].dtype, 0.0f, cases[ci].softcap, cases[ci].dv};
            dcpt_harness_t *h = NULL;
            CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(lengths, 3, masks, &shape, 40 + ci, &h),
                                  DCP_OK);
            CU_ASSERT_EQUAL(dcpt_harness_enable_backward(h, 41 + ci), DCP_OK);
            if (cases[ci].sinks) CU_ASSERT_EQUAL(dcpt_harness_enable_sinks(h, 42 + ci), DCP_OK);
            CU_ASSERT_EQUAL(dcpt_harness_enable_max_logit(h), DCP_OK);
            h->deterministic = ci == 5 && kind == DCP_MASK_LAMBDA;
            CU_ASSERT_EQUAL(dcpt_harness_reference(h, 8, NULL, 0), DCP_OK);
            for (int run = 0; run < 2; run++) {
                dcp_plan_options_t o;
                dcp_plan_options_default(&o);
                o.block_size = 128;
                o.strategy = run == 1 ? DCP_STRATEGY_ZIGZAG : DCP_STRATEGY_METIS;
                dcp_plan_t *p =
                    t_plan_shape(lengths, 3, masks, run == 1 ? "1x1" : "2x2", &shape, &o);
                CU_ASSERT_PTR_NOT_NULL_FATAL(p);
                dcpt_harness_result_t r;
                const dcp_status_t st = dcpt_harness_run(h, p, 0, 1, 60.0, 1e-5, "cuda:0", &r);
                CU_ASSERT_EQUAL(st, DCP_OK);
                CU_ASSERT(r.passed);
                if (st != DCP_OK || !r.passed)
                    fprintf(stderr,
                            "gpu variants: D %d/%d softcap %g sinks %d %s mask %d run %d: %s abs "
                            "%.3g plain %.3g lse %.3g bad %lld; grads abs %.3g %.3g %.3g plain "
                            "%.3g %.3g %.3g bad %lld; max logit %.3g dsinks %.3g bad %lld %s\n",
                            cases[ci].d, cases[ci].dv, (double)cases[ci].softcap, cases[ci].sinks,
                            cases[ci].dtype == DCP_DTYPE_BF16 ? "bf16" : "fp16", kind, run,
                            dcp_status_string(st), r.max_abs_err, r.low_abs_err, r.max_lse_err,
                            (long long)r.bad_values, r.max_abs_err_grad[0], r.max_abs_err_grad[1],
                            r.max_abs_err_grad[2], r.low_abs_err_grad[0], r.low_abs_err_grad[1],
                            r.low_abs_err_grad[2], (long long)r.bwd_bad_values, r.max_logit_err,
                            r.dsinks_err, (long long)r.variant_bad, st ? dcp_last_error() : "");
                dcp_plan_destroy(p);
            }
            dcpt_harness_destroy(h);
            for (int s = 0; s < 3; s++) free(store[s]);
        }
}

/* A GPU context refuses fp32 plans and host pointers, naming what is wrong. */
static void test_executor_refuses_bad_input(void)
{
    const int32_t len = 512;
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const dcp_attn_shape_t bf = {4, 2, 64, DCP_DTYPE_BF16, 0.0f};
    const dcp_attn_shape_t f32 = {4, 2, 64, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_t *pb = t_plan_shape(&len, 1, &causal, "1x1", &bf, NULL),
               *pf = t_plan_shape(&len, 1, &causal, "1x1", &f32, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pf);
    float *host = calloc((size_t)len * 4 * 64, sizeof(float));
    const dcp_tensors_t io = {host, host, host, host, host, 0.0f};
    CU_ASSERT_EQUAL(dcp_forward_inproc(pf, &io, 5.0, "cuda"), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "dtype"));
    CU_ASSERT_EQUAL(dcp_forward_inproc(pb, &io, 5.0, "cuda"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "io.q"));
    free(host);
    dcp_plan_destroy(pb);
    dcp_plan_destroy(pf);
}

/* The race check, at least 50 times: 8 ranks on one GPU (2x4), ring and zigzag,
 * bf16 and fp16, full and causal, each run on fresh contexts checked against the reference
 * by FlashAttention's rule; any mismatch fails. */
static void test_eight_ranks_on_one_gpu_repeated(void)
{
    enum { REPEATS = 50 };
    const int32_t lengths[3] = {1059, 3263, 3870};
    const dcp_dtype_t dtypes[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    const dcp_strategy_t strategies[2] = {DCP_STRATEGY_RING, DCP_STRATEGY_ZIGZAG};
    const char *specs[2] = {"full", "causal"};
    for (int di = 0; di < 2; di++)
        for (int mi = 0; mi < 2; mi++) {
            dcp_mask_t m[3];
            for (int s = 0; s < 3; s++)
                CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[mi], &m[s]), DCP_OK);
            const dcp_attn_shape_t shape = {4, 2, 128, dtypes[di], 0.0f};
            dcpt_harness_t *h = NULL;
            CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(lengths, 3, m, &shape, 11, &h), DCP_OK);
            CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 16, NULL, 0), DCP_OK);
            for (int si = 0; si < 2; si++) {
                dcp_plan_options_t o;
                dcp_plan_options_default(&o);
                o.block_size = 512;
                o.strategy = strategies[si];
                dcp_plan_t *p = t_plan_shape(lengths, 3, m, "2x4", &shape, &o);
                int failed = 0;
                for (int k = 0; k < REPEATS; k++) {
                    dcpt_harness_result_t r;
                    const dcp_status_t st = dcpt_harness_run(h, p, 0, 1, 60.0, 1e-5, "cuda:0", &r);
                    failed += st != DCP_OK || !r.passed;
                }
                if (failed)
                    fprintf(stderr, "gpu 8 ranks: %s %s %s: %d of %d runs failed\n",
                            dcp_strategy_name(strategies[si]), di ? "fp16" : "bf16", specs[mi],
                            failed, REPEATS);
                CU_ASSERT_EQUAL(failed, 0);
                dcp_plan_destroy(p);
            }
            dcpt_harness_destroy(h);
        }
}

/* One rank on cuda:0 with the caller's streams lent, over zeroed device tensors. */
typedef struct {
    dcp_group_t *group;
    dcp_context_t *ctx;
    dcp_plan_t *plan;
    void *t[5];
} one_gpu_rank_t;

static void one_gpu_rank_timed(one_gpu_rank_t *g, void *compute, void *transfer, double timeout_s)
{
    const int32_t len = 2048;
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const dcp_attn_shape_t shape = {8, 2, 128, DCP_DTYPE_BF16, 0.0f};
    g->plan = t_plan_shape(&len, 1, &causal, "1x1", &shape, NULL);
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(1, &g->group), DCP_OK);
    const dcp_context_config_t cfg = {.group = g->group,
                                      .device = "cuda:0",
                                      .timeout_s = timeout_s,
                                      .compute_stream = compute,
                                      .transfer_stream = transfer};
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &g->ctx), DCP_OK);
    const size_t q = (size_t)len * 8 * 128 * 2, kv = (size_t)len * 2 * 128 * 2;
    const size_t bytes[5] = {q, kv, kv, q, (size_t)len * 8 * 4};
    for (int i = 0; i < 5; i++) CU_ASSERT_PTR_NOT_NULL_FATAL(g->t[i] = dcp_cuda_alloc(0, bytes[i]));
}

static void one_gpu_rank(one_gpu_rank_t *g, void *compute, void *transfer)
{
    one_gpu_rank_timed(g, compute, transfer, 0);
}

static void one_gpu_rank_free(one_gpu_rank_t *g)
{
    dcp_context_destroy(g->ctx);
    dcp_group_destroy(g->group);
    dcp_plan_destroy(g->plan);
    for (int i = 0; i < 5; i++) dcp_cuda_free(g->t[i]);
}

/* dcp_forward is stream-ordered: behind a 500 ms kernel on the caller's stream it returns
 * while that kernel still runs (the stream is not idle when the call is back), and its
 * outputs are there once the stream is. */
static void test_forward_returns_before_its_work(void)
{
    void *caller = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cuda_stream_create(0, &caller), DCP_OK);
    one_gpu_rank_t g;
    one_gpu_rank(&g, NULL, NULL);
    const dcp_tensors_t io = {g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], 0.0f};
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK); /* binds the plan */
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(caller), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_fill_f32(g.t[4], 2048 * 8, 1.0f, caller), DCP_OK); /* stale LSE */
    CU_ASSERT_EQUAL(dcp_cuda_spin(caller, 500.0), DCP_OK);
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_idle(caller), 0);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(caller), DCP_OK);
    /* zero inputs: every row's LSE is log(number of allowed keys), never the stale 1.0 */
    float lse[2];
    CU_ASSERT_EQUAL(dcp_cuda_memcpy(lse, (float *)g.t[4] + 8 * 2047, sizeof lse, NULL), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(lse[0], log(2048.0), 1e-3);
    one_gpu_rank_free(&g);
    dcp_cuda_stream_destroy(caller);
}

/* Lent streams are used and never destroyed: they still take work after the context. */
static void test_lent_streams_outlive_the_context(void)
{
    void *s[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) CU_ASSERT_EQUAL_FATAL(dcp_cuda_stream_create(0, &s[i]), DCP_OK);
    one_gpu_rank_t g;
    one_gpu_rank(&g, s[0], s[1]);
    const dcp_tensors_t io = {g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], 0.0f};
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, NULL), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
    one_gpu_rank_free(&g);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(dcp_cuda_spin(s[i], 1.0), DCP_OK);
        CU_ASSERT_EQUAL(dcp_cuda_stream_sync(s[i]), DCP_OK);
        dcp_cuda_stream_destroy(s[i]);
    }
}

/* Max |a - b| over n bf16 values, and max |b|. */
static double bf16_max_diff(const uint16_t *a, const uint16_t *b, int64_t n, double *peak)
{
    double d = 0;
    *peak = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = dcp_half_to_f32(DCP_DTYPE_BF16, a[i]),
                     y = dcp_half_to_f32(DCP_DTYPE_BF16, b[i]);
        d = isnan(x) != isnan(y) ? INFINITY : fmax(d, fabs(x - y));
        *peak = fmax(*peak, fabs(y));
    }
    return d;
}

/* A forward and a backward captured into one CUDA graph replay what the plain calls compute:
 * O and LSE bit for bit, dQ, dK and dV within a bf16 step (the backward adds with atomics).
 * The plan is bound by the plain calls first (binding allocates), as a training loop that
 * captures after its first step would. */
static void test_graph_capture_forward_backward(void)
{
    enum { LEN = 2048, HQ = 8, HKV = 2, D = 128 };
    one_gpu_rank_t g;
    one_gpu_rank(&g, NULL, NULL);
    const int64_t nq = (int64_t)LEN * HQ * D, nkv = (int64_t)LEN * HKV * D;
    const int64_t n[4] = {nq, nq, nkv, nkv}; /* dO, dQ, dK, dV */
    void *grad[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_PTR_NOT_NULL_FATAL(grad[i] = dcp_cuda_alloc(0, (size_t)n[i] * 2));
    uint16_t *host = malloc((size_t)nq * 2);
    dcpt_rng_t rng = {21};
    void *in[4] = {g.t[0], g.t[1], g.t[2], grad[0]}; /* q, k, v, dO */
    const int64_t in_n[4] = {nq, nkv, nkv, nq};
    for (int i = 0; i < 4; i++) {
        for (int64_t j = 0; j < in_n[i]; j++)
            host[j] = dcp_half_from_f32(DCP_DTYPE_BF16, (float)dcpt_rng_normal(&rng));
        CU_ASSERT_EQUAL(dcp_cuda_memcpy(in[i], host, (size_t)in_n[i] * 2, NULL), DCP_OK);
    }
    const dcp_tensors_t io = {g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], 0.0f};
    const dcp_grad_tensors_t gio = {io, grad[0], grad[1], grad[2], grad[3]};
    void *s = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cuda_stream_create(0, &s), DCP_OK);
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, s), DCP_OK);
    CU_ASSERT_EQUAL(dcp_backward(g.ctx, g.plan, &gio, s), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(s), DCP_OK);
    /* the plain results: O, dQ, dK, dV (bf16) and LSE (fp32) */
    void *outs[5] = {g.t[3], grad[1], grad[2], grad[3], g.t[4]};
    const int64_t out_n[5] = {nq, nq, nkv, nkv, (int64_t)LEN * HQ};
    void *want[5];
    for (int i = 0; i < 5; i++) {
        const size_t bytes = (size_t)out_n[i] * (i == 4 ? 4 : 2);
        want[i] = malloc(bytes);
        CU_ASSERT_EQUAL(dcp_cuda_memcpy(want[i], outs[i], bytes, NULL), DCP_OK);
        CU_ASSERT_EQUAL(dcp_cuda_fill_f32(outs[i], (int64_t)(bytes / 4), NAN, NULL), DCP_OK);
    }
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(NULL), DCP_OK);
    void *graph = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cuda_graph_begin(s), DCP_OK);
    const dcp_status_t fst = dcp_forward(g.ctx, g.plan, &io, s);
    const dcp_status_t bst = dcp_backward(g.ctx, g.plan, &gio, s);
    const dcp_status_t est = dcp_cuda_graph_end(s, &graph);
    CU_ASSERT_EQUAL(fst, DCP_OK);
    CU_ASSERT_EQUAL(bst, DCP_OK);
    CU_ASSERT_EQUAL(est, DCP_OK);
    if (fst != DCP_OK || bst != DCP_OK || est != DCP_OK)
        fprintf(stderr, "gpu graph capture: forward %s, backward %s, end %s: %s\n",
                dcp_status_string(fst), dcp_status_string(bst), dcp_status_string(est),
                dcp_last_error());
    if (graph) {
        CU_ASSERT_EQUAL(dcp_cuda_graph_launch(graph, s), DCP_OK);
        CU_ASSERT_EQUAL(dcp_cuda_stream_sync(s), DCP_OK);
        for (int i = 0; i < 5; i++) {
            const size_t bytes = (size_t)out_n[i] * (i == 4 ? 4 : 2);
            void *got = malloc(bytes);
            CU_ASSERT_EQUAL(dcp_cuda_memcpy(got, outs[i], bytes, NULL), DCP_OK);
            if (i == 0 || i == 4) {
                CU_ASSERT_EQUAL(memcmp(got, want[i], bytes), 0);
            } else {
                double peak;
                const double d = bf16_max_diff(got, want[i], out_n[i], &peak);
                CU_ASSERT(peak > 0 && d <= ldexp(peak, -7));
            }
            free(got);
        }
    }
    dcp_cuda_graph_destroy(graph);
    for (int i = 0; i < 5; i++) free(want[i]);
    for (int i = 0; i < 4; i++) dcp_cuda_free(grad[i]);
    free(host);
    dcp_cuda_stream_destroy(s);
    one_gpu_rank_free(&g);
}

/* ---- GPU waits with a timeout, NCCL's stamp path, lent communicators --------------------- */

/* A context whose timeout is 1 s, its caller's stream held by a 4 s kernel: the forward
 * returns (queued); dcp_context_synchronize ends with DCP_ERR_TIMEOUT after about the timeout
 * (not the kernel's 4 s), naming the unfinished call, and the context has failed (its next call
 * says so at once). */
static void test_synchronize_times_out_behind_a_held_stream(void)
{
    void *caller = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cuda_stream_create(0, &caller), DCP_OK);
    one_gpu_rank_t g;
    one_gpu_rank_timed(&g, NULL, NULL, 1.0);
    const dcp_tensors_t io = {g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], 0.0f};
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK); /* binds the plan */
    CU_ASSERT_EQUAL(dcp_context_synchronize(g.ctx, 0), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_spin(caller, 4000.0), DCP_OK);
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK);
    const double t0 = dcp_now();
    CU_ASSERT_EQUAL(dcp_context_synchronize(g.ctx, 0), DCP_ERR_TIMEOUT);
    const double waited = dcp_now() - t0;
    CU_ASSERT(waited >= 0.9 && waited < 2.5);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "has not finished on GPU 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "the context has failed"));
    fprintf(stderr, "gpu synchronize: DCP_ERR_TIMEOUT after %.2f s (timeout 1 s): %s\n", waited,
            dcp_last_error());
    const double t1 = dcp_now();
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_ERR_PEER);
    CU_ASSERT(dcp_now() - t1 < 0.5);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(caller), DCP_OK);
    one_gpu_rank_free(&g);
    dcp_cuda_stream_destroy(caller);
}

/* The same hang found by the next call: queued behind the 4 s kernel, 1.3 s later the next
 * forward returns DCP_ERR_TIMEOUT at once instead of queueing more; a shorter synchronize
 * before the context's timeout has passed leaves the context going. */
static void test_next_call_times_out_behind_a_held_stream(void)
{
    void *caller = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cuda_stream_create(0, &caller), DCP_OK);
    one_gpu_rank_t g;
    one_gpu_rank_timed(&g, NULL, NULL, 1.0);
    const dcp_tensors_t io = {g.t[0], g.t[1], g.t[2], g.t[3], g.t[4], 0.0f};
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(caller), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cuda_spin(caller, 4000.0), DCP_OK);
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_synchronize(g.ctx, 0.2), DCP_ERR_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "the context goes on"));
    const struct timespec pause = {1, 300000000};
    nanosleep(&pause, NULL);
    const double t0 = dcp_now();
    CU_ASSERT_EQUAL(dcp_forward(g.ctx, g.plan, &io, caller), DCP_ERR_TIMEOUT);
    CU_ASSERT(dcp_now() - t0 < 0.5);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "forward call 1 has not finished"));
    CU_ASSERT_EQUAL(dcp_cuda_stream_sync(caller), DCP_OK);
    one_gpu_rank_free(&g);
    dcp_cuda_stream_destroy(caller);
}

/* A one-rank bootstrap: the allgather of one rank is a copy. */
static dcp_status_t self_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    (void)state;
    memcpy(recv, send, bytes);
    return DCP_OK;
}

/* A process rank on cuda:0 whose engine is NCCL (its own communicator, or `lent`): forward
 * and backward of a one-rank plan run, the context reports NCCL, stream-ordered launches and
 * stamps in device memory, and dcp_context_synchronize ends clean. */
static void nccl_rank_runs(void *lent)
{
    const dcp_bootstrap_t bs = {0, 1, self_allgather, NULL, NULL, 30.0};
    const dcp_context_config_t cfg = {
        .bootstrap = &bs, .device = "cuda:0", .transport_intra = "nccl", .nccl_comm = lent};
    dcp_context_t *ctx = NULL;
    const dcp_status_t st = dcp_context_create(&cfg, &ctx);
    CU_ASSERT_EQUAL(st, DCP_OK);
    if (st != DCP_OK) {
        fprintf(stderr, "gpu nccl context: %s: %s\n", dcp_status_string(st), dcp_last_error());
        return;
    }
    const char *report = dcp_context_transport_report(ctx);
    fprintf(stderr, "gpu nccl context: %s\n", report);
    CU_ASSERT_PTR_NOT_NULL(strstr(report, "engine nccl"));
    CU_ASSERT_PTR_NOT_NULL(strstr(report, "launches stream-ordered"));
    CU_ASSERT_PTR_NOT_NULL(strstr(report, "abort notices in device memory"));
    const int32_t len = 1024;
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const dcp_attn_shape_t shape = {8, 2, 128, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_t *p = t_plan_shape(&len, 1, &causal, "1x1", &shape, NULL);
    const size_t q = (size_t)len * 8 * 128 * 2, kv = (size_t)len * 2 * 128 * 2;
    const size_t bytes[9] = {q, kv, kv, q, (size_t)len * 8 * 4, q, q, kv, kv};
    void *t[9];
    for (int i = 0; i < 9; i++) CU_ASSERT_PTR_NOT_NULL_FATAL(t[i] = dcp_cuda_alloc(0, bytes[i]));
    const dcp_grad_tensors_t io = {{t[0], t[1], t[2], t[3], t[4], 0.0f}, t[5], t[6], t[7], t[8]};
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_EQUAL(dcp_forward(ctx, p, &io.fwd, NULL), DCP_OK);
        CU_ASSERT_EQUAL(dcp_backward(ctx, p, &io, NULL), DCP_OK);
    }
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, 0), DCP_OK);
    dcp_context_destroy(ctx);
    for (int i = 0; i < 9; i++) dcp_cuda_free(t[i]);
    dcp_plan_destroy(p);
}

/* NCCL refuses two ranks on one GPU, so one GPU runs one NCCL rank: the engine, its
 * device-memory stamp channel (no peer to stamp) and its timeout path, not an exchange. */
static void test_nccl_one_rank_device_stamps(void)
{
    nccl_rank_runs(NULL);
}

typedef struct {
    shm_bootstrap_t *bs;
    int32_t rank;
    void *comm;
    dcp_status_t st;
    char msg[512];
} lent_rank_t;

static void *lent_rank(void *arg)
{
    lent_rank_t *l = arg;
    const dcp_bootstrap_t b = shm_bootstrap_rank(l->bs, l->rank);
    const dcp_context_config_t cfg = {.bootstrap = &b,
                                      .timeout_s = 30,
                                      .device = "cuda:0",
                                      .transport_intra = "nccl",
                                      .nccl_comm = l->comm};
    dcp_context_t *ctx = NULL;
    l->st = dcp_context_create(&cfg, &ctx);
    if (l->st != DCP_OK) dcp_error_save(l->msg, sizeof l->msg);
    dcp_context_destroy(ctx);
    return NULL;
}

/* A real lent communicator: one of one rank fits a one-rank job and runs it (and outlives the
 * context: dcp never destroys it); two ranks that each lend a one-rank communicator are both
 * refused, naming the rank and its communicator's size, before anything is sent on it. */
static void test_nccl_lent_comm_checked(void)
{
    void *comm[2] = {NULL, NULL};
    dcp_nccl_test_comm_t *h[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        const dcp_status_t st = dcp_nccl_test_comm_create(0, &comm[i], &h[i]);
        CU_ASSERT_EQUAL(st, DCP_OK);
        if (st != DCP_OK) {
            fprintf(stderr, "gpu lent comm: %s\n", dcp_last_error());
            for (int j = 0; j < i; j++) dcp_nccl_test_comm_destroy(h[j]);
            return;
        }
    }
    nccl_rank_runs(comm[0]);
    shm_bootstrap_t *bs = shm_bootstrap_create(2, 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    lent_rank_t l[2];
    pthread_t t[2];
    for (int32_t r = 0; r < 2; r++) {
        l[r] = (lent_rank_t){bs, r, comm[r], DCP_OK, ""};
        pthread_create(&t[r], NULL, lent_rank, &l[r]);
    }
    for (int32_t r = 0; r < 2; r++) pthread_join(t[r], NULL);
    for (int32_t r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(l[r].st, DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(l[r].msg, "config.nccl_comm of rank 0 has 1 ranks, the "
                                                "bootstrap 2"));
        fprintf(stderr, "gpu lent comm, rank %d: %s\n", r, l[r].msg);
    }
    shm_bootstrap_destroy(bs);
    for (int i = 0; i < 2; i++) dcp_nccl_test_comm_destroy(h[i]);
}

int dcp_suite_gpu(void)
{
    const int n = dcp_cuda_device_count();
    if (n < 1) {
        printf("gpu: no CUDA device visible; the GPU suite is not registered\n");
        return 0;
    }
    static const dcp_test_t tests[] = {
        {"device_code_runs", test_device_code_runs},
        {"attention_every_mask", test_attention_every_mask},
        {"attention_gqa_dims_and_edges", test_attention_gqa_dims_and_edges},
        {"fully_masked_rows", test_fully_masked_rows},
        {"accumulate", test_accumulate},
        {"merge_and_copy", test_merge_and_copy},
        {"backward_every_mask", test_backward_every_mask},
        {"backward_gqa_dims_and_edges", test_backward_gqa_dims_and_edges},
        {"backward_fully_masked_rows", test_backward_fully_masked_rows},
        {"backward_adds_across_launches", test_backward_adds_across_launches},
        {"backward_deterministic", test_backward_deterministic},
        {"bwd_delta", test_bwd_delta},
        {"accumulate_grads", test_accumulate_grads},
        {"backward_refusals", test_backward_refusals},
        {"executor_on_one_gpu", test_executor_on_one_gpu},
        {"executor_refuses_bad_input", test_executor_refuses_bad_input},
        {"variants_on_one_gpu", test_variants_on_one_gpu},
        {"eight_ranks_on_one_gpu_repeated", test_eight_ranks_on_one_gpu_repeated},
        {"forward_returns_before_its_work", test_forward_returns_before_its_work},
        {"lent_streams_outlive_the_context", test_lent_streams_outlive_the_context},
        {"graph_capture_forward_backward", test_graph_capture_forward_backward},
        {"synchronize_times_out_behind_a_held_stream",
         test_synchronize_times_out_behind_a_held_stream},
        {"next_call_times_out_behind_a_held_stream", test_next_call_times_out_behind_a_held_stream},
        {"nccl_one_rank_device_stamps", test_nccl_one_rank_device_stamps},
        {"nccl_lent_comm_checked", test_nccl_lent_comm_checked},
        {NULL, NULL},
    };
    return dcp_add_suite("gpu", tests);
}
