/*
 * dcp_planner_t: the planner service. Worker threads plan submitted batches in ticket order;
 * a cache keyed by the whole input (batch, shape, options) keeps the serialized bytes of
 * recent plans and hands out copies rebuilt from them.
 *
 * Every submitted batch becomes a key: an array of int32 words holding the shape, the
 * resolved options, the lengths, the layer kinds (their count, and per kind its layer count
 * and one fixed-size record per mask, fields of other mask kinds zeroed) and the CUSTOM
 * ranges. A batch of one kind given as batch.kinds has the key of its masks (its layer count
 * plays no part). The key is also the job's copy of the batch: lengths and ranges point into
 * it. A key is compared whole, after its hash, so a hit is exact.
 *
 * One mutex guards the job list, the cache and the counters; `work` wakes workers for a
 * queued job or for shutdown, `done` wakes waiters when any job finishes. A worker about to
 * plan a key that another worker is planning waits for that one and takes its cached bytes,
 * so identical batches in flight are planned once.
 */
#include "include/base/error.h"
#include "partition/model/blocks.h"
#include "partition/plan/plan.h"
#include "partition/planner.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SVC_MAX_THREADS   256
#define SVC_DEFAULT_CACHE 16
#define SVC_DEFAULT_BYTES ((int64_t)256 << 20)
#define SVC_MSG_CAP       512
#define SVC_MASK_WORDS    6  /* kind + up to five parameter words */
#define SVC_HEAD_WORDS    32 /* room for put_head()'s 29 words */

/* Serialized plan bytes, shared by the cache and the workers that copy from them. */
typedef struct {
    int64_t refs; /* guarded by the planner mutex */
    size_t size;
    uint8_t bytes[];
} svc_blob_t;

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state_t;

typedef struct {
    uint64_t ticket;
    job_state_t state;
    int planning; /* past the cache: calling dcp_plan_create() */
    int claimed;  /* a caller is waiting for it */

    /* inputs: key[] holds everything; lengths and CUSTOM ranges point into it */
    int32_t *key;
    int64_t key_words;
    uint64_t hash;
    dcp_attn_shape_t shape;
    dcp_plan_options_t opts;
    dcp_batch_t batch;
    dcp_mask_t *masks; /* [kinds x num_seqs] */
    dcp_layer_kind_t kinds[DCP_MAX_KINDS];

    /* result */
    dcp_status_t status;
    dcp_plan_t *plan;
    char msg[SVC_MSG_CAP];
} svc_job_t;

typedef struct {
    int32_t *key;
    int64_t key_words;
    uint64_t hash;
    svc_blob_t *blob;
    uint64_t used; /* LRU clock value of the last hit or insertion */
} svc_entry_t;

struct dcp_planner {
    const dcp_cluster_t *cluster;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t *threads;
    int32_t num_threads;
    int stop;

    /* uncollected tickets, ascending: the first queued one is the next to plan */
    svc_job_t **jobs;
    int64_t num_jobs, jobs_cap;
    uint64_t next_ticket;

    svc_entry_t *cache;
    int32_t cache_cap, cache_count;
    int64_t bytes_cap, bytes; /* the byte bound and what the entries hold */
    uint64_t clock;

    dcp_planner_stats_t stats;
};

/* ---- keys ------------------------------------------------------------------------------ */

static void put64(int32_t *w, uint64_t v)
{
    w[0] = (int32_t)(uint32_t)v;
    w[1] = (int32_t)(uint32_t)(v >> 32);
}

static void put_double(int32_t *w, double d)
{
    uint64_t v;
    memcpy(&v, &d, sizeof v);
    put64(w, v);
}

/* The shape and options as words, field by field (no padding bytes in the key). */
static int64_t put_head(int32_t *w, const dcp_attn_shape_t *s, const dcp_plan_options_t *o)
{
    int64_t n = 0;
    w[n++] = s->num_heads;
    w[n++] = s->num_kv_heads;
    w[n++] = s->head_dim;
    w[n++] = (int32_t)s->dtype;
    put_double(w + n, (double)s->scale), n += 2;
    put_double(w + n, s->softcap == 0.0f ? 0.0 : (double)s->softcap), n += 2;
    w[n++] = dcp_shape_dv(s);
    w[n++] = o->block_size;
    w[n++] = o->head_blocks;
    w[n++] = o->divisions;
    w[n++] = (int32_t)o->strategy;
    put_double(w + n, o->eps_inter), n += 2;
    put_double(w + n, o->eps_intra), n += 2;
    put64(w + n, (uint64_t)o->mem_cap_bytes), n += 2;
    put64(w + n, o->seed), n += 2;
    w[n++] = (int32_t)o->expansion;
    w[n++] = o->net_cap;
    w[n++] = o->refine;
    w[n++] = (int32_t)o->comm_schedule;
    w[n++] = o->coalesce;
    w[n++] = o->metis_tries; /* the plan keeps the best of this many tries: another plan */
    return n;
}

/* A mask's record: the fields its kind reads, the rest zero. */
static void put_mask(int32_t *w, const dcp_mask_t *m)
{
    memset(w, 0, SVC_MASK_WORDS * sizeof *w);
    w[0] = (int32_t)m->kind;
    switch (m->kind) {
    case DCP_MASK_WINDOW:
        w[1] = m->window;
        break;
    case DCP_MASK_LAMBDA:
        w[1] = m->window;
        w[2] = m->sink;
        break;
    case DCP_MASK_BLOCKWISE:
        w[1] = m->block;
        w[2] = m->k;
        break;
    case DCP_MASK_SHARED_QUESTION:
        w[1] = m->answers;
        put_double(w + 2, m->question_frac);
        break;
    default:
        break;
    }
}

static uint64_t hash_words(const int32_t *w, int64_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a, 64-bit */
    const uint8_t *b = (const uint8_t *)w;
    for (int64_t i = 0; i < n * (int64_t)sizeof *w; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void job_free(svc_job_t *j)
{
    if (!j) return;
    dcp_plan_destroy(j->plan);
    free(j->masks);
    free(j->key);
    free(j);
}

/* A job holding a copy of checked inputs, its key and the batch view into it. */
static dcp_status_t job_create(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *o, svc_job_t **job_out)
{
    const int32_t n = batch->num_seqs, nk = dcp_batch_kinds(batch);
    int64_t custom = 0;
    for (int32_t k = 0; k < nk; k++)
        for (int32_t s = 0; s < n; s++)
            if (dcp_batch_masks(batch, k)[s].kind == DCP_MASK_CUSTOM)
                custom += 4 * (int64_t)batch->lengths[s];
    int32_t head[SVC_HEAD_WORDS];
    const int64_t head_words = put_head(head, shape, o);
    const int64_t words =
        head_words + 2 + n + (int64_t)nk * (1 + (int64_t)n * SVC_MASK_WORDS) + custom;
    svc_job_t *j;
    DCP_CHECK(dcp_calloc(&j, 1, sizeof *j, "planner job"));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&j->key, words, sizeof(int32_t), "planner batch copy"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&j->masks, (int64_t)nk * n, sizeof *j->masks, "planner batch copy"),
                   st, err);
    int32_t *w = j->key;
    memcpy(w, head, (size_t)head_words * sizeof *w);
    int64_t at = head_words;
    w[at++] = n;
    int32_t *lengths = w + at;
    memcpy(lengths, batch->lengths, (size_t)n * sizeof *lengths);
    at += n;
    w[at++] = nk;
    for (int32_t k = 0; k < nk; k++) {
        w[at++] = nk > 1 ? batch->kinds[k].layers : 1;
        for (int32_t s = 0; s < n; s++, at += SVC_MASK_WORDS)
            put_mask(w + at, &dcp_batch_masks(batch, k)[s]);
    }
    for (int32_t k = 0; k < nk; k++) {
        const dcp_mask_t *from = dcp_batch_masks(batch, k);
        dcp_mask_t *to = j->masks + (int64_t)k * n;
        for (int32_t s = 0; s < n; s++) {
            to[s] = from[s];
            to[s].ranges = NULL;
            if (from[s].kind != DCP_MASK_CUSTOM) continue;
            const int64_t m = 4 * (int64_t)batch->lengths[s];
            memcpy(w + at, from[s].ranges, (size_t)m * sizeof *w);
            to[s].ranges = w + at;
            at += m;
        }
        if (nk > 1) j->kinds[k] = (dcp_layer_kind_t){to, batch->kinds[k].layers};
    }
    j->key_words = words;
    j->hash = hash_words(w, words);
    j->shape = *shape;
    j->opts = *o;
    j->batch = (dcp_batch_t){.num_seqs = n, .lengths = lengths, .masks = j->masks};
    if (nk > 1) j->batch = (dcp_batch_t){n, lengths, NULL, nk, j->kinds};
    *job_out = j;
    return DCP_OK;
err:
    job_free(j);
    return st;
}

static int same_key(const int32_t *a, int64_t na, uint64_t ha, const int32_t *b, int64_t nb,
                    uint64_t hb)
{
    return ha == hb && na == nb && !memcmp(a, b, (size_t)na * sizeof *a);
}

/* ---- cache (planner mutex held) -------------------------------------------------------- */

static void blob_release(svc_blob_t *b)
{
    if (b && --b->refs == 0) free(b);
}

static svc_entry_t *cache_find(dcp_planner_t *p, const svc_job_t *j)
{
    for (int32_t i = 0; i < p->cache_count; i++) {
        svc_entry_t *e = &p->cache[i];
        if (same_key(e->key, e->key_words, e->hash, j->key, j->key_words, j->hash)) return e;
    }
    return NULL;
}

/* What an entry holds against the byte bound: its plan's bytes and its key. */
static int64_t entry_bytes(const svc_blob_t *blob, int64_t key_words)
{
    return (int64_t)blob->size + key_words * (int64_t)sizeof(int32_t);
}

static void entry_clear(dcp_planner_t *p, svc_entry_t *e)
{
    if (e->blob) p->bytes -= entry_bytes(e->blob, e->key_words);
    blob_release(e->blob);
    free(e->key);
    *e = (svc_entry_t){0};
}

/* Removes entry i (the last slot moves into its place). */
static void cache_remove(dcp_planner_t *p, int32_t i)
{
    entry_clear(p, &p->cache[i]);
    p->cache[i] = p->cache[--p->cache_count];
    p->cache[p->cache_count] = (svc_entry_t){0};
}

/* Moves the job's key into the cache with `blob` (one reference taken), dropping the least
 * recently used entries until it fits both bounds (serialize() kept larger plans out); every
 * entry dropped counts as an eviction. */
static void cache_insert(dcp_planner_t *p, svc_job_t *j, svc_blob_t *blob)
{
    const int64_t size = entry_bytes(blob, j->key_words);
    svc_entry_t *old = cache_find(p, j);
    if (old) cache_remove(p, (int32_t)(old - p->cache));
    p->stats.evictions += old != NULL;
    while (p->cache_count > 0 &&
           (p->cache_count == p->cache_cap || p->bytes + size > p->bytes_cap)) {
        int32_t lru = 0;
        for (int32_t i = 1; i < p->cache_count; i++)
            if (p->cache[i].used < p->cache[lru].used) lru = i;
        cache_remove(p, lru);
        p->stats.evictions++;
    }
    svc_entry_t *e = &p->cache[p->cache_count++];
    e->key = j->key;
    e->key_words = j->key_words;
    e->hash = j->hash;
    j->key = NULL; /* the job is done with its inputs */
    e->blob = blob;
    blob->refs++;
    e->used = ++p->clock;
    p->bytes += size;
}

/* ---- workers --------------------------------------------------------------------------- */

static svc_job_t *next_queued(const dcp_planner_t *p)
{
    for (int64_t i = 0; i < p->num_jobs; i++)
        if (p->jobs[i]->state == JOB_QUEUED) return p->jobs[i];
    return NULL;
}

static int key_being_planned(const dcp_planner_t *p, const svc_job_t *j)
{
    for (int64_t i = 0; i < p->num_jobs; i++) {
        const svc_job_t *o = p->jobs[i];
        if (o != j && o->planning &&
            same_key(o->key, o->key_words, o->hash, j->key, j->key_words, j->hash))
            return 1;
    }
    return 0;
}

/* The cached bytes of j's key with a reference taken, after waiting for a worker that
 * plans the same key; NULL when j must be planned (then j->planning is set). */
static svc_blob_t *claim_cached(dcp_planner_t *p, svc_job_t *j)
{
    if (p->cache_cap == 0) {
        j->planning = 1;
        return NULL;
    }
    for (;;) {
        svc_entry_t *e = cache_find(p, j);
        if (e) {
            e->used = ++p->clock;
            e->blob->refs++;
            return e->blob;
        }
        if (!key_being_planned(p, j)) break;
        pthread_cond_wait(&p->done, &p->mu);
    }
    j->planning = 1;
    return NULL;
}

/* The plan's bytes for the cache; *blob_out = NULL when they and the key would pass the
 * cache's byte bound alone (counted before anything is allocated). */
static dcp_status_t serialize(const dcp_plan_t *plan, int64_t key_words, int64_t bytes_cap,
                              svc_blob_t **blob_out)
{
    size_t n = 0;
    *blob_out = NULL;
    DCP_CHECK(dcp_plan_serialize(plan, NULL, 0, &n));
    if ((int64_t)n + key_words * (int64_t)sizeof(int32_t) > bytes_cap) return DCP_OK;
    svc_blob_t *b;
    DCP_CHECK(dcp_calloc(&b, 1, sizeof *b + n, "planner cache"));
    const dcp_status_t st = dcp_plan_serialize(plan, b->bytes, n, &b->size);
    if (st != DCP_OK) {
        free(b);
        return st;
    }
    *blob_out = b;
    return DCP_OK;
}

/* Plans (or copies) one job with the mutex released; returns with it held again. */
static void run_job(dcp_planner_t *p, svc_job_t *j)
{
    svc_blob_t *hit = claim_cached(p, j), *fresh = NULL;
    int too_big = 0;
    pthread_mutex_unlock(&p->mu);
    dcp_plan_t *plan = NULL;
    dcp_status_t st;
    double ms = 0;
    if (hit) {
        st = dcp_plan_deserialize(hit->bytes, hit->size, &plan);
    } else {
        const double t0 = dcp_now();
        st = dcp_plan_create(&j->batch, &j->shape, &j->opts, p->cluster, &plan);
        ms = (dcp_now() - t0) * 1e3;
        /* a plan that cannot be cached is still a plan: a failed copy only skips the cache */
        if (st == DCP_OK && p->cache_cap > 0 &&
            serialize(plan, j->key_words, p->bytes_cap, &fresh) != DCP_OK)
            fresh = NULL;
        too_big = st == DCP_OK && p->cache_cap > 0 && !fresh;
    }
    if (st != DCP_OK) dcp_error_save(j->msg, sizeof j->msg);
    pthread_mutex_lock(&p->mu);
    if (hit) {
        blob_release(hit);
        p->stats.cache_hits++;
    } else {
        p->stats.planned++;
        p->stats.plan_ms += ms;
    }
    if (fresh) cache_insert(p, j, fresh);
    p->stats.uncached += too_big;
    if (st != DCP_OK) p->stats.failed++;
    j->status = st;
    j->plan = plan;
    j->planning = 0;
    j->state = JOB_DONE;
    pthread_cond_broadcast(&p->done);
}

static void *worker_main(void *arg)
{
    dcp_planner_t *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        svc_job_t *j = NULL;
        while (!p->stop && !(j = next_queued(p))) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        j->state = JOB_RUNNING;
        run_job(p, j);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- API ------------------------------------------------------------------------------- */

static void planner_free(dcp_planner_t *p)
{
    for (int64_t i = 0; i < p->num_jobs; i++) job_free(p->jobs[i]);
    free(p->jobs);
    for (int32_t i = 0; i < p->cache_count; i++) entry_clear(p, &p->cache[i]);
    free(p->cache);
    free(p->threads);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* Stops the workers: queued jobs are dropped, running ones finish. */
static void planner_stop(dcp_planner_t *p, int32_t started)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    int64_t kept = 0;
    for (int64_t i = 0; i < p->num_jobs; i++) {
        if (p->jobs[i]->state == JOB_QUEUED)
            job_free(p->jobs[i]);
        else
            p->jobs[kept++] = p->jobs[i];
    }
    p->num_jobs = kept;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 0; i < started; i++) pthread_join(p->threads[i], NULL);
}

dcp_status_t dcp_planner_create(const dcp_planner_config_t *config, const dcp_cluster_t *cluster,
                                dcp_planner_t **planner_out)
{
    if (!cluster || !planner_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL",
                             cluster ? "planner_out" : "cluster");
    dcp_planner_config_t c = {1, SVC_DEFAULT_CACHE, 0};
    if (config) c = *config;
    if (c.num_threads < 0 || c.num_threads > SVC_MAX_THREADS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.num_threads = %d, must be in [0, %d]",
                             c.num_threads, SVC_MAX_THREADS);
    if (c.cache_entries < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.cache_entries = %d, must be >= 0",
                             c.cache_entries);
    if (c.cache_bytes < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.cache_bytes = %lld, must be >= 0",
                             (long long)c.cache_bytes);
    if (c.num_threads == 0) c.num_threads = 1;
    if (c.cache_bytes == 0) c.cache_bytes = SVC_DEFAULT_BYTES;
    dcp_planner_t *p;
    DCP_CHECK(dcp_calloc(&p, 1, sizeof *p, "planner"));
    dcp_status_t st = DCP_OK;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return dcp_set_error(DCP_ERR_SYSTEM, "planner: pthread_mutex_init failed");
    }
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->cluster = cluster;
    p->next_ticket = 1;
    p->cache_cap = c.cache_entries;
    p->bytes_cap = c.cache_bytes;
    DCP_CHECK_GOTO(dcp_calloc(&p->cache, c.cache_entries, sizeof *p->cache, "planner cache"), st,
                   err);
    DCP_CHECK_GOTO(dcp_calloc(&p->threads, c.num_threads, sizeof *p->threads, "planner threads"),
                   st, err);
    for (p->num_threads = 0; p->num_threads < c.num_threads; p->num_threads++)
        if (pthread_create(&p->threads[p->num_threads], NULL, worker_main, p) != 0) {
            st = dcp_set_error(DCP_ERR_SYSTEM, "planner: cannot start worker thread %d",
                               p->num_threads);
            planner_stop(p, p->num_threads);
            goto err;
        }
    *planner_out = p;
    return DCP_OK;
err:
    planner_free(p);
    return st;
}

void dcp_planner_destroy(dcp_planner_t *planner)
{
    if (!planner) return;
    planner_stop(planner, planner->num_threads);
    planner_free(planner);
}

dcp_status_t dcp_planner_submit(dcp_planner_t *planner, const dcp_batch_t *batch,
                                const dcp_attn_shape_t *shape, const dcp_plan_options_t *opts,
                                uint64_t *ticket_out)
{
    if (!planner || !ticket_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", planner ? "ticket_out" : "planner");
    dcp_plan_options_t o;
    if (opts)
        o = *opts;
    else
        dcp_plan_options_default(&o);
    DCP_CHECK(dcp_plan_check_args(batch, shape, &o));
    svc_job_t *j;
    DCP_CHECK(job_create(batch, shape, &o, &j));
    pthread_mutex_lock(&planner->mu);
    const dcp_status_t st = dcp_reserve(&planner->jobs, &planner->jobs_cap, planner->num_jobs + 1,
                                        sizeof *planner->jobs, "planner tickets");
    if (st != DCP_OK) {
        pthread_mutex_unlock(&planner->mu);
        job_free(j);
        return st;
    }
    j->ticket = planner->next_ticket++;
    planner->jobs[planner->num_jobs++] = j;
    planner->stats.submitted++;
    pthread_cond_signal(&planner->work);
    pthread_mutex_unlock(&planner->mu);
    *ticket_out = j->ticket;
    return DCP_OK;
}

/* The index of an uncollected, unclaimed ticket (mutex held), or -1 with the error set. */
static int64_t find_ticket(const dcp_planner_t *p, uint64_t ticket)
{
    for (int64_t i = 0; i < p->num_jobs; i++) {
        if (p->jobs[i]->ticket != ticket) continue;
        if (p->jobs[i]->claimed) {
            dcp_set_error(DCP_ERR_INVALID_ARG, "ticket %llu is being collected by another thread",
                          (unsigned long long)ticket);
            return -1;
        }
        return i;
    }
    if (ticket == 0 || ticket >= p->next_ticket)
        dcp_set_error(DCP_ERR_INVALID_ARG, "ticket %llu was never issued by this planner",
                      (unsigned long long)ticket);
    else
        dcp_set_error(DCP_ERR_INVALID_ARG, "ticket %llu was already collected (or dropped)",
                      (unsigned long long)ticket);
    return -1;
}

/* Removes the finished job at index i and hands out its result (mutex held). */
static dcp_status_t collect(dcp_planner_t *p, int64_t i, dcp_plan_t **plan_out)
{
    svc_job_t *j = p->jobs[i];
    memmove(p->jobs + i, p->jobs + i + 1, (size_t)(p->num_jobs - i - 1) * sizeof *p->jobs);
    p->num_jobs--;
    const dcp_status_t st = j->status;
    if (st == DCP_OK) {
        *plan_out = j->plan;
        j->plan = NULL;
    } else {
        dcp_set_error(st, "%s", j->msg);
    }
    job_free(j);
    return st;
}

dcp_status_t dcp_planner_wait(dcp_planner_t *planner, uint64_t ticket, dcp_plan_t **plan_out)
{
    if (!planner || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", planner ? "plan_out" : "planner");
    pthread_mutex_lock(&planner->mu);
    int64_t i = find_ticket(planner, ticket);
    if (i < 0) {
        pthread_mutex_unlock(&planner->mu);
        return DCP_ERR_INVALID_ARG;
    }
    svc_job_t *j = planner->jobs[i];
    if (j->state != JOB_DONE) {
        j->claimed = 1;
        const double t0 = dcp_now();
        while (j->state != JOB_DONE) pthread_cond_wait(&planner->done, &planner->mu);
        planner->stats.wait_ms += (dcp_now() - t0) * 1e3;
        for (i = 0; planner->jobs[i] != j; i++) continue; /* others may have left the list */
    }
    const dcp_status_t st = collect(planner, i, plan_out);
    pthread_mutex_unlock(&planner->mu);
    return st;
}

dcp_status_t dcp_planner_try(dcp_planner_t *planner, uint64_t ticket, dcp_plan_t **plan_out)
{
    if (!planner || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", planner ? "plan_out" : "planner");
    pthread_mutex_lock(&planner->mu);
    const int64_t i = find_ticket(planner, ticket);
    dcp_status_t st = DCP_ERR_INVALID_ARG;
    if (i >= 0 && planner->jobs[i]->state != JOB_DONE) {
        *plan_out = NULL;
        st = DCP_OK;
    } else if (i >= 0) {
        st = collect(planner, i, plan_out);
    }
    pthread_mutex_unlock(&planner->mu);
    return st;
}

dcp_status_t dcp_planner_stats(dcp_planner_t *planner, dcp_planner_stats_t *stats_out)
{
    if (!planner || !stats_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", planner ? "stats_out" : "planner");
    pthread_mutex_lock(&planner->mu);
    *stats_out = planner->stats;
    stats_out->pending = planner->num_jobs;
    stats_out->cached_plans = planner->cache_count;
    stats_out->cached_bytes = planner->bytes;
    pthread_mutex_unlock(&planner->mu);
    return DCP_OK;
}
