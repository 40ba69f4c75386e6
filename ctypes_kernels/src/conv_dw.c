/* conv_dw.c — the conv block's dW and db from the listed (nonzero) terms of dC
 * (docs/backward.md, "Convolution block"); crnn_conv_backward falls back to the dense dots
 * when the listing does not apply. */
#include <math.h>
#include <string.h>
#include "conv.h"

/* ---- dW and db from the listed terms of dC ---------------------------------------------
 * dC is +0 away from the pool winners (3 of 4 positions for a 2x2 pool), and a term with
 * dC = ±0 and a finite window value has an exact zero product. dW[o][k] and db[o] are
 * therefore computed from each channel's nonzero dC terms only, each lane's terms in
 * ascending p (crnn_gemm16_listed); a row with a -0 lane partial, where a left-out term
 * could have mattered, is recomputed with every term (core.h says why that is exact). */

typedef struct {
    const float *B;          /* col rows: x zero-padded (C % 16 == 0) or im2col */
    int64_t Wx;              /* padded row length (C % 16 == 0) */
    int direct;
} colsrc_t;

/* where col row p starts in B (col[p][16c + e] = B[roff(p) + coff[c] + e]) */
static inline int64_t col_roff(const geom_t *g, const colsrc_t *cs, int64_t p)
{
    return cs->direct ? ((p / g->Wc) * cs->Wx + p % g->Wc) * g->C : p * g->KP;
}

/* dW[o][·] and db[o] with every one of the P terms (the definition; rare path) */
static void dW_row_dense(const geom_t *g, const colsrc_t *cs, const int32_t *coff,
                         const float *dC, int64_t o, float *dWo)
{
    for (int64_t k = 0; k < g->KP; k++) {
        float p[16] = {0};
        for (int64_t q = 0; q < g->P; q++)
            p[q % 16] = fmaf(dC[q * g->Out + o], cs->B[col_roff(g, cs, q) + coff[k / 16] + k % 16],
                             p[q % 16]);
        dWo[k] = crnn_tree16(p);
    }
}

/* B: the window rows (x with padH rows and padW columns of +0 around it when C % 16 == 0,
 * else im2col) and coff, where column chunk c of a window row starts */
static void window_rows(const geom_t *g, const float *x, const colsrc_t *cs, float *B,
                        int32_t *coff)
{
    const int64_t nb = g->KP / 16;
    if (!cs->direct) {
        crnn_conv_im2col(g, x, B);
        for (int64_t c = 0; c < nb; c++) coff[c] = (int32_t)(16 * c);
        return;
    }
    crnn_conv_pad(g, x, B);
    for (int64_t c = 0; c < nb; c++) coff[c] = (int32_t)crnn_conv_chunk_offset(g, c);
}

/* bit i set when x[i] is not ±0 (a NaN is not ±0), n <= 64 */
static inline uint64_t nonzero_bits(const float *x, int64_t n)
{
    uint64_t bits = 0;
    int64_t i = 0;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4)
        bits |= (uint64_t)_mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(x + i), _mm_setzero_ps())) << i;
#endif
    for (; i < n; i++) bits |= (uint64_t)(x[i] != 0.0f) << i;
    return bits;
}

/* Slot o*16 + l (cap terms from terms + (o*16 + l)*cap) gets channel o's nonzero dC[p][o],
 * p ≡ l (mod 16), in ascending p: rows p in order, each row's nonzero channels found from
 * the bits of a compare (a position wins few channels, and most windows are dead). */
static void list_terms(const geom_t *g, const colsrc_t *cs, const float *dC, int64_t cap,
                       crnn_term *terms, int32_t *start, int32_t *len, int32_t *roff)
{
    const int64_t P = g->P, Out = g->Out;
    for (int64_t y = 0, q = 0; y < g->Hc; y++)      /* col_roff without a division a row */
        for (int64_t x = 0; x < g->Wc; x++, q++)
            roff[q] = (int32_t)(cs->direct ? (y * cs->Wx + x) * g->C : q * g->KP);
    for (int64_t sl = 0; sl < 16 * Out; sl++) {
        start[sl] = (int32_t)(sl * cap);
        len[sl] = 0;
    }
    /* up to 32 channels: the bits of 64 / span positions in one mask (span = Out rounded up
     * to a power of two), read in bit order (position, then channel), so a mask's loop, whose
     * end the branch predictor misses, runs once for several positions */
    const int span = Out <= 16 ? 16 : 32, per = 64 / span, shift = span == 16 ? 4 : 5;
    int64_t p = 0;
    for (; Out <= 32 && p + per <= P; p += per) {
        uint64_t nz = 0;
        for (int q = 0; q < per; q++) nz |= nonzero_bits(dC + (p + q) * Out, Out) << (q * span);
        for (; nz; nz &= nz - 1) {
            const int bit = __builtin_ctzll(nz);
            const int64_t pq = p + (bit >> shift), o = bit & (span - 1), sl = o * 16 + pq % 16;
            crnn_term *t = terms + sl * cap + len[sl]++;
            t->v = dC[pq * Out + o];
            t->off = roff[pq];
        }
    }
    for (; p < P; p++) {
        const float *row = dC + p * Out;
        const int32_t off = roff[p];
        for (int64_t o0 = 0; o0 < Out; o0 += 64) {
            for (uint64_t nz = nonzero_bits(row + o0, Out - o0 < 64 ? Out - o0 : 64); nz; nz &= nz - 1) {
                const int64_t o = o0 + __builtin_ctzll(nz), sl = o * 16 + p % 16;
                crnn_term *t = terms + sl * cap + len[sl]++;
                t->v = row[o];
                t->off = off;
            }
        }
    }
}

/* db[o] from the same lists (fma(v, 1, p) = p + v), redone with every term when a lane ends
 * at -0 */
static float db_listed(const geom_t *g, const float *dC, const crnn_term *terms,
                       const int32_t *start, const int32_t *len, int64_t o)
{
    float lane[16];
    int neg = 0;
    for (int l = 0; l < 16; l++) {
        lane[l] = 0.0f;
        const crnn_term *t = terms + start[o * 16 + l];
        for (int32_t m = 0; m < len[o * 16 + l]; m++) lane[l] = lane[l] + t[m].v;
        neg |= lane[l] == 0.0f && signbit(lane[l]);
    }
    if (neg)
        for (int l = 0; l < 16; l++) {
            lane[l] = 0.0f;
            for (int64_t q = l; q < g->P; q += 16) lane[l] = lane[l] + dC[q * g->Out + o];
        }
    return crnn_tree16(lane);
}

/* Returns 1 when dW and db are done, 0 when the dense dots must run instead (some x is not
 * finite: ±0 * inf is NaN, so no term may be left out; offsets beyond int32), -1 without
 * memory. Listing pays even for one chunk of 16 columns (the first block, K = 9: a position
 * wins 1.3 of its 16 channels; docs/performance.md). */
int crnn_conv_dW_listed(const geom_t *g, const float *x, const float *dC, float *dW, float *db)
{
    const int64_t C = g->C, Out = g->Out, P = g->P, KP = g->KP, nb = KP / 16;
    const colsrc_t cs0 = {NULL, g->W + 2 * g->padW, C % 16 == 0};
    const int64_t nB = cs0.direct ? (g->H + 2 * g->padH) * cs0.Wx * C : P * KP;
    /* a slot holds at most one term a window and one a position of its lane */
    const int64_t perlane = (P + 15) / 16, windows = g->Hp * g->Wp;
    int64_t fill = perlane < windows ? perlane : windows;
    const int64_t nslot = 16 * Out;
    /* with Wc % 16 == 0 a lane's positions are the columns x = l mod 16 of every row, and
     * windows at most 16 wide never hold two of them in one row: at most one term a window
     * row and lane column */
    if (g->Wc % 16 == 0 && g->poolW <= 16) {
        const int64_t lanecols = (g->Wp * g->poolW + 15) / 16;
        if (g->Hp * lanecols < fill) fill = g->Hp * lanecols;
    }
    /* slots a multiple of 4 KiB apart one cache line further apart: every slot's next term
     * would be in the same L1 set (the list stores are scattered over all the slots) */
    const int64_t cap = fill * (int64_t)sizeof(crnn_term) % 4096 == 0 ? fill + 8 : fill;
    if (nB + 16 > INT32_MAX || cap * nslot > INT32_MAX ||
        !crnn_all_finite(x, g->H * g->W * C))
        return 0;
    size_t bytes = sizeof(float) * (size_t)nB + sizeof(crnn_term) * (size_t)(cap * nslot) +
                   sizeof(int32_t) * (size_t)(2 * nslot + nb + Out + P) + 64;
    char *mem = crnn_scratch(CRNN_SCRATCH_BAND, bytes);
    if (!mem) return -1;
    float *B = (float *)mem;
    crnn_term *terms = (crnn_term *)(B + nB);
    int32_t *start = (int32_t *)(terms + cap * nslot), *len = start + nslot;
    int32_t *coff = len + nslot, *negz = coff + nb, *roff = negz + Out;
    const colsrc_t cs = {B, cs0.Wx, cs0.direct};
    window_rows(g, x, &cs, B, coff);
    list_terms(g, &cs, dC, cap, terms, start, len, roff);
    crnn_gemm16_listed(Out, nb, terms, start, len, B, coff, dW, KP, negz);
    for (int64_t o = 0; o < Out; o++) {
        if (negz[o]) dW_row_dense(g, &cs, coff, dC, o, dW + o * KP);
        db[o] = db_listed(g, dC, terms, start, len, o);
    }
    return 1;
}
