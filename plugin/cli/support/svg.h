/* A one-page SVG picture of a plan (see svg.c). */
#ifndef DCPT_CLI_SVG_H
#define DCPT_CLI_SVG_H

#include "include/dcp.h"
#include "partition/sim/simulate.h"

dcp_status_t dcpt_svg_write(const dcp_plan_t *plan, const char *path, const char *title);

/* One rank's simulated timeline of both passes (svg_timeline.c), from dcp_sim_trace_run()
 * and dcp_sim_explain() of each pass. */
dcp_status_t dcpt_svg_timeline(const dcp_plan_t *p, const dcp_sim_trace_t tr[DCP_PASS_COUNT],
                               const dcp_sim_explain_t ex[DCP_PASS_COUNT], int32_t rank,
                               const char *path, const char *title);

#endif
