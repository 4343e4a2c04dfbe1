#include "transport/route.h"

#include "include/base/error.h"
#include "include/base/poll.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    dcp_engine_t base;
    int32_t n;
    dcp_engine_t *sub[DCP_ROUTE_MAX];
    const char *label[DCP_ROUTE_MAX];
    uint8_t *engine_of;   /* [size] */
    int32_t *engine_peer; /* [size]: each peer's rank in its engine */
    dcp_xfer_op_t *scratch;
    int64_t scratch_cap;
} route_engine_t;

struct dcp_xfer_req {
    dcp_xfer_req_t *sub[DCP_ROUTE_MAX]; /* NULL: no ops for that engine, or completed */
};

/* The engine's failure, re-recorded with the engine and the links it serves. */
static dcp_status_t blame(const route_engine_t *e, int32_t i, dcp_status_t st)
{
    char why[512];
    dcp_error_save(why, sizeof why);
    return dcp_set_error(st, "%s engine (%s of rank %d): %s", e->sub[i]->ops->name, e->label[i],
                         e->base.rank, why);
}

static dcp_status_t route_register(dcp_engine_t *base, void *ptr, size_t bytes)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int32_t i = 0; i < e->n; i++) {
        const dcp_status_t st = e->sub[i]->ops->mem_register(e->sub[i], ptr, bytes);
        if (st != DCP_OK) {
            for (int32_t j = 0; j < i; j++) e->sub[j]->ops->mem_deregister(e->sub[j], ptr);
            return blame(e, i, st);
        }
    }
    return DCP_OK;
}

static void route_deregister(dcp_engine_t *base, void *ptr)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int32_t i = 0; i < e->n; i++) e->sub[i]->ops->mem_deregister(e->sub[i], ptr);
}

static void route_cancel(dcp_engine_t *base, dcp_xfer_req_t *r)
{
    route_engine_t *e = (route_engine_t *)base;
    if (!r) return;
    for (int32_t i = 0; i < e->n; i++)
        if (r->sub[i]) e->sub[i]->ops->cancel(e->sub[i], r->sub[i]);
    free(r);
}

static dcp_status_t route_launch(dcp_engine_t *base, const dcp_xfer_op_t *ops, int64_t n,
                                 dcp_xfer_req_t **req_out)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int64_t k = 0; k < n; k++)
        if (ops[k].peer < 0 || ops[k].peer >= base->size || ops[k].peer == base->rank)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "route: op %lld has peer %d (rank %d of %d)",
                                 (long long)k, ops[k].peer, base->rank, base->size);
    DCP_CHECK(dcp_reserve(&e->scratch, &e->scratch_cap, n, sizeof *e->scratch, "route: ops"));
    dcp_xfer_req_t *r = NULL;
    DCP_CHECK(dcp_calloc(&r, 1, sizeof *r, "route: request"));
    /* each engine's ops, in launch order, one launch per engine */
    for (int32_t i = 0; i < e->n; i++) {
        int64_t m = 0;
        for (int64_t k = 0; k < n; k++)
            if (e->engine_of[ops[k].peer] == i) {
                e->scratch[m] = ops[k];
                e->scratch[m++].peer = e->engine_peer[ops[k].peer];
            }
        if (m == 0) continue;
        const dcp_status_t st = e->sub[i]->ops->launch(e->sub[i], e->scratch, m, &r->sub[i]);
        if (st != DCP_OK) {
            const dcp_status_t named = blame(e, i, st);
            route_cancel(base, r);
            return named;
        }
    }
    *req_out = r;
    return DCP_OK;
}

/* Completes and frees r's part on engine i. */
static dcp_status_t finish(route_engine_t *e, dcp_xfer_req_t *r, int32_t i, double timeout_s,
                           void *stream)
{
    const dcp_status_t st = e->sub[i]->ops->wait(e->sub[i], r->sub[i], timeout_s, stream);
    if (st != DCP_OK) return blame(e, i, st);
    r->sub[i] = NULL;
    return DCP_OK;
}

static dcp_status_t route_test(dcp_engine_t *base, dcp_xfer_req_t *r, int *done_out)
{
    route_engine_t *e = (route_engine_t *)base;
    int all = 1;
    for (int32_t i = 0; i < e->n; i++) {
        if (!r->sub[i]) continue;
        int done = 0;
        const dcp_status_t st = e->sub[i]->ops->test(e->sub[i], r->sub[i], &done);
        if (st != DCP_OK) return blame(e, i, st);
        all &= done;
    }
    *done_out = all;
    return DCP_OK;
}

/* While parts are in flight on several engines, every engine is tested in turn (each
 * progresses its own transfers: none waits on the host for one while another starves) and
 * every engine is asked for peer failures (a peer's notice may come over a leg this wait has
 * nothing on); the last part gets the engine's own wait where that engine hears of failures
 * itself (host_stamps: its own notices), else it is polled like the others (NCCL's wait would
 * not learn that a peer failed on another leg). */
static dcp_status_t route_wait(dcp_engine_t *base, dcp_xfer_req_t *r, double timeout_s,
                               void *stream)
{
    route_engine_t *e = (route_engine_t *)base;
    const double deadline = dcp_now() + timeout_s;
    for (dcp_poll_t poll = dcp_poll_start();; dcp_poll_pause(&poll)) {
        int32_t left = 0, last = -1;
        for (int32_t i = 0; i < e->n; i++) {
            if (!r->sub[i]) continue;
            int done = 0;
            dcp_status_t st = e->sub[i]->ops->test(e->sub[i], r->sub[i], &done);
            if (st == DCP_OK && done)
                st = finish(e, r, i, 0, stream);
            else if (st != DCP_OK)
                st = blame(e, i, st);
            if (st != DCP_OK) return st;
            if (r->sub[i]) left++, last = i;
        }
        if (left == 0) break;
        if (left == 1 && e->sub[last]->host_stamps) {
            const double rest = deadline - dcp_now();
            DCP_CHECK(finish(e, r, last, rest > 0 ? rest : 0, stream));
            break;
        }
        for (int32_t i = 0; i < e->n; i++) {
            const dcp_status_t st = e->sub[i]->ops->health(e->sub[i]);
            if (st != DCP_OK) return blame(e, i, st);
        }
        if (dcp_now() > deadline) /* the first part still in flight times out in its engine */
            for (int32_t i = 0; i < e->n; i++)
                if (r->sub[i]) return finish(e, r, i, 0, stream);
    }
    free(r);
    return DCP_OK;
}

static void route_abort(dcp_engine_t *base, const char *reason)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int32_t i = 0; i < e->n; i++) e->sub[i]->ops->abort(e->sub[i], reason);
}

static dcp_status_t route_health(dcp_engine_t *base)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int32_t i = 0; i < e->n; i++) {
        const dcp_status_t st = e->sub[i]->ops->health(e->sub[i]);
        if (st != DCP_OK) return blame(e, i, st);
    }
    return DCP_OK;
}

static void route_destroy(dcp_engine_t *base)
{
    route_engine_t *e = (route_engine_t *)base;
    for (int32_t i = 0; i < e->n; i++) dcp_engine_destroy(e->sub[i]);
    free(e->engine_of);
    free(e->engine_peer);
    free(e->scratch);
    free(e);
}

static const dcp_engine_ops_t route_ops = {
    .name = "route",
    .mem_register = route_register,
    .mem_deregister = route_deregister,
    .launch = route_launch,
    .test = route_test,
    .wait = route_wait,
    .cancel = route_cancel,
    .abort = route_abort,
    .health = route_health,
    .destroy = route_destroy,
};

static dcp_status_t check_args(int32_t rank, int32_t size, int32_t n, dcp_engine_t *const *engines,
                               const char *const *labels, const uint8_t *engine_of,
                               const int32_t *engine_peer)
{
    if (n < 1 || n > DCP_ROUTE_MAX || !engines || !labels || !engine_of || size < 1 || rank < 0 ||
        rank >= size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "route: %d engines for rank %d of %d", n, rank,
                             size);
    for (int32_t i = 0; i < n; i++)
        if (!engines[i] || (!engine_peer && (engines[i]->rank != rank || engines[i]->size != size)))
            return dcp_set_error(
                DCP_ERR_INVALID_ARG, "route: engine %d (%s) serves rank %d of %d, not %d of %d", i,
                engines[i] ? engines[i]->ops->name : "NULL", engines[i] ? engines[i]->rank : -1,
                engines[i] ? engines[i]->size : -1, rank, size);
    for (int32_t p = 0; p < size; p++) {
        if (engine_of[p] >= n)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "route: peer %d goes to engine %d of %d", p,
                                 engine_of[p], n);
        const int32_t q = engine_peer ? engine_peer[p] : p;
        if (p != rank && (q < 0 || q >= engines[engine_of[p]]->size))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "route: peer %d is rank %d of engine %d (%s)",
                                 p, q, engine_of[p], engines[engine_of[p]]->ops->name);
    }
    return DCP_OK;
}

dcp_status_t dcp_route_engine_create(int32_t rank, int32_t size, int32_t n,
                                     dcp_engine_t *const *engines, const char *const *labels,
                                     const uint8_t *engine_of, const int32_t *engine_peer,
                                     dcp_engine_t **engine_out)
{
    route_engine_t *e = NULL;
    dcp_status_t st = check_args(rank, size, n, engines, labels, engine_of, engine_peer);
    if (st == DCP_OK) st = dcp_calloc(&e, 1, sizeof *e, "route engine");
    if (st == DCP_OK &&
        (dcp_calloc(&e->engine_of, size, 1, "route engine") != DCP_OK ||
         dcp_calloc(&e->engine_peer, size, sizeof *e->engine_peer, "route engine") != DCP_OK)) {
        free(e->engine_of);
        free(e);
        st = DCP_ERR_NO_MEMORY;
    }
    if (st != DCP_OK) {
        for (int32_t i = 0; engines && i < n && i < DCP_ROUTE_MAX; i++)
            dcp_engine_destroy(engines[i]);
        return st;
    }
    e->base = (dcp_engine_t){&route_ops, rank, size, 1, 0, 1};
    e->n = n;
    for (int32_t i = 0; i < n; i++) {
        e->sub[i] = engines[i];
        e->label[i] = labels[i];
        e->base.stream_ordered &= engines[i]->stream_ordered;
        e->base.needs_progress |= engines[i]->needs_progress;
        e->base.host_stamps &= engines[i]->host_stamps;
    }
    memcpy(e->engine_of, engine_of, (size_t)size);
    for (int32_t p = 0; p < size; p++) e->engine_peer[p] = engine_peer ? engine_peer[p] : p;
    *engine_out = &e->base;
    return DCP_OK;
}

int32_t dcp_route_leg(const dcp_engine_t *e, int32_t i, const dcp_engine_t **leg_out,
                      const char **label_out)
{
    if (!e || e->ops != &route_ops) return 0;
    const route_engine_t *r = (const route_engine_t *)e;
    if (i >= 0 && i < r->n) {
        *leg_out = r->sub[i];
        *label_out = r->label[i];
    }
    return r->n;
}
