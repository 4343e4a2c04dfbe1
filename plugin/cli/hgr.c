#include "plugin/cli/hgr.h"

#include "include/base/error.h"
#include "partition/hypergraph.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static dcp_status_t write_hgr(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g)
{
    int64_t nets = 0;
    for (int64_t e = 0; e < g->num_nets; e++) nets += g->net_off[e + 1] > g->net_off[e];
    const int64_t nv = b->num_blocks + g->num_comps;
    fprintf(f,
            "%% dcp block hypergraph: %d token blocks (vertices 1..%d) and %lld computation "
            "blocks (vertices %d..%lld)\n",
            b->num_blocks, b->num_blocks, (long long)g->num_comps, b->num_blocks + 1,
            (long long)nv);
    fprintf(f, "%% net: bytes moved per extra rank it spans, then its owner token block and the "
               "computation blocks that read it\n");
    fprintf(f, "%% vertex weights: FLOPs and bytes (two balance constraints)\n");
    fprintf(f, "%lld %lld 11\n", (long long)nets, (long long)nv);
    for (int64_t e = 0; e < g->num_nets; e++) {
        if (g->net_off[e + 1] == g->net_off[e]) continue;
        fprintf(f, "%lld %d", (long long)g->weight[e], dcp_net_block(g, e) + 1);
        for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++)
            fprintf(f, " %lld", (long long)(b->num_blocks + g->members[i] + 1));
        fputc('\n', f);
    }
    for (int32_t t = 0; t < b->num_blocks; t++)
        fprintf(f, "0 %lld\n", (long long)dcp_blocks_token_bytes(b, b->blk_len[t]));
    for (int64_t c = 0; c < g->num_comps; c++)
        fprintf(f, "%lld 0\n", (long long)dcp_blocks_comp_flops(b, c / b->head_blocks));
    return ferror(f) ? dcp_set_error(DCP_ERR_SYSTEM, "hgr: write error") : DCP_OK;
}

dcp_status_t dcp_hgr_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                           const dcp_plan_options_t *opts, const char *path)
{
    dcp_blocks_t b = {0};
    dcp_hypergraph_t g = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_blocks_init(&b, batch, shape, opts->block_size, opts->head_blocks), st, out);
    DCP_CHECK_GOTO(dcp_blocks_cut(&b, 0), st, out);
    DCP_CHECK_GOTO(dcp_blocks_tiles(&b), st, out);
    DCP_CHECK_GOTO(dcp_hypergraph_build(&b, &g), st, out);
    FILE *f = fopen(path, "w");
    if (!f) {
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "hgr '%s': %s", path, strerror(errno));
        goto out;
    }
    st = write_hgr(f, &b, &g);
    if (fclose(f) != 0 && st == DCP_OK)
        st = dcp_set_error(DCP_ERR_SYSTEM, "hgr '%s': close failed", path);
out:
    dcp_hypergraph_release(&g);
    dcp_blocks_release(&b);
    return st;
}
