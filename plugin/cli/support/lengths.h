/* Where the tools get sequence lengths: a built-in long-tailed histogram, or a lengths file
 * (one length per line), sampled with a seed. */
#ifndef DCPT_CLI_LENGTHS_H
#define DCPT_CLI_LENGTHS_H

#include "include/dcp.h"
#include "plugin/cli/support/rng.h"

typedef struct {
    const int32_t *pool; /* lengths to draw from uniformly; NULL: the built-in histogram */
    int64_t pool_size;
} dcpt_length_source_t;

/* Reads a lengths file: one positive integer per line (blank lines and '#' comments
 * allowed). Errors name the line. *lengths_out is malloc'ed. */
dcp_status_t dcpt_lengths_read(const char *path, int32_t **lengths_out, int64_t *count_out);

/* One draw. The built-in histogram (MagiAttention's document lengths) picks a bin by its
 * count and a length uniformly inside it. */
int32_t dcpt_length_draw(const dcpt_length_source_t *src, dcpt_rng_t *rng);

/* Draws lengths until exactly `tokens` are filled: draws above max_len are dropped and the
 * last sequence is cut to fit. *lengths_out is malloc'ed. */
dcp_status_t dcpt_lengths_fill(const dcpt_length_source_t *src, int64_t tokens, int32_t max_len,
                               uint64_t seed, int32_t **lengths_out, int32_t *count_out);

/* DCP's packing of consecutive batches of `tokens` tokens: lengths come from the file in
 * an order shuffled with the seed (or as seeded draws from the histogram), each multiplied
 * by `scale` (at least 1 token); lengths above max_len before scaling, or above `tokens`
 * after it, are dropped; lengths are added to
 * the current batch while they fit, and a batch is kept when it is at least 75% full.
 * Writes up to max_batches batches: batch b is lengths[first[b] .. first[b + 1]) (both
 * malloc'ed); fewer when a file runs out. */
dcp_status_t dcpt_lengths_pack(const dcpt_length_source_t *src, int64_t tokens, int32_t max_len,
                               double scale, int32_t max_batches, uint64_t seed,
                               int32_t **lengths_out, int32_t **first_out,
                               int32_t *num_batches_out);

#endif
