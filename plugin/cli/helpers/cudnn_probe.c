#include "plugin/cli/helpers/cudnn_probe.h"

#include "kernels/segment.h"
#include "plugin/cli/support/json.h"

#include <string.h>

/* One graph of the probe. */
static dcp_cudnn_key_t probe_key(int bwd, int cls, int fused, int det, dcp_dtype_t dtype,
                                 int64_t hkv, int64_t dqk, int64_t dv)
{
    dcp_cudnn_key_t k;
    memset(&k, 0, sizeof k);
    k.bwd = bwd;
    k.cls = cls;
    k.fused = fused;
    k.deterministic = det;
    k.dtype = dtype;
    k.hq = 32;
    k.hkv = hkv;
    k.dqk = dqk;
    k.dv = dv;
    k.b = 64;
    k.sq = 1024;
    k.skv = 16384;
    return k;
}

static int probe_one(FILE *out, dcp_cudnn_t *c, const dcp_cudnn_key_t *k, int json)
{
    dcp_cudnn_probe_t r;
    if (dcp_cudnn_probe(c, k, &r) != DCP_OK) snprintf(r.error, sizeof r.error, "%s", dcp_last_error());
    const char *pass = k->bwd ? "bwd" : "fwd", *cls = dcp_seg_class_name(k->cls),
               *graph = k->fused ? "fused" : "composite",
               *dtype = k->dtype == DCP_DTYPE_BF16 ? "bf16" : "fp16";
    if (json) {
        dcpt_json_t j;
        dcpt_json_begin(&j, out);
        dcpt_json_str(&j, "probe", "cudnn");
        dcpt_json_str(&j, "pass", pass);
        dcpt_json_str(&j, "class", cls);
        dcpt_json_str(&j, "graph", graph);
        dcpt_json_bool(&j, "deterministic", k->deterministic);
        dcpt_json_str(&j, "dtype", dtype);
        dcpt_json_int(&j, "q_heads", k->hq);
        dcpt_json_int(&j, "kv_heads", k->hkv);
        dcpt_json_int(&j, "head_dim", k->dqk);
        dcpt_json_int(&j, "value_dim", k->dv);
        dcpt_json_bool(&j, "built", r.built);
        dcpt_json_num(&j, "build_ms", r.build_ms);
        dcpt_json_int(&j, "ops", r.ops);
        dcpt_json_int(&j, "configs", r.configs);
        dcpt_json_int(&j, "engine", r.engine);
        dcpt_json_int(&j, "workspace", r.workspace);
        dcpt_json_str(&j, "error", r.error);
        dcpt_json_end(&j);
    } else {
        fprintf(out, "%-4s %-7s %-9s %-4s %-4s %3lld/%-3lld %3lld/%-3lld %-5s %8.1f %6lld %10lld  %s\n",
                pass, cls, graph, k->deterministic ? "det" : "-", dtype, (long long)k->hq,
                (long long)k->hkv, (long long)k->dqk, (long long)k->dv, r.built ? "yes" : "NO",
                r.build_ms, (long long)r.engine, (long long)(r.workspace >> 20), r.error);
    }
    return !r.built;
}

int dcpt_cudnn_probe(FILE *out, dcp_cudnn_t *c, int json)
{
    if (!json)
        fprintf(out, "%-4s %-7s %-9s %-4s %-4s %-7s %-7s %-5s %8s %6s %10s  %s\n", "pass", "class",
                "graph", "mode", "type", "heads", "dims", "built", "ms", "engine", "ws(MiB)",
                "cuDNN says");
    int failed = 0;
    for (int bwd = 0; bwd < 2; bwd++)
        for (int cls = 0; cls < DCP_SEG_DENSE; cls++) {
            for (int d = 64; d <= 128; d *= 2)
                for (int64_t hkv = 32; hkv >= 8; hkv /= 4) {
                    const dcp_cudnn_key_t k = probe_key(bwd, cls, 0, 0, DCP_DTYPE_BF16, hkv, d, d);
                    failed += probe_one(out, c, &k, json);
                }
            const dcp_cudnn_key_t h = probe_key(bwd, cls, 0, 0, DCP_DTYPE_FP16, 8, 128, 128);
            failed += probe_one(out, c, &h, json);
        }
    const dcp_cudnn_key_t extra[] = {
        probe_key(0, DCP_SEG_FULL, 1, 0, DCP_DTYPE_BF16, 8, 128, 128),
        probe_key(1, DCP_SEG_CAUSAL, 0, 1, DCP_DTYPE_BF16, 8, 128, 128),
        probe_key(0, DCP_SEG_CAUSAL, 0, 0, DCP_DTYPE_BF16, 8, 192, 128),
        probe_key(1, DCP_SEG_CAUSAL, 0, 0, DCP_DTYPE_BF16, 8, 192, 128),
        probe_key(0, DCP_SEG_CAUSAL, 0, 0, DCP_DTYPE_BF16, 8, 256, 256),
        probe_key(1, DCP_SEG_CAUSAL, 0, 0, DCP_DTYPE_BF16, 8, 256, 256),
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        failed += probe_one(out, c, &extra[i], json);
    return failed;
}
