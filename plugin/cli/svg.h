/* A one-page SVG picture of a plan (see svg.c). */
#ifndef DCPT_CLI_SVG_H
#define DCPT_CLI_SVG_H

#include "include/dcp.h"

dcp_status_t dcpt_svg_write(const dcp_plan_t *plan, const char *path, const char *title);

#endif
