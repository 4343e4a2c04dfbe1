/*
 * A picture of one plan, readable at a glance:
 *  - per sequence, the grid of computation blocks (query block down, KV block across),
 *    each coloured by the rank that computes it (head group 0), with the owner of every
 *    token block on the left edge;
 *  - per rank, bars of FLOPs, owned bytes and traffic (sent + received), with the mean;
 *  - the rank-to-rank traffic matrix, nodes outlined.
 */
#include "plugin/cli/svg.h"

#include "include/base/error.h"
#include "partition/plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH    1280
#define MAX_SEQS 48

static void rank_colour(char *buf, size_t n, int32_t r, int32_t nr)
{
    const double hue = 360.0 * r / (nr > 0 ? nr : 1);
    snprintf(buf, n, "hsl(%.0f,70%%,%d%%)", hue, r % 2 ? 42 : 58);
}

typedef struct {
    FILE *f;
    const dcp_plan_t *p;
    int32_t *exec;      /* [q-block index within sequence, kv index] per sequence, -1 empty */
    int32_t *seq_first; /* first token block of each sequence */
    double y;           /* next free row */
} svg_t;

static void fill_exec(svg_t *s, int64_t *cell_base)
{
    const dcp_plan_t *p = s->p;
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int64_t i = p->prog_off[r]; i < p->prog_off[r + 1]; i++) {
            if (p->instrs[i].op != DCP_OP_ATTN) continue;
            for (int64_t g = p->instrs[i].first; g < p->instrs[i].first + p->instrs[i].count; g++) {
                const dcp_tile_group_t *gr = &p->groups[g];
                if (gr->head_group != 0) continue;
                const int32_t seq = gr->seq, f = s->seq_first[seq];
                const int64_t nb = s->seq_first[seq + 1] - f;
                for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++)
                    s->exec[cell_base[seq] + (int64_t)(gr->q_block - f) * nb +
                            (p->tiles[t].kv_block - f)] = r;
            }
        }
}

static void grids(svg_t *s, const int64_t *cell_base)
{
    const dcp_plan_t *p = s->p;
    int32_t order[MAX_SEQS], n = 0, longest = 1;
    /* the longest sequences first */
    for (int32_t k = 0; k < MAX_SEQS && k < p->num_seqs; k++) {
        int32_t best = -1;
        for (int32_t q = 0; q < p->num_seqs; q++) {
            int used = 0;
            for (int32_t j = 0; j < n; j++) used |= order[j] == q;
            if (!used && (best < 0 || p->seqs[q].len > p->seqs[best].len)) best = q;
        }
        order[n++] = best;
    }
    for (int32_t i = 0; i < n; i++) {
        const int32_t nb = s->seq_first[order[i] + 1] - s->seq_first[order[i]];
        longest = nb > longest ? nb : longest;
    }
    const double cell = fmax(1.5, fmin(16.0, 420.0 / longest));
    fprintf(s->f,
            "<text x='10' y='%.0f' font-size='15' font-weight='bold'>Computation blocks "
            "by rank (query block down, KV block across; left edge: token block owner)</text>\n",
            s->y + 16);
    s->y += 28;
    double x = 10, row_h = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t seq = order[i], f = s->seq_first[seq];
        const int32_t nb = s->seq_first[seq + 1] - f;
        const double w = (nb + 1) * cell + 12;
        if (x + w > WIDTH - 10 && x > 10) {
            x = 10;
            s->y += row_h + 22;
            row_h = 0;
        }
        /* narrow grids get a short label so that neighbours do not overlap */
        if (w >= 70)
            fprintf(s->f, "<text x='%.1f' y='%.1f' font-size='10'>seq %d (%d)</text>\n", x,
                    s->y + 9, seq, p->seqs[seq].len);
        else
            fprintf(s->f, "<text x='%.1f' y='%.1f' font-size='8'>%d</text>\n", x, s->y + 9, seq);
        const double y0 = s->y + 13;
        char col[48];
        for (int32_t a = 0; a < nb; a++) {
            rank_colour(col, sizeof col, p->blk_owner[f + a], p->num_ranks);
            fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>\n", x,
                    y0 + a * cell, cell * 0.8, cell, col);
            for (int32_t b = 0; b < nb; b++) {
                const int32_t r = s->exec[cell_base[seq] + (int64_t)a * nb + b];
                if (r < 0) continue;
                rank_colour(col, sizeof col, r, p->num_ranks);
                fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>\n",
                        x + (b + 1) * cell, y0 + a * cell, cell, cell, col);
            }
        }
        fprintf(s->f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' "
                "stroke='#999' stroke-width='0.5'/>\n",
                x + cell, y0, nb * cell, nb * cell);
        x += w;
        row_h = fmax(row_h, nb * cell + 13);
    }
    if (p->num_seqs > n)
        fprintf(s->f,
                "<text x='10' y='%.0f' font-size='10'>(%d shorter sequences not drawn)</text>\n",
                s->y + row_h + 14, p->num_seqs - n);
    s->y += row_h + 30;
}

static void bars(svg_t *s, const char *title, const double *v, double x0, double w, double h)
{
    const dcp_plan_t *p = s->p;
    double max = 0, mean = 0;
    for (int32_t r = 0; r < p->num_ranks; r++) {
        max = fmax(max, v[r]);
        mean += v[r] / p->num_ranks;
    }
    fprintf(s->f, "<text x='%.0f' y='%.0f' font-size='12' font-weight='bold'>%s</text>\n", x0,
            s->y + 12, title);
    const double y0 = s->y + 20, bw = w / p->num_ranks;
    char col[48];
    for (int32_t r = 0; r < p->num_ranks; r++) {
        const double bh = max > 0 ? h * v[r] / max : 0;
        rank_colour(col, sizeof col, r, p->num_ranks);
        fprintf(s->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'/>\n",
                x0 + r * bw, y0 + h - bh, fmax(bw - 1, 0.5), bh, col);
    }
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
    const dcp_plan_t *p = s->p;
    const int32_t nr = p->num_ranks;
    double *m = calloc((size_t)nr * nr, sizeof *m), max = 0;
    if (!m) return;
    for (int32_t r = 0; r < nr; r++)
        for (int64_t i = p->prog_off[r]; i < p->prog_off[r + 1]; i++) {
            if (p->instrs[i].op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t k = p->instrs[i].first; k < p->instrs[i].first + p->instrs[i].count; k++)
                if (p->comm[k].send)
                    m[(int64_t)r * nr + p->comm[k].peer] +=
                        (double)p->comm[k].elems * dcp_plan_elem_bytes(p, p->comm[k].buf);
        }
    for (int64_t i = 0; i < (int64_t)nr * nr; i++) max = fmax(max, m[i]);
    fprintf(s->f,
            "<text x='%.0f' y='%.0f' font-size='12' font-weight='bold'>Traffic, sender "
            "down, receiver across (max %.2f MB)</text>\n",
            x0, s->y + 12, max / 1e6);
    const double c = size / nr, y0 = s->y + 20;
    for (int32_t a = 0; a < nr; a++)
        for (int32_t b = 0; b < nr; b++) {
            const double f = max > 0 ? m[(int64_t)a * nr + b] / max : 0;
            fprintf(s->f,
                    "<rect x='%.1f' y='%.1f' width='%.2f' height='%.2f' fill='rgb(%d,%d,%d)'/>\n",
                    x0 + b * c, y0 + a * c, c, c, (int)(255 - 225 * f), (int)(255 - 180 * f), 255);
        }
    for (int32_t n = 0; n < p->num_nodes; n++)
        fprintf(s->f,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' "
                "stroke='black' stroke-width='1'/>\n",
                x0 + n * p->devs_per_node * c, y0 + n * p->devs_per_node * c, p->devs_per_node * c,
                p->devs_per_node * c);
    fprintf(s->f,
            "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='#666'/>\n", x0,
            y0, size, size);
    free(m);
}

dcp_status_t dcpt_svg_write(const dcp_plan_t *p, const char *path, const char *title)
{
    svg_t s = {.p = p};
    int64_t *cell_base = NULL, cells = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s.seq_first, p->num_seqs + 1, sizeof *s.seq_first, "svg"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&cell_base, p->num_seqs + 1, sizeof *cell_base, "svg"), st, out);
    for (int32_t t = p->num_blocks - 1; t >= 0; t--) s.seq_first[p->blk_seq[t]] = t;
    s.seq_first[p->num_seqs] = p->num_blocks;
    for (int32_t q = 0; q < p->num_seqs; q++) {
        const int64_t nb = s.seq_first[q + 1] - s.seq_first[q];
        cell_base[q] = cells;
        cells += nb * nb;
    }
    DCP_CHECK_GOTO(dcp_calloc(&s.exec, cells, sizeof *s.exec, "svg"), st, out);
    for (int64_t i = 0; i < cells; i++) s.exec[i] = -1;
    fill_exec(&s, cell_base);
    /* the body goes to memory first: the height is known only at its end */
    char *body = NULL;
    size_t body_len = 0;
    s.f = open_memstream(&body, &body_len);
    if (!s.f) {
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "svg: cannot open a memory stream");
        goto out;
    }
    fprintf(s.f, "<text x='10' y='22' font-size='16'>%s</text>\n", title);
    s.y = 36;
    grids(&s, cell_base);
    double *v[3];
    for (int k = 0; k < 3; k++) v[k] = calloc((size_t)p->num_ranks, sizeof(double));
    if (v[0] && v[1] && v[2]) {
        for (int32_t r = 0; r < p->num_ranks; r++) {
            v[0][r] = (double)p->rank_stats[r].flops;
            v[1][r] = (double)p->rank_stats[r].memory_bytes;
            v[2][r] = (double)(p->rank_stats[r].sent_bytes + p->rank_stats[r].recv_bytes);
        }
        bars(&s, "FLOPs per rank", v[0], 10, 300, 120);
        bars(&s, "Owned bytes per rank", v[1], 430, 300, 120);
        bars(&s, "Traffic per rank (sent + received)", v[2], 850, 300, 120);
        s.y += 160;
        const double size = fmin(600, 12.0 * p->num_ranks + 200);
        matrix(&s, 10, size);
        s.y += size + 40;
    }
    for (int k = 0; k < 3; k++) free(v[k]);
    fclose(s.f);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(body);
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "svg '%s': %s", path, strerror(errno));
        goto out;
    }
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%.0f' "
            "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            WIDTH, s.y);
    fwrite(body, 1, body_len, f);
    fprintf(f, "</svg>\n");
    free(body);
    st = fclose(f) == 0 ? DCP_OK : dcp_set_error(DCP_ERR_SYSTEM, "svg '%s': write failed", path);
out:
    free(s.seq_first);
    free(s.exec);
    free(cell_base);
    return st;
}
