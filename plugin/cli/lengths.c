#include "plugin/cli/lengths.h"

#include "include/base/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Document-length histogram of 13.46M documents, from SandAI-org/MagiAttention,
 * exps/dist_attn/benchmark/datasets/default/doc_length_distribution.csv (Apache-2.0); a copy
 * is in tests/data/doc_length_histogram.csv. Bins are inclusive token ranges. */
static const struct {
    int32_t lo, hi;
    int64_t count;
} hist[] = {
    {1, 10, 30254},         {11, 50, 391188},        {51, 100, 699596},      {101, 200, 1377757},
    {201, 500, 3794735},    {501, 1024, 3316785},    {1025, 2048, 2106566},  {2049, 4096, 988525},
    {4097, 8192, 410002},   {8193, 16384, 173574},   {16385, 32768, 115007}, {32769, 65536, 18428},
    {65537, 131072, 22513}, {131073, 196608, 18284},
};

int32_t dcp_length_draw(const dcp_length_source_t *src, dcp_rng_t *rng)
{
    if (src->pool) return src->pool[dcp_rng_range(rng, 0, src->pool_size - 1)];
    int64_t total = 0;
    for (size_t i = 0; i < sizeof hist / sizeof hist[0]; i++) total += hist[i].count;
    int64_t pick = dcp_rng_range(rng, 0, total - 1);
    size_t b = 0;
    while (pick >= hist[b].count) pick -= hist[b++].count;
    return (int32_t)dcp_rng_range(rng, hist[b].lo, hist[b].hi);
}

dcp_status_t dcp_lengths_read(const char *path, int32_t **lengths_out, int64_t *count_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "lengths file '%s': %s", path, strerror(errno));
    int32_t *v = NULL;
    int64_t n = 0, cap = 0, line = 0;
    char buf[256];
    dcp_status_t st = DCP_OK;
    while (st == DCP_OK && fgets(buf, sizeof buf, f)) {
        line++;
        char *s = buf;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || *s == '\r' || *s == '\0') continue;
        char *end;
        errno = 0;
        const long long x = strtoll(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (end == s || *end != '\0' || errno != 0 || x < 1 || x > INT32_MAX) {
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "lengths file '%s' line %lld: expected a length >= 1", path,
                               (long long)line);
            break;
        }
        st = dcp_reserve(&v, &cap, n + 1, sizeof *v, "lengths");
        if (st == DCP_OK) v[n++] = (int32_t)x;
    }
    fclose(f);
    if (st == DCP_OK && n == 0)
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "lengths file '%s' has no lengths", path);
    if (st != DCP_OK) {
        free(v);
        return st;
    }
    *lengths_out = v;
    *count_out = n;
    return DCP_OK;
}

dcp_status_t dcp_lengths_fill(const dcp_length_source_t *src, int64_t tokens, int32_t max_len,
                              uint64_t seed, int32_t **lengths_out, int32_t *count_out)
{
    if (tokens < 1 || max_len < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "tokens = %lld and max_len = %d must be >= 1",
                             (long long)tokens, max_len);
    dcp_rng_t rng = {seed};
    int32_t *v = NULL;
    int64_t n = 0, cap = 0, sum = 0, draws = 0;
    while (sum < tokens) {
        if (++draws > 10000000) {
            free(v);
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "max_len = %d: no length of the source fits after 10^7 draws",
                                 max_len);
        }
        int64_t len = dcp_length_draw(src, &rng);
        if (len > max_len) continue;
        if (len > tokens - sum) len = tokens - sum;
        const dcp_status_t st = dcp_reserve(&v, &cap, n + 1, sizeof *v, "lengths");
        if (st != DCP_OK) {
            free(v);
            return st;
        }
        v[n++] = (int32_t)len;
        sum += len;
    }
    *lengths_out = v;
    *count_out = (int32_t)n;
    return DCP_OK;
}
