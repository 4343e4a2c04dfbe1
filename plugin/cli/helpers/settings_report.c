/* dcp-topo --env (plugin/cli/settings_report.h). */
#include "plugin/cli/helpers/settings_report.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "plugin/cli/support/json.h"

#include <string.h>

/* What one setting is in force: the value's text, where it comes from, and the error of a
 * value that does not read ("" when it reads). */
typedef struct {
    const dcp_env_row_t *row;
    const char *value; /* NULL: unset, without a default */
    const char *from;  /* "environment", "default", "unset" */
    char rule[200];
    char error[300];
} setting_t;

static void setting(dcp_env_id_t id, setting_t *s)
{
    memset(s, 0, sizeof *s);
    s->row = dcp_env_row(id);
    const char *raw = dcp_env_raw(id);
    s->value = raw ? raw : s->row->def;
    s->from = raw ? "environment" : s->row->def ? "default" : "unset";
    dcp_env_rule(s->row, s->rule, sizeof s->rule);
    if (dcp_env_validate(id) != DCP_OK) dcp_error_save(s->error, sizeof s->error);
}

static const char *const scope_heading[DCP_ENV_SCOPES] = {
    "library: read by libdcp (every program that links it)",
    "tool: read by the dcp-* tools",
    "test: read by the test programs and scripts and the benches (tests/)",
    "python: read by the Python package (plugin/python)",
};

int dcpt_settings_print_text(FILE *f)
{
    int bad = 0;
    for (int scope = 0; scope < DCP_ENV_SCOPES; scope++) {
        fprintf(f, "%s# %s\n", scope ? "\n" : "", scope_heading[scope]);
        for (int i = 0; i < DCP_ENV_COUNT; i++) {
            setting_t s;
            setting((dcp_env_id_t)i, &s);
            if ((int)s.row->scope != scope) continue;
            char line[160];
            snprintf(line, sizeof line, "%s=%s", s.row->name, s.value ? s.value : "");
            fprintf(f, "%-44s # %s%s%s\n", line, s.from, s.error[0] ? ": " : "", s.error);
            fprintf(f, "    %s; default %s\n    %s\n", s.rule, s.row->def ? s.row->def : "none",
                    s.row->effect);
            bad += s.error[0] != '\0';
        }
    }
    return bad;
}

int dcpt_settings_print_json(FILE *f)
{
    int bad = 0;
    dcpt_json_t j;
    dcpt_json_begin(&j, f);
    dcpt_json_array(&j, "settings");
    for (int i = 0; i < DCP_ENV_COUNT; i++) {
        setting_t s;
        setting((dcp_env_id_t)i, &s);
        dcpt_json_object(&j, NULL);
        dcpt_json_str(&j, "name", s.row->name);
        dcpt_json_str(&j, "scope", dcp_env_scope_name(s.row->scope));
        dcpt_json_str(&j, "type", dcp_env_type_name(s.row->type));
        dcpt_json_str(&j, "rule", s.rule);
        dcpt_json_str(&j, "default", s.row->def);
        dcpt_json_str(&j, "effect", s.row->effect);
        dcpt_json_str(&j, "value", s.value);
        dcpt_json_str(&j, "from", s.from);
        dcpt_json_str(&j, "error", s.error[0] ? s.error : NULL);
        dcpt_json_close(&j);
        bad += s.error[0] != '\0';
    }
    dcpt_json_close(&j);
    dcpt_json_end(&j);
    return bad;
}

int dcpt_settings_print_markdown(FILE *f)
{
    fprintf(f, "| setting | scope | type | values | default | effect |\n"
               "|---|---|---|---|---|---|\n");
    for (int i = 0; i < DCP_ENV_COUNT; i++) {
        const dcp_env_row_t *row = dcp_env_row((dcp_env_id_t)i);
        char rule[200];
        dcp_env_rule(row, rule, sizeof rule);
        fprintf(f, "| `%s` | %s | %s | %s | %s%s%s | %s |\n", row->name,
                dcp_env_scope_name(row->scope), dcp_env_type_name(row->type), rule,
                row->def ? "`" : "", row->def ? row->def : "-", row->def ? "`" : "", row->effect);
    }
    return 0;
}
