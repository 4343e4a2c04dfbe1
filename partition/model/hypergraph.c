#include "partition/model/hypergraph.h"

#include "include/base/error.h"

#include <stdlib.h>

void dcp_hypergraph_release(dcp_hypergraph_t *g)
{
    free(g->net_off);
    free(g->members);
    free(g->weight);
    *g = (dcp_hypergraph_t){0};
}

dcp_status_t dcp_hypergraph_build(const dcp_blocks_t *b, dcp_hypergraph_t *g)
{
    const int32_t nb = b->num_blocks, hb = b->head_blocks, nk = dcp_blocks_kinds(b);
    *g = (dcp_hypergraph_t){.num_blocks = nb,
                            .head_blocks = hb,
                            .num_sides = 2 * nk,
                            .num_comps = b->num_tiles * hb,
                            .num_nets = 2 * (int64_t)nk * nb * hb};
    dcp_status_t st;
    int64_t *fill = NULL;
    DCP_CHECK_GOTO(dcp_calloc(&g->net_off, g->num_nets + 1, sizeof(int64_t), "hypergraph"), st,
                   err);
    DCP_CHECK_GOTO(dcp_calloc(&g->members, g->num_sides * g->num_comps, sizeof(int64_t),
                              "hypergraph"),
                   st, err);
    DCP_CHECK_GOTO(dcp_calloc(&g->weight, g->num_nets, sizeof(int64_t), "hypergraph"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&fill, g->num_nets, sizeof(int64_t), "hypergraph"), st, err);
    for (int64_t c = 0; c < g->num_comps; c++) {
        int64_t nets[DCP_MAX_COMP_NETS];
        const int n = dcp_comp_nets(b, c, nets);
        for (int k = 0; k < n; k++) g->net_off[nets[k] + 1]++;
    }
    for (int64_t e = 0; e < g->num_nets; e++) g->net_off[e + 1] += g->net_off[e];
    /* tiles are sorted by (q, kv): Q nets fill in KV order, KV nets in Q order */
    for (int64_t c = 0; c < g->num_comps; c++) {
        int64_t nets[DCP_MAX_COMP_NETS];
        const int n = dcp_comp_nets(b, c, nets);
        for (int k = 0; k < n; k++) g->members[g->net_off[nets[k]] + fill[nets[k]]++] = c;
    }
    for (int32_t side = 0; side < g->num_sides; side++)
        for (int32_t t = 0; t < nb; t++)
            for (int32_t h = 0; h < hb; h++) {
                const int64_t bytes = dcp_blocks_net_bytes(b, side % 2 == 0, b->blk_len[t]);
                const int64_t layers = nk > 1 ? b->kind_layers[side / 2] : 1;
                g->weight[dcp_blk_net(g, side, t, h)] = layers * bytes;
            }
    free(fill);
    return DCP_OK;
err:
    free(fill);
    dcp_hypergraph_release(g);
    return st;
}

dcp_status_t dcp_hypergraph_traffic(const dcp_hypergraph_t *g, const int32_t *blk_owner,
                                    const int32_t *comp_exec, int32_t num_ranks,
                                    int32_t devs_per_node, int64_t *total_out, int64_t *inter_out)
{
    /* seen[r] == e + 1 marks rank r as already counted for net e */
    int64_t *seen = NULL;
    DCP_CHECK(dcp_calloc(&seen, num_ranks, sizeof *seen, "traffic"));
    int64_t total = 0, inter = 0;
    for (int64_t e = 0; e < g->num_nets; e++) {
        const int32_t o = blk_owner[dcp_net_block(g, e)];
        seen[o] = e + 1;
        for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++) {
            const int32_t r = comp_exec[g->members[i]];
            if (seen[r] == e + 1) continue;
            seen[r] = e + 1;
            total += g->weight[e];
            if (r / devs_per_node != o / devs_per_node) inter += g->weight[e];
        }
    }
    free(seen);
    *total_out = total;
    *inter_out = inter;
    return DCP_OK;
}
