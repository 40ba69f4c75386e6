/* gemm16_listed.h — crnn_gemm16_listed (core.h) on one ISA's vectors: dots over listed
 * nonzero terms only (the conv backward's dW and db over the pool winners). */
#include "gemm16_common.h"

/* core.h, crnn_gemm16_listed: per output row and lane, the listed terms' fmas into the
 * registers of LISTED_CHUNKS 16-column chunks (one chain per register, in list order; 6 on
 * 256-bit, where 5 took conv2's 18 chunks in 4 passes over the lists, not 3), the 16
 * lane partials through a small buffer, then the tree as vertical adds; a -0 lane partial
 * under a ±0 output is reported, not fixed (elsewhere the sign of a zero cannot reach the
 * output: the tree of partials equal up to the signs of zeros is equal unless it is zero). */
#define LISTED_CHUNKS (VW == 16 ? 9 : VW == 8 ? 6 : 3)   /* 9, 12, 12 accumulators */

AI void listed_lane(const int NCH, const crnn_term *t, int32_t n, const float *B,
                    const int32_t *coff, float *out)
{
    vec_t acc[LISTED_CHUNKS * NV];
    UNROLL
    for (int q = 0; q < NCH * NV; q++) acc[q] = VZERO();
    for (int32_t e = 0; e < n; e++) {
        const vec_t a = VSET1(t[e].v);
        const float *b = B + t[e].off;
        UNROLL
        for (int c = 0; c < NCH; c++)
            UNROLL
            for (int v = 0; v < NV; v++)
                acc[c * NV + v] = VFMA(a, VLOADU(b + coff[c] + v * VW), acc[c * NV + v]);
    }
    UNROLL
    for (int q = 0; q < NCH * NV; q++) VSTOREU(out + q * VW, acc[q]);
}

static void listed_lanes(int nch, const crnn_term *terms, const int32_t *start, const int32_t *len,
                         const float *B, const int32_t *coff, float *lb)
{
    for (int l = 0; l < 16; l++) {
        const crnn_term *t = terms + start[l];
        const int32_t n = len[l];
        float *out = lb + l * nch * 16;
        switch (nch) {
#define LISTED_CASE(k) case k: listed_lane(k, t, n, B, coff, out); break;
        LISTED_CASE(1) LISTED_CASE(2) LISTED_CASE(3)
#if LISTED_CHUNKS > 3
        LISTED_CASE(4) LISTED_CASE(5)
#endif
#if LISTED_CHUNKS > 5
        LISTED_CASE(6)
#endif
#if LISTED_CHUNKS > 6
        LISTED_CASE(7) LISTED_CASE(8) LISTED_CASE(9)
#endif
#undef LISTED_CASE
        }
    }
}

void CAT(crnn_gemm16_listed, ISA_SUFFIX)(int64_t M, int64_t nb, const crnn_term *terms,
                                         const int32_t *start, const int32_t *len, const float *B,
                                         const int32_t *coff, float *C, int64_t ldc, int32_t *negz)
{
    float lb[16 * LISTED_CHUNKS * 16];          /* [lane][column of the pass] */
    for (int64_t i = 0; i < M; i++) {
        int neg = 0;
        for (int64_t c0 = 0; c0 < nb; c0 += LISTED_CHUNKS) {
            const int nch = nb - c0 < LISTED_CHUNKS ? (int)(nb - c0) : LISTED_CHUNKS;
            const int64_t width = (int64_t)nch * 16;
            listed_lanes(nch, terms, start + 16 * i, len + 16 * i, B, coff + c0, lb);
            for (int64_t q = 0; q < width; q += VW) {
                vec_t x[16];
                UNROLL
                for (int l = 0; l < 16; l++) x[l] = VLOADU(lb + l * width + q);
                UNROLL
                for (int s = 8; s >= 1; s >>= 1)
                    UNROLL
                    for (int l = 0; l < s; l++) x[l] = VADD(x[l], x[l + s]);
                VSTOREU(C + i * ldc + c0 * 16 + q, x[0]);
                /* a lane's -0 can only show in an output that is ±0 */
                if (VANY_ZERO(x[0]))
                    for (int l = 0; l < 16; l++) neg |= VHAS_NEGZERO(VLOADU(lb + l * width + q));
            }
        }
        negz[i] = neg;
    }
}
