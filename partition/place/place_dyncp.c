/*
 * Megatron-LM's dynamic context parallelism (--dynamic-context-parallel with
 * --sequence-packing-scheduler default_dynamic_cp; megatron/core/datasets/data_schedule.py,
 * DefaultDynamicCPScheduler, and data_schedule_utils.py: dcp_gpus_needed,
 * dcp_get_total_workload, dcp_make_buckets_equal, next_hdp_group; the same rule as the
 * earlier "hybrid" context parallelism's BalancedCPScheduler). With M the most tokens per rank
 * (options.strategy_arg, max_seqlen_per_dp_cp_rank; default the batch's tokens over the ranks):
 *  - a document of L tokens needs the power of two >= ceil(L / M) ranks (at most all), and
 *    weighs L^2 / (its ranks);
 *  - documents sorted longest first are cut into as many consecutive buckets as there are
 *    distinct rank counts, a bucket closing once it would pass 1.1 x the mean bucket's work
 *    (or to leave a document for every bucket still to come);
 *  - a group (one microbatch over all ranks) is filled document by document: the first
 *    bucket's next document that has a place goes to the least loaded existing set of ranks
 *    of its size, or to a new set of the least loaded free ranks where that set's load is
 *    lower; once a smaller size than the first document's has been placed, the group closes
 *    as soon as the ranks are within 5% of the busiest, with documents left;
 *  - the busiest set gives back its last document while that narrows the spread; ranks still
 *    empty take work by doubling the smallest set (its ranks' work moved up, as the
 *    scheduler's fill_empty_gpus does);
 *  - groups repeat on the documents left. Every document is then zigzagged (2n chunks) over
 *    the n ranks that hold it, as TransformerEngine's THD context parallelism splits it.
 * Megatron runs the groups one after another with a barrier between them; dcp runs them in
 * one plan, so a rank's work is the sum of its groups' and none waits at a barrier (the
 * policy gains from that). Where doubling a set would drop work of ranks past the first empty
 * one (Megatron asserts there), those ranks stay empty.
 */
#include "partition/place/peer.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BALANCE_SLACK 0.05 /* next_hdp_group's delta */
#define BUCKET_SLACK  1.1  /* make_buckets_equal's 1.1 x target */

static dcp_status_t dyncp_resolve(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                  const dcp_cluster_t *c, dcp_plan_options_t *o)
{
    (void)shape;
    if (o->strategy_arg) return DCP_OK;
    int64_t tokens = 0;
    for (int32_t s = 0; s < batch->num_seqs; s++) tokens += batch->lengths[s];
    const int64_t m = (tokens + c->num_ranks - 1) / c->num_ranks;
    o->strategy_arg = m > 0 ? (int32_t)m : 1;
    return DCP_OK;
}

typedef struct {
    int32_t id, len;
} sample_t;

/* One scheduling pass: the samples still to place and the state of the group being filled. */
typedef struct {
    int32_t nr;  /* ranks */
    int64_t max; /* M */
    int32_t n;   /* samples of this pass */
    sample_t *list;
    int32_t *lo, *hi, nb; /* buckets: list[lo[k] .. hi[k]) left, lo advancing */
    /* per rank: the samples of this group (ids, in order), their load, its set */
    int32_t *mb, *mb_n;
    double *exec;
    int32_t *set_of;
    /* sets of ranks in creation order: size, members */
    int32_t nsets, *set_size, *members; /* members[set * nr + i] */
    /* scratch */
    int32_t *free_r;
    double *tmp;
} pass_t;

static int32_t gpus_needed(const pass_t *p, int32_t len)
{
    const int64_t need = (len + p->max - 1) / p->max;
    int64_t g = 1;
    while (g < need) g *= 2;
    return g < p->nr ? (int32_t)g : p->nr;
}

static double workload(const pass_t *p, int32_t len, int32_t ranks)
{
    return (double)len * (double)len / (ranks > 0 ? ranks : gpus_needed(p, len));
}

/* dcp_make_buckets_equal: list[0..n) in consecutive buckets. */
static void make_buckets(pass_t *p)
{
    int32_t k = 0;
    double total = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const int32_t g = gpus_needed(p, p->list[i].len);
        int seen = 0;
        for (int32_t j = 0; j < i && !seen; j++) seen = gpus_needed(p, p->list[j].len) == g;
        k += !seen;
        total += workload(p, p->list[i].len, 0);
    }
    const double target = total / k;
    int32_t remaining = k, start = 0, cur = 0;
    double cur_work = 0;
    p->nb = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const double w = workload(p, p->list[i].len, 0);
        if (cur && (cur_work + w > target * BUCKET_SLACK || p->n - i <= remaining - p->nb)) {
            p->lo[p->nb] = start, p->hi[p->nb] = i, p->nb++;
            remaining--;
            start = i, cur = 0, cur_work = 0;
        }
        cur++;
        cur_work += w;
    }
    if (cur) p->lo[p->nb] = start, p->hi[p->nb] = p->n, p->nb++;
}

static int any_left(const pass_t *p)
{
    for (int32_t k = 0; k < p->nb; k++)
        if (p->lo[k] < p->hi[k]) return 1;
    return 0;
}

static double max_of(const double *v, int32_t n, int32_t *at)
{
    int32_t a = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[a]) a = i;
    if (at) *at = a;
    return v[a];
}

static double min_of(const double *v, int32_t n)
{
    double m = v[0];
    for (int32_t i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* Free ranks sorted by load (stable: by rank on ties) into p->free_r; their count. */
static int32_t free_ranks(pass_t *p)
{
    int32_t n = 0;
    for (int32_t r = 0; r < p->nr; r++) {
        if (p->set_of[r] >= 0) continue;
        int32_t j = n++;
        while (j > 0 && p->exec[p->free_r[j - 1]] > p->exec[r]) {
            p->free_r[j] = p->free_r[j - 1];
            j--;
        }
        p->free_r[j] = r;
    }
    return n;
}

static int32_t count_free(const pass_t *p)
{
    int32_t n = 0;
    for (int32_t r = 0; r < p->nr; r++) n += p->set_of[r] < 0;
    return n;
}

static int has_set_of(const pass_t *p, int32_t size)
{
    for (int32_t g = 0; g < p->nsets; g++)
        if (p->set_size[g] == size) return 1;
    return 0;
}

/* Steps 1-4 of next_hdp_group: fills the group until no document has a place or it is
 * balanced. */
static void fill_group(pass_t *p)
{
    int32_t first_needed = -1;
    int check_balance = 0;
    while (any_left(p)) {
        int32_t k = -1, needed = 0;
        for (int32_t j = 0; j < p->nb && k < 0; j++) {
            if (p->lo[j] == p->hi[j]) continue;
            needed = gpus_needed(p, p->list[p->lo[j]].len);
            if (has_set_of(p, needed) || count_free(p) >= needed) k = j;
        }
        if (k < 0) break;
        const sample_t smp = p->list[p->lo[k]];
        if (first_needed < 0) first_needed = needed;
        int32_t best = -1;
        double best_load = INFINITY;
        for (int32_t g = 0; g < p->nsets; g++) {
            if (p->set_size[g] != needed) continue;
            double load = 0;
            for (int32_t i = 0; i < needed; i++)
                load = fmax(load, p->exec[p->members[g * p->nr + i]]);
            if (load < best_load) best = g, best_load = load;
        }
        const int32_t nfree = free_ranks(p);
        if (nfree >= needed && p->exec[p->free_r[needed - 1]] < best_load) {
            best = p->nsets++;
            p->set_size[best] = needed;
            for (int32_t i = 0; i < needed; i++) {
                p->members[best * p->nr + i] = p->free_r[i];
                p->set_of[p->free_r[i]] = best;
            }
        }
        const double cost = workload(p, smp.len, 0);
        for (int32_t i = 0; i < needed; i++) {
            const int32_t r = p->members[best * p->nr + i];
            p->mb[r * p->n + p->mb_n[r]++] = smp.id;
            p->exec[r] += cost;
        }
        p->lo[k]++;
        if (needed < first_needed) check_balance = 1;
        const double hi = max_of(p->exec, p->nr, NULL);
        if (check_balance && any_left(p) && hi - min_of(p->exec, p->nr) <= BALANCE_SLACK * hi)
            break;
    }
}

/* trim_overload: the busiest set gives back its last document while that narrows the spread;
 * given-back documents are appended to left[] (*nleft). */
static void trim(pass_t *p, const int32_t *len_of, sample_t *left, int32_t *nleft)
{
    for (;;) {
        int32_t r;
        const double hi = max_of(p->exec, p->nr, &r), lo = min_of(p->exec, p->nr);
        if (hi - lo <= BALANCE_SLACK * hi || lo == 0 || p->mb_n[r] <= 1) return;
        const int32_t g = p->set_of[r], id = p->mb[r * p->n + p->mb_n[r] - 1];
        const double cost = workload(p, len_of[id], 0);
        memcpy(p->tmp, p->exec, (size_t)p->nr * sizeof *p->tmp);
        for (int32_t i = 0; i < p->set_size[g]; i++) p->tmp[p->members[g * p->nr + i]] -= cost;
        if (max_of(p->tmp, p->nr, NULL) - min_of(p->tmp, p->nr) >= hi - lo) return;
        for (int32_t i = 0; i < p->set_size[g]; i++) {
            const int32_t m = p->members[g * p->nr + i];
            p->mb_n[m]--;
            p->exec[m] -= cost;
        }
        left[(*nleft)++] = (sample_t){id, len_of[id]};
    }
}

/* One step of fill_empty_gpus: the first set of the smallest size doubles into the ranks after
 * it, their work moving up. 0 when no step is possible (no empty rank, or work would be lost). */
static int widen(pass_t *p, const int32_t *len_of, int32_t *mb2, int32_t *n2, double *e2)
{
    int32_t empty = -1;
    for (int32_t r = 0; r < p->nr && empty < 0; r++)
        if (!p->mb_n[r]) empty = r;
    if (empty < 0 || !p->nsets) return 0;
    int32_t g = 0;
    for (int32_t j = 1; j < p->nsets; j++)
        if (p->set_size[j] < p->set_size[g]) g = j;
    const int32_t size = p->set_size[g], next = 2 * size < p->nr ? 2 * size : p->nr;
    const int32_t add = next - size, gs = p->members[g * p->nr],
                  ge = p->members[g * p->nr + size - 1];
    if (add <= 0) return 0;
    const int32_t push_from = ge + 1, push_n = empty > ge ? empty - push_from : 0;
    if (ge + add + push_n >= p->nr) return 0; /* past the last rank */
    for (int32_t r = push_from + push_n; r < p->nr; r++)
        if (p->mb_n[r]) return 0; /* its work would be dropped */
    memset(n2, 0, (size_t)p->nr * sizeof *n2);
    memset(e2, 0, (size_t)p->nr * sizeof *e2);
    for (int32_t r = 0; r < gs; r++) {
        n2[r] = p->mb_n[r];
        e2[r] = p->exec[r];
        memcpy(mb2 + r * p->n, p->mb + r * p->n, (size_t)p->mb_n[r] * sizeof *mb2);
    }
    for (int32_t r = gs; r <= ge + add; r++) {
        n2[r] = p->mb_n[ge];
        e2[r] = workload(p, len_of[p->mb[ge * p->n]], next);
        memcpy(mb2 + r * p->n, p->mb + ge * p->n, (size_t)p->mb_n[ge] * sizeof *mb2);
    }
    for (int32_t i = 0; i < push_n; i++) {
        const int32_t from = push_from + i, to = ge + add + 1 + i;
        n2[to] = p->mb_n[from];
        e2[to] = p->exec[from];
        memcpy(mb2 + to * p->n, p->mb + from * p->n, (size_t)p->mb_n[from] * sizeof *mb2);
    }
    memcpy(p->mb, mb2, (size_t)p->nr * p->n * sizeof *mb2);
    memcpy(p->mb_n, n2, (size_t)p->nr * sizeof *n2);
    memcpy(p->exec, e2, (size_t)p->nr * sizeof *e2);
    p->set_size[g] = next;
    for (int32_t i = 0; i < next; i++) p->members[g * p->nr + i] = gs + i;
    for (int32_t j = g + 1; j < p->nsets; j++)
        for (int32_t i = 0; i < p->set_size[j]; i++) p->members[j * p->nr + i] += add;
    return 1;
}

/* next_hdp_group on list[0..n): the group's samples per rank into p->mb; the documents left
 * for later groups into left[] (*nleft). */
static void next_group(pass_t *p, const int32_t *len_of, sample_t *left, int32_t *nleft,
                       int32_t *mb2, int32_t *n2, double *e2)
{
    for (int32_t r = 0; r < p->nr; r++) p->mb_n[r] = 0, p->exec[r] = 0, p->set_of[r] = -1;
    p->nsets = 0;
    make_buckets(p);
    fill_group(p);
    *nleft = 0;
    for (int32_t k = 0; k < p->nb; k++)
        for (int32_t i = p->lo[k]; i < p->hi[k]; i++) left[(*nleft)++] = p->list[i];
    trim(p, len_of, left, nleft);
    while (widen(p, len_of, mb2, n2, e2)) {
    }
}

static int sample_cmp(const void *a, const void *b)
{
    const sample_t *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id); /* Python's sort is stable */
}

/* Every document's ranks: rank_of[s * nr + i] for i < nranks[s], ascending. */
static dcp_status_t schedule(const dcp_blocks_t *b, int32_t nr, int64_t max, int32_t *rank_of,
                             int32_t *nranks)
{
    const int32_t n = b->num_seqs;
    pass_t p = {.nr = nr, .max = max, .n = n};
    int32_t *len_of = NULL, *mb2 = NULL, *n2 = NULL;
    double *e2 = NULL;
    sample_t *left = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&p.list, n, sizeof *p.list, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&left, n, sizeof *left, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&len_of, n, sizeof *len_of, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.lo, n, sizeof *p.lo, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.hi, n, sizeof *p.hi, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.mb, (int64_t)nr * n, sizeof *p.mb, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&mb2, (int64_t)nr * n, sizeof *mb2, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.members, (int64_t)nr * nr, sizeof *p.members, "dyncp"), st, out);
    int32_t **small[5] = {&p.mb_n, &p.set_of, &p.set_size, &p.free_r, &n2};
    for (int i = 0; i < 5; i++)
        DCP_CHECK_GOTO(dcp_calloc(small[i], nr, sizeof(int32_t), "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.exec, nr, sizeof *p.exec, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&p.tmp, nr, sizeof *p.tmp, "dyncp"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e2, nr, sizeof *e2, "dyncp"), st, out);
    for (int32_t s = 0; s < n; s++) {
        len_of[s] = b->seqs[s].len;
        p.list[s] = (sample_t){s, len_of[s]};
        nranks[s] = 0;
    }
    qsort(p.list, (size_t)n, sizeof *p.list, sample_cmp);
    while (p.n > 0) {
        int32_t nleft = 0;
        next_group(&p, len_of, left, &nleft, mb2, n2, e2);
        for (int32_t r = 0; r < nr; r++) /* ranks in increasing order: each list ascends */
            for (int32_t i = 0; i < p.mb_n[r]; i++) {
                const int32_t s = p.mb[r * p.n + i];
                rank_of[(int64_t)s * nr + nranks[s]++] = r;
            }
        memcpy(p.list, left, (size_t)nleft * sizeof *left);
        p.n = nleft;
    }
    st = DCP_OK;
    for (int32_t s = 0; s < n && st == DCP_OK; s++)
        if (!nranks[s])
            st = dcp_set_error(DCP_ERR_INTERNAL, "dyncp: sequence %d was not scheduled", s);
out:
    free(p.list), free(p.lo), free(p.hi), free(p.mb), free(p.members), free(p.mb_n);
    free(p.set_of), free(p.set_size), free(p.free_r), free(p.exec), free(p.tmp);
    free(len_of), free(mb2), free(n2), free(e2), free(left);
    return st;
}

static dcp_status_t dyncp_cut(dcp_blocks_t *b, const dcp_cluster_t *c, const dcp_plan_options_t *o)
{
    const int32_t nr = c->num_ranks;
    int32_t *rank_of = NULL, *nranks = NULL;
    dcp_runs_t runs = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&rank_of, (int64_t)b->num_seqs * nr, sizeof *rank_of, "dyncp"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&nranks, b->num_seqs, sizeof *nranks, "dyncp"), st, out);
    DCP_CHECK_GOTO(schedule(b, nr, o->strategy_arg, rank_of, nranks), st, out);
    for (int32_t s = 0; s < b->num_seqs; s++)
        DCP_CHECK_GOTO(dcp_peer_zigzag(b, s, rank_of + (int64_t)s * nr, nranks[s], &runs), st, out);
    st = dcp_blocks_cut_runs(b, &runs);
out:
    dcp_runs_release(&runs);
    free(rank_of);
    free(nranks);
    return st;
}

const dcp_strategy_ops_t dcp_strategy_dyncp = {.id = DCP_STRATEGY_DYNCP,
                                               .place = dcp_peer_place_at_query,
                                               .resolve = dyncp_resolve,
                                               .cut = dyncp_cut};
