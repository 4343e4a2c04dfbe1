/*
 * dcp-plan --layers: one plan per batch and strategy for every layer kind (the joint
 * placement), a row per kind and a model row: each kind times its layer count, summed (bytes,
 * predicted and simulated times), the worst kind's imbalance. --compare adds per strategy
 *  - "MASK only": the placement planned for that kind alone, every kind run on it
 *    (dcpt_plan_on: the kinds its tiles cover where it computes them, the rest at
 *    their query's owner);
 *  - "per-kind": every kind on its own placement, plus the re-layout between them: wherever
 *    the model goes from a layer of one kind to one of another, an all-to-all moves every
 *    token whose owner differs (its hidden state, heads x head_dim values), forward and
 *    backward. With the kinds interleaved as evenly as their counts allow (Gemma 3's 5:1, one
 *    global layer between runs of windows), a forward crosses min(L, 2 (L - most)) kind
 *    boundaries, L the layers and `most` the largest count; each crossing costs the mean of
 *    the re-layouts between distinct kinds (dcpt_relayout_ms).
 * Tables give means over the batches (imbalance: the worst batch; planning time: the median,
 * wall clock with its min-max, and CPU time, the one to compare on a shared host); JSON one
 * line per (strategy, placement, batch, kind or model).
 */
#include "plugin/cli/helpers/plan_layers.h"

#include "include/base/error.h"
#include "plugin/cli/support/planner.h"
#include "plugin/cli/support/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Placements: the joint one, each kind's alone, and one per kind with re-layouts. */
#define MAXV (DCP_MAX_KINDS + 2)

/* One row's figures for one batch; in a model row, each kind's times its layers, summed. */
typedef struct {
    double comm, inter, pred, bwd, relayout, step, sim_step, comp_imb, plan_ms, plan_cpu_ms;
} fig_t;

/* A row of the table: sums over batches (imbalance the worst), plan times for the median. */
typedef struct {
    fig_t sum;
    double *plan_ms, *plan_cpu_ms;
    int64_t n_ms;
    int32_t n;
} cell_t;

typedef struct {
    const char *tool;
    const dcpt_common_t *c;
    const dcpt_layers_flags_t *f;
    int32_t nk, nv;       /* kinds; placements */
    char vname[MAXV][80]; /* placement labels */
    cell_t *cells;        /* [strategy][placement][kind or model (nk)] */
    int64_t total_layers, most;
} run_t;

static cell_t *cell(const run_t *r, int32_t s, int32_t v, int32_t k)
{
    return &r->cells[((int64_t)s * MAXV + v) * (r->nk + 1) + k];
}

/* The figures of one kind's plan (a view); sim adds the simulated step. */
static dcp_status_t kind_fig(const run_t *r, const dcp_plan_t *view, fig_t *out)
{
    dcp_plan_stats_t st;
    DCP_CHECK(dcp_plan_get_stats(view, &st));
    *out = (fig_t){.comm = (double)st.comm_bytes,
                   .inter = (double)st.inter_node_bytes,
                   .pred = st.predicted_ms,
                   .bwd = st.bwd_predicted_ms,
                   .step = st.predicted_ms + st.bwd_predicted_ms,
                   .sim_step = NAN,
                   .comp_imb = st.compute_imbalance};
    if (r->f->simulate) {
        dcpt_sim_row_t row;
        dcpt_sim_agg_t agg = {0};
        DCP_CHECK(dcpt_sim_plan(r->f->sim, view, NULL, -1, NULL, &row, &agg));
        out->sim_step = row.fwd_ms + row.bwd_ms;
    }
    return DCP_OK;
}

static void model_add(fig_t *m, const fig_t *k, int32_t layers)
{
    m->comm += layers * k->comm;
    m->inter += layers * k->inter;
    m->pred += layers * k->pred;
    m->bwd += layers * k->bwd;
    m->step += layers * k->step;
    m->sim_step += layers * k->sim_step;
    m->comp_imb = fmax(m->comp_imb, k->comp_imb);
}

/* JSON line of one row. */
static void json_row(const run_t *r, const char *s, int32_t v, int32_t b, int32_t k, const fig_t *x)
{
    const dcpt_common_t *c = r->c;
    dcpt_json_t j;
    dcpt_json_begin(&j, stdout);
    dcpt_json_str(&j, "strategy", s);
    dcpt_json_str(&j, "placement", r->vname[v]);
    dcpt_json_int(&j, "batch", b);
    if (k < r->nk)
        dcpt_json_int(&j, "kind", k);
    else
        dcpt_json_null(&j, "kind");
    dcpt_json_str(&j, "mask", k < r->nk ? c->mask_names[k] : "model");
    dcpt_json_int(&j, "layers", k < r->nk ? c->kind_layers[k] : r->total_layers);
    dcpt_json_num(&j, "comm_bytes", x->comm);
    dcpt_json_num(&j, "inter_node_bytes", x->inter);
    dcpt_json_num(&j, "compute_imbalance", x->comp_imb);
    dcpt_json_num(&j, "predicted_ms", x->pred);
    dcpt_json_num(&j, "bwd_predicted_ms", x->bwd);
    dcpt_json_num(&j, "relayout_ms", x->relayout);
    dcpt_json_num(&j, "step_ms", x->step);
    dcpt_json_num(&j, "sim_step_ms", x->sim_step);
    dcpt_json_num(&j, "plan_ms", x->plan_ms);
    dcpt_json_num(&j, "plan_cpu_ms", x->plan_cpu_ms);
    dcpt_json_end(&j);
}

/* Adds a row's figures to its cell (and prints it with --json). */
static void record(run_t *r, int32_t s, int32_t v, int32_t b, int32_t k, const fig_t *x)
{
    cell_t *cl = cell(r, s, v, k);
    cl->sum.comm += x->comm;
    cl->sum.inter += x->inter;
    cl->sum.pred += x->pred;
    cl->sum.bwd += x->bwd;
    cl->sum.relayout += x->relayout;
    cl->sum.step += x->step;
    cl->sum.sim_step += x->sim_step;
    cl->sum.comp_imb = fmax(cl->sum.comp_imb, x->comp_imb);
    cl->plan_ms[cl->n_ms] = x->plan_ms;
    cl->plan_cpu_ms[cl->n_ms++] = x->plan_cpu_ms;
    cl->n++;
    if (r->f->json) json_row(r, r->c->strategy_labels[s], v, b, k, x);
}

/* Planning time, wall clock and CPU (ms, medians of --repeat): on a shared host the CPU time
 * is the one to compare. */
typedef struct {
    double wall, cpu;
} plan_time_t;

/* Records every kind (views[k]) and the model row, with `relayout` ms per step and the
 * placement's planning time. */
static dcp_status_t record_plans(run_t *r, int32_t s, int32_t v, int32_t b,
                                 const dcp_plan_t *const *views, double relayout, plan_time_t t)
{
    fig_t model = {.relayout = relayout, .plan_ms = t.wall, .plan_cpu_ms = t.cpu};
    for (int32_t k = 0; k < r->nk; k++) {
        fig_t x;
        DCP_CHECK(kind_fig(r, views[k], &x));
        x.plan_ms = t.wall;
        x.plan_cpu_ms = t.cpu;
        model_add(&model, &x, r->c->kind_layers[k]);
        record(r, s, v, b, k, &x);
    }
    model.step += relayout;
    model.sim_step += relayout;
    record(r, s, v, b, r->nk, &model);
    return DCP_OK;
}

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* Plans `batch` f->repeat times (the last plan kept); the median planning times. */
static dcp_status_t plan_timed(const run_t *r, const dcp_batch_t *batch, int32_t s,
                               dcp_plan_t **plan_out, plan_time_t *time_out)
{
    dcp_plan_options_t o = r->c->opts;
    dcpt_common_strategy(r->c, s, &o);
    double *ms = calloc(2 * (size_t)r->f->repeat, sizeof *ms), *cpu = ms + r->f->repeat;
    if (!ms) return DCP_ERR_NO_MEMORY;
    dcp_plan_t *p = NULL;
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; i < r->f->repeat && st == DCP_OK; i++) {
        dcp_plan_destroy(p);
        p = NULL;
        const double c0 = cpu_ms();
        st = dcp_plan_create(batch, &r->c->shape, &o, r->c->cluster, &p);
        cpu[i] = cpu_ms() - c0;
        dcp_plan_stats_t ps;
        if (st == DCP_OK) st = dcp_plan_get_stats(p, &ps);
        if (st == DCP_OK) ms[i] = ps.plan_ms;
    }
    if (st == DCP_OK) {
        *time_out = (plan_time_t){dcpt_median(ms, r->f->repeat), dcpt_median(cpu, r->f->repeat)};
        *plan_out = p;
    } else {
        dcp_plan_destroy(p);
    }
    free(ms);
    return st;
}

/* Every kind's view of p. */
static void views_of(const dcp_plan_t *p, int32_t nk, const dcp_plan_t **views)
{
    for (int32_t k = 0; k < nk; k++) (void)dcp_plan_kind(p, k, &views[k]);
}

/* The first batch's joint plans drawn, one picture per kind. */
static dcp_status_t draw(const run_t *r, const dcp_plan_t *const *views, const char *s)
{
    const char *svg = r->f->svg, *dot = strrchr(svg, '.');
    const int stem = dot ? (int)(dot - svg) : (int)strlen(svg);
    for (int32_t k = 0; k < r->nk; k++) {
        dcp_plan_stats_t st;
        DCP_CHECK(dcp_plan_get_stats(views[k], &st));
        char path[1024], title[256];
        snprintf(path, sizeof path, "%.*s-%s-%s%s", stem, svg, r->c->mask_names[k], s,
                 dot ? dot : ".svg");
        for (char *q = path + stem; *q; q++) *q = *q == ':' ? '_' : *q;
        snprintf(title, sizeof title,
                 "%s, layer kind %s (one plan for every kind): %d ranks, %.1f MB moved, "
                 "imbalance %.1f%% / %.1f%%",
                 dcp_strategy_name(st.strategy), r->c->kind_labels[k], st.num_ranks,
                 st.comm_bytes / 1e6, 100 * st.compute_imbalance, 100 * st.memory_imbalance);
        DCP_CHECK(dcpt_svg_write(views[k], path, title));
        fprintf(stderr, "%s: wrote %s\n", r->tool, path);
    }
    return DCP_OK;
}

/* The model's re-layout time per step with kind k on plans[k]: 2 x boundaries (forward and
 * backward) x the mean re-layout between distinct kinds. */
static dcp_status_t relayout_step(const run_t *r, dcp_plan_t *const *plans, double *ms_out)
{
    const dcp_attn_shape_t *sh = &r->c->shape;
    const int64_t row =
        (int64_t)sh->num_heads * sh->head_dim * (sh->dtype == DCP_DTYPE_FP32 ? 4 : 2);
    double sum = 0;
    int32_t pairs = 0;
    for (int32_t i = 0; i < r->nk; i++)
        for (int32_t j = 0; j < r->nk; j++) {
            if (i == j) continue;
            double ms;
            DCP_CHECK(dcpt_relayout_ms(plans[i], plans[j], row, &ms));
            sum += ms;
            pairs++;
        }
    const int64_t bounds = r->total_layers < 2 * (r->total_layers - r->most)
                               ? r->total_layers
                               : 2 * (r->total_layers - r->most);
    *ms_out = pairs ? 2.0 * (double)bounds * sum / pairs : 0.0;
    return DCP_OK;
}

/* One batch, one strategy: the joint plan, and with --compare the alternatives. */
static dcp_status_t plan_one(run_t *r, int32_t b, int32_t s)
{
    const dcpt_common_t *c = r->c;
    dcp_mask_t *masks = NULL;
    dcp_layer_kind_t kinds[DCP_MAX_KINDS];
    const dcp_batch_t all = dcpt_common_batch(c, b, 0, &masks, kinds);
    dcp_plan_t *joint = NULL, *alone[DCP_MAX_KINDS] = {NULL}, *on = NULL;
    const dcp_plan_t *views[DCP_MAX_KINDS];
    plan_time_t ms = {0, 0}, alone_ms = {0, 0};
    dcp_status_t st = plan_timed(r, &all, s, &joint, &ms);
    if (st == DCP_OK) {
        views_of(joint, r->nk, views);
        st = record_plans(r, s, 0, b, views, 0.0, ms);
    }
    if (st == DCP_OK && b == 0 && r->f->svg) st = draw(r, views, c->strategy_labels[s]);
    for (int32_t k = 0; k < r->nk && r->f->compare && st == DCP_OK; k++) {
        const dcp_batch_t one = {
            .num_seqs = all.num_seqs, .lengths = all.lengths, .masks = kinds[k].masks};
        st = plan_timed(r, &one, s, &alone[k], &ms);
        alone_ms.wall += ms.wall;
        alone_ms.cpu += ms.cpu;
        if (st == DCP_OK) st = dcpt_plan_on(alone[k], &all, c->cluster, &on);
        if (st == DCP_OK) {
            views_of(on, r->nk, views);
            st = record_plans(r, s, 1 + k, b, views, 0.0, ms);
        }
        dcp_plan_destroy(on);
        on = NULL;
    }
    if (r->f->compare && st == DCP_OK) {
        double relayout = 0;
        st = relayout_step(r, alone, &relayout);
        for (int32_t k = 0; k < r->nk; k++) views[k] = alone[k];
        if (st == DCP_OK) st = record_plans(r, s, r->nk + 1, b, views, relayout, alone_ms);
    }
    for (int32_t k = 0; k < r->nk; k++) dcp_plan_destroy(alone[k]);
    dcp_plan_destroy(joint);
    free(masks);
    return st;
}

#define T(head, width, fmt, member, by)                                                            \
    {                                                                                              \
        head, width, NULL, DCPT_F_NUM, fmt, offsetof(table_row_t, member), by                      \
    }
typedef struct {
    const char *strategy, *placement, *kind;
    double comm, inter, comp_imb, pred, bwd, relayout, step, sim_step;
    dcpt_stats_t plan_ms;
    double plan_cpu_ms; /* median */
} table_row_t;
static const dcpt_field_t fields[] = {
    {"strategy", -8, NULL, DCPT_F_STR, NULL, offsetof(table_row_t, strategy), 0},
    {"placement", -16, NULL, DCPT_F_STR, NULL, offsetof(table_row_t, placement), 0},
    {"kind", -18, NULL, DCPT_F_STR, NULL, offsetof(table_row_t, kind), 0},
    T("total(MB)", 10, "%.1f", comm, 1e-6),
    T("inter(MB)", 10, "%.1f", inter, 1e-6),
    T("comp-imb(%)", 11, "%.1f", comp_imb, 100),
    T("pred(ms)", 9, "%.3f", pred, 1),
    T("bwd-pred", 9, "%.3f", bwd, 1),
    T("relayout", 9, "%.3f", relayout, 1),
    T("step(ms)", 9, "%.3f", step, 1),
    T("sim-step", 9, "%.3f", sim_step, 1),
    {"plan(ms)", 9, NULL, DCPT_F_STATS, "%.2f", offsetof(table_row_t, plan_ms), 0},
    {"plan-cpu", 9, NULL, DCPT_F_NUM, "%.2f", offsetof(table_row_t, plan_cpu_ms), 0},
};
#undef T
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

static void print_table(const run_t *r)
{
    const dcpt_common_t *c = r->c;
    printf("\nlayers");
    for (int32_t k = 0; k < r->nk; k++) printf("%s %s", k ? "," : "", c->kind_labels[k]);
    printf(" (%d batches: means; imbalance: worst batch and kind; model: each kind x its "
           "layers, summed, + re-layouts)\n",
           c->num_batches);
    dcpt_report_header(stdout, fields, NFIELDS);
    for (int32_t s = 0; s < c->num_strategies; s++)
        for (int32_t v = 0; v < r->nv; v++)
            for (int32_t k = 0; k <= r->nk; k++) {
                cell_t *cl = cell(r, s, v, k);
                if (!cl->n) continue;
                const double n = cl->n;
                const table_row_t row = {
                    .strategy = c->strategy_labels[s],
                    .placement = r->vname[v],
                    .kind = k < r->nk ? c->kind_labels[k] : "model",
                    .comm = cl->sum.comm / n,
                    .inter = cl->sum.inter / n,
                    .comp_imb = cl->sum.comp_imb,
                    .pred = cl->sum.pred / n,
                    .bwd = cl->sum.bwd / n,
                    .relayout = cl->sum.relayout / n,
                    .step = cl->sum.step / n,
                    .sim_step = cl->sum.sim_step / n,
                    .plan_ms = dcpt_stats(cl->plan_ms, cl->n_ms),
                    .plan_cpu_ms = dcpt_median(cl->plan_cpu_ms, cl->n_ms),
                };
                dcpt_report_row(stdout, 0, fields, NFIELDS, &row, NULL, NULL);
            }
}

int dcpt_plan_layers(const char *tool, const dcpt_common_t *c, const dcpt_layers_flags_t *f)
{
    run_t r = {.tool = tool, .c = c, .f = f, .nk = c->num_kinds};
    r.nv = f->compare ? r.nk + 2 : 1;
    snprintf(r.vname[0], sizeof r.vname[0], "joint");
    for (int32_t k = 0; k < r.nk; k++) {
        snprintf(r.vname[1 + k], sizeof r.vname[1 + k], "%s only", c->mask_names[k]);
        r.total_layers += c->kind_layers[k];
        r.most = c->kind_layers[k] > r.most ? c->kind_layers[k] : r.most;
    }
    snprintf(r.vname[r.nk + 1], sizeof r.vname[r.nk + 1], "per-kind");
    const int64_t ncells = (int64_t)c->num_strategies * MAXV * (r.nk + 1);
    r.cells = calloc((size_t)ncells, sizeof *r.cells);
    for (int64_t i = 0; r.cells && i < ncells; i++) {
        r.cells[i].plan_ms = calloc((size_t)c->num_batches, sizeof(double));
        r.cells[i].plan_cpu_ms = calloc((size_t)c->num_batches, sizeof(double));
    }
    int failed = 0;
    for (int32_t b = 0; r.cells && b < c->num_batches; b++)
        for (int32_t s = 0; s < c->num_strategies; s++) {
            const dcp_status_t st = plan_one(&r, b, s);
            if (st == DCP_OK) continue;
            fprintf(stderr, "%s: batch %d, layers, %s: %s: %s\n", tool, b, c->strategy_labels[s],
                    dcp_status_string(st), dcp_last_error());
            const int rc = st == DCP_ERR_CAPACITY ? 2 : 1;
            failed = rc > failed ? rc : failed;
        }
    if (!r.cells) failed = 1;
    if (r.cells && !f->json) print_table(&r);
    for (int64_t i = 0; r.cells && i < ncells; i++) {
        free(r.cells[i].plan_ms);
        free(r.cells[i].plan_cpu_ms);
    }
    free(r.cells);
    return failed;
}
