/* Call stamps (plugin/stamp.h): the exchange, its two channels and the comparison. */
#include "plugin/stamp.h"

#include "include/base/alloc.h"
#include "include/base/error.h"
#include "include/base/poll.h"
#include "include/base/test_hook.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DCP_STAMP_MAGIC 0x504d5453u /* "STMP" */

/* How long a notice may take to reach the peers before the failing rank goes on (as long as
 * the UCX engine flushes its abort notices). */
#define NOTICE_FLUSH_S 1.0

static const char *const pass_name[DCP_PASS_COUNT] = {"forward", "backward"};

static int is_ring(int32_t peer, int32_t rank, int32_t size)
{
    return size > 1 && (peer == (rank + 1) % size || peer == (rank + size - 1) % size);
}

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

/* The peer lists of plan p, kept while the context runs it. */
static dcp_status_t bind(dcp_stamps_t *s, const dcp_plan_t *p, int32_t rank)
{
    /* the layer kinds of a plan share its serial, not its peers */
    if (s->serial == p->serial && s->kind == p->kind) return DCP_OK;
    lists_free(s);
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++)
        DCP_CHECK(peer_list(p, rank, (dcp_pass_t)pass, &s->peers[pass], &s->npeers[pass]));
    s->serial = p->serial;
    s->kind = p->kind;
    return DCP_OK;
}

void dcp_stamps_init(dcp_context_t *ctx)
{
    ctx->stamps.device = !ctx->engine->host_stamps;
}

/* ---- slots ---------------------------------------------------------------------------- */

static void slot_buffers_free(dcp_context_t *ctx, dcp_stamp_slot_t *slot)
{
    if (ctx->stamps.device) {
        ctx->dev->host_free(slot->host);
        ctx->dev->free(slot->dev);
        for (int32_t i = 0; slot->done && i < 2 * slot->cap; i++)
            ctx->dev->event_destroy(slot->done[i]);
    } else {
        free(slot->host);
    }
    free(slot->done);
    free(slot->peers);
    slot->host = slot->dev = NULL;
    slot->done = NULL;
    slot->peers = NULL;
    slot->cap = 0;
}

/* Room for n peers in a slot whose last exchange is done with. */
static dcp_status_t slot_reserve(dcp_context_t *ctx, dcp_stamp_slot_t *slot, int32_t n)
{
    dcp_stamps_t *s = &ctx->stamps;
    if (s->device)
        for (int i = 0; i < 2; i++)
            if (!slot->landed[i]) DCP_CHECK(ctx->dev->event_create(ctx->device, &slot->landed[i]));
    if (slot->host && slot->cap >= n) return DCP_OK;
    slot_buffers_free(ctx, slot);
    const size_t bytes = (size_t)(1 + n) * sizeof(dcp_stamp_t);
    dcp_status_t st = DCP_OK;
    if (s->device) {
        slot->host = ctx->dev->host_alloc(bytes);
        slot->dev = ctx->dev->alloc(ctx->device, bytes);
        if (!slot->host || !slot->dev)
            st = dcp_set_error(DCP_ERR_NO_MEMORY, "call stamps: %zu bytes for %d peers", bytes, n);
    } else {
        st = dcp_calloc(&slot->host, (int64_t)n + 1, sizeof(dcp_stamp_t), "call stamps");
        slot->dev = slot->host;
    }
    if (st == DCP_OK)
        st = dcp_calloc(&slot->peers, (int64_t)n + 1, sizeof *slot->peers, "call stamps");
    if (st == DCP_OK)
        st = dcp_calloc(&slot->done, 2 * (int64_t)n + 1, sizeof *slot->done, "call stamps");
    if (st != DCP_OK) {
        slot_buffers_free(ctx, slot);
        return st;
    }
    slot->cap = n;
    for (int32_t i = 0; s->device && st == DCP_OK && i < 2 * n; i++)
        st = ctx->dev->event_create(ctx->device, &slot->done[i]);
    if (st != DCP_OK) slot_buffers_free(ctx, slot);
    return st;
}

/* ---- the exchange --------------------------------------------------------------------- */

/* Launches stage `stage` of the slot's exchange (a no-op without peers). */
static dcp_status_t launch_stage(dcp_context_t *ctx, dcp_stamp_slot_t *slot, int stage)
{
    dcp_stamps_t *s = &ctx->stamps;
    const int32_t first = stage ? slot->nring : 0, m = stage ? slot->n - slot->nring : slot->nring;
    slot->todo[stage] = 0;
    if (m == 0) return DCP_OK;
    DCP_CHECK(dcp_reserve(&s->ops, &s->ops_cap, 2 * (int64_t)m, sizeof *s->ops, "call stamps"));
    const uint64_t space = s->device ? DCP_TAG_NOTICE : DCP_TAG_STAMP;
    void *ready = s->device ? s->ready : NULL;
    for (int32_t k = 0; k < m; k++) {
        const int32_t peer = slot->peers[first + k], j = 2 * (first + k);
        s->ops[2 * k] = (dcp_xfer_op_t){peer,
                                        1,
                                        space | (uint32_t)ctx->rank,
                                        &slot->dev[0],
                                        sizeof(dcp_stamp_t),
                                        ready,
                                        s->device ? slot->done[j] : NULL};
        s->ops[2 * k + 1] = (dcp_xfer_op_t){peer,
                                            0,
                                            space | (uint32_t)peer,
                                            &slot->dev[1 + first + k],
                                            sizeof(dcp_stamp_t),
                                            ready,
                                            s->device ? slot->done[j + 1] : NULL};
    }
    DCP_CHECK(ctx->engine->ops->launch(ctx->engine, s->ops, 2 * (int64_t)m, &s->req[stage]));
    slot->todo[stage] = 1;
    return DCP_OK;
}

/* Sends `mine` to peers[0..n) and receives theirs, in slot `idx` (ring stage first). */
static dcp_status_t exchange(dcp_context_t *ctx, int32_t idx, const int32_t *peers, int32_t n,
                             const dcp_stamp_t *mine)
{
    dcp_stamps_t *s = &ctx->stamps;
    dcp_stamp_slot_t *slot = &s->slot[idx];
    slot->todo[0] = slot->todo[1] = 0;
    DCP_CHECK(slot_reserve(ctx, slot, n));
    const int32_t R = ctx->engine->size;
    int32_t k = 0;
    for (int ring = 1; ring >= 0; ring--)
        for (int32_t i = 0; i < n; i++)
            if (is_ring(peers[i], ctx->rank, R) == ring) slot->peers[k++] = peers[i];
    slot->n = n;
    slot->nring = 0;
    while (slot->nring < n && is_ring(slot->peers[slot->nring], ctx->rank, R)) slot->nring++;
    slot->host[0] = *mine;
    s->cur = idx;
    if (n == 0) return DCP_OK;
    if (s->device) {
        /* this rank's stamp onto the device, after the work the call's stream holds */
        if (!s->ready) DCP_CHECK(ctx->dev->event_create(ctx->device, &s->ready));
        DCP_CHECK(ctx->dev->copy(slot->dev, slot->host, sizeof *mine, ctx->stream));
        DCP_CHECK(ctx->dev->event_record(s->ready, ctx->stream));
        if (!ctx->engine->stream_ordered) { /* the engine reads it when launched */
            DCP_TEST_COUNT(DCP_COUNT_HOST_SYNC);
            DCP_CHECK(ctx->dev->stream_sync(ctx->stream));
        }
    }
    DCP_CHECK(launch_stage(ctx, slot, 0));
    return launch_stage(ctx, slot, 1);
}

dcp_status_t dcp_stamps_launch(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               float scale, uint32_t flags)
{
    dcp_stamps_t *s = &ctx->stamps;
    DCP_CHECK(bind(s, p, ctx->rank));
    /* the slot's earlier exchange is checked first, waited for if it has not landed */
    const int32_t idx = (int32_t)(ctx->calls % DCP_STAMP_SLOTS);
    dcp_stamp_slot_t *slot = &s->slot[idx];
    if (slot->todo[0] || slot->todo[1])
        DCP_CHECK(dcp_stamps_check(ctx, 1, dcp_now() + ctx->timeout_s));
    uint32_t checksum;
    DCP_CHECK(dcp_plan_checksum(p, &checksum));
    dcp_stamp_t mine = {DCP_STAMP_MAGIC, checksum, ctx->calls, (int32_t)pass,
                        ctx->rank,       scale,    0,          {0},
                        flags};
    s->launched = ctx->calls + 1;
    s->last_pass = pass;
    return exchange(ctx, idx, s->peers[pass], s->npeers[pass], &mine);
}

/* ---- the comparison ------------------------------------------------------------------- */

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

/* Peer `peer`'s stamp t against this rank's. */
static dcp_status_t compare(const dcp_stamp_t *mine, const dcp_stamp_t *t, int32_t peer,
                            int32_t rank)
{
    if (t->magic != DCP_STAMP_MAGIC || t->rank != peer || t->pass < 0 || t->pass >= DCP_PASS_COUNT)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "call stamps: rank %d sent rank %d a stamp this build cannot "
                             "read (another dcp version?)",
                             peer, rank);
    if (t->failed)
        return dcp_set_error(DCP_ERR_PEER, "rank %d failed (%.*s); rank %d stops", peer,
                             (int)sizeof t->reason - 1, t->reason, rank);
    if (t->checksum != mine->checksum || t->pass != mine->pass || t->call != mine->call)
        return differ(mine, t);
    if (memcmp(&t->scale, &mine->scale, sizeof t->scale) != 0) {
        const dcp_stamp_t *a = t->rank < mine->rank ? t : mine, *b = a == t ? mine : t;
        char sa[24], sb[24];
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "softmax scales differ: rank %d computes its %s with scale %s, "
                             "rank %d with %s; every rank must give the same softmax_scale",
                             a->rank, pass_name[mine->pass & 1], scale_text(a->scale, sa), b->rank,
                             scale_text(b->scale, sb));
    }
    if (t->flags != mine->flags) {
        const dcp_stamp_t *asks = t->flags & DCP_STAMP_MAX_LOGIT ? t : mine,
                          *other = asks == t ? mine : t;
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "max logit: rank %d asks for it (io.max_logit), rank %d does not; "
                             "every rank of a call passes one, or none",
                             asks->rank, other->rank);
    }
    return DCP_OK;
}

/* The ranks of stage `stage` of a slot, for messages ("1, 3, 5"). */
static const char *stage_ranks(const dcp_stamp_slot_t *slot, int stage, char *buf, size_t cap)
{
    const int32_t first = stage ? slot->nring : 0, last = stage ? slot->n : slot->nring;
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t k = first; k < last && used + 16 < cap; k++)
        used +=
            (size_t)snprintf(buf + used, cap - used, "%s%d", k > first ? ", " : "", slot->peers[k]);
    return buf;
}

/* Compares the stages of a slot whose stamps have come back (waiting for them until
 * `deadline` when `wait`). */
static dcp_status_t check_slot(dcp_context_t *ctx, dcp_stamp_slot_t *slot, int wait,
                               double deadline)
{
    const dcp_stamps_t *s = &ctx->stamps;
    for (int stage = 0; stage < 2; stage++) {
        if (slot->todo[stage] != 2) continue;
        int state = 1;
        if (s->device) {
            DCP_CHECK(ctx->dev->event_query(slot->landed[stage], &state));
            if (state == 0 && !wait) continue;
            if (state == 0) DCP_TEST_COUNT(DCP_COUNT_HOST_SYNC);
            for (dcp_poll_t poll = dcp_poll_start(); state == 0; dcp_poll_pause(&poll)) {
                if (dcp_now() > deadline) {
                    char who[160];
                    return dcp_set_error(DCP_ERR_TIMEOUT,
                                         "call stamps: rank %d has not had the stamps of ranks %s "
                                         "(call %llu) within its timeout: one of them has not "
                                         "reached that call, or has failed",
                                         ctx->rank, stage_ranks(slot, stage, who, sizeof who),
                                         (unsigned long long)slot->host[0].call);
                }
                DCP_CHECK(ctx->dev->event_query(slot->landed[stage], &state));
            }
        }
        slot->todo[stage] = 0;
        if (state < 0) continue; /* captured into a graph: its replays are not checked here */
        const int32_t first = stage ? slot->nring : 0, last = stage ? slot->n : slot->nring;
        for (int32_t k = first; k < last; k++)
            DCP_CHECK(compare(&slot->host[0], &slot->host[1 + k], slot->peers[k], ctx->rank));
    }
    return DCP_OK;
}

dcp_status_t dcp_stamps_settle(dcp_context_t *ctx)
{
    dcp_stamps_t *s = &ctx->stamps;
    dcp_stamp_slot_t *slot = &s->slot[s->cur];
    /* stage by stage: the ring's stamps are compared before the other peers' are waited for */
    for (int stage = 0; stage < 2; stage++) {
        if (!s->req[stage]) continue;
        void *stream = s->device && ctx->engine->stream_ordered ? ctx->xfer_stream : NULL;
        DCP_CHECK(ctx->engine->ops->wait(ctx->engine, s->req[stage], ctx->timeout_s, stream));
        s->req[stage] = NULL;
        if (s->device) { /* back to the host behind the exchange, on the transfer stream */
            const int32_t first = stage ? slot->nring : 0,
                          m = stage ? slot->n - slot->nring : slot->nring;
            DCP_CHECK(ctx->dev->copy(&slot->host[1 + first], &slot->dev[1 + first],
                                     (size_t)m * sizeof(dcp_stamp_t), ctx->xfer_stream));
            DCP_CHECK(ctx->dev->event_record(slot->landed[stage], ctx->xfer_stream));
        }
        slot->todo[stage] = 2;
        DCP_CHECK(check_slot(ctx, slot, 0, 0));
    }
    return DCP_OK;
}

dcp_status_t dcp_stamps_check(dcp_context_t *ctx, int wait, double deadline)
{
    dcp_stamps_t *s = &ctx->stamps;
    if (!s->device) return DCP_OK;
    for (int32_t i = 1; i <= DCP_STAMP_SLOTS; i++) /* the oldest first */
        DCP_CHECK(check_slot(ctx, &s->slot[(s->cur + i) % DCP_STAMP_SLOTS], wait, deadline));
    return DCP_OK;
}

/* ---- notices and failure -------------------------------------------------------------- */

/* Waits (on the host, briefly) for the stages in flight; withdraws what did not end. */
static void flush(dcp_context_t *ctx)
{
    dcp_stamps_t *s = &ctx->stamps;
    const double t = ctx->timeout_s < NOTICE_FLUSH_S ? ctx->timeout_s : NOTICE_FLUSH_S;
    for (int stage = 0; stage < 2; stage++) {
        if (!s->req[stage]) continue;
        if (ctx->engine->ops->wait(ctx->engine, s->req[stage], t, NULL) != DCP_OK)
            ctx->engine->ops->cancel(ctx->engine, s->req[stage]);
        s->req[stage] = NULL;
    }
    s->slot[s->cur].todo[0] = s->slot[s->cur].todo[1] = 0;
}

void dcp_stamps_notify(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass, const char *reason)
{
    dcp_stamps_t *s = &ctx->stamps;
    if (!s->device || s->launched == ctx->calls + 1) return; /* none, or already out */
    char kept[1024]; /* the failure's own message stays the thread's last error */
    dcp_error_save(kept, sizeof kept);
    const int32_t R = ctx->engine->size;
    const int32_t ring[2] = {(ctx->rank + 1) % R, (ctx->rank + R - 1) % R};
    const int32_t *peers = ring;
    int32_t n = R > 2 ? 2 : R - 1;
    uint32_t checksum = 0;
    if (p && p->num_ranks == R && bind(s, p, ctx->rank) == DCP_OK &&
        dcp_plan_checksum(p, &checksum) == DCP_OK) {
        peers = s->peers[pass];
        n = s->npeers[pass];
    } else if (!p && s->serial) { /* dcp_context_abort: the peers of the last exchange */
        pass = (dcp_pass_t)s->last_pass;
        peers = s->peers[pass];
        n = s->npeers[pass];
    }
    dcp_stamp_t mine = {DCP_STAMP_MAGIC, checksum, ctx->calls, (int32_t)pass,
                        ctx->rank,       0.0f,     1,          {0}};
    snprintf(mine.reason, sizeof mine.reason, "%s", reason && *reason ? reason : "no reason given");
    const int32_t idx = (int32_t)(ctx->calls % DCP_STAMP_SLOTS);
    s->launched = ctx->calls + 1;
    if (exchange(ctx, idx, peers, n, &mine) == DCP_OK &&
        ctx->dev->stream_sync(ctx->stream) == DCP_OK)
        flush(ctx);
    else
        dcp_stamps_cancel(ctx);
    dcp_set_error(DCP_OK, "%s", kept);
}

const int32_t *dcp_stamps_last_peers(const dcp_context_t *ctx, int32_t *n_out)
{
    const dcp_stamps_t *s = &ctx->stamps;
    const dcp_stamp_slot_t *slot = &s->slot[s->cur];
    *n_out = s->launched ? slot->n : 0;
    return s->launched ? slot->peers : NULL;
}

void dcp_stamps_cancel(dcp_context_t *ctx)
{
    dcp_stamps_t *s = &ctx->stamps;
    for (int stage = 0; stage < 2; stage++) {
        ctx->engine->ops->cancel(ctx->engine, s->req[stage]);
        s->req[stage] = NULL;
    }
    for (int32_t i = 0; i < DCP_STAMP_SLOTS; i++) s->slot[i].todo[0] = s->slot[i].todo[1] = 0;
}

void dcp_stamps_free(dcp_context_t *ctx)
{
    dcp_stamps_t *s = &ctx->stamps;
    if (s->device) (void)ctx->dev->stream_sync(ctx->xfer_stream); /* copies still queued */
    for (int32_t i = 0; i < DCP_STAMP_SLOTS; i++) {
        slot_buffers_free(ctx, &s->slot[i]);
        for (int k = 0; k < 2; k++) ctx->dev->event_destroy(s->slot[i].landed[k]);
    }
    ctx->dev->event_destroy(s->ready);
    lists_free(s);
    free(s->ops);
    memset(s, 0, sizeof *s);
}
