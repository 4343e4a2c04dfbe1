/*
 * Owners spread over the network links of their node (dcp_place_spread_links, place.h).
 *
 * Between nodes a block leaves its owner's node once per other node that reads it (relays,
 * schedule.h), through its owner's network link, and its partials come back the same way:
 * a token block's heat is the bytes of its nets times the other nodes reading them. Heat
 * gathers where METIS puts a long sequence's hot blocks - its first KV blocks under a causal
 * mask, a shared question read by every answer - and one link of a node can carry several
 * times what its neighbours carry, so the step waits on it. Moving a block to another rank of
 * the same node changes no byte between nodes, nor any rank's FLOPs; swapping it with a block
 * of the same length keeps every rank's owned bytes. So, node by node, the hottest block of
 * the busiest link swaps with the coldest block of the same length on the least busy one,
 * while that lowers the busier of the two.
 */
#include "include/base/error.h"
#include "partition/model/hypergraph.h"
#include "partition/place/place.h"

#include <stdlib.h>
#include <string.h>

/* Above this many (net, node) cells the pass is skipped (a bitmap of them is kept). */
#define SPREAD_MAX_CELLS ((int64_t)64 << 20)

typedef struct {
    const dcp_blocks_t *b;
    const dcp_cluster_t *c;
    dcp_placement_t *pl;
    int32_t nics, devs;
    double *heat; /* [num_blocks] */
    double *load; /* [nodes * nics] */
} spread_t;

static int32_t nic_of(const spread_t *s, int32_t r)
{
    return r / s->devs * s->nics + (r % s->devs) * s->nics / s->devs;
}

/* Each block's heat: per net, its bytes times the nodes other than the owner's that read it. */
static dcp_status_t block_heat(spread_t *s)
{
    const dcp_blocks_t *b = s->b;
    const int32_t nodes = s->c->num_nodes;
    dcp_hypergraph_t g;
    DCP_CHECK(dcp_hypergraph_build(b, &g));
    uint8_t *seen = NULL;
    dcp_status_t st = dcp_calloc(&seen, nodes, 1, "link spread");
    for (int64_t e = 0; e < g.num_nets && st == DCP_OK; e++) {
        const int32_t t = dcp_net_block(&g, e), home = s->pl->blk_owner[t] / s->devs;
        memset(seen, 0, (size_t)nodes);
        int32_t far = 0;
        for (int64_t i = g.net_off[e]; i < g.net_off[e + 1]; i++) {
            const int32_t n = s->pl->comp_exec[g.members[i]] / s->devs;
            if (n == home || seen[n]) continue;
            seen[n] = 1;
            far++;
        }
        s->heat[t] += (double)g.weight[e] * far;
    }
    free(seen);
    dcp_hypergraph_release(&g);
    return st;
}

/* The coldest block of length `len` owned on link `nic` among blocks[0..n), or -1. */
static int32_t coldest(const spread_t *s, const int32_t *blocks, int32_t n, int32_t nic,
                       int32_t len)
{
    int32_t u = -1;
    for (int32_t j = 0; j < n; j++) {
        const int32_t v = blocks[j];
        if (nic_of(s, s->pl->blk_owner[v]) != nic || s->b->blk_len[v] != len) continue;
        if (u < 0 || s->heat[v] < s->heat[u]) u = v;
    }
    return u;
}

/* One swap on the node of blocks[0..n) that lowers its busiest link: the hottest of that
 * link's blocks (of the TRIES hottest) that has a colder partner of its length on the least
 * busy link, swapped with the coldest such. Returns 1 when one is made. */
enum { TRIES = 4 };

static int swap_once(spread_t *s, int32_t node, const int32_t *blocks, int32_t n)
{
    int32_t hi = node * s->nics, lo = hi;
    for (int32_t k = node * s->nics; k < (node + 1) * s->nics; k++) {
        if (s->load[k] > s->load[hi]) hi = k;
        if (s->load[k] < s->load[lo]) lo = k;
    }
    double below = -1; /* heat of the last block tried: the next is the hottest under it */
    for (int try = 0; try < TRIES && hi != lo; try++) {
        int32_t t = -1;
        for (int32_t i = 0; i < n; i++) {
            const int32_t v = blocks[i];
            const double h = s->heat[v];
            if (nic_of(s, s->pl->blk_owner[v]) != hi || h <= 0 || (below >= 0 && h >= below))
                continue;
            if (t < 0 || h > s->heat[t]) t = v;
        }
        if (t < 0) return 0;
        below = s->heat[t];
        const int32_t u = coldest(s, blocks, n, lo, s->b->blk_len[t]);
        if (u < 0) continue;
        const double d = s->heat[t] - s->heat[u];
        const double after = s->load[hi] - d > s->load[lo] + d ? s->load[hi] - d : s->load[lo] + d;
        if (d <= 0 || after >= s->load[hi]) continue;
        const int32_t a = s->pl->blk_owner[t];
        s->pl->blk_owner[t] = s->pl->blk_owner[u];
        s->pl->blk_owner[u] = a;
        s->load[hi] -= d;
        s->load[lo] += d;
        return 1;
    }
    return 0;
}

dcp_status_t dcp_place_spread_links(const dcp_blocks_t *b, const dcp_cluster_t *c,
                                    dcp_placement_t *pl)
{
    const int32_t devs = c->devs_per_node, nodes = c->num_nodes;
    const int32_t nics = c->nics_per_node > 0 ? c->nics_per_node : devs;
    if (nodes < 2 || nics < 2 ||
        2 * (int64_t)b->num_blocks * b->head_blocks * nodes > SPREAD_MAX_CELLS)
        return DCP_OK;
    spread_t s = {.b = b, .c = c, .pl = pl, .nics = nics, .devs = devs};
    int32_t *order = NULL, *first = NULL, *pos = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s.heat, b->num_blocks, sizeof *s.heat, "link spread"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.load, (int64_t)nodes * nics, sizeof *s.load, "link spread"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&order, b->num_blocks, sizeof *order, "link spread"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&first, nodes + 1, sizeof *first, "link spread"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&pos, nodes, sizeof *pos, "link spread"), st, out);
    DCP_CHECK_GOTO(block_heat(&s), st, out);
    /* the blocks of each node (a counting sort by node), and each link's load */
    for (int32_t t = 0; t < b->num_blocks; t++) {
        first[pl->blk_owner[t] / devs + 1]++;
        s.load[nic_of(&s, pl->blk_owner[t])] += s.heat[t];
    }
    for (int32_t n = 0; n < nodes; n++) first[n + 1] += first[n];
    for (int32_t n = 0; n < nodes; n++) pos[n] = first[n];
    for (int32_t t = 0; t < b->num_blocks; t++) order[pos[pl->blk_owner[t] / devs]++] = t;
    for (int32_t n = 0; n < nodes; n++) {
        const int32_t cnt = first[n + 1] - first[n];
        for (int32_t k = 0; k < 2 * cnt && swap_once(&s, n, order + first[n], cnt); k++) {
        }
    }
    st = DCP_OK;
out:
    free(s.heat);
    free(s.load);
    free(order);
    free(first);
    free(pos);
    return st;
}
