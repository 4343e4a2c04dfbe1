#include "partition/program/schedule.h"

#include "include/base/error.h"
#include "partition/program/rounds.h"

#include <stdlib.h>
#include <string.h>

/* One remote input or partial output a rank needs, before deduplication. */
typedef struct {
    int32_t holder, kind, block, head, div;
} need_t;

static int need_cmp(const void *a, const void *b)
{
    const need_t *x = a, *y = b;
    if (x->holder != y->holder) return x->holder < y->holder ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->block != y->block) return x->block < y->block ? -1 : 1;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    return (x->div > y->div) - (x->div < y->div);
}

static int bits_for(int32_t max)
{
    int n = 0;
    while (n < 31 && ((int64_t)1 << n) <= max) n++;
    return n;
}

/* Sorts needs into need_cmp's order. Their fields are non-negative and usually fit one 64-bit
 * key, which an LSD radix sort orders in linear time (planning a long sequence sorts millions
 * of needs); otherwise, or without memory for the keys, qsort. The order is the same. */
static void sort_needs(need_t *needs, int64_t n)
{
    int32_t max[5] = {0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) {
        const int32_t f[5] = {needs[i].holder, needs[i].kind, needs[i].block, needs[i].head,
                              needs[i].div};
        for (int k = 0; k < 5; k++) max[k] = f[k] > max[k] ? f[k] : max[k];
    }
    int w[5], total = 0;
    for (int k = 0; k < 5; k++) total += w[k] = bits_for(max[k]);
    uint64_t *key = NULL, *tmp = NULL;
    if (total <= 64 && n > 1 && dcp_calloc(&key, n, sizeof *key, "needs sort") == DCP_OK)
        (void)dcp_calloc(&tmp, n, sizeof *tmp, "needs sort");
    if (!tmp) {
        free(key);
        if (n > 1) qsort(needs, (size_t)n, sizeof *needs, need_cmp);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const uint64_t f[5] = {(uint64_t)needs[i].holder, (uint64_t)needs[i].kind,
                               (uint64_t)needs[i].block, (uint64_t)needs[i].head,
                               (uint64_t)needs[i].div};
        uint64_t k = 0;
        for (int j = 0; j < 5; j++) k = k << w[j] | f[j];
        key[i] = k;
    }
    enum { DIGIT = 11, BINS = 1 << DIGIT };
    int64_t *count = NULL;
    if (dcp_calloc(&count, BINS, sizeof *count, "needs sort") != DCP_OK) {
        free(key);
        free(tmp);
        qsort(needs, (size_t)n, sizeof *needs, need_cmp);
        return;
    }
    for (int shift = 0; shift < total; shift += DIGIT) {
        memset(count, 0, BINS * sizeof *count);
        for (int64_t i = 0; i < n; i++) count[(key[i] >> shift) & (BINS - 1)]++;
        int64_t sum = 0;
        for (int d = 0; d < BINS; d++) {
            const int64_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) tmp[count[(key[i] >> shift) & (BINS - 1)]++] = key[i];
        uint64_t *swap = key;
        key = tmp;
        tmp = swap;
    }
    for (int64_t i = 0; i < n; i++) {
        uint64_t k = key[i];
        int32_t f[5];
        for (int j = 4; j >= 0; j--) {
            f[j] = (int32_t)(k & (((uint64_t)1 << w[j]) - 1));
            k >>= w[j];
        }
        needs[i] = (need_t){f[0], f[1], f[2], f[3], f[4]};
    }
    free(count);
    free(key);
    free(tmp);
}

static int xfer_cmp(const void *a, const void *b)
{
    const dcp_transfer_t *x = a, *y = b;
    const int32_t kx[6] = {x->phase, x->src, x->dst, x->kind, x->block, x->head_group};
    const int32_t ky[6] = {y->phase, y->src, y->dst, y->kind, y->block, y->head_group};
    for (int i = 0; i < 6; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* Sort keys for one rank's computation blocks. */
typedef struct {
    int64_t comp;
    int32_t key[6];
} comp_key_t;

static int comp_key_cmp(const void *a, const void *b)
{
    const comp_key_t *x = a, *y = b;
    for (int i = 0; i < 6; i++)
        if (x->key[i] != y->key[i]) return x->key[i] < y->key[i] ? -1 : 1;
    return (x->comp > y->comp) - (x->comp < y->comp);
}

/* Local divisions of a schedule of `ndiv` before the remote ones: 0 (none) with one
 * division, 1 with two, else 2 - so that an input forwarded through a hub has a step to
 * reach the hub in and one to reach the other readers in before the first remote
 * division. */
static int32_t local_head(int32_t ndiv)
{
    return ndiv >= 3 ? 2 : ndiv - 1;
}

/* Local divisions after the remote ones: one from 5 divisions on, so that the partials of
 * the last remote division leave while it computes (measured on 8x8 h100-ib, 256K tokens:
 * a second one gained nothing). */
static int32_t local_tail(int32_t ndiv)
{
    return ndiv >= 5 ? 1 : 0;
}

/* The share of a rank's local FLOPs that its tail computes. Half: the 32 batches of
 * tests/perf/overlap_bench.sh at 8x8 h100-ib sum to 438.1 ms of simulated steps with a third
 * (an even split over the three local divisions), 437.3 with 0.4, 436.2 with half, 436.0
 * with 0.6 and 441.4 with a fifth. Half made every row's step / compute better or equal and
 * every cluster's steps shorter; lambda exposes more of a shorter step. (Before the waits
 * after a division, half gained less, 446 -> 444 ms: ranks waited for their partials before
 * the tail then.) */
#define LOCAL_TAIL_SHARE 0.5

/* The tail's share with DCP_ORDER_LONG_TAIL (alone, 0.7 made the cuDNN-rate blockwise batches
 * of partition/README.md's comparison at 8x8 h100-ib expose less, some causal ones longer). */
#define LONG_TAIL_SHARE 0.7

/* Remote blocks that read only inside the rank's node: the first half of their FLOPs come
 * before the blocks that read from other nodes, the rest after them. With
 * DCP_ORDER_LONG_TAIL, the forward's blocks that read from other nodes and return no partial
 * there come last (REMOTE_FAR_INPUT). */
enum { REMOTE_NEAR_FIRST = 0, REMOTE_FAR = 1, REMOTE_NEAR_LAST = 2, REMOTE_FAR_INPUT = 3 };

/* Assigns divisions to the blocks of one rank (keys[0..n)) of schedule s (its pass, division
 * count and order) and leaves them ordered by (division, q block, head, kv block).
 * `devs_per_node` ranks make a node. */
static void assign_divisions(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t rank,
                             int32_t devs_per_node, dcp_order_t order, dcp_schedule_t *s,
                             comp_key_t *keys, int64_t n)
{
    const int32_t ndiv = s->num_divs, hb = b->head_blocks, head = local_head(ndiv),
                  tail = local_tail(ndiv);
    const int32_t nloc = head + tail, node = rank / devs_per_node;
    const int long_tail = order == DCP_ORDER_LONG_TAIL;
    const double tail_share = long_tail ? LONG_TAIL_SHARE : LOCAL_TAIL_SHARE;
    int32_t *comp_div = s->comp_div;
    /* Pass 1: remote blocks sorted by where their inputs come from, then by the remote input
     * they read (KV first, then Q). Those that read from other nodes take the middle remote
     * divisions: the first remote division's inputs then come over the node's fast links
     * while the local head computes, and the last one's partials go back over them while
     * the tail computes (8x8 h100-ib, tests/perf/overlap_bench.sh: 435 -> 433 ms in sum). */
    double remote_flops = 0, local_flops = 0, near_flops = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = keys[i].comp, t = c / hb;
        const int32_t q = b->tile_q[t], kv = b->tile_kv[t];
        const int32_t q_owner = p->blk_owner[q], kv_owner = p->blk_owner[kv];
        const int q_remote = q_owner != rank, kv_remote = kv_owner != rank;
        const int remote = ndiv > 1 && (q_remote || kv_remote);
        const int q_far = q_remote && q_owner / devs_per_node != node;
        const int far = q_far || (kv_remote && kv_owner / devs_per_node != node);
        const int far_input = far && !q_far && long_tail && s->pass == DCP_PASS_FWD;
        const double f = (double)dcp_blocks_comp_flops(b, t);
        keys[i].key[0] = remote;
        keys[i].key[1] = far_input ? REMOTE_FAR_INPUT : far ? REMOTE_FAR : REMOTE_NEAR_FIRST;
        keys[i].key[2] = kv_remote ? kv : -1;
        keys[i].key[3] = (int32_t)(c % hb);
        keys[i].key[4] = q_remote ? q : -1;
        keys[i].key[5] = q;
        *(remote ? &remote_flops : &local_flops) += f;
        if (remote && !far) near_flops += f;
    }
    qsort(keys, (size_t)n, sizeof *keys, comp_key_cmp);
    double near_done = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!keys[i].key[0] || keys[i].key[1] != REMOTE_NEAR_FIRST) continue;
        const double f = (double)dcp_blocks_comp_flops(b, keys[i].comp / hb);
        if (near_done + f / 2 > near_flops / 2) keys[i].key[1] = REMOTE_NEAR_LAST;
        near_done += f;
    }
    qsort(keys, (size_t)n, sizeof *keys, comp_key_cmp);
    double done[2] = {0, 0};
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = keys[i].comp, t = c / hb;
        const int remote = keys[i].key[0];
        /* the block's FLOP midpoint decides its division among the remote ones (head ..
         * T - tail - 1, equal shares) or the local ones: the tail (T - 1) takes the last
         * tail_share of the local FLOPs, divisions 0 .. head - 1 equal shares of the rest */
        const double f = (double)dcp_blocks_comp_flops(b, t),
                     all = remote ? remote_flops : local_flops;
        const double mid = all > 0 ? (done[remote] + f / 2) / all : 0;
        int32_t div = 0;
        if (remote) {
            div = head + (int32_t)(mid * (ndiv - nloc));
            if (div > ndiv - tail - 1) div = ndiv - tail - 1;
        } else if (tail > 0 && mid >= 1 - tail_share) {
            div = ndiv - 1;
        } else if (head > 0) {
            div = (int32_t)(mid / (tail > 0 ? 1 - tail_share : 1) * head);
            if (div > head - 1) div = head - 1;
        }
        done[remote] += f;
        comp_div[c] = div;
    }
    /* Pass 2: execution order. */
    for (int64_t i = 0; i < n; i++) {
        const int64_t c = keys[i].comp, t = c / hb;
        keys[i].key[0] = comp_div[c];
        keys[i].key[1] = b->tile_q[t];
        keys[i].key[2] = (int32_t)(c % hb);
        keys[i].key[3] = b->tile_kv[t];
        keys[i].key[4] = 0;
        keys[i].key[5] = 0;
    }
    qsort(keys, (size_t)n, sizeof *keys, comp_key_cmp);
}

static dcp_status_t order_comps(const dcp_blocks_t *b, const dcp_placement_t *p,
                                int32_t devs_per_node, dcp_order_t order, dcp_schedule_t *s)
{
    const int64_t ncomp = b->num_tiles * b->head_blocks;
    const int32_t nr = s->num_ranks;
    DCP_CHECK(dcp_calloc(&s->rank_off, nr + 1, sizeof(int64_t), "schedule"));
    DCP_CHECK(dcp_calloc(&s->order, ncomp, sizeof(int64_t), "schedule"));
    DCP_CHECK(dcp_calloc(&s->comp_div, ncomp, sizeof(int32_t), "schedule"));
    for (int64_t c = 0; c < ncomp; c++) s->rank_off[p->comp_exec[c] + 1]++;
    for (int32_t r = 0; r < nr; r++) s->rank_off[r + 1] += s->rank_off[r];
    int64_t max_n = 0;
    for (int32_t r = 0; r < nr; r++)
        if (s->rank_off[r + 1] - s->rank_off[r] > max_n)
            max_n = s->rank_off[r + 1] - s->rank_off[r];
    comp_key_t *keys;
    DCP_CHECK(dcp_calloc(&keys, max_n, sizeof *keys, "schedule keys"));
    int64_t *fill;
    dcp_status_t st = dcp_calloc(&fill, nr, sizeof *fill, "schedule");
    if (st != DCP_OK) {
        free(keys);
        return st;
    }
    for (int64_t c = 0; c < ncomp; c++) {
        const int32_t r = p->comp_exec[c];
        s->order[s->rank_off[r] + fill[r]++] = c;
    }
    for (int32_t r = 0; r < nr; r++) {
        const int64_t n = s->rank_off[r + 1] - s->rank_off[r];
        for (int64_t i = 0; i < n; i++) keys[i].comp = s->order[s->rank_off[r] + i];
        assign_divisions(b, p, r, devs_per_node, order, s, keys, n);
        for (int64_t i = 0; i < n; i++) s->order[s->rank_off[r] + i] = keys[i].comp;
    }
    free(fill);
    free(keys);
    return DCP_OK;
}

/* What a computation block needs from other ranks in each pass: the query side of a remote
 * query block (inputs in, a partial back), the key/value side of a remote KV block. */
static const int32_t query_kinds[DCP_PASS_COUNT][4] = {
    {DCP_XFER_Q, DCP_XFER_PART, -1}, {DCP_XFER_BQ, DCP_XFER_BSTAT, DCP_XFER_DQ, -1}};
static const int32_t kv_kinds[DCP_PASS_COUNT][3] = {{DCP_XFER_KV, -1},
                                                    {DCP_XFER_KV, DCP_XFER_DKV, -1}};

static dcp_status_t collect_needs(const dcp_blocks_t *b, const dcp_placement_t *p,
                                  const dcp_schedule_t *s, need_t **needs_out, int64_t *n_out)
{
    const int64_t ncomp = b->num_tiles * b->head_blocks;
    const int32_t *qk = query_kinds[s->pass], *kk = kv_kinds[s->pass];
    need_t *needs;
    DCP_CHECK(dcp_calloc(&needs, 5 * ncomp, sizeof *needs, "transfer needs"));
    int64_t n = 0;
    for (int64_t c = 0; c < ncomp; c++) {
        const int64_t t = c / b->head_blocks;
        const int32_t r = p->comp_exec[c], h = (int32_t)(c % b->head_blocks), d = s->comp_div[c];
        const int32_t q = b->tile_q[t], kv = b->tile_kv[t];
        if (p->blk_owner[q] != r)
            for (int i = 0; qk[i] >= 0; i++) needs[n++] = (need_t){r, qk[i], q, h, d};
        if (p->blk_owner[kv] != r)
            for (int i = 0; kk[i] >= 0; i++) needs[n++] = (need_t){r, kk[i], kv, h, d};
    }
    sort_needs(needs, n);
    *needs_out = needs;
    *n_out = n;
    return DCP_OK;
}

static int same_item(const need_t *a, const need_t *b)
{
    return a->holder == b->holder && a->kind == b->kind && a->block == b->block &&
           a->head == b->head;
}

static int32_t holder_of(const dcp_transfer_t *t)
{
    return dcp_xfer_is_partial(t->kind) ? t->src : t->dst;
}

/* Phases: one per step, or the step's transfers (contiguous, sorted by step) coloured into
 * rounds and grouped `coalesce` rounds at a time. */
static dcp_status_t assign_phases(dcp_schedule_t *s, dcp_comm_schedule_t comm, int32_t coalesce)
{
    const int32_t steps = s->num_divs + 3;
    free(s->phase_first); /* a schedule phased again (relayed) */
    s->phase_first = NULL;
    DCP_CHECK(dcp_calloc(&s->phase_first, steps + 1, sizeof(int32_t), "phases"));
    int32_t *src = NULL, *dst = NULL, *colour = NULL;
    dcp_status_t st = DCP_OK;
    if (comm == DCP_COMM_ROUNDS) {
        DCP_CHECK_GOTO(dcp_calloc(&src, s->num_xfers, sizeof *src, "phases"), st, out);
        DCP_CHECK_GOTO(dcp_calloc(&dst, s->num_xfers, sizeof *dst, "phases"), st, out);
        DCP_CHECK_GOTO(dcp_calloc(&colour, s->num_xfers, sizeof *colour, "phases"), st, out);
    }
    int32_t phases = 0, i = 0;
    for (int32_t step = 0; step < steps; step++) {
        s->phase_first[step] = phases;
        const int32_t first = i;
        while (i < s->num_xfers && s->xfers[i].step == step) i++;
        if (comm != DCP_COMM_ROUNDS) {
            for (int32_t x = first; x < i; x++) s->xfers[x].phase = phases;
            phases += i > first;
            continue;
        }
        for (int32_t x = first; x < i; x++) {
            src[x - first] = s->xfers[x].src;
            dst[x - first] = s->xfers[x].dst;
        }
        int32_t rounds = 0;
        DCP_CHECK_GOTO(dcp_rounds_colour(i - first, src, dst, s->num_ranks, colour, &rounds), st,
                       out);
        for (int32_t x = first; x < i; x++)
            s->xfers[x].phase = phases + colour[x - first] / coalesce;
        phases += (rounds + coalesce - 1) / coalesce;
    }
    s->phase_first[steps] = phases;
    s->num_phases = phases;
out:
    free(src);
    free(dst);
    free(colour);
    return st;
}

/* Gives the transfers (steps set) their phases and global order, and builds the holder
 * index; `keys` has room for every transfer. */
static dcp_status_t order_transfers(dcp_schedule_t *s, need_t *keys)
{
    const int64_t nx = s->num_xfers;
    for (int64_t i = 0; i < nx; i++) s->xfers[i].phase = s->xfers[i].step;
    qsort(s->xfers, (size_t)nx, sizeof *s->xfers, xfer_cmp); /* by step: phase == step here */
    DCP_CHECK(assign_phases(s, s->comm, s->coalesce));
    qsort(s->xfers, (size_t)nx, sizeof *s->xfers, xfer_cmp);
    for (int32_t i = 0; i < s->num_xfers; i++) {
        const dcp_transfer_t *t = &s->xfers[i];
        keys[i] = (need_t){holder_of(t), t->kind, t->block, t->head_group, i};
    }
    sort_needs(keys, nx);
    for (int32_t i = 0; i < s->num_xfers; i++) s->by_holder[i] = keys[i].div;
    return DCP_OK;
}

/* Deduplicates the sorted needs into transfers (first and last division of use), gives
 * them their steps, global order and holder index. */
static dcp_status_t build_transfers(const dcp_blocks_t *b, const dcp_placement_t *p,
                                    dcp_schedule_t *s)
{
    need_t *needs;
    int64_t n;
    DCP_CHECK(collect_needs(b, p, s, &needs, &n));
    int64_t nx = 0;
    for (int64_t i = 0; i < n; i++) nx += i == 0 || !same_item(&needs[i], &needs[i - 1]);
    dcp_status_t st;
    if (nx > INT32_MAX) {
        st = dcp_set_error(DCP_ERR_UNSUPPORTED, "schedule: %lld transfers exceed 2^31 - 1",
                           (long long)nx);
        goto out;
    }
    DCP_CHECK_GOTO(dcp_calloc(&s->xfers, nx, sizeof *s->xfers, "transfers"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s->by_holder, nx, sizeof(int32_t), "transfers"), st, out);
    int64_t x = -1;
    for (int64_t i = 0; i < n; i++) {
        const need_t *e = &needs[i];
        if (i == 0 || !same_item(e, &needs[i - 1])) {
            const int32_t owner = p->blk_owner[e->block];
            const int part = dcp_xfer_is_partial(e->kind);
            s->xfers[++x] = (dcp_transfer_t){
                .src = part ? e->holder : owner,
                .dst = part ? owner : e->holder,
                .step = e->div, /* a partial's: below */
                .kind = e->kind,
                .block = e->block,
                .head_group = e->head,
                .first_div = e->div,
                .bytes = dcp_blocks_xfer_bytes(b, (dcp_xfer_kind_t)e->kind, b->blk_len[e->block]),
            };
        }
        s->xfers[x].last_div = e->div; /* needs of one item are sorted by division */
    }
    /* A partial goes back in the first launch after the division that writes it last: the
     * programs launch step d + 1 before they compute division d, so the partial of division
     * L leaves in step L + 2 and flows while later divisions compute (the last division's in
     * step T + 1, after it). */
    for (int64_t i = 0; i <= x; i++)
        if (dcp_xfer_is_partial(s->xfers[i].kind)) s->xfers[i].step = s->xfers[i].last_div + 2;
    s->num_xfers = (int32_t)nx;
    st = order_transfers(s, needs); /* the needs array is room enough for the keys */
out:
    free(needs);
    return st;
}

dcp_status_t dcp_schedule_build(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t num_ranks,
                                int32_t devs_per_node, int32_t num_divs, dcp_comm_schedule_t comm,
                                int32_t coalesce, dcp_pass_t pass, dcp_order_t order,
                                dcp_schedule_t *s)
{
    *s = (dcp_schedule_t){.num_ranks = num_ranks,
                          .num_divs = num_divs,
                          .pass = pass,
                          .comm = comm,
                          .coalesce = coalesce};
    dcp_status_t st;
    if (devs_per_node < 1 || devs_per_node > num_ranks) devs_per_node = num_ranks;
    DCP_CHECK_GOTO(order_comps(b, p, devs_per_node, order, s), st, err);
    DCP_CHECK_GOTO(build_transfers(b, p, s), st, err);
    return DCP_OK;
err:
    dcp_schedule_release(s);
    return st;
}

/* ---- relays between nodes ---------------------------------------------------------------- */

/* A transfer between nodes, keyed by (kind, block, head group, the holder's node), then
 * inputs by the division that reads them first and partials by the one that writes them
 * last, latest first, then the holder. */
typedef struct {
    int32_t key[6];
    int32_t x;
} relay_key_t;

static int relay_cmp(const void *a, const void *b)
{
    const relay_key_t *x = a, *y = b;
    for (int i = 0; i < 6; i++)
        if (x->key[i] != y->key[i]) return x->key[i] < y->key[i] ? -1 : 1;
    return 0;
}

static relay_key_t relay_key(const dcp_transfer_t *t, int32_t x, int32_t devs)
{
    const int part = dcp_xfer_is_partial(t->kind);
    return (relay_key_t){{t->kind, t->block, t->head_group, holder_of(t) / devs,
                          part ? -t->last_div : t->first_div, holder_of(t)},
                         x};
}

static int same_relay_group(const relay_key_t *x, const relay_key_t *y)
{
    return !memcmp(x->key, y->key, 4 * sizeof *x->key);
}

/* Inputs g[0..k) (sorted by first division) to holders on one node: the hub is the one
 * whose network link has received least so far among those that read it first (hop 1 arrives
 * one step before the others need it, or when the hub does); the others get it from the hub,
 * when they need it. */
static void relay_inputs(dcp_schedule_t *s, const int32_t *g, int32_t k, double *in_bytes)
{
    int32_t hub = 0;
    for (int32_t i = 1; i < k && s->xfers[g[i]].first_div == s->xfers[g[0]].first_div; i++)
        if (in_bytes[s->xfers[g[i]].dst] < in_bytes[s->xfers[g[hub]].dst]) hub = i;
    dcp_transfer_t *h = &s->xfers[g[hub]];
    int32_t step = h->first_div, keep = h->last_div;
    for (int32_t i = 0; i < k; i++) {
        if (i == hub) continue;
        dcp_transfer_t *t = &s->xfers[g[i]];
        step = t->first_div - 1 < step ? t->first_div - 1 : step;
        keep = t->first_div > keep ? t->first_div : keep;
        in_bytes[t->dst] -= (double)t->bytes;
        t->src = h->dst;
        t->hop = DCP_HOP_SECOND;
    }
    h->step = step;
    h->last_div = keep;
    h->hop = DCP_HOP_FIRST;
}

/* Partials g[0..k) (sorted by last division, latest first) from holders on one node: the
 * hub is the one whose network link has sent least among those that write last; the others
 * send theirs to it as soon as they are done, it merges them once they are there and its
 * own is done, and sends the merged partial in the next step. */
static void relay_partials(dcp_schedule_t *s, const int32_t *g, int32_t k, double *out_bytes)
{
    int32_t hub = 0;
    for (int32_t i = 1; i < k && s->xfers[g[i]].last_div == s->xfers[g[0]].last_div; i++)
        if (out_bytes[s->xfers[g[i]].src] < out_bytes[s->xfers[g[hub]].src]) hub = i;
    dcp_transfer_t *h = &s->xfers[g[hub]];
    int32_t merge = h->last_div + 1;
    for (int32_t i = 0; i < k; i++) {
        if (i == hub) continue;
        dcp_transfer_t *t = &s->xfers[g[i]];
        merge = t->step > merge ? t->step : merge; /* step: last_div + 2 */
        out_bytes[t->src] -= (double)t->bytes;
        t->dst = h->src;
        t->hop = DCP_HOP_FIRST;
    }
    h->step = merge + 1;
    h->hop = DCP_HOP_SECOND;
}

dcp_status_t dcp_schedule_relay(int32_t devs_per_node, dcp_schedule_t *s)
{
    if (s->comm != DCP_COMM_DIVISIONS || local_head(s->num_divs) < 2 || devs_per_node < 1 ||
        s->num_ranks <= devs_per_node)
        return DCP_OK;
    relay_key_t *rk = NULL;
    int32_t *g = NULL;
    double *in_bytes = NULL, *out_bytes = NULL;
    need_t *keys = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&rk, s->num_xfers + 1, sizeof *rk, "relay"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&g, s->num_xfers + 1, sizeof *g, "relay"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&in_bytes, s->num_ranks, sizeof *in_bytes, "relay"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&out_bytes, s->num_ranks, sizeof *out_bytes, "relay"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&keys, s->num_xfers + 1, sizeof *keys, "relay"), st, out);
    int32_t n = 0;
    for (int32_t i = 0; i < s->num_xfers; i++) {
        const dcp_transfer_t *t = &s->xfers[i];
        if (t->src / devs_per_node == t->dst / devs_per_node) continue;
        in_bytes[t->dst] += (double)t->bytes;
        out_bytes[t->src] += (double)t->bytes;
        rk[n++] = relay_key(t, i, devs_per_node);
    }
    qsort(rk, (size_t)n, sizeof *rk, relay_cmp);
    for (int32_t i = 0; i < n;) {
        int32_t j = i + 1;
        while (j < n && same_relay_group(&rk[i], &rk[j])) j++;
        for (int32_t k = i; k < j; k++) g[k - i] = rk[k].x;
        if (j - i >= 2) {
            if (dcp_xfer_is_partial(s->xfers[g[0]].kind))
                relay_partials(s, g, j - i, out_bytes);
            else
                relay_inputs(s, g, j - i, in_bytes);
        }
        i = j;
    }
    st = order_transfers(s, keys);
out:
    free(rk);
    free(g);
    free(in_bytes);
    free(out_bytes);
    free(keys);
    return st;
}

int32_t dcp_schedule_find(const dcp_schedule_t *s, int32_t holder, int32_t kind, int32_t block,
                          int32_t head_group)
{
    int32_t lo = 0, hi = s->num_xfers;
    const need_t want = {holder, kind, block, head_group, 0};
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        const dcp_transfer_t *t = &s->xfers[s->by_holder[mid]];
        const need_t have = {holder_of(t), t->kind, t->block, t->head_group, 0};
        const int c = need_cmp(&have, &want);
        if (c == 0) return s->by_holder[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

void dcp_schedule_release(dcp_schedule_t *s)
{
    free(s->comp_div);
    free(s->phase_first);
    free(s->rank_off);
    free(s->order);
    free(s->xfers);
    free(s->by_holder);
    *s = (dcp_schedule_t){0};
}
