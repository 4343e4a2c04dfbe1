/* The text form of masks: "lambda:64:4096" and friends. */
#include "partition/model/mask.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    dcp_mask_kind_t kind;
    int nparams;
} mask_name_t;

static const mask_name_t mask_names[] = {
    {"full", DCP_MASK_FULL, 0},           {"causal", DCP_MASK_CAUSAL, 0},
    {"window", DCP_MASK_WINDOW, 1},       {"lambda", DCP_MASK_LAMBDA, 2},
    {"blockwise", DCP_MASK_BLOCKWISE, 2}, {"shared-question", DCP_MASK_SHARED_QUESTION, 2},
};

/* DCP's parameters for the bare names. */
static void mask_defaults(dcp_mask_kind_t kind, dcp_mask_t *m)
{
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->window = 4096;
    m->sink = 64;
    m->block = 256;
    m->k = 2;
    m->question_frac = 0.2;
    m->answers = 4;
}

static int parse_int(const char *s, size_t n, int32_t *out)
{
    char buf[32];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (*end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX) return 0;
    *out = (int32_t)v;
    return 1;
}

static int parse_double(const char *s, size_t n, double *out)
{
    char buf[64];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

dcp_status_t dcp_mask_parse(const char *spec, dcp_mask_t *mask_out)
{
    if (!spec || !mask_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "mask: spec and mask_out must be non-NULL");
    const char *colon = strchr(spec, ':');
    const size_t name_len = colon ? (size_t)(colon - spec) : strlen(spec);
    const mask_name_t *mn = NULL;
    for (size_t i = 0; i < sizeof mask_names / sizeof mask_names[0]; i++)
        if (strlen(mask_names[i].name) == name_len && !strncmp(spec, mask_names[i].name, name_len))
            mn = &mask_names[i];
    if (!mn)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "mask '%s': unknown kind (full, causal, window:W, lambda:S:W, "
                             "blockwise:b:k, shared-question:p:a)",
                             spec);
    dcp_mask_t m;
    mask_defaults(mn->kind, &m);
    if (colon) {
        const char *p1 = colon + 1, *c2 = strchr(p1, ':');
        const char *p2 = c2 ? c2 + 1 : NULL;
        const size_t n1 = c2 ? (size_t)(c2 - p1) : strlen(p1);
        const size_t n2 = p2 ? strlen(p2) : 0;
        const int given = p2 ? 2 : 1;
        if (given != mn->nparams || (p2 && strchr(p2, ':')))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "mask '%s': %s takes %d parameter%s", spec,
                                 mn->name, mn->nparams, mn->nparams == 1 ? "" : "s");
        /* the first parameter that does not read: 1 or 2; 0 when both do */
        int bad = 0;
        switch (mn->kind) {
        case DCP_MASK_WINDOW:
            bad = !parse_int(p1, n1, &m.window);
            break;
        case DCP_MASK_LAMBDA:
            bad = !parse_int(p1, n1, &m.sink) ? 1 : !parse_int(p2, n2, &m.window) ? 2 : 0;
            break;
        case DCP_MASK_BLOCKWISE:
            bad = !parse_int(p1, n1, &m.block) ? 1 : !parse_int(p2, n2, &m.k) ? 2 : 0;
            break;
        case DCP_MASK_SHARED_QUESTION:
            bad = !parse_double(p1, n1, &m.question_frac) ? 1
                  : !parse_int(p2, n2, &m.answers)        ? 2
                                                          : 0;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "mask '%s': parameter %d ('%.*s') is not %s",
                                 spec, bad, (int)(bad == 1 ? n1 : n2), bad == 1 ? p1 : p2,
                                 bad == 1 && mn->kind == DCP_MASK_SHARED_QUESTION
                                     ? "a finite number"
                                     : "an integer in [-2^31, 2^31 - 1]");
    }
    char field[96];
    snprintf(field, sizeof field, "mask '%s'", spec);
    DCP_CHECK(dcp_mask_validate(&m, 1, field));
    *mask_out = m;
    return DCP_OK;
}

dcp_status_t dcp_mask_format(const dcp_mask_t *mask, char *buf, size_t capacity)
{
    if (!mask || !buf) return dcp_set_error(DCP_ERR_INVALID_ARG, "mask and buf must be non-NULL");
    int n;
    switch (mask->kind) {
    case DCP_MASK_FULL:
        n = snprintf(buf, capacity, "full");
        break;
    case DCP_MASK_CAUSAL:
        n = snprintf(buf, capacity, "causal");
        break;
    case DCP_MASK_WINDOW:
        n = snprintf(buf, capacity, "window:%d", mask->window);
        break;
    case DCP_MASK_LAMBDA:
        n = snprintf(buf, capacity, "lambda:%d:%d", mask->sink, mask->window);
        break;
    case DCP_MASK_BLOCKWISE:
        n = snprintf(buf, capacity, "blockwise:%d:%d", mask->block, mask->k);
        break;
    case DCP_MASK_SHARED_QUESTION: {
        /* the fewest digits that read back as the same double: "0.2", not "0.20000000000000001" */
        const double p = mask->question_frac;
        int digits = 15;
        char num[40];
        for (; digits < 17; digits++) {
            snprintf(num, sizeof num, "%.*g", digits, p);
            if (strtod(num, NULL) == p) break;
        }
        n = snprintf(buf, capacity, "shared-question:%.*g:%d", digits, p, mask->answers);
        break;
    }
    case DCP_MASK_CUSTOM:
        n = snprintf(buf, capacity, "custom");
        break;
    default:
        return dcp_set_error(DCP_ERR_INVALID_ARG, "mask.kind = %d is not a mask kind",
                             (int)mask->kind);
    }
    if (n < 0 || (size_t)n >= capacity)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "capacity = %zu, the mask text needs %d bytes",
                             capacity, n + 1);
    return DCP_OK;
}
