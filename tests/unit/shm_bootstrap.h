/* A bootstrap for tests: an allgather over shared memory, for ranks that are threads or
 * forked processes (create it before forking). Its barrier gives up after a timeout, so a
 * rank that died cannot hang the others. */
#ifndef DCP_TESTS_SHM_BOOTSTRAP_H
#define DCP_TESTS_SHM_BOOTSTRAP_H

#include "include/dcp.h"

typedef struct shm_bootstrap shm_bootstrap_t;

/* Room for `size` ranks of up to `cap` bytes each. */
shm_bootstrap_t *shm_bootstrap_create(int32_t size, size_t cap);
void shm_bootstrap_destroy(shm_bootstrap_t *b);

/* Rank r's view (its state points into the shared region). */
dcp_bootstrap_t shm_bootstrap_rank(shm_bootstrap_t *b, int32_t rank);

#endif
