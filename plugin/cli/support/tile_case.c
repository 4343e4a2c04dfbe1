#include "plugin/cli/support/tile_case.h"

#include "include/base/error.h"
#include "partition/model/mask.h"

#include <stdlib.h>
#include <string.h>

static dcp_view_t view(int32_t buf, int64_t row, int32_t width)
{
    return (dcp_view_t){.off = row * width, .stride = width, .buf = buf};
}

dcp_status_t dcpt_tile_case_build(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq,
                                  int32_t hkv, int32_t d, dcpt_tile_case_t *out)
{
    if (total < 1 || tile < 1 || hq < 1 || hkv < 1 || hq % hkv != 0 || d < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "tile case: total %d, tile %d, heads %d/%d, D %d",
                             total, tile, hq, hkv, d);
    DCP_CHECK(dcp_mask_validate(mask, total, "mask"));
    *out = (dcpt_tile_case_t){
        .seq = {total, *mask}, .total = total, .tile = tile, .hq = hq, .hkv = hkv, .d = d};
    const int64_t nb = (total + tile - 1) / tile;
    DCP_CHECK(dcp_calloc(&out->groups, nb, sizeof *out->groups, "tile case"));
    dcp_status_t st = dcp_calloc(&out->tiles, nb * nb, sizeof *out->tiles, "tile case");
    for (int64_t qb = 0; st == DCP_OK && qb < nb; qb++) {
        const int32_t q0 = (int32_t)(qb * tile), q1 = q0 + tile < total ? q0 + tile : total;
        dcp_tile_group_t *g = &out->groups[out->num_groups];
        *g = (dcp_tile_group_t){.q = view(DCP_BUF_Q, q0, hq * d),
                                .o = view(DCP_BUF_ACC_O, q0, hq * d),
                                .lse = view(DCP_BUF_ACC_LSE, q0, hq),
                                .dout = view(DCP_BUF_DO, q0, hq * d),
                                .delta = view(DCP_BUF_DELTA, q0, hq),
                                .dq = view(DCP_BUF_ACC_DQ, q0, hq * d),
                                .q_block = (int32_t)qb,
                                .q_pos = q0,
                                .q_len = q1 - q0,
                                .first_tile = (int32_t)out->num_tiles};
        for (int64_t kb = 0; kb < nb; kb++) {
            const int32_t k0 = (int32_t)(kb * tile), k1 = k0 + tile < total ? k0 + tile : total;
            const int64_t pairs = dcp_mask_pairs(mask, total, q0, q1, k0, k1);
            if (pairs == 0) continue;
            const int full = pairs == (int64_t)(q1 - q0) * (k1 - k0);
            out->tiles[out->num_tiles++] = (dcp_tile_t){.k = view(DCP_BUF_K, k0, hkv * d),
                                                        .v = view(DCP_BUF_V, k0, hkv * d),
                                                        .dk = view(DCP_BUF_ACC_DK, k0, hkv * d),
                                                        .dv = view(DCP_BUF_ACC_DV, k0, hkv * d),
                                                        .kv_block = (int32_t)kb,
                                                        .kv_pos = k0,
                                                        .kv_len = k1 - k0,
                                                        .full = full};
            out->pairs += pairs;
            out->full_tiles += full;
        }
        /* a block whose rows see nothing keeps its group: its rows get O = 0, LSE = -inf */
        g->num_tiles = (int32_t)(out->num_tiles - g->first_tile);
        out->num_groups++;
    }
    if (st != DCP_OK) dcpt_tile_case_free(out);
    return st;
}

void dcpt_tile_case_free(dcpt_tile_case_t *c)
{
    free(c->groups);
    free(c->tiles);
    c->groups = NULL;
    c->tiles = NULL;
}
