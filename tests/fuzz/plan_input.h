/* What must hold for any plan bytes, trusted or not: shared by the bounded mutation suite
 * (tests/unit/test_plan_fuzz.c) and the libFuzzer target (tests/fuzz/plan_fuzz.c). */
#ifndef DCP_TESTS_FUZZ_PLAN_INPUT_H
#define DCP_TESTS_FUZZ_PLAN_INPUT_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { DCPT_PLAN_REJECTED = 0, DCPT_PLAN_ACCEPTED = 1 } dcpt_plan_verdict_t;

/* Loads `bytes` as a plan and checks every promise of dcp_plan_deserialize(): it is either
 * refused with DCP_ERR_PLAN_CORRUPT, or accepted as a plan that passes the validator again,
 * serializes back to exactly `bytes` (one byte string per plan), reports statistics and a
 * local layout for every rank, and, when small (at most 4 ranks and `run_max_tokens` rows
 * per rank; 0: never), runs both passes on zeroed CPU tensors to an end. Returns NULL and
 * sets *verdict_out, or names the broken promise (static text). */
const char *dcpt_plan_input_check(const uint8_t *bytes, size_t size, int64_t run_max_tokens,
                                  dcpt_plan_verdict_t *verdict_out);

/* Runs both passes of a plan on zeroed CPU tensors of exactly the rows it asks for (plans of
 * at most 4 ranks); any status but DCP_ERR_INTERNAL/SYSTEM/NO_MEMORY is an end. NULL, or
 * the broken promise. */
const char *dcpt_plan_run_anyway(const dcp_plan_t *plan);

/* Plan bytes: a 32-byte header, then the payload. Re-seals the header's payload length
 * (bytes 16..23) and CRC-32C (24..27) to match the bytes, so that a change to the payload
 * reaches the validator instead of the checksum. size >= DCPT_PLAN_HEADER. */
enum { DCPT_PLAN_HEADER = 32 };
void dcpt_plan_reseal(uint8_t *bytes, size_t size);

/* The seed plans (strategies x masks x schedules x dtypes, 1 to 4 ranks), serialized:
 * *bytes_out[i] of (*sizes_out)[i] bytes, all malloc'ed, freed with dcpt_plan_seeds_free().
 * Returns the count, or 0 when planning failed (dcp_last_error()). */
int dcpt_plan_seeds(uint8_t ***bytes_out, size_t **sizes_out);
void dcpt_plan_seeds_free(uint8_t **bytes, size_t *sizes, int n);

#endif
