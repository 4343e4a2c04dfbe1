/* bf16 and fp16 on the host: conversions with round-to-nearest-even (NaN kept a NaN,
 * overflow to infinity, fp16 subnormals exact), for data that goes to or comes from the GPU
 * kernels and for the low-precision reference. */
#ifndef DCP_BASE_HALF_H
#define DCP_BASE_HALF_H

#include "include/dcp.h"

#include <stdint.h>
#include <string.h>

static inline uint32_t dcp_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float dcp_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t dcp_f32_to_bf16(float f)
{
    const uint32_t u = dcp_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static inline float dcp_bf16_to_f32(uint16_t h)
{
    return dcp_bits_f32((uint32_t)h << 16);
}

static inline uint16_t dcp_f32_to_fp16(float f)
{
    const uint32_t u = dcp_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;             /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;            /* rounds to >= 65520: infinity */
    if (a < 0x38800000u) {                                  /* below 2^-14: subnormal or zero */
        const float scaled = dcp_bits_f32(a) * 16777216.0f; /* x 2^24: units of 2^-24 */
        const uint32_t m = (uint32_t)scaled;
        const float rem = scaled - (float)m;
        const uint32_t r = m + (rem > 0.5f || (rem == 0.5f && (m & 1)));
        return sign | (uint16_t)r;
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1) - 0x38000000u; /* rebias 127 -> 15 */
    return sign | (uint16_t)(r >> 13);
}

static inline float dcp_fp16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) return dcp_bits_f32(sign) + (sign ? -1.0f : 1.0f) * (float)m / 16777216.0f;
    if (e == 31) return dcp_bits_f32(sign | 0x7f800000u | (m << 13));
    return dcp_bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

/* One element of a 2-byte dtype (bf16, else fp16) from a float, and back. */
static inline uint16_t dcp_half_from_f32(dcp_dtype_t dtype, float f)
{
    return dtype == DCP_DTYPE_BF16 ? dcp_f32_to_bf16(f) : dcp_f32_to_fp16(f);
}

static inline float dcp_half_to_f32(dcp_dtype_t dtype, uint16_t h)
{
    return dtype == DCP_DTYPE_BF16 ? dcp_bf16_to_f32(h) : dcp_fp16_to_f32(h);
}

/* f rounded to the nearest value of dtype (fp32: unchanged). */
static inline float dcp_round_to(dcp_dtype_t dtype, float f)
{
    return dtype == DCP_DTYPE_FP32 ? f : dcp_half_to_f32(dtype, dcp_half_from_f32(dtype, f));
}

/* n floats to 2-byte elements of dtype (bf16 or fp16), and back. */
static inline void dcp_pack_half(dcp_dtype_t dtype, const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = dcp_half_from_f32(dtype, src[i]);
}

static inline void dcp_unpack_half(dcp_dtype_t dtype, const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++) dst[i] = dcp_half_to_f32(dtype, src[i]);
}

#endif
