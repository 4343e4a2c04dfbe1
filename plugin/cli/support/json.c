#include "plugin/cli/support/json.h"

#include <math.h>

void dcpt_json_quote(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The separator and, inside an object, the key of the next member. */
static void member(dcpt_json_t *j, const char *key)
{
    const int d = (j->depth < DCPT_JSON_DEPTH ? j->depth : DCPT_JSON_DEPTH) - 1;
    if (j->count[d]++) fputs(", ", j->f);
    if (j->close[d] == '}') {
        dcpt_json_quote(j->f, key ? key : "");
        fputs(": ", j->f);
    }
}

static void open(dcpt_json_t *j, char open_c, char close_c)
{
    fputc(open_c, j->f);
    if (j->depth < DCPT_JSON_DEPTH) {
        j->count[j->depth] = 0;
        j->close[j->depth] = close_c;
    }
    j->depth++;
}

void dcpt_json_begin(dcpt_json_t *j, FILE *f)
{
    j->f = f;
    j->depth = 0;
    open(j, '{', '}');
}

void dcpt_json_str(dcpt_json_t *j, const char *key, const char *value)
{
    member(j, key);
    if (value)
        dcpt_json_quote(j->f, value);
    else
        fputs("null", j->f);
}

void dcpt_json_int(dcpt_json_t *j, const char *key, int64_t value)
{
    member(j, key);
    fprintf(j->f, "%lld", (long long)value);
}

void dcpt_json_num(dcpt_json_t *j, const char *key, double value)
{
    member(j, key);
    if (isfinite(value))
        fprintf(j->f, "%.6g", value);
    else
        fputs("null", j->f);
}

void dcpt_json_bool(dcpt_json_t *j, const char *key, int value)
{
    member(j, key);
    fputs(value ? "true" : "false", j->f);
}

void dcpt_json_null(dcpt_json_t *j, const char *key)
{
    member(j, key);
    fputs("null", j->f);
}

void dcpt_json_object(dcpt_json_t *j, const char *key)
{
    member(j, key);
    open(j, '{', '}');
}

void dcpt_json_array(dcpt_json_t *j, const char *key)
{
    member(j, key);
    open(j, '[', ']');
}

void dcpt_json_close(dcpt_json_t *j)
{
    if (j->depth < 1) return;
    j->depth--;
    fputc(j->close[j->depth < DCPT_JSON_DEPTH ? j->depth : DCPT_JSON_DEPTH - 1], j->f);
}

void dcpt_json_end(dcpt_json_t *j)
{
    while (j->depth > 0) dcpt_json_close(j);
    fputc('\n', j->f);
    fflush(j->f);
}
