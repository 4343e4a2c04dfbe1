/* Call stamps (plugin/stamp.h): the exchange and the comparison. */
#include "plugin/stamp.h"

#include "include/base/error.h"
#include "partition/plan.h"
#include "plugin/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DCP_STAMP_MAGIC 0x504d5453u /* "STMP" */

static const char *const pass_name[DCP_PASS_COUNT] = {"forward", "backward"};

/* The ranks this rank stamps in `pass`: its transfer peers and its ring neighbours. */
static dcp_status_t peer_list(const dcp_plan_t *p, int32_t rank, dcp_pass_t pass,
                              int32_t **peers_out, int32_t *n_out)
{
    const int32_t R = p->num_ranks;
    uint8_t *mark = NULL;
    DCP_CHECK(dcp_calloc(&mark, R, 1, "call stamps"));
    if (R > 1) mark[(rank + 1) % R] = mark[(rank + R - 1) % R] = 1;
    for (int64_t i = dcp_plan_prog_begin(p, pass, rank); i < dcp_plan_prog_end(p, pass, rank);
         i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_COMM_LAUNCH) continue;
        for (int64_t k = 0; k < in->count; k++) mark[p->comm[in->first + k].peer] = 1;
    }
    mark[rank] = 0;
    int32_t n = 0;
    for (int32_t r = 0; r < R; r++) n += mark[r];
    int32_t *peers = NULL;
    const dcp_status_t st = dcp_calloc(&peers, n, sizeof *peers, "call stamps");
    for (int32_t r = 0, k = 0; st == DCP_OK && r < R; r++)
        if (mark[r]) peers[k++] = r;
    free(mark);
    if (st != DCP_OK) return st;
    *peers_out = peers;
    *n_out = n;
    return DCP_OK;
}

static void lists_free(dcp_stamps_t *s)
{
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        free(s->peers[pass]);
        s->peers[pass] = NULL;
        s->npeers[pass] = 0;
    }
    s->serial = 0;
}

/* The peer lists of plan p (kept while the context runs it) and room for one exchange. */
static dcp_status_t bind(dcp_stamps_t *s, const dcp_plan_t *p, int32_t rank)
{
    /* the layer kinds of a plan share its serial, not its peers */
    if (s->serial == p->serial && s->kind == p->kind) return DCP_OK;
    lists_free(s);
    int32_t most = 0;
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        DCP_CHECK(peer_list(p, rank, (dcp_pass_t)pass, &s->peers[pass], &s->npeers[pass]));
        if (s->npeers[pass] > most) most = s->npeers[pass];
    }
    if (most > s->cap) {
        free(s->theirs);
        free(s->ops);
        s->theirs = NULL;
        s->ops = NULL;
        s->cap = 0;
        DCP_CHECK(dcp_calloc(&s->theirs, most, sizeof *s->theirs, "call stamps"));
        DCP_CHECK(dcp_calloc(&s->ops, 2 * (int64_t)most, sizeof *s->ops, "call stamps"));
        s->cap = most;
    }
    s->serial = p->serial;
    s->kind = p->kind;
    return DCP_OK;
}

dcp_status_t dcp_stamps_launch(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               float scale, uint32_t flags)
{
    dcp_stamps_t *s = &ctx->stamps;
    DCP_CHECK(bind(s, p, ctx->rank));
    uint32_t checksum;
    DCP_CHECK(dcp_plan_checksum(p, &checksum));
    s->mine = (dcp_stamp_t){DCP_STAMP_MAGIC, checksum, ctx->calls, (int32_t)pass,
                            ctx->rank,       scale,    flags};
    const int32_t n = s->npeers[pass];
    if (n == 0) return DCP_OK;
    memset(s->theirs, 0, (size_t)n * sizeof *s->theirs);
    for (int32_t k = 0; k < n; k++) {
        const int32_t peer = s->peers[pass][k];
        s->ops[2 * k] = (dcp_xfer_op_t){
            peer, 1, DCP_TAG_STAMP | (uint32_t)ctx->rank, &s->mine, sizeof s->mine, NULL, NULL};
        s->ops[2 * k + 1] = (dcp_xfer_op_t){
            peer, 0,   DCP_TAG_STAMP | (uint32_t)peer, &s->theirs[k], sizeof s->theirs[k],
            NULL, NULL};
    }
    DCP_CHECK(ctx->engine->ops->launch(ctx->engine, s->ops, 2 * (int64_t)n, &s->req));
    s->n = n;
    return DCP_OK;
}

/* The difference between two stamps, named from the lower rank's side. */
static dcp_status_t differ(const dcp_stamp_t *a, const dcp_stamp_t *b)
{
    if (a->rank > b->rank) {
        const dcp_stamp_t *t = a;
        a = b;
        b = t;
    }
    const char *what = a->checksum != b->checksum ? "plans differ" : "calls differ";
    return dcp_set_error(DCP_ERR_INVALID_ARG,
                         "%s: rank %d runs plan 0x%08x (%s, call %llu), rank %d runs plan "
                         "0x%08x (%s, call %llu); every rank must make the same calls with the "
                         "same plan",
                         what, a->rank, a->checksum, pass_name[a->pass & 1],
                         (unsigned long long)a->call, b->rank, b->checksum, pass_name[b->pass & 1],
                         (unsigned long long)b->call);
}

/* A float in the fewest digits that read back as it ("0.3", not "0.300000012"). */
static const char *scale_text(float x, char buf[24])
{
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, 24, "%.*g", digits, (double)x);
        if (strtof(buf, NULL) == x) break;
    }
    return buf;
}

dcp_status_t dcp_stamps_settle(dcp_context_t *ctx)
{
    dcp_stamps_t *s = &ctx->stamps;
    if (!s->req) return DCP_OK;
    DCP_CHECK(ctx->engine->ops->wait(ctx->engine, s->req, ctx->timeout_s, NULL));
    s->req = NULL;
    const int32_t pass = s->mine.pass;
    for (int32_t k = 0; k < s->n; k++) {
        const dcp_stamp_t *t = &s->theirs[k];
        if (t->magic == 0) continue; /* an engine that does not carry stamps (NCCL) */
        if (t->magic != DCP_STAMP_MAGIC || t->rank != s->peers[pass][k] || t->pass < 0 ||
            t->pass >= DCP_PASS_COUNT)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "call stamps: rank %d sent rank %d a stamp this build cannot "
                                 "read (another dcp version?)",
                                 s->peers[pass][k], ctx->rank);
        if (t->checksum != s->mine.checksum || t->pass != s->mine.pass || t->call != s->mine.call)
            return differ(&s->mine, t);
        if (memcmp(&t->scale, &s->mine.scale, sizeof t->scale) != 0) {
            const dcp_stamp_t *a = t->rank < s->mine.rank ? t : &s->mine,
                              *b = a == t ? &s->mine : t;
            char sa[24], sb[24];
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "softmax scales differ: rank %d computes its %s with scale %s, "
                                 "rank %d with %s; every rank must give the same softmax_scale",
                                 a->rank, pass_name[pass & 1], scale_text(a->scale, sa), b->rank,
                                 scale_text(b->scale, sb));
        }
        if (t->flags != s->mine.flags) {
            const dcp_stamp_t *asks = t->flags & DCP_STAMP_MAX_LOGIT ? t : &s->mine,
                              *other = asks == t ? &s->mine : t;
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "max logit: rank %d asks for it (io.max_logit), rank %d does "
                                 "not; every rank of a call passes one, or none",
                                 asks->rank, other->rank);
        }
    }
    return DCP_OK;
}

void dcp_stamps_cancel(dcp_context_t *ctx)
{
    ctx->engine->ops->cancel(ctx->engine, ctx->stamps.req);
    ctx->stamps.req = NULL;
}

void dcp_stamps_free(dcp_stamps_t *s)
{
    lists_free(s);
    free(s->theirs);
    free(s->ops);
    memset(s, 0, sizeof *s);
}
