// quant.cuh — reading ggml's blocks (csrc/quants.h) on the device, one warp per 256 elements of a
// row: lane l decodes 8 values, 4 at row element e0 .. e0+3 and 4 at e1 .. e1+3, so that each
// lane's x reads are two aligned float4 loads and the warp's weight reads are contiguous. The
// arithmetic follows csrc/quants.c's scalar dequantizers (the definition) operation for operation,
// except that the device may fuse a multiply and an add (one rounding instead of two).
// Used by the matrix-vector products, the dequantize kernel and the GEMM tiles (matmul.cu);
// tested through them by tests/test_cuda_kernels.py against llmbench.quant's CPU dequantization.
#ifndef LLMB_CUDA_QUANT_CUH
#define LLMB_CUDA_QUANT_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "../csrc/quants.h"

#define CHUNK 256 // row elements one warp decodes per step

__device__ __forceinline__ float h2f(llmb_half h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf2f(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4); // a register move on the device; also compiles for the host test (kernels/tests)
    return f;
}

// 4 bytes from a 2-byte-aligned address (blocks of 18, 34, 210 bytes are only that aligned)
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t *p) {
    const uint16_t *q = (const uint16_t *)p;
    return (uint32_t)q[0] | ((uint32_t)q[1] << 16);
}

// llmb_get_scale_min_k4 on the device
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t *q, int &d, int &m) {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q4_K/Q5_K: scale and min of sub-blocks 2g and 2g+1 (the low and high nibbles of 64 elements)
__device__ __forceinline__ void k4_scales(llmb_half dh, llmb_half dminh, const uint8_t *scales, int g, float &d1,
                                          float &m1, float &d2, float &m2) {
    int sc, m;
    const float d = h2f(dh), dmin = h2f(dminh);
    scale_min_k4(2 * g, scales, sc, m);
    d1 = d * sc, m1 = dmin * m;
    scale_min_k4(2 * g + 1, scales, sc, m);
    d2 = d * sc, m2 = dmin * m;
}

// Block size of the types the device kernels read (1: the float types)
__host__ __device__ constexpr int64_t llmb_cu_blck(int t) {
    return t == LLMB_TYPE_Q4_0 || t == LLMB_TYPE_Q4_1 || t == LLMB_TYPE_Q5_0 || t == LLMB_TYPE_Q5_1 ||
                   t == LLMB_TYPE_Q8_0 || t == LLMB_TYPE_IQ4_NL
               ? LLMB_QK
           : t == LLMB_TYPE_Q2_K || t == LLMB_TYPE_Q3_K || t == LLMB_TYPE_Q4_K || t == LLMB_TYPE_Q5_K ||
                   t == LLMB_TYPE_Q6_K || t == LLMB_TYPE_IQ4_XS
               ? LLMB_QK_K
               : 1;
}

// llmb_kvalues_iq4nl[q] (q 0..15) from registers: byte q % 8 of the table's first or second 8 values
__device__ __forceinline__ int iq4nl_value(uint32_t q) {
    const uint64_t lo = 0xF6EADDCFBFAD9881ull, hi = 0x7159453526190D01ull; // -127 .. -10, 1 .. 113
    return (int)(int8_t)((q < 8 ? lo : hi) >> (8 * (q & 7)));
}

// llmb_q3_K_scale on the device: the 6-bit scale of sub-block j (0..15) of Q3_K, minus 32
__device__ __forceinline__ int q3k_scale(int j, const uint8_t *s) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

// Decode lane `lane`'s 8 values of chunk `ch` of a row of `cols` elements of type T. Returns how
// many are valid: 8, 0 (a block-format row whose last chunk has fewer than 8 blocks), or for the
// float types 0..8 at the row's end (then e1 = e0 + 4 and the values are contiguous).
// VEC: 16-byte loads of float-type rows (the caller checked the alignment).
template <int T, bool VEC>
__device__ __forceinline__ int load8(const uint8_t *row, int64_t cols, int64_t ch, int lane, float v[8], int64_t &e0,
                                     int64_t &e1) {
    const int64_t base = ch * CHUNK;
    e0 = e1 = base;
    if (T == LLMB_TYPE_Q4_K) {
        const llmb_block_q4_K *b = (const llmb_block_q4_K *)row + ch;
        const int g = lane >> 3, t = lane & 7;
        float d1, m1, d2, m2;
        k4_scales(b->d, b->dmin, b->scales, g, d1, m1, d2, m2);
        const uint32_t q = *(const uint32_t *)(b->qs + 32 * g + 4 * t);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = d1 * (float)((q >> (8 * k)) & 0xF) - m1;
            v[4 + k] = d2 * (float)((q >> (8 * k + 4)) & 0xF) - m2;
        }
        e0 = base + 64 * g + 4 * t;
        e1 = e0 + 32;
        return 8;
    } else if (T == LLMB_TYPE_Q5_K) {
        const llmb_block_q5_K *b = (const llmb_block_q5_K *)row + ch;
        const int g = lane >> 3, t = lane & 7;
        float d1, m1, d2, m2;
        k4_scales(b->d, b->dmin, b->scales, g, d1, m1, d2, m2);
        const uint32_t q = *(const uint32_t *)(b->qs + 32 * g + 4 * t);
        const uint32_t h = *(const uint32_t *)(b->qh + 4 * t); // fifth bits: bit 2g (low), 2g+1 (high)
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int lo = ((q >> (8 * k)) & 0xF) | (((h >> (8 * k + 2 * g)) & 1) << 4);
            const int hi = ((q >> (8 * k + 4)) & 0xF) | (((h >> (8 * k + 2 * g + 1)) & 1) << 4);
            v[k] = d1 * (float)lo - m1;
            v[4 + k] = d2 * (float)hi - m2;
        }
        e0 = base + 64 * g + 4 * t;
        e1 = e0 + 32;
        return 8;
    } else if (T == LLMB_TYPE_Q6_K) {
        const llmb_block_q6_K *b = (const llmb_block_q6_K *)((const uint8_t *)row + ch * sizeof(llmb_block_q6_K));
        // half h of 128 elements; pair 0: ql[l] (elements l, l+64), pair 1: ql[l+32] (l+32, l+96);
        // l = 4u .. 4u+3
        const int h = lane >> 4, pair = (lane >> 3) & 1, u = lane & 7, is = u >> 2;
        const uint32_t ql = ld_u32_a2(b->ql + 64 * h + 32 * pair + 4 * u);
        const uint32_t qh = ld_u32_a2(b->qh + 32 * h + 4 * u);
        const int8_t *sc = b->scales + 8 * h;
        const float d = h2f(b->d);
        const float dlo = d * (float)sc[is + 2 * pair], dhi = d * (float)sc[is + 4 + 2 * pair];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int lo = (int)(((ql >> (8 * k)) & 0xF) | (((qh >> (8 * k + 2 * pair)) & 3) << 4)) - 32;
            const int hi = (int)(((ql >> (8 * k + 4)) & 0xF) | (((qh >> (8 * k + 4 + 2 * pair)) & 3) << 4)) - 32;
            v[k] = dlo * (float)lo;
            v[4 + k] = dhi * (float)hi;
        }
        e0 = base + 128 * h + 32 * pair + 4 * u;
        e1 = e0 + 64;
        return 8;
    } else if (T == LLMB_TYPE_Q2_K || T == LLMB_TYPE_Q3_K) {
        // 2-bit quants: element 128h + 32s + l in bits 2s of qs[32h + l]. Lane: half h, bytes 4u .. 4u+3,
        // shifts s = 2p (e0: elements 128h + 64p + 4u ..) and 2p + 1 (e1 = e0 + 32); sub-blocks of 16
        // j0 = 8h + 4p + u/4 and j0 + 2
        const int h = lane >> 4, p = (lane >> 3) & 1, u = lane & 7, j0 = 8 * h + 4 * p + (u >> 2);
        typedef typename std::conditional<T == LLMB_TYPE_Q2_K, llmb_block_q2_K, llmb_block_q3_K>::type blk_t;
        const blk_t *b = (const blk_t *)((const uint8_t *)row + ch * sizeof(blk_t));
        const uint32_t q = ld_u32_a2(b->qs + 32 * h + 4 * u);
        const float d = h2f(b->d);
        if (T == LLMB_TYPE_Q2_K) {
            const llmb_block_q2_K *b2 = (const llmb_block_q2_K *)b;
            const float dmin = h2f(b2->dmin);
            const float dl0 = d * (float)(b2->scales[j0] & 0xF), ml0 = dmin * (float)(b2->scales[j0] >> 4);
            const float dl1 = d * (float)(b2->scales[j0 + 2] & 0xF), ml1 = dmin * (float)(b2->scales[j0 + 2] >> 4);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[k] = dl0 * (float)((q >> (8 * k + 4 * p)) & 3) - ml0;
                v[4 + k] = dl1 * (float)((q >> (8 * k + 4 * p + 2)) & 3) - ml1;
            }
        } else {
            // the third bit of element 128h + 32s + l: bit 4h + s of hmask[l]; missing, the value is q - 4
            const llmb_block_q3_K *b3 = (const llmb_block_q3_K *)b;
            const uint32_t hm = ld_u32_a2(b3->hmask + 4 * u);
            const float dl0 = d * (float)q3k_scale(j0, b3->scales), dl1 = d * (float)q3k_scale(j0 + 2, b3->scales);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int lo = (int)((q >> (8 * k + 4 * p)) & 3), hi = (int)((q >> (8 * k + 4 * p + 2)) & 3);
                v[k] = dl0 * (float)(lo - (((hm >> (8 * k + 4 * h + 2 * p)) & 1) ? 0 : 4));
                v[4 + k] = dl1 * (float)(hi - (((hm >> (8 * k + 4 * h + 2 * p + 1)) & 1) ? 0 : 4));
            }
        }
        e0 = base + 128 * h + 64 * p + 4 * u;
        e1 = e0 + 32;
        return 8;
    } else if (T == LLMB_TYPE_IQ4_XS) {
        // 8 sub-blocks of 32 laid out as IQ4_NL blocks: lane -> sub-block lane/4, quarter lane%4
        const llmb_block_iq4_xs *b = (const llmb_block_iq4_xs *)((const uint8_t *)row + ch * sizeof(llmb_block_iq4_xs));
        const int j = lane >> 2, qq = lane & 3;
        const int ls = (int)(((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
        const float dl = h2f(b->d) * (float)ls;
        const uint32_t q = ld_u32_a2(b->qs + 16 * j + 4 * qq);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            v[k] = dl * (float)iq4nl_value((q >> (8 * k)) & 0xF);
            v[4 + k] = dl * (float)iq4nl_value((q >> (8 * k + 4)) & 0xF);
        }
        e0 = base + 32 * j + 4 * qq;
        e1 = e0 + 16;
        return 8;
    } else if (llmb_cu_blck(T) == LLMB_QK) {
        // 8 blocks of 32 per chunk: lane -> block lane/4, quarter lane%4
        const int64_t blk = ch * (CHUNK / LLMB_QK) + (lane >> 2);
        if (blk >= cols / LLMB_QK) return 0;
        const int qq = lane & 3;
        if (T == LLMB_TYPE_Q8_0) {
            const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)((const uint8_t *)row + blk * sizeof(llmb_block_q8_0));
            const float d = h2f(b->d);
            const uint32_t a = ld_u32_a2((const uint8_t *)b->qs + 8 * qq), c = ld_u32_a2((const uint8_t *)b->qs + 8 * qq + 4);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[k] = (float)(int8_t)(a >> (8 * k)) * d;
                v[4 + k] = (float)(int8_t)(c >> (8 * k)) * d;
            }
            e0 = blk * LLMB_QK + 8 * qq;
            e1 = e0 + 4;
            return 8;
        }
        // the 4-bit layouts: bytes 4qq .. 4qq+3 of qs hold elements 4qq+k (low nibbles) and 16+4qq+k (high)
        e0 = blk * LLMB_QK + 4 * qq;
        e1 = e0 + LLMB_QK / 2;
        if (T == LLMB_TYPE_Q4_0) {
            const llmb_block_q4_0 *b = (const llmb_block_q4_0 *)((const uint8_t *)row + blk * sizeof(llmb_block_q4_0));
            const float d = h2f(b->d);
            const uint32_t q = ld_u32_a2(b->qs + 4 * qq);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[k] = (float)((int)((q >> (8 * k)) & 0xF) - 8) * d;
                v[4 + k] = (float)((int)((q >> (8 * k + 4)) & 0xF) - 8) * d;
            }
        } else if (T == LLMB_TYPE_IQ4_NL) {
            const llmb_block_iq4_nl *b = (const llmb_block_iq4_nl *)((const uint8_t *)row + blk * sizeof(llmb_block_iq4_nl));
            const float d = h2f(b->d);
            const uint32_t q = ld_u32_a2(b->qs + 4 * qq);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[k] = d * (float)iq4nl_value((q >> (8 * k)) & 0xF);
                v[4 + k] = d * (float)iq4nl_value((q >> (8 * k + 4)) & 0xF);
            }
        } else if (T == LLMB_TYPE_Q4_1) {
            const llmb_block_q4_1 *b = (const llmb_block_q4_1 *)((const uint8_t *)row + blk * sizeof(llmb_block_q4_1));
            const float d = h2f(b->d), m = h2f(b->m);
            const uint32_t q = ld_u32_a2(b->qs + 4 * qq);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[k] = (float)((q >> (8 * k)) & 0xF) * d + m;
                v[4 + k] = (float)((q >> (8 * k + 4)) & 0xF) * d + m;
            }
        } else if (T == LLMB_TYPE_Q5_0 || T == LLMB_TYPE_Q5_1) {
            // Q5_1's block is Q5_0's with the min m after d: the same offsets from qh on
            typedef typename std::conditional<T == LLMB_TYPE_Q5_0, llmb_block_q5_0, llmb_block_q5_1>::type blk_t;
            const blk_t *b = (const blk_t *)((const uint8_t *)row + blk * sizeof(blk_t));
            const float d = h2f(b->d);
            const uint32_t q = ld_u32_a2(b->qs + 4 * qq), h = ld_u32_a2(b->qh); // fifth bit of element j: bit j
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int j = 4 * qq + k;
                const int lo = (int)(((q >> (8 * k)) & 0xF) | (((h >> j) & 1) << 4));
                const int hi = (int)(((q >> (8 * k + 4)) & 0xF) | (((h >> (j + 16)) & 1) << 4));
                if (T == LLMB_TYPE_Q5_0) {
                    v[k] = (float)(lo - 16) * d;
                    v[4 + k] = (float)(hi - 16) * d;
                } else {
                    const float m = h2f(((const llmb_block_q5_1 *)b)->m);
                    v[k] = (float)lo * d + m;
                    v[4 + k] = (float)hi * d + m;
                }
            }
        }
        return 8;
    } else { // F16, BF16, F32: 8 consecutive elements per lane
        e0 = base + 8 * lane;
        e1 = e0 + 4;
        const int64_t left = cols - e0;
        const int n = left >= 8 ? 8 : left > 0 ? (int)left : 0;
        if (VEC && n == 8) {
            if (T == LLMB_TYPE_F32) {
                const float4 a = *(const float4 *)((const float *)row + e0), c = *(const float4 *)((const float *)row + e1);
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
            } else {
                const uint4 a = *(const uint4 *)((const uint16_t *)row + e0);
                const uint32_t w4[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const uint16_t lo = (uint16_t)(w4[k] & 0xffff), hi = (uint16_t)(w4[k] >> 16);
                    v[2 * k] = T == LLMB_TYPE_F16 ? h2f(lo) : bf2f(lo);
                    v[2 * k + 1] = T == LLMB_TYPE_F16 ? h2f(hi) : bf2f(hi);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int64_t e = e0 + k;
                v[k] = 0.0f;
                if (k < n) {
                    if (T == LLMB_TYPE_F32) v[k] = ((const float *)row)[e];
                    else if (T == LLMB_TYPE_F16) v[k] = h2f(((const uint16_t *)row)[e]);
                    else v[k] = bf2f(((const uint16_t *)row)[e]);
                }
            }
        }
        return n;
    }
}

// Row element of value k (0..7) of a lane
__device__ __forceinline__ int64_t elem_of(int k, int64_t e0, int64_t e1) { return k < 4 ? e0 + k : e1 + k - 4; }

// Bytes of a row of cols elements (0: a type without device kernels)
static inline int64_t llmb_cu_row_bytes(int t, int64_t cols) {
    switch (t) {
    case LLMB_TYPE_F32: return cols * 4;
    case LLMB_TYPE_F16:
    case LLMB_TYPE_BF16: return cols * 2;
    case LLMB_TYPE_Q4_0: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_q4_0);
    case LLMB_TYPE_Q4_1: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_q4_1);
    case LLMB_TYPE_Q5_0: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_q5_0);
    case LLMB_TYPE_Q5_1: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_q5_1);
    case LLMB_TYPE_Q8_0: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_q8_0);
    case LLMB_TYPE_Q2_K: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_q2_K);
    case LLMB_TYPE_Q3_K: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_q3_K);
    case LLMB_TYPE_Q4_K: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_q4_K);
    case LLMB_TYPE_Q5_K: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_q5_K);
    case LLMB_TYPE_Q6_K: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_q6_K);
    case LLMB_TYPE_IQ4_NL: return cols / LLMB_QK * (int64_t)sizeof(llmb_block_iq4_nl);
    case LLMB_TYPE_IQ4_XS: return cols / LLMB_QK_K * (int64_t)sizeof(llmb_block_iq4_xs);
    default: return 0;
    }
}

// Call f(std::integral_constant<int, TYPE>{}) for a supported type: the one switch over types.
// Returns 0 for a type without device kernels.
template <typename F>
static inline int llmb_cu_dispatch_type(int t, F &&f) {
    switch (t) {
    case LLMB_TYPE_F32: f(std::integral_constant<int, LLMB_TYPE_F32>{}); return 1;
    case LLMB_TYPE_F16: f(std::integral_constant<int, LLMB_TYPE_F16>{}); return 1;
    case LLMB_TYPE_BF16: f(std::integral_constant<int, LLMB_TYPE_BF16>{}); return 1;
    case LLMB_TYPE_Q4_0: f(std::integral_constant<int, LLMB_TYPE_Q4_0>{}); return 1;
    case LLMB_TYPE_Q4_1: f(std::integral_constant<int, LLMB_TYPE_Q4_1>{}); return 1;
    case LLMB_TYPE_Q5_0: f(std::integral_constant<int, LLMB_TYPE_Q5_0>{}); return 1;
    case LLMB_TYPE_Q5_1: f(std::integral_constant<int, LLMB_TYPE_Q5_1>{}); return 1;
    case LLMB_TYPE_Q8_0: f(std::integral_constant<int, LLMB_TYPE_Q8_0>{}); return 1;
    case LLMB_TYPE_Q2_K: f(std::integral_constant<int, LLMB_TYPE_Q2_K>{}); return 1;
    case LLMB_TYPE_Q3_K: f(std::integral_constant<int, LLMB_TYPE_Q3_K>{}); return 1;
    case LLMB_TYPE_Q4_K: f(std::integral_constant<int, LLMB_TYPE_Q4_K>{}); return 1;
    case LLMB_TYPE_Q5_K: f(std::integral_constant<int, LLMB_TYPE_Q5_K>{}); return 1;
    case LLMB_TYPE_Q6_K: f(std::integral_constant<int, LLMB_TYPE_Q6_K>{}); return 1;
    case LLMB_TYPE_IQ4_NL: f(std::integral_constant<int, LLMB_TYPE_IQ4_NL>{}); return 1;
    case LLMB_TYPE_IQ4_XS: f(std::integral_constant<int, LLMB_TYPE_IQ4_XS>{}); return 1;
    default: return 0;
    }
}

#endif
