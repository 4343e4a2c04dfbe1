/* The allocation failure hook, dcp's live blocks and the transport fault hook (fault_hook.h):
 * the functions of include/base/test_hook.h that the failure walks, the soak and the hooked
 * libdcp.so supply. */
#include "tests/unit/fault_hook.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* dcp_now()'s clock (CLOCK_MONOTONIC: one clock for every process of the machine), for the
 * time an injected failure fired. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- failing the nth allocation -------------------------------------------------------- */

static atomic_int_fast64_t alloc_at, alloc_seen;
static atomic_int alloc_hit;
static const void *_Atomic alloc_hit_site;
static _Atomic double alloc_hit_time, fault_hit_time;
static const void *_Atomic alloc_target; /* fail the first allocation here */

void dcp_test_alloc_fail_at(int64_t n)
{
    atomic_store(&alloc_target, NULL);
    atomic_store(&alloc_hit, 0);
    atomic_store(&alloc_hit_site, NULL);
    atomic_store(&alloc_hit_time, 0.0);
    atomic_store(&alloc_seen, 0);
    atomic_store(&alloc_at, n);
}

void dcp_test_alloc_fail_site(const void *site)
{
    dcp_test_alloc_fail_at(0);
    atomic_store(&alloc_target, site);
}

int64_t dcp_test_alloc_count(void)
{
    return atomic_load(&alloc_seen);
}

int dcp_test_alloc_fired(const void **site_out)
{
    if (site_out) *site_out = atomic_load(&alloc_hit_site);
    return atomic_load(&alloc_hit);
}

double dcp_test_fired_time(void)
{
    const double a = atomic_load(&alloc_hit_time);
    return a > 0 ? a : atomic_load(&fault_hit_time);
}

/* ---- sites ------------------------------------------------------------------------------ */

static atomic_int sites_on;
static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;
static const void *sites[DCP_TEST_SITES_MAX];
static int64_t num_sites;

void dcp_test_sites_record(int on)
{
    atomic_store(&sites_on, on);
}

void dcp_test_sites_reset(void)
{
    pthread_mutex_lock(&sites_mu);
    num_sites = 0;
    pthread_mutex_unlock(&sites_mu);
}

int64_t dcp_test_sites_count(void)
{
    pthread_mutex_lock(&sites_mu);
    const int64_t n = num_sites;
    pthread_mutex_unlock(&sites_mu);
    return n;
}

const void *dcp_test_site(int64_t i)
{
    pthread_mutex_lock(&sites_mu);
    const void *s = i >= 0 && i < num_sites ? sites[i] : NULL;
    pthread_mutex_unlock(&sites_mu);
    return s;
}

static void site_seen(const void *site)
{
    pthread_mutex_lock(&sites_mu);
    int64_t i = 0;
    while (i < num_sites && sites[i] != site) i++;
    if (i == num_sites && num_sites < DCP_TEST_SITES_MAX) sites[num_sites++] = site;
    pthread_mutex_unlock(&sites_mu);
}

int dcp_test_alloc_fails(const void *site)
{
    if (atomic_load_explicit(&sites_on, memory_order_relaxed)) site_seen(site);
    const int64_t n = atomic_fetch_add(&alloc_seen, 1) + 1;
    const void *target = atomic_load(&alloc_target);
    if (target) {
        int none = 0;
        if (site != target || !atomic_compare_exchange_strong(&alloc_hit, &none, 1)) return 0;
        atomic_store(&alloc_hit_time, now_s());
        atomic_store(&alloc_hit_site, site);
        return 1;
    }
    if (n != atomic_load(&alloc_at)) return 0;
    atomic_store(&alloc_hit_time, now_s());
    atomic_store(&alloc_hit_site, site);
    atomic_store(&alloc_hit, 1);
    return 1;
}

/* ---- live blocks ------------------------------------------------------------------------ */

/* An open-addressing table of the blocks made while tracking, keyed by address; deletions
 * leave tombstones, and the table is rebuilt when it fills. Its own memory comes from libc
 * directly (__real_free: the table is never one of its own entries). */
typedef struct {
    const void *ptr; /* NULL: empty; TOMB: deleted */
    size_t bytes;
    const void *site;
} block_t;

#define TOMB ((const void *)1)

void __real_free(void *ptr);

static atomic_int track_on;
static atomic_int_fast64_t tracked; /* blocks in the table: free() looks only when > 0 */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static block_t *table;
static size_t table_cap, table_used; /* used: live entries and tombstones */
static int64_t live_bytes, live_blocks;

static size_t slot_of(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

/* Rebuilt at twice the live count (at least 4096 slots), without tombstones. */
static int rebuild(void)
{
    size_t cap = 4096;
    while (cap < 4 * (size_t)live_blocks + 16) cap *= 2;
    block_t *t = calloc(cap, sizeof *t);
    if (!t) return 0;
    for (size_t i = 0; i < table_cap; i++) {
        if (!table[i].ptr || table[i].ptr == TOMB) continue;
        size_t s = slot_of(table[i].ptr, cap);
        while (t[s].ptr) s = (s + 1) & (cap - 1);
        t[s] = table[i];
    }
    __real_free(table);
    table = t;
    table_cap = cap;
    table_used = (size_t)live_blocks;
    return 1;
}

/* The slot holding p, or (size_t)-1. */
static size_t find(const void *p)
{
    if (!table_cap) return (size_t)-1;
    for (size_t s = slot_of(p, table_cap), k = 0; k < table_cap;
         s = (s + 1) & (table_cap - 1), k++) {
        if (!table[s].ptr) return (size_t)-1;
        if (table[s].ptr == p) return s;
    }
    return (size_t)-1;
}

static void drop(const void *p)
{
    const size_t s = find(p);
    if (s == (size_t)-1) return;
    live_bytes -= (int64_t)table[s].bytes;
    live_blocks--;
    table[s].ptr = TOMB;
    atomic_fetch_sub(&tracked, 1);
}

static void add(const void *p, size_t bytes, const void *site)
{
    if (4 * (table_used + 1) > 3 * table_cap && !rebuild()) return;
    size_t s = slot_of(p, table_cap);
    while (table[s].ptr && table[s].ptr != TOMB) s = (s + 1) & (table_cap - 1);
    if (!table[s].ptr) table_used++;
    table[s] = (block_t){p, bytes, site};
    live_bytes += (int64_t)bytes;
    live_blocks++;
    atomic_fetch_add(&tracked, 1);
}

void dcp_test_alloc_made(uintptr_t old, const void *ptr, size_t bytes, const void *site)
{
    if (!atomic_load_explicit(&track_on, memory_order_relaxed) &&
        !(old && atomic_load(&tracked) > 0))
        return;
    pthread_mutex_lock(&live_mu);
    if (old) drop((const void *)old);
    if (atomic_load(&track_on)) add(ptr, bytes, site);
    pthread_mutex_unlock(&live_mu);
}

void dcp_test_alloc_freed(const void *ptr)
{
    if (ptr && atomic_load_explicit(&tracked, memory_order_relaxed) > 0) {
        pthread_mutex_lock(&live_mu);
        drop(ptr);
        pthread_mutex_unlock(&live_mu);
    }
}

void __wrap_free(void *ptr);
void __wrap_free(void *ptr)
{
    dcp_test_alloc_freed(ptr);
    __real_free(ptr);
}

void dcp_test_alloc_track(int on)
{
    atomic_store(&track_on, on);
}

int64_t dcp_test_alloc_live_bytes(void)
{
    pthread_mutex_lock(&live_mu);
    const int64_t b = live_bytes;
    pthread_mutex_unlock(&live_mu);
    return b;
}

int64_t dcp_test_alloc_live_blocks(void)
{
    pthread_mutex_lock(&live_mu);
    const int64_t b = live_blocks;
    pthread_mutex_unlock(&live_mu);
    return b;
}

void dcp_test_alloc_live_print(FILE *f, int most)
{
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < table_cap && most > 0; i++)
        if (table[i].ptr && table[i].ptr != TOMB) {
            fprintf(f, "  live block of %zu bytes from %p\n", table[i].bytes, table[i].site);
            most--;
        }
    pthread_mutex_unlock(&live_mu);
}

/* ---- transport faults ------------------------------------------------------------------- */

static atomic_int_fast64_t fault_at, fault_seen, fault_seen_at[DCP_FAULT_COUNT];
static atomic_int fault_hit, fault_hit_site;

void dcp_test_fault_at(int64_t n)
{
    atomic_store(&fault_hit, 0);
    atomic_store(&fault_hit_time, 0.0);
    atomic_store(&fault_seen, 0);
    for (int s = 0; s < DCP_FAULT_COUNT; s++) atomic_store(&fault_seen_at[s], 0);
    atomic_store(&fault_at, n);
}

int64_t dcp_test_fault_count(void)
{
    return atomic_load(&fault_seen);
}

int64_t dcp_test_fault_count_site(dcp_fault_site_t site)
{
    return (unsigned)site < DCP_FAULT_COUNT ? atomic_load(&fault_seen_at[site]) : 0;
}

int dcp_test_fault_fired(dcp_fault_site_t *site_out)
{
    if (site_out) *site_out = (dcp_fault_site_t)atomic_load(&fault_hit_site);
    return atomic_load(&fault_hit);
}

int dcp_test_fault(dcp_fault_site_t site)
{
    if ((unsigned)site < DCP_FAULT_COUNT) atomic_fetch_add(&fault_seen_at[site], 1);
    const int64_t n = atomic_fetch_add(&fault_seen, 1) + 1;
    if (n != atomic_load(&fault_at)) return 0;
    atomic_store(&fault_hit_time, now_s());
    atomic_store(&fault_hit_site, (int)site);
    atomic_store(&fault_hit, 1);
    return 1;
}
