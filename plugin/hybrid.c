#include "plugin/hybrid.h"

#include "include/base/error.h"
#include "include/base/timeout.h"
#include "transport/bootstrap.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dcp_hybrid_t *h;
    int32_t local;
} slot_t;

struct dcp_hybrid {
    const dcp_bootstrap_t *procs;
    int32_t threads;
    dcp_inproc_hub_t *hub;
    slot_t *slots;
    dcp_bootstrap_t *bs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* one allgather at a time: threads arrive, the last runs the process allgather, the
     * others wait for `round` to advance, then everyone reads; the next may start once the
     * last reader has left */
    int32_t arrived, readers;
    uint64_t round;
    char *part, *all; /* [threads x bytes], [procs x threads x bytes] */
    size_t cap_part, cap_all;
    dcp_status_t st;
    int32_t failed;
    char why[256];
    /* DCP_OK, or the failure that ended the bootstrap (a round whose process allgather failed,
     * or a thread of this process that did not come): every later allgather fails at once with
     * it (dcp.h allows it), as the MPI bootstrap's do, so that a failed job costs its ranks one
     * timeout, not one per collective, and no round starts with a thread counted that left */
    dcp_status_t broken;
};

/* The failure that ended the bootstrap, again (h->mu held; released). */
static dcp_status_t stay_failed(dcp_hybrid_t *h, int32_t *failed_out)
{
    if (failed_out) *failed_out = h->failed;
    const dcp_status_t st = dcp_set_error(h->broken, "%s", h->why);
    pthread_mutex_unlock(&h->mu);
    return st;
}

/* Ends the bootstrap: st and the calling thread's last error (h->mu held). */
static void break_down(dcp_hybrid_t *h, dcp_status_t st, int32_t failed)
{
    if (h->broken != DCP_OK) return;
    h->broken = st;
    h->failed = failed;
    dcp_error_save(h->why, sizeof h->why);
    pthread_cond_broadcast(&h->cv);
}

static dcp_status_t grow(char **buf, size_t *cap, size_t bytes)
{
    if (*cap >= bytes) return DCP_OK;
    DCP_CHECK(dcp_resize(buf, (int64_t)bytes, 1, "hybrid bootstrap"));
    *cap = bytes;
    return DCP_OK;
}

/* The last thread to arrive: the process allgather (outside the lock). */
static void gather_process(dcp_hybrid_t *h, size_t bytes, double timeout_s)
{
    const dcp_bootstrap_t *p = h->procs;
    const size_t part = (size_t)h->threads * bytes;
    dcp_status_t st = grow(&h->all, &h->cap_all, part * (size_t)p->size);
    int32_t failed = -1;
    pthread_mutex_unlock(&h->mu);
    if (st == DCP_OK)
        st = p->allgather_timed
                 ? p->allgather_timed(p->state, h->part, h->all, part, timeout_s, &failed)
                 : p->allgather(p->state, h->part, h->all, part);
    pthread_mutex_lock(&h->mu);
    h->st = st;
    h->failed = failed >= 0 ? failed * h->threads : -1; /* the process's first rank */
    /* keeps the message in h->why, which the round's readers take */
    if (st != DCP_OK) break_down(h, st, h->failed);
    h->readers = h->threads;
    h->arrived = 0;
    h->round++;
    pthread_cond_broadcast(&h->cv);
}

static dcp_status_t hybrid_allgather_timed(void *state, const void *send, void *recv, size_t bytes,
                                           double timeout_s, int32_t *failed_out)
{
    const slot_t *s = state;
    dcp_hybrid_t *h = s->h;
    /* the process's threads wait for each other here: a thread that never comes (a hang
     * elsewhere in its rank) ends the wait at the deadline */
    const struct timespec deadline = dcp_deadline_after(timeout_s + 1.0);
    dcp_status_t st = DCP_OK;
    pthread_mutex_lock(&h->mu);
    while (h->readers > 0 && st == DCP_OK && h->broken == DCP_OK)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &deadline) != 0) st = DCP_ERR_TIMEOUT;
    if (h->broken != DCP_OK) return stay_failed(h, failed_out);
    if (st != DCP_OK) {
        dcp_set_error(st, "hybrid bootstrap: rank %d: the previous allgather did not end",
                      s->local);
        break_down(h, st, -1);
        return stay_failed(h, failed_out);
    }
    if (h->arrived == 0) st = grow(&h->part, &h->cap_part, h->threads * bytes);
    if (st != DCP_OK) { /* the others would wait for this thread: they fail with it now */
        break_down(h, st, -1);
        return stay_failed(h, failed_out);
    }
    memcpy(h->part + (size_t)s->local * bytes, send, bytes);
    const uint64_t round = h->round;
    if (++h->arrived == h->threads) gather_process(h, bytes, timeout_s);
    while (h->round == round && st == DCP_OK && h->broken == DCP_OK)
        if (pthread_cond_timedwait(&h->cv, &h->mu, &deadline) != 0) st = DCP_ERR_TIMEOUT;
    if (h->round == round) { /* the round never ended: a thread of this process did not come */
        if (h->broken == DCP_OK) {
            dcp_set_error(DCP_ERR_TIMEOUT,
                          "hybrid bootstrap: a thread of process %d did not take part",
                          h->procs->rank);
            break_down(h, DCP_ERR_TIMEOUT, -1);
        }
        return stay_failed(h, failed_out);
    }
    st = h->st;
    if (st == DCP_OK)
        memcpy(recv, h->all, bytes * (size_t)h->threads * (size_t)h->procs->size);
    else
        dcp_set_error(st, "%s", h->why);
    if (failed_out) *failed_out = h->failed;
    if (--h->readers == 0) pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return st;
}

static dcp_status_t hybrid_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    const slot_t *s = state;
    int32_t failed = -1;
    return hybrid_allgather_timed(state, send, recv, bytes, dcp_bootstrap_timeout(s->h->procs),
                                  &failed);
}

dcp_status_t dcp_hybrid_create(const dcp_bootstrap_t *procs, int32_t threads,
                               dcp_hybrid_t **hybrid_out)
{
    if (!procs || !procs->allgather || threads < 1 || !hybrid_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "hybrid: procs, its allgather and hybrid_out "
                                                  "must be given, threads >= 1");
    if ((int64_t)procs->size * threads > INT32_MAX)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "hybrid: %d processes x %d threads", procs->size,
                             threads);
    dcp_hybrid_t *h = NULL;
    DCP_CHECK(dcp_calloc(&h, 1, sizeof *h, "hybrid"));
    h->procs = procs;
    h->threads = threads;
    pthread_mutex_init(&h->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &ca);
    pthread_condattr_destroy(&ca);
    dcp_status_t st = dcp_calloc(&h->slots, threads, sizeof *h->slots, "hybrid");
    if (st == DCP_OK) st = dcp_calloc(&h->bs, threads, sizeof *h->bs, "hybrid");
    if (st == DCP_OK) st = dcp_inproc_hub_create(threads, &h->hub);
    if (st != DCP_OK) {
        dcp_hybrid_destroy(h);
        return st;
    }
    for (int32_t l = 0; l < threads; l++) {
        h->slots[l] = (slot_t){h, l};
        h->bs[l] = (dcp_bootstrap_t){procs->rank * threads + l, procs->size * threads,
                                     hybrid_allgather,          &h->slots[l],
                                     hybrid_allgather_timed,    procs->timeout_s};
    }
    *hybrid_out = h;
    return DCP_OK;
}

void dcp_hybrid_destroy(dcp_hybrid_t *h)
{
    if (!h) return;
    if (h->hub) dcp_inproc_hub_destroy(h->hub);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->slots);
    free(h->bs);
    free(h->part);
    free(h->all);
    free(h);
}

const dcp_bootstrap_t *dcp_hybrid_bootstrap(dcp_hybrid_t *h, int32_t local)
{
    return h && local >= 0 && local < h->threads ? &h->bs[local] : NULL;
}

int dcp_hybrid_of(const dcp_bootstrap_t *bs, dcp_inproc_hub_t **hub_out, int32_t *local_out)
{
    if (!bs || bs->allgather != hybrid_allgather) return 0;
    const slot_t *s = bs->state;
    *hub_out = s->h->hub;
    *local_out = s->local;
    return 1;
}
