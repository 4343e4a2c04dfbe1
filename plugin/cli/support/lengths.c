#include "plugin/cli/support/lengths.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
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

int32_t dcpt_length_draw(const dcpt_length_source_t *src, dcpt_rng_t *rng)
{
    if (src->pool) return src->pool[dcpt_rng_range(rng, 0, src->pool_size - 1)];
    int64_t total = 0;
    for (size_t i = 0; i < sizeof hist / sizeof hist[0]; i++) total += hist[i].count;
    int64_t pick = dcpt_rng_range(rng, 0, total - 1);
    size_t b = 0;
    while (pick >= hist[b].count) pick -= hist[b++].count;
    return (int32_t)dcpt_rng_range(rng, hist[b].lo, hist[b].hi);
}

dcp_status_t dcpt_lengths_read(const char *path, int32_t **lengths_out, int64_t *count_out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "lengths file '%s': %s", path, strerror(errno));
    int32_t *v = NULL;
    int64_t n = 0, cap = 0, line = 0;
    char *buf = NULL; /* whole lines, however long */
    size_t bufsize = 0;
    ssize_t got;
    dcp_status_t st = DCP_OK;
    while (st == DCP_OK && (got = getline(&buf, &bufsize, f)) >= 0) {
        line++;
        char *s = buf;
        while (*s == ' ' || *s == '\t') s++;
        const int nul = strlen(buf) != (size_t)got; /* a NUL byte inside the line */
        if (!nul && (*s == '#' || *s == '\n' || *s == '\r' || *s == '\0')) continue;
        char *end;
        errno = 0;
        const long long x = strtoll(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (nul || end == s || *end != '\0' || errno != 0 || x < 1 || x > INT32_MAX) {
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "lengths file '%s' line %lld: expected one length in [1, 2^31 - 1]",
                               path, (long long)line);
            break;
        }
        st = dcp_reserve(&v, &cap, n + 1, sizeof *v, "lengths");
        if (st == DCP_OK) v[n++] = (int32_t)x;
    }
    free(buf);
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

dcp_status_t dcpt_lengths_fill(const dcpt_length_source_t *src, int64_t tokens, int32_t max_len,
                               uint64_t seed, int32_t **lengths_out, int32_t *count_out)
{
    if (tokens < 1 || max_len < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "tokens = %lld and max_len = %d must be >= 1",
                             (long long)tokens, max_len);
    dcpt_rng_t rng = {seed};
    int32_t *v = NULL;
    int64_t n = 0, cap = 0, sum = 0, draws = 0;
    while (sum < tokens) {
        if (++draws > 10000000) {
            free(v);
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "max_len = %d: no length of the source fits after 10^7 draws",
                                 max_len);
        }
        int64_t len = dcpt_length_draw(src, &rng);
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

/* The next length of the packing stream: a shuffled pass over the pool, or a draw. */
static int next_length(const dcpt_length_source_t *src, const int64_t *order, int64_t *pos,
                       dcpt_rng_t *rng, int32_t *len)
{
    if (!src->pool) {
        *len = dcpt_length_draw(src, rng);
        return 1;
    }
    if (*pos >= src->pool_size) return 0;
    *len = src->pool[order[(*pos)++]];
    return 1;
}

dcp_status_t dcpt_lengths_pack(const dcpt_length_source_t *src, int64_t tokens, int32_t max_len,
                               double scale, int32_t max_batches, uint64_t seed,
                               int32_t **lengths_out, int32_t **first_out, int32_t *num_batches_out)
{
    if (tokens < 1 || max_len < 1 || max_batches < 1 || !(scale > 0))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "pack: tokens, max_len, batches and scale must be > 0");
    dcpt_rng_t rng = {seed};
    int64_t *order = NULL, pos = 0, n = 0, cap = 0, fcap = 0;
    int32_t *v = NULL, *first = NULL, nb = 0, cur_n = 0;
    int64_t cur_tokens = 0, draws = 0;
    dcp_status_t st = DCP_OK;
    if (src->pool) {
        DCP_CHECK_GOTO(dcp_calloc(&order, src->pool_size, sizeof *order, "pack"), st, out);
        for (int64_t i = 0; i < src->pool_size; i++) order[i] = i;
        for (int64_t i = src->pool_size - 1; i > 0; i--) { /* Fisher-Yates */
            const int64_t j = dcpt_rng_range(&rng, 0, i), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    DCP_CHECK_GOTO(dcp_reserve(&first, &fcap, 1, sizeof *first, "pack"), st, out);
    int32_t len;
    while (nb < max_batches && next_length(src, order, &pos, &rng, &len)) {
        if (++draws > 100000000) break;
        const double scaled = (double)len * scale; /* compared before llround can overflow */
        if (len > max_len || scaled > (double)tokens) continue;
        const int64_t l = llround(scaled) > 0 ? llround(scaled) : 1;
        if (l > tokens) continue;
        if (cur_tokens + l > tokens) { /* close the batch: keep it if >= 75% full */
            if (4 * cur_tokens >= 3 * tokens) {
                DCP_CHECK_GOTO(dcp_reserve(&first, &fcap, nb + 2, sizeof *first, "pack"), st, out);
                first[++nb] = (int32_t)n;
            } else {
                n -= cur_n;
            }
            cur_tokens = 0;
            cur_n = 0;
            if (nb == max_batches) break;
        }
        DCP_CHECK_GOTO(dcp_reserve(&v, &cap, n + 1, sizeof *v, "pack"), st, out);
        v[n++] = (int32_t)l;
        cur_n++;
        cur_tokens += l;
    }
    if (nb < max_batches && 4 * cur_tokens >= 3 * tokens) { /* the last, open batch */
        DCP_CHECK_GOTO(dcp_reserve(&first, &fcap, nb + 2, sizeof *first, "pack"), st, out);
        first[++nb] = (int32_t)n;
    }
    if (nb == 0) {
        st = dcp_set_error(DCP_ERR_INVALID_ARG,
                           "pack: the lengths fill no batch of %lld tokens to 75%%",
                           (long long)tokens);
        goto out;
    }
    first[0] = 0;
    *lengths_out = v;
    *first_out = first;
    *num_batches_out = nb;
    v = NULL;
    first = NULL;
out:
    free(order);
    free(v);
    free(first);
    return st;
}
