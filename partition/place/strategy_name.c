/* Strategy names: the names dcp.h's dcp_strategy_name() and dcp_strategy_parse() speak, one
 * per strategy id (the strategies' table is place.c's). */
#include "partition/place/place.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

static const char *const names[DCP_STRATEGY_PEER_END] = {
    [DCP_STRATEGY_RING] = "ring",   [DCP_STRATEGY_ZIGZAG] = "zigzag",
    [DCP_STRATEGY_LPT] = "lpt",     [DCP_STRATEGY_METIS] = "metis",
    [DCP_STRATEGY_NODES] = "nodes", [DCP_STRATEGY_PACKED] = "packed",
    [DCP_STRATEGY_DYNCP] = "dyncp", [DCP_STRATEGY_ULYSSES] = "ulysses",
    [DCP_STRATEGY_USP] = "usp",     [DCP_STRATEGY_MAGI] = "magi",
};

const char *dcp_strategy_name(dcp_strategy_t strategy)
{
    if (strategy == DCP_STRATEGY_AUTO) return "auto";
    return (unsigned)strategy < DCP_STRATEGY_PEER_END && names[strategy] ? names[strategy]
                                                                         : "unknown";
}

dcp_status_t dcp_strategy_parse(const char *name, dcp_strategy_t *strategy_out)
{
    if (!name || !strategy_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "strategy: name and strategy_out must be non-NULL");
    for (int i = 0; i < DCP_STRATEGY_PEER_END; i++)
        if (names[i] && !strcmp(name, names[i])) {
            *strategy_out = (dcp_strategy_t)i;
            return DCP_OK;
        }
    if (!strcmp(name, "auto")) {
        *strategy_out = DCP_STRATEGY_AUTO;
        return DCP_OK;
    }
    return dcp_set_error(DCP_ERR_INVALID_ARG,
                         "strategy '%s': unknown (ring, zigzag, lpt, metis, auto, nodes; peers: "
                         "packed, dyncp, ulysses, usp, magi)",
                         name);
}

dcp_status_t dcp_strategy_parse_spec(const char *spec, dcp_strategy_t *strategy_out,
                                     int32_t *arg_out)
{
    if (!spec || !strategy_out || !arg_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "strategy: spec, strategy_out and arg_out must be non-NULL");
    const char *colon = strchr(spec, ':');
    char name[32];
    const size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n >= sizeof name)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "strategy '%s': unknown name", spec);
    memcpy(name, spec, n);
    name[n] = 0;
    dcp_strategy_t s;
    DCP_CHECK(dcp_strategy_parse(name, &s));
    long arg = 0;
    if (colon) {
        char *end;
        arg = strtol(colon + 1, &end, 10);
        if (!dcp_strategy_is_peer(s))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "strategy '%s': %s takes no parameter", spec,
                                 name);
        if (end == colon + 1 || *end || arg < 1 || arg > INT32_MAX)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "strategy '%s': the parameter after ':' must be a whole number "
                                 ">= 1",
                                 spec);
    }
    *strategy_out = s;
    *arg_out = (int32_t)arg;
    return DCP_OK;
}
