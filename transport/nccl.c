#include "transport/nccl.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/poll.h"
#include "include/base/test_hook.h"
#include "transport/bootstrap.h"
#include "transport/lent.h"
#include "transport/peers.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The NCCL entry points dcp uses, resolved from the loaded library. */
typedef struct {
    void *lib;
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, ncclConfig_t *);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*finalize)(ncclComm_t);
    ncclResult_t (*destroy)(ncclComm_t);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*comm_count)(const ncclComm_t, int *);
    ncclResult_t (*user_rank)(const ncclComm_t, int *);
    ncclResult_t (*cu_device)(const ncclComm_t, int *);
} nccl_api_t;

typedef struct {
    dcp_engine_t base;
    nccl_api_t api;
    ncclComm_t comm;
    int owns_comm;
    int device;
    cudaStream_t stream;
    int owns_stream;
    int failed; /* the communicator was aborted: every later call fails */
    double timeout_s; /* the context's: communicator set-up, launches, finalisation */
} nccl_engine_t;

struct dcp_xfer_req {
    cudaEvent_t done; /* recorded after the group on the engine's stream; NULL: nothing was
                         launched (call stamps only), complete at once */
    int owns_done;    /* created here (ops without a done event: barriers, benches) */
};

static dcp_status_t load_api(nccl_api_t *a)
{
    const char *path = NULL;
    DCP_CHECK(dcp_env_str(DCP_ENV_NCCL_LIB, &path)); /* libnccl.so.2 when unset */
    a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!a->lib)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: cannot load %s (%s); set DCP_NCCL_LIB",
                             path, dlerror());
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&a->get_unique_id, "ncclGetUniqueId"},
        {(void **)&a->init_rank_config, "ncclCommInitRankConfig"},
        {(void **)&a->async_error, "ncclCommGetAsyncError"},
        {(void **)&a->finalize, "ncclCommFinalize"},
        {(void **)&a->destroy, "ncclCommDestroy"},
        {(void **)&a->abort, "ncclCommAbort"},
        {(void **)&a->group_start, "ncclGroupStart"},
        {(void **)&a->group_end, "ncclGroupEnd"},
        {(void **)&a->send, "ncclSend"},
        {(void **)&a->recv, "ncclRecv"},
        {(void **)&a->error_string, "ncclGetErrorString"},
        {(void **)&a->comm_count, "ncclCommCount"},
        {(void **)&a->user_rank, "ncclCommUserRank"},
        {(void **)&a->cu_device, "ncclCommCuDevice"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].fn = dlsym(a->lib, syms[i].name);
        if (!*syms[i].fn) {
            dlclose(a->lib);
            a->lib = NULL;
            return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: the library lacks %s (NCCL >= 2.14)",
                                 syms[i].name);
        }
    }
    return DCP_OK;
}

static dcp_status_t cuda_error(cudaError_t e, const char *what)
{
    return dcp_set_error(DCP_ERR_SYSTEM, "nccl: %s: %s", what, cudaGetErrorString(e));
}

/* The engine's stream and events are the library's resources too: they pass the allocation
 * failure hook of include/base/test_hook.h with their caller as the site (test builds compile
 * this file again with the hook, as they do the device tables), and one refused for lack of
 * memory is DCP_ERR_NO_MEMORY, as the device tables' are (kernels/device.h). */
static dcp_status_t create_failed(cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return dcp_set_error(e == cudaErrorMemoryAllocation ? DCP_ERR_NO_MEMORY : DCP_ERR_SYSTEM,
                         "nccl: %s: %s", what, cudaGetErrorString(e));
}

__attribute__((noinline)) static dcp_status_t stream_create(cudaStream_t *stream_out)
{
    const cudaError_t e = DCP_TEST_ALLOC_FAILS(DCP_ALLOC_SITE())
                              ? cudaErrorMemoryAllocation
                              : cudaStreamCreateWithFlags(stream_out, cudaStreamNonBlocking);
    return e == cudaSuccess ? DCP_OK : create_failed(e, "stream create");
}

__attribute__((noinline)) static dcp_status_t event_create(cudaEvent_t *event_out)
{
    const cudaError_t e = DCP_TEST_ALLOC_FAILS(DCP_ALLOC_SITE())
                              ? cudaErrorMemoryAllocation
                              : cudaEventCreateWithFlags(event_out, cudaEventDisableTiming);
    return e == cudaSuccess ? DCP_OK : create_failed(e, "event create");
}

static dcp_status_t nccl_error(const nccl_engine_t *e, ncclResult_t r, const char *what)
{
    /* remote and system errors mean a peer or its link is gone */
    const dcp_status_t st =
        r == ncclRemoteError || r == ncclSystemError ? DCP_ERR_PEER : DCP_ERR_SYSTEM;
    return dcp_set_error(st, "nccl: %s on rank %d: %s", what, e->base.rank, e->api.error_string(r));
}

/* Waits for a non-blocking communicator to leave ncclInProgress. */
static dcp_status_t settle(nccl_engine_t *e, const char *what, double timeout_s)
{
    const double deadline = dcp_now() + timeout_s;
    for (;;) {
        ncclResult_t r = ncclSuccess;
        e->api.async_error(e->comm, &r);
        if (r == ncclSuccess) return DCP_OK;
        if (r != ncclInProgress) return nccl_error(e, r, what);
        if (dcp_now() > deadline)
            return dcp_set_error(DCP_ERR_TIMEOUT, "nccl: %s on rank %d took over %.0f s", what,
                                 e->base.rank, timeout_s);
        sched_yield();
    }
}

static void fail(nccl_engine_t *e)
{
    if (e->failed) return;
    e->failed = 1;
    if (e->comm && e->owns_comm) e->api.abort(e->comm);
}

static dcp_status_t nccl_register(dcp_engine_t *base, void *ptr, size_t bytes)
{
    (void)base, (void)ptr, (void)bytes; /* NCCL copies through its own buffers */
    return DCP_OK;
}

static void nccl_deregister(dcp_engine_t *base, void *ptr)
{
    (void)base, (void)ptr;
}

/* Per peer and direction, tag order: the order NCCL will match in on both sides. */
static int op_order(const void *a, const void *b)
{
    const dcp_xfer_op_t *x = *(const dcp_xfer_op_t *const *)a,
                        *y = *(const dcp_xfer_op_t *const *)b;
    if (x->peer != y->peer) return x->peer < y->peer ? -1 : 1;
    if (x->send != y->send) return x->send < y->send ? -1 : 1;
    return (x->tag > y->tag) - (x->tag < y->tag);
}

static dcp_status_t nccl_launch(dcp_engine_t *base, const dcp_xfer_op_t *ops, int64_t n,
                                dcp_xfer_req_t **req_out)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (e->failed) return dcp_set_error(DCP_ERR_PEER, "nccl: the communicator was aborted");
    for (int64_t k = 0; k < n; k++)
        if (ops[k].peer < 0 || ops[k].peer >= base->size || ops[k].peer == base->rank)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "nccl: op %lld has peer %d", (long long)k,
                                 ops[k].peer);
    for (int64_t k = 0; k < n; k++)
        if (dcp_tag_is_host_stamp(ops[k].tag)) /* host_stamps is 0: the context knows */
            return dcp_set_error(DCP_ERR_INTERNAL,
                                 "nccl: op %lld is a call stamp in host memory, which NCCL "
                                 "cannot move",
                                 (long long)k);
    const dcp_xfer_op_t **order = NULL;
    dcp_xfer_req_t *r = NULL;
    dcp_status_t st;
    if (n == 0) { /* no event: the host never waits on the engine's stream for nothing */
        DCP_CHECK(dcp_calloc(&r, 1, sizeof *r, "nccl request"));
        *req_out = r;
        return DCP_OK;
    }
    DCP_CHECK(dcp_calloc(&order, n, sizeof *order, "nccl launch"));
    DCP_CHECK_GOTO(dcp_calloc(&r, 1, sizeof *r, "nccl request"), st, out);
    for (int64_t k = 0; k < n; k++) order[k] = &ops[k];
    qsort(order, (size_t)n, sizeof *order, op_order);
    cudaError_t ce = cudaSetDevice(e->device);
    /* the group starts after the kernels that made its regions ready */
    for (int64_t k = 0; k < n && ce == cudaSuccess; k++)
        if (ops[k].ready && (k == 0 || ops[k].ready != ops[k - 1].ready))
            ce = cudaStreamWaitEvent(e->stream, (cudaEvent_t)ops[k].ready, 0);
    st = ce == cudaSuccess ? DCP_OK : cuda_error(ce, "stream wait");
    if (st == DCP_OK && n > 0 && ops[0].done) {
        r->done = (cudaEvent_t)ops[0].done;
    } else if (st == DCP_OK) {
        r->owns_done = 1;
        st = event_create(&r->done);
    }
    if (st != DCP_OK) goto out;
    ncclResult_t nr = e->api.group_start();
    for (int64_t k = 0; k < n && (nr == ncclSuccess || nr == ncclInProgress); k++)
        nr = order[k]->send ? e->api.send(order[k]->ptr, order[k]->bytes, ncclUint8, order[k]->peer,
                                          e->comm, e->stream)
                            : e->api.recv(order[k]->ptr, order[k]->bytes, ncclUint8, order[k]->peer,
                                          e->comm, e->stream);
    const ncclResult_t end = e->api.group_end();
    if (nr == ncclSuccess || nr == ncclInProgress) nr = end;
    if (nr == ncclInProgress) {
        st = settle(e, "group launch", e->timeout_s);
    } else {
        st = nr == ncclSuccess ? DCP_OK : nccl_error(e, nr, "group launch");
    }
    if (st == DCP_OK && (ce = cudaEventRecord(r->done, e->stream)) != cudaSuccess)
        st = cuda_error(ce, "event record");
out:
    free(order);
    if (st != DCP_OK) {
        if (r && r->owns_done && r->done) cudaEventDestroy(r->done);
        free(r);
        fail(e);
        return st;
    }
    *req_out = r;
    return DCP_OK;
}

static void free_req(dcp_xfer_req_t *r)
{
    if (!r) return;
    if (r->owns_done && r->done) cudaEventDestroy(r->done);
    free(r);
}

static dcp_status_t query(nccl_engine_t *e, dcp_xfer_req_t *r, int *done)
{
    if (!r->done) {
        *done = 1;
        return DCP_OK;
    }
    const cudaError_t q = cudaEventQuery(r->done);
    *done = q == cudaSuccess;
    if (q != cudaSuccess && q != cudaErrorNotReady) return cuda_error(q, "event query");
    ncclResult_t a = ncclSuccess;
    e->api.async_error(e->comm, &a);
    if (a != ncclSuccess && a != ncclInProgress) return nccl_error(e, a, "transfer");
    return DCP_OK;
}

static dcp_status_t nccl_test(dcp_engine_t *base, dcp_xfer_req_t *r, int *done_out)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (e->failed) return dcp_set_error(DCP_ERR_PEER, "nccl: the communicator was aborted");
    return query(e, r, done_out);
}

/* With a stream the completion is ordered on the GPU and nothing waits here: a peer that
 * dies mid-transfer shows as an asynchronous error at a later call (health). */
static dcp_status_t nccl_wait(dcp_engine_t *base, dcp_xfer_req_t *r, double timeout_s, void *stream)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (stream) {
        int done = 0;
        if (e->failed) return dcp_set_error(DCP_ERR_PEER, "nccl: the communicator was aborted");
        DCP_CHECK(query(e, r, &done));
        const cudaError_t ce =
            r->done ? cudaStreamWaitEvent((cudaStream_t)stream, r->done, 0) : cudaSuccess;
        if (ce != cudaSuccess) return cuda_error(ce, "stream wait");
        free_req(r);
        return DCP_OK;
    }
    const double deadline = dcp_now() + timeout_s;
    for (dcp_poll_t poll = dcp_poll_start();; dcp_poll_pause(&poll)) {
        if (e->failed) return dcp_set_error(DCP_ERR_PEER, "nccl: the communicator was aborted");
        int done = 0;
        const dcp_status_t st = query(e, r, &done);
        if (st != DCP_OK) return st;
        if (done) break;
        if (dcp_now() > deadline)
            return dcp_set_error(DCP_ERR_TIMEOUT, "nccl: rank %d waited %.1f s for a launch",
                                 base->rank, timeout_s);
    }
    free_req(r);
    return DCP_OK;
}

/* NCCL cannot withdraw operations: the communicator is aborted, which ends them. */
static void nccl_cancel(dcp_engine_t *base, dcp_xfer_req_t *r)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (!r) return;
    fail(e);
    free_req(r);
}

/* NCCL has no failure notice: aborting ends this rank's side, and the peers' operations
 * with it fail on their side (remote error) or time out. */
static void nccl_abort(dcp_engine_t *base, const char *reason)
{
    (void)reason; /* nothing carries it: NCCL has no messages of its own to the peers */
    fail((nccl_engine_t *)base);
}

static dcp_status_t nccl_health(dcp_engine_t *base)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (e->failed) return dcp_set_error(DCP_ERR_PEER, "nccl: the communicator was aborted");
    ncclResult_t a = ncclSuccess;
    e->api.async_error(e->comm, &a);
    return a == ncclSuccess || a == ncclInProgress ? DCP_OK : nccl_error(e, a, "health");
}

static void nccl_destroy(dcp_engine_t *base)
{
    nccl_engine_t *e = (nccl_engine_t *)base;
    if (e->comm && e->owns_comm) {
        if (!e->failed && e->api.finalize(e->comm) != ncclSuccess) fail(e);
        if (!e->failed && settle(e, "finalize", e->timeout_s) != DCP_OK) fail(e);
        if (!e->failed) e->api.destroy(e->comm); /* after an abort the comm is gone */
    }
    if (e->stream && e->owns_stream) cudaStreamDestroy(e->stream);
    if (e->api.lib) dlclose(e->api.lib);
    free(e);
}

static const dcp_engine_ops_t nccl_ops = {
    .name = "nccl",
    .mem_register = nccl_register,
    .mem_deregister = nccl_deregister,
    .launch = nccl_launch,
    .test = nccl_test,
    .wait = nccl_wait,
    .cancel = nccl_cancel,
    .abort = nccl_abort,
    .health = nccl_health,
    .destroy = nccl_destroy,
};

dcp_status_t dcp_nccl_gpu_busid(int device, char *busid, size_t capacity)
{
    const cudaError_t ce = cudaDeviceGetPCIBusId(busid, (int)capacity, device);
    return ce == cudaSuccess ? DCP_OK : cuda_error(ce, "device bus id");
}

/* Two ranks of one host on one GPU cannot run NCCL: the peer table's GPU column, gathered
 * here when the caller has no table. */
static dcp_status_t check_one_rank_per_gpu(const dcp_bootstrap_t *bs, const dcp_peer_table_t *lent,
                                           int device)
{
    if (lent) return dcp_peers_check_gpus(lent, "nccl");
    char busid[32];
    dcp_peer_t me;
    dcp_peer_table_t t;
    DCP_CHECK(dcp_nccl_gpu_busid(device, busid, sizeof busid));
    dcp_peer_describe_self(0, &me);
    DCP_CHECK(dcp_peers_gather(bs, &me, &t));
    dcp_status_t st = dcp_peers_set_device(bs, device, busid, &t);
    if (st == DCP_OK) st = dcp_peers_check_gpus(&t, "nccl");
    dcp_peers_free(&t);
    return st;
}

static dcp_status_t open_comm(nccl_engine_t *e, const dcp_bootstrap_t *bs,
                              const dcp_peer_table_t *peers)
{
    DCP_CHECK(check_one_rank_per_gpu(bs, peers, e->device));
    ncclUniqueId mine, *ids = NULL;
    memset(&mine, 0, sizeof mine);
    const ncclResult_t got = bs->rank == 0 ? e->api.get_unique_id(&mine) : ncclSuccess;
    DCP_CHECK(dcp_bootstrap_agree(
        bs, got == ncclSuccess ? DCP_OK : nccl_error(e, got, "ncclGetUniqueId"), "nccl unique id"));
    DCP_CHECK(dcp_calloc(&ids, bs->size, sizeof *ids, "nccl"));
    dcp_status_t st = dcp_bootstrap_allgather(bs, &mine, ids, sizeof mine, "nccl unique id");
    if (st == DCP_OK) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0; /* waits can give up, and abort */
        const ncclResult_t r = e->api.init_rank_config(&e->comm, bs->size, ids[0], bs->rank, &cfg);
        st = r == ncclSuccess || r == ncclInProgress
                 ? settle(e, "communicator set-up", e->timeout_s)
                 : nccl_error(e, r, "ncclCommInitRankConfig");
    }
    free(ids);
    return st;
}

dcp_status_t dcp_nccl_engine_create(const dcp_bootstrap_t *bootstrap, int device, void *lent_comm,
                                    void *lent_stream, dcp_engine_t **engine_out)
{
    return dcp_nccl_engine_create_on(bootstrap, NULL, device, lent_comm, lent_stream,
                                     bootstrap ? dcp_bootstrap_timeout(bootstrap) : 0, engine_out);
}

/* What NCCL says of a lent communicator (count -1: it cannot read it). */
static dcp_lent_comm_t lent_facts(const nccl_engine_t *e, void *comm)
{
    dcp_lent_comm_t f = {-1, -1, -1};
    int count = 0, rank = 0, dev = 0;
    if (e->api.comm_count((ncclComm_t)comm, &count) == ncclSuccess &&
        e->api.user_rank((ncclComm_t)comm, &rank) == ncclSuccess &&
        e->api.cu_device((ncclComm_t)comm, &dev) == ncclSuccess)
        f = (dcp_lent_comm_t){count, rank, dev};
    return f;
}

dcp_status_t dcp_nccl_engine_create_on(const dcp_bootstrap_t *bootstrap,
                                       const dcp_peer_table_t *peers, int device, void *lent_comm,
                                       void *lent_stream, double timeout_s,
                                       dcp_engine_t **engine_out)
{
    if (!bootstrap || !bootstrap->allgather || bootstrap->size < 1 || bootstrap->rank < 0 ||
        bootstrap->rank >= bootstrap->size || !engine_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "nccl: bad bootstrap or engine_out");
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: no CUDA device");
    if (device < 0 || device >= count)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "nccl: device %d of %d", device, count);
    nccl_engine_t *e = NULL;
    DCP_CHECK(dcp_calloc(&e, 1, sizeof *e, "nccl engine"));
    e->base = (dcp_engine_t){&nccl_ops, bootstrap->rank, bootstrap->size, 1, 0, 0};
    e->device = device;
    e->timeout_s = timeout_s > 0 ? timeout_s : dcp_bootstrap_timeout(bootstrap);
    dcp_status_t st = load_api(&e->api);
    const cudaError_t ce = st == DCP_OK ? cudaSetDevice(device) : cudaSuccess;
    e->stream = (cudaStream_t)lent_stream;
    e->owns_stream = !lent_stream;
    if (st == DCP_OK && ce != cudaSuccess) st = cuda_error(ce, "set device");
    if (st == DCP_OK && !lent_stream) st = stream_create(&e->stream);
    /* a rank without NCCL or a stream fails every rank, not only itself */
    DCP_CHECK_GOTO(dcp_bootstrap_agree(bootstrap, st, "nccl set-up"), st, err);
    /* every rank lends a communicator that fits, or none lends one: checked on all at once */
    const dcp_lent_comm_t facts = lent_comm ? lent_facts(e, lent_comm) : (dcp_lent_comm_t){0};
    DCP_CHECK_GOTO(dcp_lent_comm_check(bootstrap, lent_comm ? &facts : NULL, device), st, err);
    if (lent_comm) {
        e->comm = (ncclComm_t)lent_comm;
    } else {
        e->owns_comm = 1;
        DCP_CHECK_GOTO(
            dcp_bootstrap_agree(bootstrap, open_comm(e, bootstrap, peers), "nccl communicator"), st,
            err);
    }
    *engine_out = &e->base;
    return DCP_OK;
err:
    fail(e);
    nccl_destroy(&e->base);
    return st;
}

struct dcp_nccl_test_comm {
    nccl_api_t api;
    ncclComm_t comm;
};

dcp_status_t dcp_nccl_test_comm_create(int device, void **comm_out,
                                       dcp_nccl_test_comm_t **handle_out)
{
    dcp_nccl_test_comm_t *h = NULL;
    DCP_CHECK(dcp_calloc(&h, 1, sizeof *h, "nccl test communicator"));
    dcp_status_t st = load_api(&h->api);
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (st == DCP_OK && cudaSetDevice(device) != cudaSuccess)
        st = dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: no CUDA device %d", device);
    if (st == DCP_OK && (r = h->api.get_unique_id(&id)) == ncclSuccess) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; /* blocking */
        r = h->api.init_rank_config(&h->comm, 1, id, 0, &cfg);
    }
    if (st == DCP_OK && r != ncclSuccess)
        st = dcp_set_error(DCP_ERR_SYSTEM, "nccl: a one-rank communicator: %s",
                           h->api.error_string(r));
    if (st != DCP_OK) {
        if (h->api.lib) dlclose(h->api.lib);
        free(h);
        return st;
    }
    *comm_out = h->comm;
    *handle_out = h;
    return DCP_OK;
}

void dcp_nccl_test_comm_destroy(dcp_nccl_test_comm_t *h)
{
    if (!h) return;
    h->api.destroy(h->comm);
    dlclose(h->api.lib);
    free(h);
}
