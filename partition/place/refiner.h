/*
 * A placement under refinement, shared by the balance repair (partition/place/refine.c) and the
 * FM passes (partition/place/refine_fm.c): every net's readers counted per rank, per-rank FLOPs
 * and owned bytes, the bounds moves must respect, and the exact change in link time of
 * moving one vertex.
 *
 * Cost is link time: a net owned on rank o and read on rank p != o costs weight /
 * bandwidth(o, p), with the intra- or inter-node bandwidth of the cluster model, once per
 * reading rank (connectivity, not cut edges: this is the plan's traffic exactly, per link
 * class).
 */
#ifndef DCP_PARTITION_REFINER_H
#define DCP_PARTITION_REFINER_H

#include "partition/model/hypergraph.h"
#include "partition/place/place.h"

typedef struct {
    const dcp_blocks_t *b;
    const dcp_hypergraph_t *g;
    int32_t nr, devs;
    double ib_intra, ib_inter; /* seconds per byte */
    int32_t *owner, *exec;     /* the placement being changed (borrowed) */
    int32_t *cnt;              /* [net * nr + rank]: the net's members executed on rank */
    int32_t *readers;          /* [net]: ranks with cnt > 0 */
    uint64_t *rmask;           /* [net * words + rank / 64]: bit rank % 64 set when cnt > 0 */
    int32_t words;             /* 64-bit words per net in rmask */
    int32_t kinds;             /* the model's layer kinds (partition/model/blocks.h) */
    int64_t *flops, *mem;      /* flops [kinds * nr] (kind k's at k * nr), mem [nr] */
    double bound_flops[DCP_MAX_KINDS]; /* per kind: (1 + tol) x the mean */
    double bound_mem;          /* (1 + tol) x the mean, or the memory cap if lower */
} dcp_refiner_t;

/* Dense per-(net, rank) counts cost nets x ranks integers; beyond this, no refinement. */
#define DCP_REFINE_MAX_CELLS ((int64_t)64 << 20)

/* Counts and loads of placement p (changed in place by the moves). *ok_out = 0 (and r
 * untouched) when the graph is too large to refine. */
dcp_status_t dcp_refiner_init(dcp_refiner_t *r, const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                              const dcp_place_in_t *in, double tol, dcp_placement_t *p,
                              int *ok_out);
void dcp_refiner_release(dcp_refiner_t *r);

static inline double dcp_refiner_inv_bw(const dcp_refiner_t *r, int32_t a, int32_t b)
{
    return a / r->devs == b / r->devs ? r->ib_intra : r->ib_inter;
}

static inline int32_t *dcp_refiner_cell(const dcp_refiner_t *r, int64_t net, int32_t rank)
{
    return &r->cnt[net * r->nr + rank];
}

/* The reader mask of net e (r->words words). */
static inline const uint64_t *dcp_refiner_mask(const dcp_refiner_t *r, int64_t net)
{
    return &r->rmask[net * r->words];
}

/* Kind k's FLOPs of computation block c. */
static inline int64_t dcp_refiner_comp_flops(const dcp_refiner_t *r, int64_t c, int32_t k)
{
    return dcp_blocks_kind_flops(r->b, c / r->b->head_blocks, k);
}

/* 1 when computation block c fits on rank `to` under every kind's bound. */
static inline int dcp_refiner_comp_fits(const dcp_refiner_t *r, int64_t c, int32_t to)
{
    for (int32_t k = 0; k < r->kinds; k++)
        if ((double)(r->flops[(int64_t)k * r->nr + to] + dcp_refiner_comp_flops(r, c, k)) >
            r->bound_flops[k])
            return 0;
    return 1;
}

static inline int64_t dcp_refiner_blk_bytes(const dcp_refiner_t *r, int32_t t)
{
    return dcp_blocks_token_bytes(r->b, r->b->blk_len[t]);
}

/* Change of cost (seconds) when computation block c moves from its rank to rank `to`. */
double dcp_refiner_comp_delta(const dcp_refiner_t *r, int64_t c, int32_t to);
void dcp_refiner_comp_move(dcp_refiner_t *r, int64_t c, int32_t to);

/* Cost (seconds) of token block t's nets were its owner rank o. */
double dcp_refiner_blk_cost(const dcp_refiner_t *r, int32_t t, int32_t o);
void dcp_refiner_blk_move(dcp_refiner_t *r, int32_t t, int32_t to);

/* 1 when rank `rank` reads one of token block t's nets. */
int dcp_refiner_blk_read_by(const dcp_refiner_t *r, int32_t t, int32_t rank);

#endif
