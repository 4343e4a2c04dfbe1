/* The runtime objects behind dcp_group_t and dcp_context_t. */
#ifndef DCP_PLUGIN_CONTEXT_H
#define DCP_PLUGIN_CONTEXT_H

#include "include/base/descr.h"
#include "kernels/device.h"
#include "plugin/attn_engine.h"
#include "plugin/binding.h"
#include "plugin/job.h"
#include "plugin/stamp.h"
#include "plugin/variants.h"
#include "transport/engine.h"
#include "transport/inproc.h"
#include "transport/select.h"

struct dcp_group {
    dcp_inproc_hub_t *hub;
};

struct dcp_context {
    int32_t rank;
    dcp_engine_t *engine;
    dcp_engine_kind_t engine_kind[DCP_LINK_COUNT];
    dcp_peer_table_t peers; /* process ranks: the job's peer table (empty for threads) */
    dcp_cluster_t *cluster; /* process ranks: the cluster they form, when it is regular */
    char cluster_why[160];  /* why there is none */
    int32_t device;         /* CUDA device ordinal; -1: the CPU */
    const dcp_device_t *dev;
    void *stream;                      /* kernels, uploads and fills (NULL on the CPU) */
    void *xfer_stream;                 /* the in-process block copies this rank performs */
    int owns_stream, owns_xfer_stream; /* 0: lent by the caller */
    void *entry, *exit; /* events: the caller's stream -> stream -> the caller's stream */
    char *sync_dev;     /* GPU: the barrier's two bytes (NCCL moves device memory only) */
    double timeout_s;
    uint32_t barriers;     /* barriers so far: each one's tags differ from the last's */
    dcp_binding_t bound;   /* what the last plan run needs, kept for the next call */
    dcp_stamps_t stamps;   /* this call's identity, exchanged with the peers */
    uint64_t calls;        /* forward and backward calls so far (the stamps' call count) */
    double wait_blocked_s; /* host time spent blocked in COMM_WAIT, summed over calls */
    double queued_at;      /* GPU: when the last call returned with work queued (dcp_now());
                              0: none left unfinished at the last look */
    uint64_t queued_call;  /* that call's number (the stamps' call count) and pass */
    int32_t queued_pass;
    char transport_note[256]; /* dcp_context_transport_note() */
    int drive_progress;    /* the executor tests transfers in flight while it computes */
    dcp_attn_state_t attn; /* what runs the dense segments (attn_engine.h) */
    dcp_variants_t variants; /* the max logit's maxima (variants.h) */
};

/* The engine's health and dcp_context_watch() at the start of a call or a barrier
 * (synchronize.c). A failure seen there is relayed to the other peers (engine abort) like one
 * seen inside a call: peers already inside would otherwise find this rank gone once it exits,
 * and blame it (tests/mpi/kill.sh's midrun kill: ranks 2 and 3 named rank 0, which had seen
 * rank 1 die between calls and exited without a notice). */
dcp_status_t dcp_context_health(dcp_context_t *ctx);

/* Records that call ctx->calls (pass `pass`) returned with its work queued (GPU contexts):
 * dcp_context_watch() finds it if it does not finish. */
void dcp_context_queued(dcp_context_t *ctx, dcp_pass_t pass);

/* GPU work that outlives its call: the stamps of earlier calls that have landed are compared
 * (plugin/stamp.h), and the last call's work, when it has not finished within the context's
 * timeout of the call's return, gives DCP_ERR_TIMEOUT naming the peers it exchanges blocks
 * with. Never waits. Called by dcp_context_health(). */
dcp_status_t dcp_context_watch(dcp_context_t *ctx);

/* Writes ctx->transport_note (dcp_context_transport_report), and prints it under
 * $DCP_DEBUG; once the engine and the stamps' channel are set. */
void dcp_context_describe_transport(dcp_context_t *ctx);

/* Tests: dcp_context_create() for a rank of an in-process group (config->group), whose engine
 * `wrap` replaces before anything uses it: wrap gets the group's in-process engine (owning it
 * from then on, also on failure) and gives the engine the context uses. */
typedef dcp_status_t (*dcp_engine_wrap_fn)(void *user, int32_t rank, dcp_engine_t *inner,
                                           dcp_engine_t **engine_out);
dcp_status_t dcp_context_create_wrapped(const dcp_context_config_t *config, dcp_engine_wrap_fn wrap,
                                        void *user, dcp_context_t **ctx_out);

/* Default per-wait timeout: $DCP_TIMEOUT_S when set, else 60 s; a value that is not a
 * number of seconds > 0 is refused naming the variable. */
dcp_status_t dcp_context_default_timeout(double *timeout_s_out);

/* In-process ranks: a group and one context per rank, each configured as `base` (timeout,
 * device, attention engine; its rank and group are set here), created together and destroyed
 * together (destroy accepts a partial set). */
dcp_status_t dcp_inproc_contexts_create(int32_t n, const dcp_context_config_t *base,
                                        dcp_group_t **group_out, dcp_context_t ***ctx_out);
void dcp_inproc_contexts_destroy(int32_t n, dcp_group_t *group, dcp_context_t **ctx);

/* Runs ctx[r] on io[r] for every rank, rank r > 0 on its own thread, on the legacy default
 * stream, and waits for the work; the first failure of any rank (its own error preferred to
 * the PEER/TIMEOUT it caused in the others). host_ms_out (may be NULL): the longest time a
 * rank's call took to return, before the wait for its work. */
dcp_status_t dcp_forward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                               const dcp_tensors_t *io, double *host_ms_out);
dcp_status_t dcp_backward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                                const dcp_grad_tensors_t *io, double *host_ms_out);

#endif
