/* dcp-topo --env: dcp's settings (include/base/env.h) with the values in force, as `ucx_info -c`
 * prints UCX's: for people (text), for scripts (one JSON object), or as the markdown table of
 * plugin/SETTINGS.md (the table alone: no values, so that the file does not depend on the
 * environment it was made in). */
#ifndef DCPT_CLI_SETTINGS_REPORT_H
#define DCPT_CLI_SETTINGS_REPORT_H

#include <stdio.h>

/* Each returns the number of settings whose value in force does not read. */
int dcpt_settings_print_text(FILE *f);
int dcpt_settings_print_json(FILE *f);
int dcpt_settings_print_markdown(FILE *f);

#endif
