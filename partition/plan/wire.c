#include "partition/plan/wire.h"

#include <pthread.h>
#include <string.h>

static void put_le(dcp_writer_t *w, uint64_t v, int n)
{
    uint8_t b[8];
    uint8_t *to = w->buf ? w->buf + w->len : b;
    for (int i = 0; i < n; i++) to[i] = (uint8_t)(v >> (8 * i));
    if (w->crc) *w->crc = dcp_crc32c_update(*w->crc, to, (size_t)n);
    w->len += (size_t)n;
}

void dcp_put_u32(dcp_writer_t *w, uint32_t v)
{
    put_le(w, v, 4);
}

void dcp_put_u64(dcp_writer_t *w, uint64_t v)
{
    put_le(w, v, 8);
}

void dcp_put_i32(dcp_writer_t *w, int32_t v)
{
    put_le(w, (uint32_t)v, 4);
}

void dcp_put_i64(dcp_writer_t *w, int64_t v)
{
    put_le(w, (uint64_t)v, 8);
}

void dcp_put_f64(dcp_writer_t *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_le(w, u, 8);
}

void dcp_put_f32(dcp_writer_t *w, float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    put_le(w, u, 4);
}

void dcp_put_bytes(dcp_writer_t *w, const void *p, size_t n)
{
    if (w->buf && n > 0) memcpy(w->buf + w->len, p, n);
    if (w->crc && n > 0) *w->crc = dcp_crc32c_update(*w->crc, p, n);
    w->len += n;
}

static uint64_t get_le(dcp_reader_t *r, int n)
{
    if (r->bad || r->len - r->pos < (size_t)n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)r->buf[r->pos + (size_t)i] << (8 * i);
    r->pos += (size_t)n;
    return v;
}

uint32_t dcp_get_u32(dcp_reader_t *r)
{
    return (uint32_t)get_le(r, 4);
}

uint64_t dcp_get_u64(dcp_reader_t *r)
{
    return get_le(r, 8);
}

int32_t dcp_get_i32(dcp_reader_t *r)
{
    return (int32_t)(uint32_t)get_le(r, 4);
}

int64_t dcp_get_i64(dcp_reader_t *r)
{
    return (int64_t)get_le(r, 8);
}

double dcp_get_f64(dcp_reader_t *r)
{
    const uint64_t u = get_le(r, 8);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

float dcp_get_f32(dcp_reader_t *r)
{
    const uint32_t u = (uint32_t)get_le(r, 4);
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int64_t dcp_get_count(dcp_reader_t *r, size_t min_elem_bytes)
{
    const uint64_t n = dcp_get_u64(r);
    if (r->bad) return -1;
    if (n > (uint64_t)INT64_MAX || (min_elem_bytes > 0 && n > (r->len - r->pos) / min_elem_bytes)) {
        r->bad = 1;
        return -1;
    }
    return (int64_t)n;
}

/* CRC-32C (Castagnoli), reflected polynomial 0x82F63B78: the SSE4.2 instruction where the
 * CPU has it (8 bytes a step, ~20x the table), else a table built once. Both give the same
 * value; plan checksums are computed per plan at first use, so the speed matters. */
static uint32_t crc_table[256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = (uint32_t)c64;
    for (; n > 0; n--, p++) c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

uint32_t dcp_crc32c_update(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const uint32_t c = crc ^ 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc_hw) return crc_sse42(c, data, n) ^ 0xFFFFFFFFu;
#endif
    return crc_sw(c, data, n) ^ 0xFFFFFFFFu;
}

uint32_t dcp_crc32c(const void *data, size_t n)
{
    return dcp_crc32c_update(0, data, n);
}
