#include "tests/unit/shm_bootstrap.h"

#include "include/base/error.h"

#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#define BARRIER_TIMEOUT_S 30.0

typedef struct {
    shm_bootstrap_t *shared;
    int32_t rank;
} view_t;

struct shm_bootstrap {
    atomic_int arrived;
    atomic_int generation;
    int32_t size;
    size_t cap, map_bytes;
    view_t views[64];
    char data[]; /* size x cap */
};

shm_bootstrap_t *shm_bootstrap_create(int32_t size, size_t cap)
{
    if (size < 1 || size > 64) return NULL;
    const size_t bytes = sizeof(shm_bootstrap_t) + (size_t)size * cap;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    shm_bootstrap_t *b = p;
    memset(b, 0, sizeof *b);
    atomic_init(&b->arrived, 0);
    atomic_init(&b->generation, 0);
    b->size = size;
    b->cap = cap;
    b->map_bytes = bytes;
    for (int32_t r = 0; r < size; r++) {
        b->views[r].shared = b;
        b->views[r].rank = r;
    }
    return b;
}

void shm_bootstrap_destroy(shm_bootstrap_t *b)
{
    if (b) munmap(b, b->map_bytes);
}

/* A generation barrier on shared atomics. */
static dcp_status_t barrier(shm_bootstrap_t *b)
{
    const int gen = atomic_load(&b->generation);
    if (atomic_fetch_add(&b->arrived, 1) == b->size - 1) {
        atomic_store(&b->arrived, 0);
        atomic_fetch_add(&b->generation, 1);
        return DCP_OK;
    }
    const double deadline = dcp_now() + BARRIER_TIMEOUT_S;
    while (atomic_load(&b->generation) == gen) {
        if (dcp_now() > deadline)
            return dcp_set_error(DCP_ERR_TIMEOUT, "shm bootstrap: a rank never arrived");
        sched_yield();
    }
    return DCP_OK;
}

static dcp_status_t allgather(void *state, const void *send, void *recv, size_t bytes)
{
    const view_t *me = state;
    shm_bootstrap_t *b = me->shared;
    const int32_t rank = me->rank;
    if (bytes > b->cap)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shm bootstrap: %zu bytes, room for %zu", bytes,
                             b->cap);
    memcpy(b->data + (size_t)rank * bytes, send, bytes);
    DCP_CHECK(barrier(b));
    memcpy(recv, b->data, (size_t)b->size * bytes);
    return barrier(b);
}

dcp_bootstrap_t shm_bootstrap_rank(shm_bootstrap_t *b, int32_t rank)
{
    return (dcp_bootstrap_t){rank, b->size, allgather, &b->views[rank], NULL, 0.0};
}
