/*
 * A picture of one plan, readable at a glance and small at any scale:
 *  - a legend: every rank's colour, ranks grouped by node (hues step between nodes,
 *    lightness between the devices of a node);
 *  - per sequence (the longest MAX_SEQS), the grid of computation blocks (query block down,
 *    KV block across, ticks at both ends), each coloured by the rank that computes it (head
 *    group 0), with the owner of every token block on the left edge; a sequence of more than
 *    MAX_CELLS blocks is drawn in bins of k x k blocks (the label says k), and runs of equal
 *    cells in a row are one rectangle, so the file stays small;
 *  - per rank, bars of FLOPs, owned bytes and traffic (sent + received), with the mean, a
 *    rank axis and node separators;
 *  - the rank-to-rank traffic matrix, nodes outlined.
 * Everything comes through the plan walker (partition/plan/plan_walk.h) and dcp.h.
 */
#include "plugin/cli/support/svg.h"

#include "include/base/error.h"
#include "include/base/out_file.h"
#include "partition/plan/plan_walk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH     1280
#define MAX_SEQS  24
#define MAX_CELLS 128 /* grid edge in drawn cells */

typedef struct {
    FILE *f;
    const dcp_plan_t *p;
    dcp_plan_walk_shape_t sh;
    int32_t *seq_first; /* first token block of each sequence, [num_seqs + 1] */
    int32_t *bin;       /* per sequence: blocks per drawn cell */
    int64_t *cell_base; /* per sequence: its first cell in exec */
    int32_t *exec;      /* drawn cells, row-major per sequence: the computing rank, -1 none */
    double *traffic;    /* [R * R] bytes sent, sender-major */
    double y;           /* next free row */
} svg_t;

static void rank_colour(const svg_t *s, int32_t r, char *buf, size_t n)
{
    const int32_t g = s->sh.devs_per_node > 0 ? s->sh.devs_per_node : 1;
    const int32_t node = r / g, dev = r % g, nodes = (s->sh.num_ranks + g - 1) / g;
    const double hue = 360.0 * node / (nodes > 0 ? nodes : 1) + (nodes > 1 ? 0 : 300.0 * dev / g);
    const int light = nodes > 1 ? 30 + (int)(45.0 * dev / (g > 1 ? g - 1 : 1)) : 50;
    snprintf(buf, n, "hsl(%.0f,70%%,%d%%)", fmod(hue, 360.0), light);
}

static void on_tile(void *arg, int32_t rank, int32_t head_group, int32_t q_block, int32_t kv_block)
{
    svg_t *s = arg;
    if (head_group != 0) return;
    int32_t seq, owner;
    dcp_plan_walk_block(s->p, q_block, &seq, &owner);
    const int32_t f = s->seq_first[seq], k = s->bin[seq];
    const int64_t n = (s->seq_first[seq + 1] - f + k - 1) / k;
    s->exec[s->cell_base[seq] + (int64_t)((q_block - f) / k) * n + (kv_block - f) / k] = rank;
}

static void on_send(void *arg, int32_t from, int32_t to, int64_t bytes)
{
    svg_t *s = arg;
    s->traffic[(int64_t)from * s->sh.num_ranks + to] += (double)bytes;
}

static void rect(const svg_t *s, double x, double y, double w, double h, const char *fill)
{
    fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>\n", x, y, w, h,
            fill);
}

static void legend(svg_t *s)
{
    const int32_t nr = s->sh.num_ranks, g = s->sh.devs_per_node > 0 ? s->sh.devs_per_node : 1;
    fprintf(s->f, "<text x='10' y='%.0f' font-size='12' font-weight='bold'>Ranks</text>\n",
            s->y + 12);
    s->y += 18;
    char col[48];
    for (int32_t node = 0; node * g < nr; node++) {
        const double y = s->y + (node / 4) * 18.0, x0 = 10 + (node % 4) * 310.0;
        fprintf(s->f, "<text x='%.0f' y='%.0f' font-size='10'>node %d</text>\n", x0, y + 10, node);
        for (int32_t d = 0; d < g && node * g + d < nr; d++) {
            rank_colour(s, node * g + d, col, sizeof col);
            const double w = fmin(30.0, 250.0 / g);
            rect(s, x0 + 48 + d * w, y, w - 1, 12, col);
            if (w >= 14)
                fprintf(s->f, "<text x='%.1f' y='%.0f' font-size='8' fill='white'>%d</text>\n",
                        x0 + 49 + d * w, y + 9, node * g + d);
        }
    }
    s->y += ((nr / g + 3) / 4) * 18.0 + 12;
}

/* The sequences drawn: the longest first. */
static int32_t pick(const svg_t *s, int32_t *order)
{
    int32_t n = 0;
    for (int32_t k = 0; k < MAX_SEQS && k < s->sh.num_seqs; k++) {
        int32_t best = -1;
        for (int32_t q = 0; q < s->sh.num_seqs; q++) {
            int used = 0;
            for (int32_t j = 0; j < n; j++) used |= order[j] == q;
            if (!used &&
                (best < 0 || dcp_plan_walk_seq_len(s->p, q) > dcp_plan_walk_seq_len(s->p, best)))
                best = q;
        }
        order[n++] = best;
    }
    return n;
}

/* Row a of a grid: runs of equal cells as one rectangle each. */
static void grid_row(const svg_t *s, const int32_t *row, int32_t n, double x, double y, double c)
{
    char col[48];
    for (int32_t b = 0; b < n;) {
        int32_t e = b + 1;
        while (e < n && row[e] == row[b]) e++;
        if (row[b] >= 0) {
            rank_colour(s, row[b], col, sizeof col);
            rect(s, x + b * c, y, (e - b) * c, c, col);
        }
        b = e;
    }
}

static void grid(svg_t *s, int32_t seq, double x, double c)
{
    const int32_t f = s->seq_first[seq], nb = s->seq_first[seq + 1] - f, k = s->bin[seq];
    const int32_t n = (nb + k - 1) / k;
    const double y0 = s->y + 13;
    char col[48];
    if (k > 1)
        fprintf(s->f,
                "<text x='%.1f' y='%.1f' font-size='10'>seq %d (%d tokens, %dx%d blocks a "
                "cell)</text>\n",
                x, s->y + 9, seq, dcp_plan_walk_seq_len(s->p, seq), k, k);
    else if (n * c >= 60)
        fprintf(s->f, "<text x='%.1f' y='%.1f' font-size='10'>seq %d (%d)</text>\n", x, s->y + 9,
                seq, dcp_plan_walk_seq_len(s->p, seq));
    else
        fprintf(s->f, "<text x='%.1f' y='%.1f' font-size='8'>%d</text>\n", x, s->y + 9, seq);
    for (int32_t a = 0; a < n; a++) {
        int32_t sq, owner;
        dcp_plan_walk_block(s->p, f + a * k, &sq, &owner);
        rank_colour(s, owner, col, sizeof col);
        rect(s, x, y0 + a * c, c * 0.8, c, col);
        grid_row(s, s->exec + s->cell_base[seq] + (int64_t)a * n, n, x + c, y0 + a * c, c);
    }
    fprintf(s->f,
            "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#999' "
            "stroke-width='0.5'/>\n",
            x + c, y0, n * c, n * c);
    if (n * c >= 40) /* axis ticks: the first and last block of each direction */
        fprintf(s->f,
                "<text x='%.1f' y='%.1f' font-size='7' fill='#555'>0</text><text x='%.1f' "
                "y='%.1f' font-size='7' fill='#555' text-anchor='end'>%d</text>\n",
                x + c, y0 + n * c + 8, x + c + n * c, y0 + n * c + 8, nb - 1);
}

/* Cells of sequence q's grid along each edge. */
static int32_t grid_cells(const svg_t *s, int32_t q)
{
    return (s->seq_first[q + 1] - s->seq_first[q] + s->bin[q] - 1) / s->bin[q];
}

/* Each grid's edge is proportional to its sequence's length (the longest GRID_PX), so short
 * sequences take little room whatever their block count. */
#define GRID_PX 360.0

static void grids(svg_t *s)
{
    int32_t order[MAX_SEQS];
    const int32_t n = pick(s, order);
    const double longest = n ? dcp_plan_walk_seq_len(s->p, order[0]) : 1;
    fprintf(s->f,
            "<text x='10' y='%.0f' font-size='14' font-weight='bold'>Computation blocks by rank "
            "(query block down 0..n-1, KV block across 0..n-1; left edge: token block owner; "
            "edge proportional to length)</text>\n",
            s->y + 16);
    s->y += 28;
    double x = 10, row_h = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t q = order[i], cells = grid_cells(s, q);
        const double edge = fmax(24.0, GRID_PX * dcp_plan_walk_seq_len(s->p, q) / longest);
        const double c = edge / cells, w = edge + c + 14;
        if (x + w > WIDTH - 10 && x > 10) {
            x = 10;
            s->y += row_h + 24;
            row_h = 0;
        }
        grid(s, q, x, c);
        x += w;
        row_h = fmax(row_h, edge + 21);
    }
    if (s->sh.num_seqs > n)
        fprintf(s->f,
                "<text x='10' y='%.0f' font-size='10'>(%d shorter sequences not drawn)</text>\n",
                s->y + row_h + 14, s->sh.num_seqs - n);
    s->y += row_h + 30;
}

static void bars(svg_t *s, const char *title, const double *v, double x0, double w, double h)
{
    const int32_t nr = s->sh.num_ranks, g = s->sh.devs_per_node > 0 ? s->sh.devs_per_node : 1;
    double max = 0, mean = 0;
    for (int32_t r = 0; r < nr; r++) {
        max = fmax(max, v[r]);
        mean += v[r] / nr;
    }
    fprintf(s->f, "<text x='%.0f' y='%.0f' font-size='12' font-weight='bold'>%s</text>\n", x0,
            s->y + 12, title);
    const double y0 = s->y + 20, bw = w / nr;
    char col[48];
    for (int32_t r = 0; r < nr; r++) {
        const double bh = max > 0 ? h * v[r] / max : 0;
        rank_colour(s, r, col, sizeof col);
        rect(s, x0 + r * bw, y0 + h - bh, fmax(bw - 1, 0.5), bh, col);
        if (r % g == 0) /* node separators and the rank axis */
            fprintf(s->f,
                    "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#aaa'/><text "
                    "x='%.1f' y='%.1f' font-size='8'>%d</text>\n",
                    x0 + r * bw, x0 + r * bw, y0, y0 + h + 4, x0 + r * bw + 1, y0 + h + 11, r);
    }
    fprintf(s->f,
            "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='black'/><text x='%.0f' "
            "y='%.1f' font-size='9'>rank</text>\n",
            x0, x0 + w, y0 + h, y0 + h, x0 + w + 4, y0 + h + 11);
    if (max > 0)
        fprintf(s->f,
                "<line x1='%.0f' x2='%.0f' y1='%.1f' y2='%.1f' stroke='black' "
                "stroke-dasharray='4,3'/><text x='%.0f' y='%.1f' font-size='10'>mean, "
                "max %.2fx</text>\n",
                x0, x0 + w, y0 + h - h * mean / max, y0 + h - h * mean / max, x0 + w + 4,
                y0 + h - h * mean / max + 3, mean > 0 ? max / mean : 0.0);
}

static void matrix(svg_t *s, double x0, double size)
{
    const int32_t nr = s->sh.num_ranks, g = s->sh.devs_per_node > 0 ? s->sh.devs_per_node : 1;
    double max = 0;
    for (int64_t i = 0; i < (int64_t)nr * nr; i++) max = fmax(max, s->traffic[i]);
    fprintf(s->f,
            "<text x='%.0f' y='%.0f' font-size='12' font-weight='bold'>Traffic, sender rank "
            "down, receiver rank across (darkest %.2f MB)</text>\n",
            x0, s->y + 12, max / 1e6);
    const double c = size / nr, y0 = s->y + 20;
    for (int32_t a = 0; a < nr; a++)
        for (int32_t b = 0; b < nr; b++) {
            const double f = max > 0 ? s->traffic[(int64_t)a * nr + b] / max : 0;
            if (f <= 0) continue;
            fprintf(s->f,
                    "<rect x='%.1f' y='%.1f' width='%.2f' height='%.2f' fill='rgb(%d,%d,%d)'/>\n",
                    x0 + b * c, y0 + a * c, c, c, (int)(255 - 225 * f), (int)(255 - 180 * f), 255);
        }
    for (int32_t n = 0; n * g < nr; n++)
        fprintf(s->f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='black' "
                "stroke-width='1'/><text x='%.1f' y='%.1f' font-size='8'>node %d</text>\n",
                x0 + n * g * c, y0 + n * g * c, g * c, g * c, x0 + size + 4, y0 + (n + 0.5) * g * c,
                n);
    fprintf(s->f,
            "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#666'/>\n", x0,
            y0, size, size);
}

/* Per sequence: first block, bin and first cell; exec and traffic allocated. */
static dcp_status_t layout(svg_t *s)
{
    const int32_t ns = s->sh.num_seqs, nr = s->sh.num_ranks;
    DCP_CHECK(dcp_calloc(&s->seq_first, ns + 1, sizeof *s->seq_first, "svg"));
    DCP_CHECK(dcp_calloc(&s->bin, ns, sizeof *s->bin, "svg"));
    DCP_CHECK(dcp_calloc(&s->cell_base, ns + 1, sizeof *s->cell_base, "svg"));
    DCP_CHECK(dcp_calloc(&s->traffic, (int64_t)nr * nr, sizeof *s->traffic, "svg"));
    for (int32_t t = s->sh.num_blocks - 1; t >= 0; t--) {
        int32_t seq, owner;
        dcp_plan_walk_block(s->p, t, &seq, &owner);
        s->seq_first[seq] = t;
    }
    s->seq_first[ns] = s->sh.num_blocks;
    int64_t cells = 0;
    for (int32_t q = 0; q < ns; q++) {
        const int32_t nb = s->seq_first[q + 1] - s->seq_first[q];
        s->bin[q] = (nb + MAX_CELLS - 1) / MAX_CELLS;
        const int64_t n = (nb + s->bin[q] - 1) / s->bin[q];
        s->cell_base[q] = cells;
        cells += n * n;
    }
    DCP_CHECK(dcp_calloc(&s->exec, cells, sizeof *s->exec, "svg"));
    for (int64_t i = 0; i < cells; i++) s->exec[i] = -1;
    dcp_plan_walk_tiles(s->p, on_tile, s);
    dcp_plan_walk_sends(s->p, on_send, s);
    return DCP_OK;
}

static dcp_status_t body(svg_t *s, const char *title)
{
    const int32_t nr = s->sh.num_ranks;
    fputs("<text x='10' y='22' font-size='16'>", s->f);
    for (const char *c = title; *c; c++) /* the title is text, not markup */
        fputs(*c == '<' ? "&lt;" : *c == '&' ? "&amp;" : (char[2]){*c, 0}, s->f);
    fputs("</text>\n", s->f);
    s->y = 36;
    legend(s);
    grids(s);
    double *v;
    DCP_CHECK(dcp_calloc(&v, 3 * (int64_t)nr, sizeof *v, "svg"));
    for (int32_t r = 0; r < nr; r++) {
        dcp_rank_stats_t rs;
        const dcp_status_t st = dcp_plan_get_rank_stats(s->p, r, &rs);
        if (st != DCP_OK) {
            free(v);
            return st;
        }
        v[r] = (double)rs.flops;
        v[nr + r] = (double)rs.memory_bytes;
        v[2 * nr + r] = (double)(rs.sent_bytes + rs.recv_bytes);
    }
    bars(s, "FLOPs per rank", v, 10, 300, 120);
    bars(s, "Owned bytes per rank", v + nr, 430, 300, 120);
    bars(s, "Traffic per rank (sent + received)", v + 2 * nr, 850, 300, 120);
    free(v);
    s->y += 165;
    const double size = fmin(600, 12.0 * nr + 200);
    matrix(s, 10, size);
    s->y += size + 40;
    return DCP_OK;
}

dcp_status_t dcpt_svg_write(const dcp_plan_t *p, const char *path, const char *title)
{
    svg_t s = {.p = p};
    dcp_plan_walk_shape(p, &s.sh);
    char *text = NULL;
    size_t len = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(layout(&s), st, out);
    /* the body goes to memory first: the height is known only at its end */
    s.f = open_memstream(&text, &len);
    if (!s.f) {
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "svg: cannot open a memory stream");
        goto out;
    }
    st = body(&s, title);
    fclose(s.f);
    if (st != DCP_OK) goto out;
    dcp_out_file_t o;
    DCP_CHECK_GOTO(dcp_out_file_open(&o, path, "svg"), st, out);
    FILE *f = o.f;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%.0f' "
            "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            WIDTH, s.y);
    fwrite(text, 1, len, f);
    fprintf(f, "</svg>\n");
    st = dcp_out_file_close(&o, DCP_OK, "svg");
out:
    free(text);
    free(s.seq_first);
    free(s.bin);
    free(s.cell_base);
    free(s.exec);
    free(s.traffic);
    return st;
}
