/* What the peer policies share (partition/place/peer.h). */
#include "partition/place/peer.h"

#include "include/base/error.h"
#include "partition/model/mask.h"

#include <stdlib.h>

double dcp_peer_pairs(const dcp_blocks_t *b, int32_t s, int32_t q0, int32_t q1)
{
    const int32_t len = b->seqs[s].len;
    if (b->num_kinds <= 1) return (double)dcp_mask_pairs(&b->seqs[s].mask, len, q0, q1, 0, len);
    double pairs = 0;
    for (int32_t k = 0; k < b->num_kinds; k++)
        pairs +=
            (double)b->kind_layers[k] *
            (double)dcp_mask_pairs(&b->kind_seqs[k * b->num_seqs + s].mask, len, q0, q1, 0, len);
    return pairs;
}

typedef struct {
    double key;
    int32_t seq;
} doc_t;

static int doc_cmp(const void *a, const void *b)
{
    const doc_t *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

dcp_status_t dcp_peer_pack(const dcp_blocks_t *b, int32_t groups, int32_t *group_of)
{
    const int32_t n = b->num_seqs;
    doc_t *docs = NULL;
    double *pairs = NULL, *load = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&docs, n, sizeof *docs, "document packing"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&pairs, n, sizeof *pairs, "document packing"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&load, 2 * (int64_t)groups, sizeof *load, "document packing"), st,
                   out);
    double tp = 0;
    for (int32_t s = 0; s < n; s++) tp += pairs[s] = dcp_peer_pairs(b, s, 0, b->seqs[s].len);
    const double tm = (double)b->total_tokens / groups, pm = tp > 0 ? tp / groups : 1;
    for (int32_t s = 0; s < n; s++) {
        const double m = b->seqs[s].len / tm, c = pairs[s] / pm;
        docs[s] = (doc_t){m > c ? m : c, s};
    }
    qsort(docs, (size_t)n, sizeof *docs, doc_cmp);
    for (int32_t i = 0; i < n; i++) {
        const int32_t s = docs[i].seq;
        int32_t best = 0;
        double best_load = 0;
        for (int32_t g = 0; g < groups; g++) {
            const double m = load[2 * g] / tm, c = load[2 * g + 1] / pm, l = m > c ? m : c;
            if (g == 0 || l < best_load) best = g, best_load = l;
        }
        group_of[s] = best;
        load[2 * best] += b->seqs[s].len;
        load[2 * best + 1] += pairs[s];
    }
    st = DCP_OK;
out:
    free(docs);
    free(pairs);
    free(load);
    return st;
}

dcp_status_t dcp_peer_zigzag(const dcp_blocks_t *b, int32_t s, const int32_t *ranks, int32_t n,
                             dcp_runs_t *runs)
{
    const int64_t len = b->seqs[s].len, chunks = 2 * (int64_t)n;
    for (int64_t c = 0; c < chunks; c++)
        DCP_CHECK(dcp_runs_push(runs, s, (int32_t)(c * len / chunks),
                                (int32_t)((c + 1) * len / chunks),
                                ranks[c < n ? c : chunks - 1 - c]));
    return DCP_OK;
}

int64_t dcp_peer_stream_tokens(const dcp_runs_t *stream)
{
    int64_t t = 0;
    for (int64_t i = 0; i < stream->n; i++) t += stream->end[i] - stream->start[i];
    return t;
}

dcp_status_t dcp_peer_pieces(const dcp_runs_t *stream, int64_t piece, dcp_runs_t *out,
                             int32_t *pieces_out)
{
    int64_t at = 0; /* stream position of the run's start */
    for (int64_t i = 0; i < stream->n; i++) {
        for (int64_t p = stream->start[i]; p < stream->end[i];) {
            const int64_t idx = (at + p - stream->start[i]) / piece;
            const int64_t edge = (idx + 1) * piece - at + stream->start[i];
            const int64_t e = edge < stream->end[i] ? edge : stream->end[i];
            DCP_CHECK(dcp_runs_push(out, stream->seq[i], (int32_t)p, (int32_t)e, (int32_t)idx));
            p = e;
        }
        at += stream->end[i] - stream->start[i];
    }
    *pieces_out = (int32_t)((at + piece - 1) / piece);
    return DCP_OK;
}

dcp_status_t dcp_peer_place_at_query(const dcp_place_in_t *in, dcp_placement_t *out)
{
    const dcp_blocks_t *b = in->blocks;
    for (int32_t t = 0; t < b->num_blocks; t++) out->blk_owner[t] = b->blk_chunk[t];
    dcp_place_at_query_owner(b, out);
    return dcp_place_check_cap(in, out);
}
