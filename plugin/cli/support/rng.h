/* A small deterministic generator (splitmix64) for sampling lengths and filling tensors:
 * the same seed gives the same batch on every machine. */
#ifndef DCPT_CLI_RNG_H
#define DCPT_CLI_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s;
} dcpt_rng_t;

static inline uint64_t dcpt_rng_next(dcpt_rng_t *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double dcpt_rng_uniform(dcpt_rng_t *r)
{
    return (double)(dcpt_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [lo, hi]. */
static inline int64_t dcpt_rng_range(dcpt_rng_t *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(dcpt_rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Standard normal (Box-Muller). */
static inline double dcpt_rng_normal(dcpt_rng_t *r)
{
    const double u = 1.0 - dcpt_rng_uniform(r), v = dcpt_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

#endif
