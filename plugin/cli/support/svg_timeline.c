/*
 * A picture of one rank's simulated timeline (dcp-plan --simulate --svg): for the forward
 * and the backward, on a common time axis, the rank's kernels, its blocked stretches
 * (exposed communication, waiting for a peer), the transfer groups it receives and sends
 * (one bar per group from when it flows to when it ends, after a thin latency, coloured by
 * its main kind, darker between nodes; overlapping groups stacked), and the critical path:
 * dark where it runs through this rank, grey elsewhere.
 * Everything comes from the simulator's trace and explanation (partition/sim/simulate.h).
 */
#include "plugin/cli/support/svg.h"

#include "include/base/error.h"
#include "include/base/out_file.h"
#include "partition/sim/simulate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH   1280
#define LEFT    110
#define LANE    14
#define MAX_SUB 8 /* stacked rows per transfer lane */

static const char *const kind_name[DCP_XFER_KIND_COUNT] = {"Q",         "K+V", "O+LSE", "Q+dO",
                                                           "LSE+delta", "dQ",  "dK+dV"};
static const int kind_hue[DCP_XFER_KIND_COUNT] = {210, 30, 280, 200, 170, 330, 0};

typedef struct {
    FILE *f;
    double x_per_s, y;
} canvas_t;

static double X(const canvas_t *c, double t)
{
    return LEFT + t * c->x_per_s;
}

static void bar(const canvas_t *c, double t0, double t1, double y, double h, const char *fill,
                const char *tip)
{
    const double w = fmax(0.5, (t1 - t0) * c->x_per_s);
    fprintf(c->f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='%s'>", X(c, t0), y, w,
            h, fill);
    if (tip) fprintf(c->f, "<title>%s</title>", tip);
    fputs("</rect>\n", c->f);
}

static void label(const canvas_t *c, double y, const char *text)
{
    fprintf(c->f, "<text x='6' y='%.1f' font-size='11'>%s</text>\n", y + LANE - 3, text);
}

static int main_kind(const dcp_sim_group_t *g)
{
    int best = 0;
    for (int k = 1; k < DCP_XFER_KIND_COUNT; k++)
        if (g->kind_bytes[k] > g->kind_bytes[best]) best = k;
    return best;
}

static void kind_colour(int kind, int inter, char *buf, size_t n)
{
    snprintf(buf, n, "hsl(%d,65%%,%d%%)", kind_hue[kind], inter ? 35 : 62);
}

/* The groups rank r receives (dir 0) or sends (dir 1), stacked greedily into rows. */
static void xfer_lane(canvas_t *c, const dcp_sim_trace_t *t, int32_t r, int dir, const char *name)
{
    double row_end[MAX_SUB];
    for (int i = 0; i < MAX_SUB; i++) row_end[i] = -1;
    int rows = 1;
    const double y0 = c->y;
    for (int64_t g = 0; g < t->num_groups; g++) {
        const dcp_sim_group_t *G = &t->groups[g];
        if ((dir ? G->src : G->dst) != r) continue;
        int row = 0;
        while (row < MAX_SUB - 1 && row_end[row] > G->sides_s) row++;
        row_end[row] = G->end_s;
        rows = row + 1 > rows ? row + 1 : rows;
        char col[48], tip[160];
        const int k = main_kind(G);
        kind_colour(k, G->inter, col, sizeof col);
        snprintf(tip, sizeof tip, "%s %d -> %d: %.2f MB (%s), %.3f-%.3f ms", kind_name[k], G->src,
                 G->dst, G->bytes / 1e6, G->inter ? "between nodes" : "in node", G->start_s * 1e3,
                 G->end_s * 1e3);
        const double y = y0 + row * (LANE - 4);
        bar(c, G->sides_s, G->start_s, y + 4, 2, "#999", NULL);
        bar(c, G->start_s, G->end_s, y, LANE - 6, col, tip);
    }
    label(c, y0, name);
    c->y += rows * (LANE - 4) + 6;
}

static void pass_panel(canvas_t *c, const dcp_plan_t *p, const dcp_sim_trace_t *t,
                       const dcp_sim_explain_t *e, int32_t r, double end_s)
{
    fprintf(c->f,
            "<text x='6' y='%.1f' font-size='13' font-weight='bold'>%s: rank %d ends at %.3f ms, "
            "the pass at %.3f ms</text>\n",
            c->y + 12, t->pass == DCP_PASS_FWD ? "forward" : "backward", r, t->finish_s[r] * 1e3,
            end_s * 1e3);
    c->y += 20;
    for (int i = 0; i <= 10; i++) {
        const double ts = end_s * i / 10;
        fprintf(c->f,
                "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#ddd'/>"
                "<text x='%.1f' y='%.1f' font-size='9' text-anchor='middle'>%.2f</text>\n",
                X(c, ts), c->y, X(c, ts), c->y + 6 * LANE, X(c, ts), c->y + 8, ts * 1e3);
    }
    c->y += 12;
    dcp_sim_seg_t *segs = NULL;
    int64_t n = 0;
    if (dcp_sim_rank_timeline(p, t, r, &segs, &n) != DCP_OK) n = 0;
    static const char *const fill[] = {"#4caf50", "#9e9e9e", "", "", "#e53935", "#ffb300"};
    for (int lane = 0; lane < 2; lane++) {
        for (int64_t i = 0; i < n; i++) {
            const int kern = segs[i].what == DCP_SIM_SEG_ATTN || segs[i].what == DCP_SIM_SEG_MEMORY;
            if (kern != (lane == 0)) continue;
            bar(c, segs[i].t0_s, segs[i].t1_s, c->y, LANE - 2, fill[segs[i].what], NULL);
        }
        label(c, c->y, lane == 0 ? "kernels" : "blocked");
        c->y += LANE;
    }
    free(segs);
    xfer_lane(c, t, r, 0, "receives");
    xfer_lane(c, t, r, 1, "sends");
    for (int64_t i = 0; i < e->num_path; i++) {
        const dcp_sim_seg_t *s = &e->path[i];
        const int here =
            s->what == DCP_SIM_SEG_ATTN || s->what == DCP_SIM_SEG_MEMORY
                ? s->rank == r
                : s->group >= 0 && (t->groups[s->group].src == r || t->groups[s->group].dst == r);
        bar(c, s->t0_s, s->t1_s, c->y, LANE - 4, here ? "#212121" : "#cfcfcf", NULL);
    }
    label(c, c->y, "critical path");
    c->y += LANE + 10;
}

static void legend(canvas_t *c)
{
    static const char *const names[] = {"attention", "merge/sum/copy", "exposed", "waiting"};
    static const char *const cols[] = {"#4caf50", "#9e9e9e", "#e53935", "#ffb300"};
    double x = LEFT;
    for (int i = 0; i < 4; i++, x += 120) {
        fprintf(c->f,
                "<rect x='%.0f' y='%.0f' width='10' height='10' fill='%s'/>"
                "<text x='%.0f' y='%.0f' font-size='11'>%s</text>\n",
                x, c->y, cols[i], x + 14, c->y + 9, names[i]);
    }
    c->y += 16;
    x = LEFT;
    for (int k = 0; k < DCP_XFER_KIND_COUNT; k++, x += 120) {
        char a[48], b[48];
        kind_colour(k, 0, a, sizeof a);
        kind_colour(k, 1, b, sizeof b);
        fprintf(c->f,
                "<rect x='%.0f' y='%.0f' width='6' height='10' fill='%s'/>"
                "<rect x='%.0f' y='%.0f' width='6' height='10' fill='%s'/>"
                "<text x='%.0f' y='%.0f' font-size='11'>%s</text>\n",
                x, c->y, a, x + 6, c->y, b, x + 16, c->y + 9, kind_name[k]);
    }
    fprintf(c->f,
            "<text x='%.0f' y='%.0f' font-size='11'>(light: in a node, dark: between "
            "nodes)</text>\n",
            x, c->y + 9);
    c->y += 22;
}

dcp_status_t dcpt_svg_timeline(const dcp_plan_t *p, const dcp_sim_trace_t tr[DCP_PASS_COUNT],
                               const dcp_sim_explain_t ex[DCP_PASS_COUNT], int32_t rank,
                               const char *path, const char *title)
{
    if (rank < 0 || rank >= tr[0].num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "svg-rank = %d, the plan has ranks 0..%d", rank,
                             tr[0].num_ranks - 1);
    char *body = NULL;
    size_t body_len = 0;
    FILE *f = open_memstream(&body, &body_len);
    if (!f) return dcp_set_error(DCP_ERR_NO_MEMORY, "svg timeline: %s", strerror(errno));
    /* one scale for both passes: the longer one fills the width */
    double end[DCP_PASS_COUNT] = {0, 0};
    for (int k = 0; k < DCP_PASS_COUNT; k++)
        for (int32_t r = 0; r < tr[k].num_ranks; r++) end[k] = fmax(end[k], tr[k].finish_s[r]);
    const double span = fmax(fmax(end[0], end[1]), 1e-9);
    canvas_t c = {.f = f, .x_per_s = (WIDTH - LEFT - 20) / span, .y = 36};
    legend(&c);
    for (int k = 0; k < DCP_PASS_COUNT; k++) pass_panel(&c, p, &tr[k], &ex[k], rank, end[k]);
    fclose(f);
    dcp_out_file_t o;
    const dcp_status_t st = dcp_out_file_open(&o, path, "timeline svg");
    if (st != DCP_OK) {
        free(body);
        return st;
    }
    FILE *out = o.f;
    fprintf(out,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%.0f' "
            "font-family='sans-serif'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
            WIDTH, c.y + 10);
    fputs("<text x='6' y='24' font-size='15' font-weight='bold'>", out);
    for (const char *q = title; *q; q++) {
        if (*q == '<')
            fputs("&lt;", out);
        else if (*q == '&')
            fputs("&amp;", out);
        else
            fputc(*q, out);
    }
    fputs("</text>\n", out);
    fwrite(body, 1, body_len, out);
    free(body);
    fputs("</svg>\n", out);
    return dcp_out_file_close(&o, DCP_OK, "timeline svg");
}
