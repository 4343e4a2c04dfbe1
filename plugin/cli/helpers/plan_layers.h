/* dcp-plan --layers: plans of a model whose layers use several masks (layer kinds), a row per
 * kind and a model row per strategy; with --compare beside the alternatives to one joint
 * placement: each kind's own placement run for every kind, and a placement per kind with an
 * all-to-all re-layout between kinds. */
#ifndef DCPT_CLI_PLAN_LAYERS_H
#define DCPT_CLI_PLAN_LAYERS_H

#include "plugin/cli/helpers/common.h"
#include "plugin/cli/support/sim_report.h"

typedef struct {
    int json, compare, simulate;
    int64_t repeat;
    const char *svg;       /* FILE-kind-strategy.svg per kind of the first batch's joint plans */
    const dcpt_sim_t *sim; /* with simulate */
} dcpt_layers_flags_t;

/* Plans every batch of c (c->num_kinds > 0) with every strategy and prints the tables or JSON
 * lines. Returns the tool's exit status for the plans (0, 1 a planning failure, 2 a plan that
 * does not fit the configuration). */
int dcpt_plan_layers(const char *tool, const dcpt_common_t *c, const dcpt_layers_flags_t *f);

#endif
