/*
 * Builds one of cudnn-frontend's SDPA graphs (packed THD layout, GQA, padding mask) the way
 * TransformerEngine and PyTorch build their varlen attention, and lowers it to cuDNN backend
 * descriptors without a GPU: validate(), then build_operation_graph() with no handle. With
 * CUDNN_LOGLEVEL_DBG=3 the cuDNN library logs every descriptor, attribute and finalize it is
 * given; with CUDNN_FRONTEND_LOG_INFO=1 the frontend logs the name and UID of every tensor.
 * It then asks for execution plans (heuristics mode A) and prints where that stops: a plan
 * needs the GPU.
 *
 * Usage: cudnn_capture GRAPH        (cudnn_capture --list names the graphs)
 * Prints to stdout: the configuration, each step's status, the frontend's own workspace (the
 * buffers it places in front of cuDNN's plan workspace, by UID, offset and size) and the
 * graph as the frontend serializes it (JSON, one line).
 */
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#if defined NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <dlfcn.h>
namespace cudnn_frontend
{
void *cudnn_dlhandle = nullptr;
}
#endif

namespace fe = cudnn_frontend;
using Tensor = std::shared_ptr<fe::graph::Tensor_attributes>;

namespace
{

enum class Mask { full, causal, band, left };

struct Config {
    const char *name;
    bool backward;
    Mask mask;
    fe::DataType_t io;
    int64_t d_qk, d_v;
    bool force_composite; /* forward: ask for the composite implementation explicitly */
    bool max_total;       /* backward: set_max_total_seq_len_q/kv as TransformerEngine does */
    bool deterministic;   /* backward: set_deterministic_algorithm(true) */
};

constexpr int64_t B = 8, H_Q = 32, H_KV = 8, S_Q = 128, S_KV = 256, WINDOW = 64;

const Config CONFIGS[] = {
    {"fwd_full", false, Mask::full, fe::DataType_t::BFLOAT16, 128, 128, false, false, false},
    {"fwd_full_composite", false, Mask::full, fe::DataType_t::BFLOAT16, 128, 128, true, false,
     false},
    {"fwd_causal", false, Mask::causal, fe::DataType_t::BFLOAT16, 128, 128, false, false, false},
    {"fwd_band", false, Mask::band, fe::DataType_t::BFLOAT16, 128, 128, false, false, false},
    {"fwd_left", false, Mask::left, fe::DataType_t::BFLOAT16, 128, 128, false, false, false},
    {"bwd_full", true, Mask::full, fe::DataType_t::BFLOAT16, 128, 128, false, true, false},
    {"bwd_causal", true, Mask::causal, fe::DataType_t::BFLOAT16, 128, 128, false, true, false},
    {"bwd_band", true, Mask::band, fe::DataType_t::BFLOAT16, 128, 128, false, true, false},
    {"bwd_full_no_max_total", true, Mask::full, fe::DataType_t::BFLOAT16, 128, 128, false, false,
     false},
    {"bwd_causal_no_max_total", true, Mask::causal, fe::DataType_t::BFLOAT16, 128, 128, false,
     false, false},
    {"bwd_band_no_max_total", true, Mask::band, fe::DataType_t::BFLOAT16, 128, 128, false, false,
     false},
    {"bwd_left_no_max_total", true, Mask::left, fe::DataType_t::BFLOAT16, 128, 128, false, false,
     false},
    {"bwd_causal_deterministic", true, Mask::causal, fe::DataType_t::BFLOAT16, 128, 128, false,
     false, true},
    {"fwd_causal_fp16", false, Mask::causal, fe::DataType_t::HALF, 128, 128, false, false, false},
    {"fwd_causal_mla", false, Mask::causal, fe::DataType_t::BFLOAT16, 192, 128, false, false,
     false},
    {"bwd_causal_mla", true, Mask::causal, fe::DataType_t::BFLOAT16, 192, 128, false, true, false},
    {"bwd_causal_mla_no_max_total", true, Mask::causal, fe::DataType_t::BFLOAT16, 192, 128, false,
     false, false},
};

/* Exposes the frontend's own workspace (protected in INode) for the report. */
class CaptureGraph : public fe::graph::Graph
{
  public:
    int64_t frontend_workspace_size() const
    {
        return get_fe_workspace_size_subtree();
    }

    fe::error_t
    frontend_workspace_tensors(std::map<int64_t, std::tuple<int64_t, int64_t>> &out) const
    {
        std::unordered_map<fe::graph::Tensor_attributes::uid_t,
                           std::tuple<int64_t, int64_t, std::vector<float>>>
            mods;
        int64_t offset = 0;
        auto status = collect_tensors_in_workspace_subtree(mods, offset);
        for (auto const &[uid, mod] : mods) out[uid] = {std::get<0>(mod), std::get<1>(mod)};
        return status;
    }

    /* The values of the by-value scalars (handed to cuDNN with the variant pack, not in a
     * descriptor), as text: float, int32 or int64. */
    fe::error_t pass_by_values(std::map<int64_t, std::string> &out) const
    {
        std::unordered_map<fe::graph::Tensor_attributes::uid_t,
                           fe::graph::Tensor_attributes::pass_by_values_t>
            values;
        auto status = collect_pass_by_value_tensors_subtree(values);
        for (auto const &[uid, v] : values) {
            char text[64];
            if (auto f = std::get_if<float>(&v))
                std::snprintf(text, sizeof text, "FLOAT %.9g", (double)*f);
            else if (auto i = std::get_if<int32_t>(&v))
                std::snprintf(text, sizeof text, "INT32 %d", *i);
            else if (auto l = std::get_if<int64_t>(&v))
                std::snprintf(text, sizeof text, "INT64 %lld", (long long)*l);
            else
                std::snprintf(text, sizeof text, "half/bfloat16 (not expected here)");
            out[uid] = text;
        }
        return status;
    }
};

/* Strides of the packed layout: (S H D, D, H D, 1), TransformerEngine's THD strides. */
std::vector<int64_t> thd_strides(int64_t h, int64_t s, int64_t d)
{
    return {s * h * d, d, h * d, 1};
}

Tensor data_tensor(CaptureGraph &g, const char *name, int64_t h, int64_t s, int64_t d,
                   Tensor offsets)
{
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_dim({B, h, s, d})
                        .set_stride(thd_strides(h, s, d))
                        .set_ragged_offset(offsets));
}

Tensor int32_column(CaptureGraph &g, const char *name, int64_t n)
{
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

template <typename Attributes> void set_mask(Attributes &a, Mask mask)
{
    if (mask == Mask::full) return;
    a.set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT);
    if (mask != Mask::left) a.set_diagonal_band_right_bound(0);
    if (mask == Mask::band || mask == Mask::left) a.set_diagonal_band_left_bound(WINDOW);
}

void build(CaptureGraph &g, Config const &c)
{
    g.set_io_data_type(c.io)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);

    float const scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk));

    /* Each ragged tensor gets its own offsets tensor, as PyTorch and TransformerEngine do. */
    auto off_q = int32_column(g, "offset_q", B + 1);
    auto off_k = int32_column(g, "offset_k", B + 1);
    auto off_v = int32_column(g, "offset_v", B + 1);
    auto off_o = int32_column(g, "offset_o", B + 1);
    auto off_stats = int32_column(g, "offset_stats", B + 1);
    auto seq_q = int32_column(g, "seq_len_q", B);
    auto seq_kv = int32_column(g, "seq_len_kv", B);

    auto Q = data_tensor(g, "Q", H_Q, S_Q, c.d_qk, off_q);
    auto K = data_tensor(g, "K", H_KV, S_KV, c.d_qk, off_k);
    auto V = data_tensor(g, "V", H_KV, S_KV, c.d_v, off_v);

    if (!c.backward) {
        auto a = fe::graph::SDPA_attributes()
                     .set_name("sdpa")
                     .set_generate_stats(true)
                     .set_attn_scale(scale)
                     .set_padding_mask(true)
                     .set_seq_len_q(seq_q)
                     .set_seq_len_kv(seq_kv);
        set_mask(a, c.mask);
        if (c.force_composite) a.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
        auto [O, Stats] = g.sdpa(Q, K, V, a);
        O->set_output(true)
            .set_dim({B, H_Q, S_Q, c.d_v})
            .set_stride(thd_strides(H_Q, S_Q, c.d_v))
            .set_ragged_offset(off_o);
        Stats->set_output(true)
            .set_data_type(fe::DataType_t::FLOAT)
            .set_dim({B, H_Q, S_Q, 1})
            .set_stride({H_Q * S_Q, 1, H_Q, 1})
            .set_ragged_offset(off_stats);
        return;
    }

    auto O = data_tensor(g, "O", H_Q, S_Q, c.d_v, off_o);
    auto dO = data_tensor(g, "dO", H_Q, S_Q, c.d_v, off_o);
    auto Stats = g.tensor(fe::graph::Tensor_attributes()
                              .set_name("Stats")
                              .set_dim({B, H_Q, S_Q, 1})
                              .set_stride({H_Q * S_Q, 1, H_Q, 1})
                              .set_data_type(fe::DataType_t::FLOAT)
                              .set_ragged_offset(off_stats));
    auto a = fe::graph::SDPA_backward_attributes()
                 .set_name("sdpa_backward")
                 .set_attn_scale(scale)
                 .set_padding_mask(true)
                 .set_seq_len_q(seq_q)
                 .set_seq_len_kv(seq_kv);
    set_mask(a, c.mask);
    if (c.max_total) a.set_max_total_seq_len_q(B * S_Q).set_max_total_seq_len_kv(B * S_KV);
    if (c.deterministic) a.set_deterministic_algorithm(true);
    auto [dQ, dK, dV] = g.sdpa_backward(Q, K, V, O, dO, Stats, a);
    dQ->set_output(true)
        .set_dim({B, H_Q, S_Q, c.d_qk})
        .set_stride(thd_strides(H_Q, S_Q, c.d_qk))
        .set_ragged_offset(off_q);
    dK->set_output(true)
        .set_dim({B, H_KV, S_KV, c.d_qk})
        .set_stride(thd_strides(H_KV, S_KV, c.d_qk))
        .set_ragged_offset(off_k);
    dV->set_output(true)
        .set_dim({B, H_KV, S_KV, c.d_v})
        .set_stride(thd_strides(H_KV, S_KV, c.d_v))
        .set_ragged_offset(off_v);
}

const char *mask_name(Mask m)
{
    return m == Mask::full     ? "none (padding only)"
           : m == Mask::causal ? "causal bottom-right (alignment BOTTOM_RIGHT, right bound 0)"
           : m == Mask::band   ? "band (alignment BOTTOM_RIGHT, right bound 0, left bound 64)"
                               : "left bound 64 alone (alignment BOTTOM_RIGHT, no right bound)";
}

bool report(const char *step, fe::error_t e)
{
    std::printf("step %s: %s%s%s\n", step, e.is_good() ? "ok" : "FAILED", e.is_good() ? "" : ": ",
                e.is_good() ? "" : e.get_message().c_str());
    return e.is_good();
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s GRAPH | --list\n", argv[0]);
        return 2;
    }
    if (std::strcmp(argv[1], "--list") == 0) {
        for (auto const &c : CONFIGS) std::printf("%s\n", c.name);
        return 0;
    }
    Config const *config = nullptr;
    for (auto const &c : CONFIGS)
        if (std::strcmp(argv[1], c.name) == 0) config = &c;
    if (!config) {
        std::fprintf(stderr, "%s: no graph named '%s' (--list names them)\n", argv[0], argv[1]);
        return 2;
    }
#if defined NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
    fe::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (!fe::cudnn_dlhandle) {
        std::fprintf(stderr, "%s: dlopen libcudnn.so.9: %s\n", argv[0], dlerror());
        return 1;
    }
    std::printf("frontend: dynamic loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)\n");
#else
    std::printf("frontend: linked against libcudnn and libcudart\n");
#endif
    Config const &c = *config;
    std::printf("graph: %s\n", c.name);
    std::printf("frontend version: %d, cuDNN compiled %d, cuDNN loaded %zu\n",
                CUDNN_FRONTEND_VERSION, CUDNN_VERSION, fe::detail::get_backend_version());
    std::printf("direction: %s; mask: %s; io: %s; b %lld, h_q %lld, h_kv %lld, s_q %lld, s_kv "
                "%lld, d_qk %lld, d_v %lld\n",
                c.backward ? "backward" : "forward", mask_name(c.mask),
                c.io == fe::DataType_t::HALF ? "HALF" : "BFLOAT16", (long long)B, (long long)H_Q,
                (long long)H_KV, (long long)S_Q, (long long)S_KV, (long long)c.d_qk,
                (long long)c.d_v);
    if (c.backward)
        std::printf("max_total_seq_len_q/kv: %s\n",
                    c.max_total ? "set (b s_q = 1024, b s_kv = 2048)" : "not set");
    if (c.force_composite) std::printf("implementation: COMPOSITE requested\n");
    if (c.deterministic) std::printf("deterministic algorithm: requested\n");

    CaptureGraph g;
    try {
        build(g, c);
    } catch (std::exception const &e) {
        std::printf("step build: FAILED: %s\n", e.what());
        return 1;
    }
    if (!report("validate", g.validate())) return 1;
    if (!report("build_operation_graph(handle = NULL)", g.build_operation_graph(nullptr))) return 1;

    std::printf("frontend workspace: %lld bytes\n", (long long)g.frontend_workspace_size());
    std::map<int64_t, std::tuple<int64_t, int64_t>> ws;
    report("collect frontend workspace tensors", g.frontend_workspace_tensors(ws));
    for (auto const &[uid, mod] : ws)
        std::printf("frontend workspace tensor: uid %lld at offset %lld (action %lld: %s)\n",
                    (long long)uid, (long long)std::get<1>(mod), (long long)std::get<0>(mod),
                    std::get<0>(mod) == 0   ? "filled from host values by the frontend"
                    : std::get<0>(mod) == 1 ? "zeroed by the frontend"
                                            : "left uninitialized");

    std::map<int64_t, std::string> by_value;
    report("collect by-value scalars", g.pass_by_values(by_value));
    for (auto const &[uid, text] : by_value)
        std::printf("by-value scalar: uid %lld = %s\n", (long long)uid, text.c_str());

#ifndef CUDNN_FRONTEND_SKIP_JSON_LIB
    nlohmann::json j;
    g.serialize(j);
    std::printf("serialized: %s\n", j.dump().c_str());
#endif

    /* Heuristics look at the device through the handle-less graph; expected to stop here. */
    try {
        report("create_execution_plans(A)", g.create_execution_plans({fe::HeurMode_t::A}));
    } catch (std::exception const &e) {
        std::printf("step create_execution_plans(A): FAILED (exception): %s\n", e.what());
    }
    return 0;
}
