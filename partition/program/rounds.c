#include "partition/program/rounds.h"

#include "include/base/error.h"

#include <stdlib.h>

typedef struct {
    int32_t delta;
    int64_t *at_send; /* [rank * delta + colour] = edge, or -1 */
    int64_t *at_recv;
    const int32_t *src, *dst;
    int32_t *colour;
} colouring_t;

static int32_t first_free(const int64_t *at, int32_t delta)
{
    for (int32_t c = 0; c < delta; c++)
        if (at[c] < 0) return c;
    return -1;
}

static void set_colour(colouring_t *k, int64_t e, int32_t c)
{
    k->colour[e] = c;
    k->at_send[(int64_t)k->src[e] * k->delta + c] = e;
    k->at_recv[(int64_t)k->dst[e] * k->delta + c] = e;
}

static void clear_colour(colouring_t *k, int64_t e)
{
    const int32_t c = k->colour[e];
    k->at_send[(int64_t)k->src[e] * k->delta + c] = -1;
    k->at_recv[(int64_t)k->dst[e] * k->delta + c] = -1;
}

/* Swaps colours a and b along the path that leaves receiver v by its a-edge and then
 * alternates b (at senders) and a (at receivers). In a bipartite graph it cannot come back
 * to the sender that has a free, so afterwards a is free at v. */
static dcp_status_t flip_path(colouring_t *k, int32_t v, int32_t a, int32_t b, int64_t *path)
{
    int64_t n = 0;
    int at_receiver = 1;
    int32_t node = v;
    for (;;) {
        const int32_t want = at_receiver ? a : b;
        const int64_t e = (at_receiver ? k->at_recv : k->at_send)[(int64_t)node * k->delta + want];
        if (e < 0) break;
        path[n++] = e;
        node = at_receiver ? k->src[e] : k->dst[e];
        at_receiver = !at_receiver;
    }
    for (int64_t i = 0; i < n; i++) clear_colour(k, path[i]);
    for (int64_t i = 0; i < n; i++) set_colour(k, path[i], i % 2 == 0 ? b : a);
    return DCP_OK;
}

dcp_status_t dcp_rounds_colour(int64_t n, const int32_t *src, const int32_t *dst, int32_t num_ranks,
                               int32_t *colour_out, int32_t *colours_out)
{
    int32_t *deg_s = NULL, *deg_r = NULL;
    colouring_t k = {.src = src, .dst = dst, .colour = colour_out};
    int64_t *path = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&deg_s, num_ranks, sizeof *deg_s, "rounds"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&deg_r, num_ranks, sizeof *deg_r, "rounds"), st, out);
    for (int64_t e = 0; e < n; e++) {
        if (src[e] < 0 || src[e] >= num_ranks || dst[e] < 0 || dst[e] >= num_ranks ||
            src[e] == dst[e]) {
            st = dcp_set_error(DCP_ERR_INTERNAL, "rounds: edge %lld from %d to %d", (long long)e,
                               src[e], dst[e]);
            goto out;
        }
        if (++deg_s[src[e]] > k.delta) k.delta = deg_s[src[e]];
        if (++deg_r[dst[e]] > k.delta) k.delta = deg_r[dst[e]];
    }
    DCP_CHECK_GOTO(dcp_calloc(&k.at_send, (int64_t)num_ranks * k.delta, sizeof(int64_t), "rounds"),
                   st, out);
    DCP_CHECK_GOTO(dcp_calloc(&k.at_recv, (int64_t)num_ranks * k.delta, sizeof(int64_t), "rounds"),
                   st, out);
    DCP_CHECK_GOTO(dcp_calloc(&path, n + 1, sizeof *path, "rounds"), st, out);
    for (int64_t i = 0; i < (int64_t)num_ranks * k.delta; i++) k.at_send[i] = k.at_recv[i] = -1;
    for (int64_t e = 0; e < n; e++) {
        const int32_t a = first_free(k.at_send + (int64_t)src[e] * k.delta, k.delta);
        const int32_t b = first_free(k.at_recv + (int64_t)dst[e] * k.delta, k.delta);
        if (k.at_recv[(int64_t)dst[e] * k.delta + a] >= 0) /* a is taken at the receiver */
            DCP_CHECK_GOTO(flip_path(&k, dst[e], a, b, path), st, out);
        set_colour(&k, e, a);
    }
    *colours_out = k.delta;
    st = DCP_OK;
out:
    free(deg_s);
    free(deg_r);
    free(k.at_send);
    free(k.at_recv);
    free(path);
    return st;
}
