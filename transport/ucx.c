#include "transport/ucx.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/poll.h"
#include "include/base/test_hook.h"
#include "transport/bootstrap.h"
#include "transport/peers.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

/* Control messages carry the top tag bit, which data tags never set. */
#define TAG_ABORT (DCP_TAG_CONTROL | 0xab0full)

/* How long a closing endpoint may flush before it is closed by force. */
#define CLOSE_FLUSH_S 5.0

/* How long cancel() lets withdrawn operations finish before leaving them to the worker's
 * destruction (a send to a dead peer never finishes). */
#define CANCEL_GRACE_S 0.2

/* How long a timed-out wait listens for a peer's notice before it blames its own peer (a
 * running peer of the same node: one whole timeout, see ucx_wait). */
#define TIMEOUT_GRACE_S 2.0

/* How often waits look whether same-node peers are still alive. */
#define LIVENESS_PERIOD_S 0.1

/* An abort notice: the rank whose failure it reports (the first failure its sender saw,
 * which a relaying rank passes on), the sender, and why that rank failed. */
typedef struct {
    int32_t origin, sender;
    char reason[DCP_ABORT_REASON_CAP];
} abort_msg_t;

typedef struct ucx_engine ucx_engine_t;

typedef struct {
    ucx_engine_t *e;
    int32_t peer;
} peer_ref_t;

struct ucx_engine {
    dcp_engine_t base;
    const dcp_bootstrap_t *bs;
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_ep_h *eps;
    peer_ref_t *refs;
    int64_t *local_pid;   /* same-node peers: their pid (liveness checks), else 0 */
    uint8_t *peer_mode;   /* endpoint created with UCX peer error handling */
    double next_liveness; /* when waits next look at local_pid */
    int32_t failed_peer;  /* first peer reported dead or aborted, -1 while none */
    int32_t peer_dead;    /* failed_peer is known dead (its endpoint failed, its process is
                             gone), not only blamed for a transfer that broke */
    int32_t suspect;      /* the peer a timed-out wait was waiting for, -1 while none */
    int32_t self_failed;  /* this rank announced its own failure */
    char failed_reason[DCP_ABORT_REASON_CAP]; /* failed_peer's reason, from its notice */
    void *abort_req;                          /* the posted receive for abort notices */
    abort_msg_t abort_in;
    /* made with the endpoints, so that announcing a failure (abort) and closing allocate
     * nothing: [size] requests in flight, [size] outgoing notices */
    void **close_reqs;
    abort_msg_t *abort_out;
    /* set: ops with a ready event are posted once it is reached (dcp_ucx_engine_order_by) */
    dcp_status_t (*ready_query)(void *event, int *state_out);
};

struct dcp_xfer_req {
    int64_t n, pending;
    void **reqs;          /* in-flight UCX requests (NULL once complete) */
    ucs_status_t *status; /* completion status of each op */
    int32_t *peer;
    uint8_t *send; /* 1: the op is a send */
    dcp_xfer_op_t *held; /* ops waiting for their ready event (ready NULL once posted);
                            NULL when none were held */
    int64_t nheld;
};

static dcp_status_t ucx_error(ucs_status_t s, const char *what)
{
    return dcp_set_error(DCP_ERR_SYSTEM, "ucx: %s: %s", what, ucs_status_string(s));
}

static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    peer_ref_t *ref = arg;
    if (ref->e->failed_peer < 0) {
        ref->e->failed_peer = ref->peer;
        ref->e->peer_dead = 1;
        snprintf(ref->e->failed_reason, sizeof ref->e->failed_reason, "its endpoint failed: %s",
                 ucs_status_string(status));
    }
}

/* The state letter of process pid in /proc (R, S, D, T, Z, ...): 'X' when it is gone, 0 when
 * it cannot be read. */
static char process_state(int64_t pid)
{
    if (kill((pid_t)pid, 0) != 0) return errno == ESRCH ? 'X' : 0;
    char path[64], state = 0;
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    /* "pid (comm) S ...": the state follows the last ')' */
    char buf[512];
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close = strrchr(buf, ')');
    if (close && close[1] == ' ') state = close[2];
    return state;
}

/* A same-node peer that has exited (or is a zombie) has failed: shared-memory transports
 * have no peer error handling in UCX, so waits look for themselves. */
static int process_gone(int64_t pid)
{
    const char state = process_state(pid);
    return state == 'Z' || state == 'X';
}

/* UCX treats a failed single-copy (CMA) transfer on an endpoint without peer error
 * handling - ours within a node - as fatal and aborts the process. The failure is a peer
 * that died mid-transfer: the operation still completes with an error, which becomes
 * DCP_ERR_PEER, so that one message is kept from ending the process. Other messages pass. */
static ucs_log_func_rc_t keep_cma_failures_nonfatal(const char *file, unsigned line,
                                                    const char *function, ucs_log_level_t level,
                                                    const ucs_log_component_config_t *comp,
                                                    const char *message, va_list ap)
{
    (void)file, (void)line, (void)comp, (void)message, (void)ap;
    if (level == UCS_LOG_LEVEL_FATAL && function && !strcmp(function, "uct_cma_ep_tx_error"))
        return UCS_LOG_FUNC_RC_STOP;
    return UCS_LOG_FUNC_RC_CONTINUE;
}

static void install_log_filter(void)
{
    ucs_log_push_handler(keep_cma_failures_nonfatal);
}

static void progress(ucx_engine_t *e)
{
    for (int i = 0; i < 64 && ucp_worker_progress(e->worker); i++) {
    }
    if (e->abort_req && ucp_request_check_status(e->abort_req) != UCS_INPROGRESS) {
        ucp_request_free(e->abort_req);
        e->abort_req = NULL;
        /* the rank that failed first, unless that is this rank (then: the sender) */
        const abort_msg_t *m = &e->abort_in;
        const int32_t blamed =
            m->origin >= 0 && m->origin < e->base.size && m->origin != e->base.rank ? m->origin
                                                                                    : m->sender;
        if (e->failed_peer < 0 && blamed >= 0 && blamed < e->base.size) {
            e->failed_peer = blamed;
            snprintf(e->failed_reason, sizeof e->failed_reason, "%.*s", (int)sizeof m->reason - 1,
                     m->reason);
        }
    }
}

/* Blames the first same-node peer whose process is gone, unless an abort notice names the
 * failure first. A peer that relays a failure (ucx_abort) sends its notice, then exits: a
 * check that finds it gone may run before progress() has taken that notice, and then, with
 * the failed rank gone too, blamed whichever of the two has the lower rank (tests/mpi/
 * kill.sh once saw ranks 2 and 3 name rank 0, which had relayed rank 1's death). So the
 * worker is progressed once more before a gone process is blamed. */
static void check_liveness(ucx_engine_t *e)
{
    const double now = dcp_now();
    if (now < e->next_liveness || !e->local_pid) return;
    e->next_liveness = now + LIVENESS_PERIOD_S;
    for (int32_t p = 0; p < e->base.size && e->failed_peer < 0; p++)
        if (e->local_pid[p] > 0 && process_gone(e->local_pid[p])) {
            progress(e);
            if (e->failed_peer >= 0) break;
            e->failed_peer = p;
            e->peer_dead = 1;
            snprintf(e->failed_reason, sizeof e->failed_reason, "its process %lld is gone",
                     (long long)e->local_pid[p]);
        }
}

/* Posts the standing receive for abort notices. */
static dcp_status_t post_abort_listener(ucx_engine_t *e)
{
    ucp_request_param_t p = {0};
    void *r = ucp_tag_recv_nbx(e->worker, &e->abort_in, sizeof e->abort_in, TAG_ABORT, ~0ull, &p);
    if (UCS_PTR_IS_ERR(r)) return ucx_error(UCS_PTR_STATUS(r), "abort listener");
    e->abort_req = r; /* a receive never completes at once unless a notice is already there */
    return DCP_OK;
}

/* ---- requests ------------------------------------------------------------------------- */

static void free_req(dcp_xfer_req_t *r)
{
    if (!r) return;
    free(r->held);
    free(r->reqs);
    free(r->status);
    free(r->peer);
    free(r->send);
    free(r);
}

/* "send to rank 3" or "receive from rank 3": the call an op of r is. */
static const char *op_name(const dcp_xfer_req_t *r, int64_t i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s rank %d", r->send[i] ? "send to" : "receive from", r->peer[i]);
    return buf;
}

/* Collects finished operations; returns the first error as a dcp status. */
static dcp_status_t harvest(ucx_engine_t *e, dcp_xfer_req_t *r)
{
    for (int64_t i = 0; i < r->n; i++) {
        if (r->reqs[i]) {
            ucs_status_t s = ucp_request_check_status(r->reqs[i]);
            if (s == UCS_INPROGRESS) continue;
            ucp_request_free(r->reqs[i]);
            r->reqs[i] = NULL;
            if (s == UCS_OK && DCP_TEST_FAULT(DCP_FAULT_UCX_COMPLETE)) s = UCS_ERR_IO_ERROR;
            r->status[i] = s;
            r->pending--;
        }
        const ucs_status_t s = r->status[i];
        if (s == UCS_OK || s == UCS_INPROGRESS) continue;
        char call[48];
        op_name(r, i, call, sizeof call);
        if (s == UCS_ERR_MESSAGE_TRUNCATED)
            return dcp_set_error(DCP_ERR_INTERNAL,
                                 "ucx: rank %d's %s: the two ranks posted different sizes for "
                                 "one tag",
                                 e->base.rank, call);
        if (s == UCS_ERR_CANCELED) continue;
        /* a peer that failed on purpose sent its notice before it closed: the notice, with
         * its reason, may be waiting behind the broken transfer */
        for (int k = 0; k < 16 && e->failed_peer < 0; k++) progress(e);
        if (e->failed_peer >= 0)
            return dcp_set_error(DCP_ERR_PEER, "ucx: rank %d failed (%s); rank %d's %s ended: %s",
                                 e->failed_peer, e->failed_reason, e->base.rank, call,
                                 ucs_status_string(s));
        /* the peer is blamed (a transfer that breaks mostly means it died), and the notice
         * this rank sends names the call that saw it */
        e->failed_peer = r->peer[i];
        snprintf(e->failed_reason, sizeof e->failed_reason, "rank %d's %s failed: %s", e->base.rank,
                 call, ucs_status_string(s));
        return dcp_set_error(DCP_ERR_PEER, "ucx: rank %d's %s failed: %s", e->base.rank, call,
                             ucs_status_string(s));
    }
    return DCP_OK;
}

/* Posts op k of r (a tagged send or receive). A post that fails is this rank's own
 * failure, named with the call; the ops posted before it are the caller's to withdraw. */
static dcp_status_t post(ucx_engine_t *e, dcp_xfer_req_t *r, int64_t k, const dcp_xfer_op_t *op)
{
    ucp_request_param_t p = {0};
    void *q;
    if (DCP_TEST_FAULT(op->send ? DCP_FAULT_UCX_SEND : DCP_FAULT_UCX_RECV))
        q = UCS_STATUS_PTR(UCS_ERR_IO_ERROR);
    else if (op->send)
        q = ucp_tag_send_nbx(e->eps[op->peer], op->ptr, op->bytes, op->tag, &p);
    else
        q = ucp_tag_recv_nbx(e->worker, op->ptr, op->bytes, op->tag, ~0ull, &p);
    if (UCS_PTR_IS_ERR(q)) {
        r->status[k] = UCS_ERR_CANCELED; /* never posted: nothing to harvest */
        r->pending--;
        char call[48];
        op_name(r, k, call, sizeof call);
        /* a peer that failed first (its notice waiting, its process gone: a shared-memory
         * endpoint then refuses the post) is named rather than this rank */
        for (int i = 0; i < 16 && e->failed_peer < 0; i++) progress(e);
        e->next_liveness = 0;
        check_liveness(e);
        if (e->failed_peer >= 0)
            return dcp_set_error(DCP_ERR_PEER, "ucx: rank %d failed (%s); rank %d cannot post its %s",
                                 e->failed_peer, e->failed_reason, e->base.rank, call);
        /* a shared-memory endpoint refuses the post once the peer's memory is gone (its worker
         * closed before its notice came): the peer is blamed, as for a transfer that breaks */
        if (UCS_PTR_STATUS(q) == UCS_ERR_SHMEM_SEGMENT) {
            e->failed_peer = op->peer;
            snprintf(e->failed_reason, sizeof e->failed_reason, "rank %d cannot post its %s: %s",
                     e->base.rank, call, ucs_status_string(UCS_ERR_SHMEM_SEGMENT));
            return dcp_set_error(DCP_ERR_PEER, "ucx: %s", e->failed_reason);
        }
        return dcp_set_error(DCP_ERR_SYSTEM, "ucx: rank %d cannot post its %s (%zu bytes): %s",
                             e->base.rank, call, op->bytes, ucs_status_string(UCS_PTR_STATUS(q)));
    }
    if (q) {
        r->reqs[k] = q;
        return DCP_OK;
    }
    /* completed at once */
    r->status[k] = DCP_TEST_FAULT(DCP_FAULT_UCX_AT_ONCE) ? UCS_ERR_IO_ERROR : UCS_OK;
    r->pending--;
    return DCP_OK;
}

/* Whether op's ready event has been reached (always, unless ops are ordered by events). */
static dcp_status_t is_ready(const ucx_engine_t *e, const dcp_xfer_op_t *op, int *ready_out)
{
    int state = 1;
    if (e->ready_query && op->ready) DCP_CHECK(e->ready_query(op->ready, &state));
    *ready_out = state != 0;
    return DCP_OK;
}

/* Posts the held ops whose ready event has been reached. */
static dcp_status_t post_ready(ucx_engine_t *e, dcp_xfer_req_t *r)
{
    for (int64_t k = 0; r->nheld > 0 && k < r->n; k++) {
        if (!r->held[k].ready) continue;
        int ready = 0;
        DCP_CHECK(is_ready(e, &r->held[k], &ready));
        if (!ready) continue;
        r->held[k].ready = NULL;
        r->nheld--;
        DCP_CHECK(post(e, r, k, &r->held[k]));
    }
    return DCP_OK;
}
static void ucx_cancel(dcp_engine_t *base, dcp_xfer_req_t *r);

static dcp_status_t ucx_launch(dcp_engine_t *base, const dcp_xfer_op_t *ops, int64_t n,
                               dcp_xfer_req_t **req_out)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    for (int64_t k = 0; k < n; k++)
        if (ops[k].peer < 0 || ops[k].peer >= base->size || ops[k].peer == base->rank ||
            (ops[k].tag & DCP_TAG_CONTROL))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "ucx: op %lld has peer %d or a control tag",
                                 (long long)k, ops[k].peer);
    dcp_xfer_req_t *r = NULL;
    DCP_CHECK(dcp_calloc(&r, 1, sizeof *r, "ucx request"));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&r->reqs, n, sizeof *r->reqs, "ucx request"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&r->status, n, sizeof *r->status, "ucx request"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&r->peer, n, sizeof *r->peer, "ucx request"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&r->send, n, sizeof *r->send, "ucx request"), st, err);
    r->n = n;
    r->pending = n;
    for (int64_t k = 0; k < n; k++) {
        r->peer[k] = ops[k].peer;
        r->send[k] = (uint8_t)(ops[k].send != 0);
        r->status[k] = UCS_INPROGRESS;
        int ready = 1;
        DCP_CHECK_GOTO(is_ready(e, &ops[k], &ready), st, err);
        if (ready) {
            st = post(e, r, k, &ops[k]);
            if (st == DCP_OK) continue;
            /* the ops posted so far are withdrawn; those after k were never counted out */
            r->pending -= n - k - 1;
            r->n = k;
            ucx_cancel(base, r);
            return st;
        }
        /* its region is not written (send) or not free (receive) yet: posted once it is */
        if (!r->held)
            DCP_CHECK_GOTO(dcp_calloc(&r->held, n, sizeof *r->held, "ucx request"), st, err);
        r->held[k] = ops[k];
        r->nheld++;
    }
    *req_out = r;
    return DCP_OK;
err:
    free_req(r);
    return st;
}

static dcp_status_t ucx_test(dcp_engine_t *base, dcp_xfer_req_t *r, int *done_out)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    DCP_CHECK(post_ready(e, r));
    progress(e);
    const dcp_status_t st = harvest(e, r);
    *done_out = r->pending == 0;
    return st;
}

static dcp_status_t ucx_wait(dcp_engine_t *base, dcp_xfer_req_t *r, double timeout_s, void *stream)
{
    (void)stream; /* UCX completes on the host: the ops are done when this returns */
    ucx_engine_t *e = (ucx_engine_t *)base;
    const double start = dcp_now(), deadline = start + timeout_s;
    double grace_end = -1; /* set once the deadline has passed */
    for (dcp_poll_t poll = dcp_poll_start();; dcp_poll_pause(&poll)) {
        DCP_CHECK(post_ready(e, r));
        progress(e);
        DCP_CHECK(harvest(e, r));
        if (r->pending == 0) break;
        check_liveness(e);
        if (e->failed_peer >= 0)
            return dcp_set_error(DCP_ERR_PEER,
                                 "ucx: rank %d failed (%s); rank %d stops waiting after %.2f s",
                                 e->failed_peer, e->failed_reason, base->rank, dcp_now() - start);
        if ((poll.polls & 255) == 0 && dcp_now() > deadline) {
            int32_t peer = -1;
            for (int64_t i = 0; i < r->n && peer < 0; i++)
                if (r->reqs[i] || (r->held && r->held[i].ready)) peer = r->peer[i];
            /* Past the deadline a wait listens longer for a notice before it blames the peer
             * it waited for: that peer may itself be waiting for the rank that failed (the
             * ranks of a host whose link went down), and its own timeout names that one. A
             * peer of this node whose process runs (not stopped) is such a waiter unless it
             * hangs: it has not launched the step of this rank's transfer, so it is blocked in
             * an earlier wait, whose timeout ends within about one timeout of this one's; the
             * wait listens that long. (With min(2 s, timeout / 2), a host-0 rank of
             * tests/cluster's link-down case once blamed its host-0 peer, whose own timeout
             * came later and named the rank of host 1.) */
            if (grace_end < 0) {
                const int64_t pid = e->local_pid && peer >= 0 ? e->local_pid[peer] : 0;
                const char state = pid > 0 ? process_state(pid) : 0;
                const int running = state == 'R' || state == 'S' || state == 'D';
                grace_end =
                    deadline + (running ? timeout_s : fmin(TIMEOUT_GRACE_S, 0.5 * timeout_s));
            }
            if (dcp_now() <= grace_end) continue;
            if (e->suspect < 0) e->suspect = peer;
            return dcp_set_error(DCP_ERR_TIMEOUT,
                                 "ucx: rank %d waited %.1f s for %lld of %lld transfers "
                                 "(the first with rank %d)",
                                 base->rank, timeout_s, (long long)r->pending, (long long)r->n,
                                 peer);
        }
    }
    free_req(r);
    return DCP_OK;
}

static void ucx_cancel(dcp_engine_t *base, dcp_xfer_req_t *r)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    if (!r) return;
    for (int64_t i = 0; i < r->n; i++)
        if (r->reqs[i]) ucp_request_cancel(e->worker, r->reqs[i]);
    r->pending -= r->nheld; /* never posted */
    r->nheld = 0;
    const double deadline = dcp_now() + CANCEL_GRACE_S;
    while (r->pending > 0 && dcp_now() < deadline) {
        progress(e);
        harvest(e, r);
    }
    for (int64_t i = 0; i < r->n; i++) /* still running: UCX frees them when they end */
        if (r->reqs[i]) ucp_request_free(r->reqs[i]);
    free_req(r);
}

/* Tells every peer that this rank has failed, flushing the notices briefly. The notice
 * names the failure this rank saw first (a dead peer, or the peer a timed-out wait waited
 * for), so that a rank relaying a failure is not blamed for it; its own rank otherwise. A peer
 * blamed only because a transfer with it broke is told too, unless its process is gone: it
 * may be alive, and would otherwise learn of the failure only once the others have exited
 * (and then blame one of them). */
static void ucx_abort(dcp_engine_t *base, const char *reason)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    if (e->self_failed) return;
    e->self_failed = 1;
    const int32_t origin = e->failed_peer >= 0 ? e->failed_peer
                           : e->suspect >= 0   ? e->suspect
                                               : base->rank;
    /* a relayed failure travels with its origin's reason */
    const char *why = e->failed_peer >= 0 && e->failed_reason[0] ? e->failed_reason
                      : reason && *reason                        ? reason
                                                                 : "no reason given";
    void **reqs = e->close_reqs;
    abort_msg_t *me = e->abort_out;
    if (!reqs || !me) return; /* no endpoints yet: nobody to tell */
    for (int32_t p = 0; p < base->size; p++) {
        reqs[p] = NULL;
        if (p == base->rank) continue;
        if (p == e->failed_peer && (e->peer_dead || (e->local_pid && e->local_pid[p] > 0 &&
                                                     process_gone(e->local_pid[p]))))
            continue;
        me[p] = (abort_msg_t){origin, base->rank, {0}};
        snprintf(me[p].reason, sizeof me[p].reason, "%s", why);
        ucp_request_param_t prm = {0};
        /* only the reason's bytes travel: a short notice fits a shared-memory FIFO element
           whole, so it does not depend on the sender's memory once this rank has exited */
        const size_t len = offsetof(abort_msg_t, reason) + strlen(me[p].reason) + 1;
        void *q = ucp_tag_send_nbx(e->eps[p], &me[p], len, TAG_ABORT, &prm);
        reqs[p] = UCS_PTR_IS_PTR(q) ? q : NULL;
    }
    const double deadline = dcp_now() + 1.0;
    for (int busy = 1; busy && dcp_now() < deadline;) {
        progress(e);
        busy = 0;
        for (int32_t p = 0; p < base->size; p++)
            if (reqs[p] && ucp_request_check_status(reqs[p]) == UCS_INPROGRESS) busy = 1;
    }
    for (int32_t p = 0; p < base->size; p++)
        if (reqs[p]) {
            if (ucp_request_check_status(reqs[p]) == UCS_INPROGRESS)
                ucp_request_cancel(e->worker, reqs[p]);
            ucp_request_free(reqs[p]);
            reqs[p] = NULL;
        }
}

static dcp_status_t ucx_health(dcp_engine_t *base)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    progress(e);
    check_liveness(e);
    if (e->failed_peer >= 0)
        return dcp_set_error(DCP_ERR_PEER, "ucx: rank %d of the job failed (%s)", e->failed_peer,
                             e->failed_reason);
    if (e->self_failed)
        return dcp_set_error(DCP_ERR_PEER,
                             "ucx: this rank failed in an earlier call; destroy the context "
                             "and create a new one on every rank");
    return DCP_OK;
}

static dcp_status_t ucx_register(dcp_engine_t *base, void *ptr, size_t bytes)
{
    (void)base, (void)ptr, (void)bytes; /* host memory: UCX registers on demand and caches */
    return DCP_OK;
}

static void ucx_deregister(dcp_engine_t *base, void *ptr)
{
    (void)base, (void)ptr;
}

/* Closes every endpoint, flushing first while the job is healthy. */
static void close_eps(ucx_engine_t *e)
{
    const int healthy = e->failed_peer < 0 && !e->self_failed;
    const int32_t n = e->base.size;
    void **reqs = e->close_reqs;
    for (int32_t p = 0; reqs && p < n; p++) reqs[p] = NULL;
    for (int32_t p = 0; p < n; p++) {
        if (!e->eps || !e->eps[p]) continue;
        /* a failed job: endpoints with peer error handling close by force; the others are
         * left to the worker's destruction (UCX allows force only with peer handling) */
        if (!healthy && !e->peer_mode[p]) continue;
        ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                   .flags = healthy ? 0 : UCP_EP_CLOSE_FLAG_FORCE};
        void *q = ucp_ep_close_nbx(e->eps[p], &prm);
        if (reqs && UCS_PTR_IS_PTR(q)) reqs[p] = q;
    }
    const double deadline = dcp_now() + CLOSE_FLUSH_S;
    for (int busy = 1; busy && reqs;) {
        ucp_worker_progress(e->worker);
        busy = 0;
        for (int32_t p = 0; p < n; p++)
            if (reqs[p] && ucp_request_check_status(reqs[p]) == UCS_INPROGRESS) busy = 1;
        if (dcp_now() > deadline) break;
    }
    for (int32_t p = 0; p < n && reqs; p++)
        if (reqs[p]) ucp_request_free(reqs[p]);
}

/* After a failure, peers' blocks may have arrived that no receive will ever take: receives
 * them into scratch memory (for at most a second), so that the worker closes without a
 * warning per message. */
static void drain_unexpected(ucx_engine_t *e)
{
    char keep[512];
    dcp_error_save(keep, sizeof keep);
    const double deadline = dcp_now() + 1.0;
    while (dcp_now() < deadline) {
        ucp_worker_progress(e->worker);
        ucp_tag_recv_info_t info;
        ucp_tag_message_h msg = ucp_tag_probe_nb(e->worker, 0, 0, 1, &info);
        if (!msg) break;
        void *scratch = NULL;
        if (dcp_calloc(&scratch, (int64_t)info.length, 1, "ucx drain") != DCP_OK) {
            dcp_set_error(DCP_ERR_NO_MEMORY, "%s", keep); /* destroy records nothing */
            break;
        }
        ucp_request_param_t p = {0};
        void *q = ucp_tag_msg_recv_nbx(e->worker, scratch, info.length, msg, &p);
        while (UCS_PTR_IS_PTR(q) && ucp_request_check_status(q) == UCS_INPROGRESS &&
               dcp_now() < deadline)
            ucp_worker_progress(e->worker);
        if (UCS_PTR_IS_PTR(q)) {
            if (ucp_request_check_status(q) == UCS_INPROGRESS) ucp_request_cancel(e->worker, q);
            ucp_request_free(q);
        }
        free(scratch);
    }
}

static void ucx_destroy(dcp_engine_t *base)
{
    ucx_engine_t *e = (ucx_engine_t *)base;
    if (e->worker) {
        /* peers may still be completing sends to this rank (a rendezvous ends with an
         * acknowledgement): meet them before closing, unless the job has failed (a failed
         * peer may never come; every rank whose call failed skips it alike, so that the
         * ranks' next bootstrap collective, a new context's, stays in step) */
        progress(e); /* a notice already here: the job has failed, no collective close */
        if (e->failed_peer < 0 && !e->self_failed && e->bs)
            dcp_bootstrap_agree(e->bs, DCP_OK, "ucx close");
        if (e->abort_req) {
            ucp_request_cancel(e->worker, e->abort_req);
            ucp_worker_progress(e->worker);
            ucp_request_free(e->abort_req);
        }
        if (e->failed_peer >= 0 || e->self_failed) drain_unexpected(e);
        close_eps(e);
        ucp_worker_destroy(e->worker);
    }
    if (e->ctx) ucp_cleanup(e->ctx);
    free(e->eps);
    free(e->refs);
    free(e->local_pid);
    free(e->peer_mode);
    free(e->close_reqs);
    free(e->abort_out);
    free(e);
}

static const dcp_engine_ops_t ucx_ops = {
    .name = "ucx",
    .mem_register = ucx_register,
    .mem_deregister = ucx_deregister,
    .launch = ucx_launch,
    .test = ucx_test,
    .wait = ucx_wait,
    .cancel = ucx_cancel,
    .abort = ucx_abort,
    .health = ucx_health,
    .destroy = ucx_destroy,
};

static dcp_status_t init_worker(ucx_engine_t *e)
{
    static pthread_once_t filter_once = PTHREAD_ONCE_INIT;
    pthread_once(&filter_once, install_log_filter);
    ucp_config_t *cfg = NULL;
    ucs_status_t s = ucp_config_read(NULL, NULL, &cfg);
    if (s != UCS_OK) return ucx_error(s, "ucp_config_read");
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    s = ucp_init(&params, cfg, &e->ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) return ucx_error(s, "ucp_init");
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    s = ucp_worker_create(e->ctx, &wp, &e->worker);
    if (s != UCS_OK) return ucx_error(s, "ucp_worker_create");
    return DCP_OK;
}

/* Which peers get UCX peer error handling. UCX 1.13's shared-memory transports have none,
 * so asking for it within a node would push same-node traffic onto TCP or the NIC:
 *   auto (default)  peer handling between nodes; within a node none, with liveness checks
 *   peer            peer handling everywhere (same-node traffic leaves shared memory)
 *   none            nowhere: dead peers are found by liveness checks (same node) and
 *                   timeouts
 * from $DCP_UCX_ERR_MODE. */
static dcp_status_t err_mode_policy(int *mode_out)
{
    int64_t mode = 0; /* the table's words: auto 0, peer 1, none 2 */
    DCP_CHECK(dcp_env_int(DCP_ENV_UCX_ERR_MODE, &mode));
    *mode_out = (int)mode;
    return DCP_OK;
}

/* Exchanges worker addresses (lengths first, then padded addresses) and connects to every
 * peer; which peers share this node and pid namespace comes from the peer table. `setup`
 * is this rank's set-up so far: every rank learns of any rank's failure and all fail
 * together. The buffers of each exchange are made, and voted on, before it: a rank that
 * could not make them and left the exchange would meet the others' allgather with its next
 * collective, and each would read the other's bytes as its own. */
static dcp_status_t connect_peers(ucx_engine_t *e, const dcp_peer_table_t *peers,
                                  dcp_status_t setup)
{
    const int32_t n = e->base.size, me = e->base.rank;
    int policy = 0;
    ucp_address_t *addr = NULL;
    size_t len = 0;
    if (setup == DCP_OK) setup = err_mode_policy(&policy);
    if (setup == DCP_OK) {
        const ucs_status_t s = ucp_worker_get_address(e->worker, &addr, &len);
        if (s != UCS_OK) setup = ucx_error(s, "ucp_worker_get_address");
    }
    uint64_t most = 0, mine = len, *lens = NULL;
    char *all = NULL, *padded = NULL;
    dcp_status_t st;
    if (setup == DCP_OK) setup = dcp_calloc(&lens, n, sizeof *lens, "ucx addresses");
    DCP_CHECK_GOTO(dcp_bootstrap_agree(e->bs, setup, "ucx worker set-up"), st, out);
    DCP_CHECK_GOTO(dcp_bootstrap_allgather(e->bs, &mine, lens, sizeof mine, "ucx address sizes"),
                   st, out);
    for (int32_t p = 0; p < n; p++) most = lens[p] > most ? lens[p] : most;
    st = dcp_calloc(&padded, (int64_t)most, 1, "ucx addresses");
    if (st == DCP_OK) st = dcp_calloc(&all, (int64_t)most * n, 1, "ucx addresses");
    DCP_CHECK_GOTO(dcp_bootstrap_agree(e->bs, st, "ucx address buffers"), st, out);
    memcpy(padded, addr, len);
    DCP_CHECK_GOTO(dcp_bootstrap_allgather(e->bs, padded, all, most, "ucx addresses"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->eps, n, sizeof *e->eps, "ucx endpoints"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->refs, n, sizeof *e->refs, "ucx endpoints"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->local_pid, n, sizeof *e->local_pid, "ucx endpoints"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->peer_mode, n, sizeof *e->peer_mode, "ucx endpoints"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->close_reqs, n, sizeof *e->close_reqs, "ucx endpoints"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e->abort_out, n, sizeof *e->abort_out, "ucx endpoints"), st, out);
    for (int32_t p = 0; p < n; p++) {
        if (p == me) continue;
        const int local = dcp_peers_same_pidns(peers, p, me);
        if (local && peers->peer[p].pid != peers->peer[me].pid)
            e->local_pid[p] = peers->peer[p].pid;
        e->peer_mode[p] = policy == 1 || (policy == 0 && !local);
        e->refs[p] = (peer_ref_t){e, p};
        ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
                              .address = (const ucp_address_t *)(all + (size_t)most * p),
                              .err_mode = UCP_ERR_HANDLING_MODE_NONE};
        if (e->peer_mode[p]) {
            ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
            ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
            ep.err_handler = (ucp_err_handler_t){.cb = ep_failed, .arg = &e->refs[p]};
        }
        const ucs_status_t s = ucp_ep_create(e->worker, &ep, &e->eps[p]);
        if (s != UCS_OK) {
            st = dcp_set_error(
                DCP_ERR_SYSTEM, "ucx: no transport from rank %d to rank %d (%s)%s: %s", me, p,
                local ? "same node" : "other node",
                e->peer_mode[p] ? " with peer error handling" : "", ucs_status_string(s));
            goto out;
        }
    }
    st = DCP_OK;
out:
    if (addr) ucp_worker_release_address(e->worker, addr);
    free(lens);
    free(padded);
    free(all);
    return st;
}

dcp_status_t dcp_ucx_engine_create(const dcp_bootstrap_t *bootstrap, dcp_engine_t **engine_out)
{
    return dcp_ucx_engine_create_on(bootstrap, NULL, engine_out);
}

dcp_status_t dcp_ucx_engine_create_on(const dcp_bootstrap_t *bootstrap,
                                      const dcp_peer_table_t *peers, dcp_engine_t **engine_out)
{
    if (!bootstrap || !bootstrap->allgather || bootstrap->size < 1 || bootstrap->rank < 0 ||
        bootstrap->rank >= bootstrap->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "ucx: bootstrap rank %d of %d is invalid",
                             bootstrap ? bootstrap->rank : -1, bootstrap ? bootstrap->size : -1);
    ucx_engine_t *e = NULL;
    DCP_CHECK(dcp_calloc(&e, 1, sizeof *e, "ucx engine"));
    e->base = (dcp_engine_t){&ucx_ops, bootstrap->rank, bootstrap->size, 0, 1, 1};
    e->bs = bootstrap;
    e->failed_peer = -1;
    e->suspect = -1;
    /* a rank whose worker failed still takes part in the exchanges, so that all fail */
    dcp_status_t st = init_worker(e);
    dcp_peer_table_t own = {0};
    if (!peers) {
        dcp_peer_t me;
        dcp_peer_describe_self(0, &me);
        const dcp_status_t got = dcp_peers_gather(bootstrap, &me, &own);
        if (got != DCP_OK) {
            e->bs = NULL;
            ucx_destroy(&e->base);
            return got;
        }
        peers = &own;
    }
    st = connect_peers(e, peers, st);
    dcp_peers_free(&own);
    if (st == DCP_OK) st = post_abort_listener(e);
    DCP_CHECK_GOTO(dcp_bootstrap_agree(bootstrap, st, "ucx connection"), st, err);
    *engine_out = &e->base;
    return DCP_OK;
err:
    e->bs = NULL; /* every rank fails here: no collective teardown */
    ucx_destroy(&e->base);
    return st;
}

int dcp_ucx_supports_cuda(void)
{
    ucp_config_t *cfg = NULL;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK) return 0;
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx = NULL;
    const ucs_status_t s = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (s != UCS_OK) return 0;
    ucp_context_attr_t attr = {.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES};
    const int cuda = ucp_context_query(ctx, &attr) == UCS_OK &&
                     (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
    ucp_cleanup(ctx);
    return cuda;
}

void dcp_ucx_engine_order_by(dcp_engine_t *engine,
                             dcp_status_t (*ready_query)(void *event, int *state_out))
{
    ucx_engine_t *e = (ucx_engine_t *)engine;
    e->ready_query = ready_query;
    engine->stream_ordered = ready_query != NULL;
}
