/* Where the tools get sequence lengths: a built-in long-tailed histogram, or a lengths file
 * (one length per line), sampled with a seed. */
#ifndef DCP_CLI_LENGTHS_H
#define DCP_CLI_LENGTHS_H

#include "include/dcp.h"
#include "plugin/cli/rng.h"

typedef struct {
    const int32_t *pool; /* lengths to draw from uniformly; NULL: the built-in histogram */
    int64_t pool_size;
} dcp_length_source_t;

/* Reads a lengths file: one positive integer per line (blank lines and '#' comments
 * allowed). Errors name the line. *lengths_out is malloc'ed. */
dcp_status_t dcp_lengths_read(const char *path, int32_t **lengths_out, int64_t *count_out);

/* One draw. The built-in histogram (MagiAttention's document lengths) picks a bin by its
 * count and a length uniformly inside it. */
int32_t dcp_length_draw(const dcp_length_source_t *src, dcp_rng_t *rng);

/* Draws lengths until exactly `tokens` are filled: draws above max_len are dropped and the
 * last sequence is cut to fit. *lengths_out is malloc'ed. */
dcp_status_t dcp_lengths_fill(const dcp_length_source_t *src, int64_t tokens, int32_t max_len,
                              uint64_t seed, int32_t **lengths_out, int32_t *count_out);

#endif
