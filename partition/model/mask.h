/* Masks at planning time: validation, text form, exact pair counts and tile classes, and
 * the key envelope of a query block. Semantics come from include/base/mask_rule.h. */
#ifndef DCP_PARTITION_MASK_H
#define DCP_PARTITION_MASK_H

#include "include/base/mask_rule.h"

#include <stdint.h>

typedef enum { DCP_TILE_EMPTY = 0, DCP_TILE_PARTIAL = 1, DCP_TILE_FULL = 2 } dcp_tile_class_t;

typedef struct {
    int32_t lo, hi; /* half-open */
} dcp_range_t;

/* Checks the mask's parameters (and, for CUSTOM, every range against `len`); `field` names
 * the mask in the message ("batch.masks[3]"). */
dcp_status_t dcp_mask_validate(const dcp_mask_t *m, int32_t len, const char *field);

/* Exact allowed pairs in [q0, q1) x [k0, k1); the mask must be valid for len. */
int64_t dcp_mask_pairs(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1, int32_t k0,
                       int32_t k1);

/* Classifies the tile and returns its pair count in *pairs_out. */
dcp_tile_class_t dcp_mask_classify(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1,
                                   int32_t k0, int32_t k1, int64_t *pairs_out);

/* Keys any query of [q0, q1) may attend, as sorted disjoint ranges that cover every allowed
 * key (and possibly some masked ones). Replaces the content of *ranges (capacity *cap). */
dcp_status_t dcp_mask_envelope(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1,
                               dcp_range_t **ranges, int64_t *cap, int64_t *count_out);

/* Most structure cuts of one mask (dcp_mask_cuts). */
#define DCP_MASK_MAX_CUTS 2

/* Positions in (0, len) where a mask's rows change what they read at a scale that placement
 * cares about, sorted: the end of a sink that every later query reads (lambda's S tokens,
 * blockwise's first block) and the start of rows that read the whole prefix (blockwise's test
 * block). A token block cut at them carries only the keys (or the queries) that ranks far
 * away read. Returns the count (0 for the other kinds). The mask must be valid for len. */
int dcp_mask_cuts(const dcp_mask_t *m, int32_t len, int32_t cuts[DCP_MASK_MAX_CUTS]);

#endif
