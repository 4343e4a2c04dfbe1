/*
 * The failure walks' engine (tests/README.md "Failure walks"): a call of the library is run
 * once clean, counting its allocations (or transport calls) and their sites; then again with
 * the Nth one failing, for every N (full walks) or a seeded sample of N (the sampled walks of
 * make test). Each run must end with the named status, or complete with the clean run's
 * result (a failure the library absorbs, such as a cache that is skipped, may not change
 * what it returns), and leave no block of dcp's allocator behind.
 */
#ifndef DCP_TESTS_WALK_H
#define DCP_TESTS_WALK_H

#include "include/dcp.h"
#include "tests/unit/fault_hook.h"
#include "tests/unit/walk_procs.h"

#include <stddef.h>
#include <stdint.h>

/* 1 when $DCP_WALK is "full": every N of single-process calls, larger samples elsewhere. */
int t_walk_full(void);

/* Runs of a sampled walk of processes in make test: fewer under ASan, whose processes start
 * slowly (make test-asan runs every suite again); the full walks use their own counts. */
#if defined(__SANITIZE_ADDRESS__)
#define T_PROC_RUNS(plain, asan) (asan)
#else
#define T_PROC_RUNS(plain, asan) (plain)
#endif

/* $DCP_WALK_SEED, else a fixed seed: the sample of N a walk draws. */
uint64_t t_walk_seed(void);

/* Sorted distinct N in [1, total]: all of them when the walk is full or total <= count, else
 * `count` of them drawn with `seed`, 1 and total always among them. Returns how many. */
int64_t t_walk_pick(int64_t total, int64_t count, uint64_t seed, int64_t *n_out);

/* The same, sampled in full walks too. */
int64_t t_walk_pick_sample(int64_t total, int64_t count, uint64_t seed, int64_t *n_out);

/* One run of a walked call. Everything it makes is destroyed before it returns. It returns
 * its status (its message in dcp_last_error() on the calling thread) and, on success, a digest
 * of its result in *digest_out (equal for equal results). */
typedef dcp_status_t (*t_run_fn)(void *arg, uint64_t *digest_out);

typedef struct {
    int64_t total;        /* allocations of the clean run */
    int64_t sites;        /* distinct allocation sites of the clean run */
    int64_t runs;         /* runs with a failure injected */
    int64_t named;        /* ... that ended with DCP_ERR_NO_MEMORY and a message */
    int64_t absorbed;     /* ... that completed with the clean run's result */
    int64_t directed;     /* runs that failed the first allocation at a given site */
    int64_t sites_failed; /* distinct sites at which a failure was injected */
    int64_t sites_missed; /* sites of the clean run never failed (full walks: must be 0) */
} t_walk_result_t;

/* Walks a call that runs on the calling thread (it may start threads of its own, whose
 * allocations count too): N = 1 .. total in full walks, `sample` of them otherwise (a
 * negative sample: -sample of them in full walks too). A full walk then fails, once each, the
 * first allocation at every site of the clean run that no N failed (the order of threads'
 * allocations varies), and every site must have failed. Asserts
 * (CUnit) the rules above for every run and prints one line for the walk. */
void t_alloc_walk(const char *name, t_run_fn run, void *arg, int64_t sample, t_walk_result_t *out);

/* The sites of the clean run of the last t_alloc_walk(), as "file:line" of the library's
 * sources, printed to $DCP_WALK_SITES (appended) when it is set. */
void t_walk_print_sites(const char *name, const void *const *sites, int64_t n);

/* FNV-1a over bytes, chained from h (start with 0). */
uint64_t t_digest(uint64_t h, const void *bytes, size_t n);

#endif

/* The walks' batch: four sequences (700, 300, 130 and 60 tokens) under causal, lambda,
 * sliding-window and custom masks, the shape 4/2 heads x 8 in fp32, block 128. */
typedef struct {
    int32_t lengths[4];
    dcp_mask_t masks[4];
    int32_t ranges[4 * 60];
    dcp_batch_t batch;
    dcp_attn_shape_t shape;
    dcp_plan_options_t opts;
} t_walk_batch_t;

void t_walk_batch_init(t_walk_batch_t *b, dcp_strategy_t strategy);

/* One rank's tensors for the walks' shape: deterministic Q, K, V and dO of `rank`'s rows of
 * `plan` (io->mem NULL when they cannot be allocated), their digest after a pass, release. */
typedef struct {
    float *mem;
    int64_t tokens;
    dcp_tensors_t fwd;
    dcp_grad_tensors_t bwd;
} t_rank_io_t;

void t_rank_io_init(t_rank_io_t *io, const dcp_plan_t *plan, int32_t rank);
uint64_t t_rank_io_digest(const t_rank_io_t *io, uint64_t h);
void t_rank_io_free(t_rank_io_t *io);

/* Forward, then backward, of `plan` on ctx over deterministic rows of ctx's rank. After a
 * failure the context's next call must say so (DCP_ERR_PEER, at once): when it does not,
 * DCP_ERR_INTERNAL naming what it returned; otherwise the failure's own status and message.
 * *digest_out covers the outputs and gradients. */
dcp_status_t t_rank_pass(dcp_context_t *ctx, const dcp_plan_t *plan, int32_t rank,
                         uint64_t *digest_out);

/* How long after an injected failure every rank has ended, beyond the timeout: the timeout
 * bounds a wait for a rank that failed; the margin covers a rank's own work between the failure
 * and that wait, the second a hybrid's threads give each other on top of the timeout
 * (plugin/hybrid.c), and a slow machine (ASan on 2 shared cores). */
#define T_END_MARGIN_S 2.0

/* Walks a job of ranks as processes (walk_procs.h): a clean run counts each process's
 * allocations (transport = 0) or transport calls (transport = 1); then `sample` runs each fail
 * one process's Nth, process and N drawn with the walk's seed (the first run: N = 1). Every
 * process must exit by itself with 0 (no crash, no hang, no leak report) and leave no block
 * behind; the victim's rank (or ranks) ends with the named status, every other rank completes
 * or stops with DCP_ERR_PEER or DCP_ERR_TIMEOUT naming a rank, within the timeout (plus
 * T_END_MARGIN_S) of the failure. */
void t_job_walk(const char *name, int32_t procs, int32_t threads, int transport, int64_t sample);

/* The rules of a multi-rank run on its ranks' results: "" when they hold, else why not (into
 * why). Ranks [own_lo, own_hi) are the victim's: an allocation failure ends one of them with
 * DCP_ERR_NO_MEMORY. Every other failed rank ends with DCP_ERR_PEER or DCP_ERR_TIMEOUT, or with
 * the status a vote of the set-up carried to it (DCP_ERR_NO_MEMORY; with `transport`,
 * DCP_ERR_SYSTEM), naming a rank; with `transport` every failed rank names the call (a send, a
 * receive, a block copy). When a failure was injected (fired_at > 0: dcp_test_fired_time()),
 * every rank ends within timeout_s + T_END_MARGIN_S of it. */
const char *t_judge_ranks(const t_rank_result_t *r, int32_t n, int32_t own_lo, int32_t own_hi,
                          int transport, double timeout_s, double fired_at, char *why, size_t cap);

/* Ranks as threads of this process on the walks' batch: the plan made on `cluster` (a spec),
 * then a group of in-process ranks with their contexts, all on this thread (a failure there
 * is returned, with nothing run); then every rank runs t_rank_pass on its own thread into
 * out[rank]; everything is destroyed before it returns. */
dcp_status_t t_group_pass(const t_walk_batch_t *b, const char *cluster, int32_t ranks,
                          double timeout_s, t_rank_result_t *out);
