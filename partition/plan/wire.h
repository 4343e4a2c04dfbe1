/* Little-endian byte writer and bounds-checked reader, and CRC-32C, for the plan format. */
#ifndef DCP_PARTITION_WIRE_H
#define DCP_PARTITION_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* A writer with buf == NULL only counts bytes; with crc set it also folds every byte it
 * writes (or counts) into *crc (dcp_crc32c_update), so a checksum needs no buffer. */
typedef struct {
    uint8_t *buf;
    size_t len;
    uint32_t *crc;
} dcp_writer_t;

void dcp_put_u32(dcp_writer_t *w, uint32_t v);
void dcp_put_u64(dcp_writer_t *w, uint64_t v);
void dcp_put_i32(dcp_writer_t *w, int32_t v);
void dcp_put_i64(dcp_writer_t *w, int64_t v);
void dcp_put_f64(dcp_writer_t *w, double v);
void dcp_put_f32(dcp_writer_t *w, float v);
void dcp_put_bytes(dcp_writer_t *w, const void *p, size_t n);

/* A reader never reads past `len`; the first short read sets `bad` and yields zeros. */
typedef struct {
    const uint8_t *buf;
    size_t len, pos;
    int bad;
} dcp_reader_t;

uint32_t dcp_get_u32(dcp_reader_t *r);
uint64_t dcp_get_u64(dcp_reader_t *r);
int32_t dcp_get_i32(dcp_reader_t *r);
int64_t dcp_get_i64(dcp_reader_t *r);
double dcp_get_f64(dcp_reader_t *r);
float dcp_get_f32(dcp_reader_t *r);

/* Reads an element count and checks that `count * min_elem_bytes` bytes remain, so that a
 * corrupted count can never trigger a huge allocation. Returns -1 (and sets bad) if not. */
int64_t dcp_get_count(dcp_reader_t *r, size_t min_elem_bytes);

uint32_t dcp_crc32c(const void *data, size_t n);
/* The CRC-32C of the concatenation, given `crc` of what came before (0 to start). */
uint32_t dcp_crc32c_update(uint32_t crc, const void *data, size_t n);

#endif
