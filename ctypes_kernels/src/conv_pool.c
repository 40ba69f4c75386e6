/* conv_pool.c — the conv block's bias and fused ReLU/max pool, and the pool's backward: dC
 * from dPooled at the winners (docs/numerics.md and docs/backward.md, "Convolution block").
 * Element-wise; split across threads by rows of windows only. */
#include <stdlib.h>
#include <string.h>
#include "conv.h"

void crnn_conv_bias_rows_scalar(void *ctx, int64_t p0, int64_t p1)
{
    const fwd_job *j = ctx;
    int64_t Out = j->g->Out;
    for (int64_t p = p0; p < p1; p++) crnn_conv_add_floats(j->conv + (p - j->p0) * Out, j->b, Out);
}

/* Running maximum from +0, window rows outer, columns inner, replaced only when strictly
 * greater: the first of equal maxima wins, -0 and NaN never win; winner p*Out + o or -1.
 * Channels innermost (a block of them per window), written as selects so it vectorizes.
 * This is the scalar path; the vector paths run the same selects at their width
 * (src/isa/conv_pool_impl.h). */
#define POOL_OB 64
void crnn_conv_pool_rows_scalar(void *ctx, int64_t oy0, int64_t oy1)
{
    const fwd_job *j = ctx;
    const geom_t *g = j->g;
    int64_t Out = g->Out;
#if defined(__SSE2__)
    if (Out % 4 == 0) {   /* four channels in registers through the window, stored once */
        for (int64_t oy = oy0; oy < oy1; oy++)
            for (int64_t ox = 0; ox < g->Wp; ox++) {
                const int64_t at = (oy * g->Wp + ox) * Out;
                const int64_t p0 = oy * g->poolH * g->Wc + ox * g->poolW;
                for (int64_t o = 0; o < Out; o += 4) {
                    __m128 mo = _mm_setzero_ps();
                    __m128i wo = _mm_set1_epi32(-1);
                    for (int64_t dy = 0; dy < g->poolH; dy++)
                        for (int64_t dx = 0; dx < g->poolW; dx++) {
                            const int64_t p = p0 + dy * g->Wc + dx;
                            __m128 v = _mm_loadu_ps(j->conv + (p - j->p0) * Out + o);
                            __m128 better = _mm_cmpgt_ps(v, mo);   /* false for NaN, -0 */
                            __m128i bi = _mm_castps_si128(better);
                            __m128i idx = _mm_add_epi32(_mm_set1_epi32((int32_t)(p * Out + o)),
                                                        _mm_setr_epi32(0, 1, 2, 3));
                            mo = _mm_or_ps(_mm_and_ps(better, v), _mm_andnot_ps(better, mo));
                            wo = _mm_or_si128(_mm_and_si128(bi, idx), _mm_andnot_si128(bi, wo));
                        }
                    _mm_storeu_ps(j->pooled + at + o, mo);
                    _mm_storeu_si128((__m128i *)(j->winners + at + o), wo);
                }
            }
        return;
    }
#endif
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++)
            for (int64_t o0 = 0; o0 < Out; o0 += POOL_OB) {
                const int64_t no = Out - o0 < POOL_OB ? Out - o0 : POOL_OB;
                float m[POOL_OB];
                int32_t w[POOL_OB];
                for (int64_t o = 0; o < no; o++) {
                    m[o] = 0.0f;
                    w[o] = -1;
                }
                int64_t ph = g->poolH, pw = g->poolW;
                for (int64_t dy = 0; dy < ph; dy++)
                    for (int64_t dx = 0; dx < pw; dx++) {
                        int64_t p = (oy * g->poolH + dy) * g->Wc + ox * g->poolW + dx;
                        const float *row = j->conv + (p - j->p0) * Out + o0;
                        int32_t base = (int32_t)(p * Out + o0);
                        int64_t o = 0;
#if defined(__SSE2__)
                        /* four channels at a time, the same comparisons and selects */
                        for (; o + 4 <= no; o += 4) {
                            __m128 v = _mm_loadu_ps(row + o), mo = _mm_loadu_ps(m + o);
                            __m128 better = _mm_cmpgt_ps(v, mo);   /* false for NaN */
                            __m128i bi = _mm_castps_si128(better);
                            __m128i idx = _mm_add_epi32(_mm_set1_epi32(base + (int32_t)o),
                                                        _mm_setr_epi32(0, 1, 2, 3));
                            __m128i wo = _mm_loadu_si128((const __m128i *)(w + o));
                            _mm_storeu_ps(m + o, _mm_or_ps(_mm_and_ps(better, v),
                                                           _mm_andnot_ps(better, mo)));
                            _mm_storeu_si128((__m128i *)(w + o),
                                             _mm_or_si128(_mm_and_si128(bi, idx),
                                                          _mm_andnot_si128(bi, wo)));
                        }
#endif
                        for (; o < no; o++) {
                            float v = row[o];
                            int better = v > m[o];
                            m[o] = better ? v : m[o];
                            w[o] = better ? base + (int32_t)o : w[o];
                        }
                    }
                int64_t at = (oy * g->Wp + ox) * Out + o0;
                memcpy(j->pooled + at, m, sizeof(float) * (size_t)no);
                memcpy(j->winners + at, w, sizeof(int32_t) * (size_t)no);
            }
}

static const crnn_range_fn bias_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_conv_bias_rows);
void crnn_conv_bias_rows(void *ctx, int64_t p0, int64_t p1)
{
    bias_paths[crnn_current_isa()](ctx, p0, p1);
}

static const crnn_range_fn pool_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_conv_pool_rows);
void crnn_conv_pool_rows(void *ctx, int64_t oy0, int64_t oy1)
{
    pool_paths[crnn_current_isa()](ctx, oy0, oy1);
}

/* dC's rows and columns that no window holds (a dropped partial window's): +0 */
void crnn_conv_zero_dropped(const geom_t *g, float *dC)
{
    const int64_t Out = g->Out, Wc = g->Wc, rowsUsed = g->Hp * g->poolH, colsUsed = g->Wp * g->poolW;
    for (int64_t y = 0; y < rowsUsed && colsUsed < Wc; y++)
        memset(dC + (y * Wc + colsUsed) * Out, 0, sizeof(float) * (size_t)((Wc - colsUsed) * Out));
    if (rowsUsed < g->Hc)
        memset(dC + rowsUsed * Wc * Out, 0, sizeof(float) * (size_t)((g->Hc - rowsUsed) * Wc * Out));
}

/* dC[p][o] = dPooled at each window's winner, +0 elsewhere. Every winner must be -1 or a
 * cell of its own window and channel; anything else is CRNN_E_ARG. The scalar path (the
 * check, then the scatter); the vector paths do both in one pass, VW channels a compare
 * (src/isa/conv_pool_impl.h). */
int crnn_conv_scatter_winners_scalar(const geom_t *g, const float *dPooled, const int32_t *winners,
                                     float *dC)
{
    int64_t Out = g->Out, n = g->Hp * g->Wp * Out;
    /* w - (first cell of the window)*Out - o must be one of the window's cell offsets
     * (dy*Wc + dx)*Out, dy < poolH, dx < poolW, or w = -1 (int32: P*Out fits). Branch-free
     * over a block of channels; the verdict is checked once per window. */
    int64_t ncand = g->poolH * g->poolW;
    int32_t cand_small[16], *cand = ncand <= 16 ? cand_small : malloc(sizeof(int32_t) * (size_t)ncand);
    if (!cand) return 0;
    for (int64_t dy = 0, q = 0; dy < g->poolH; dy++)
        for (int64_t dx = 0; dx < g->poolW; dx++, q++) cand[q] = (int32_t)((dy * g->Wc + dx) * Out);
    int bad = 0;
    for (int64_t oy = 0, i = 0; oy < g->Hp && !bad; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++) {
            const int32_t first = (int32_t)((oy * g->poolH * g->Wc + ox * g->poolW) * Out);
            for (int64_t o0 = 0; o0 < Out; o0 += 64, i += 64) {
                const int64_t no = Out - o0 < 64 ? Out - o0 : 64;
                const int32_t *w = winners + i;
                uint32_t d[64];       /* unsigned: wraps exactly (only w itself can match) */
                int32_t ok[64];
                int64_t o4 = 0;
#if defined(__SSE2__)
                for (; o4 + 4 <= no; o4 += 4) {   /* four channels: the same test */
                    __m128i wv = _mm_loadu_si128((const __m128i *)(w + o4));
                    __m128i dv = _mm_sub_epi32(wv, _mm_add_epi32(_mm_set1_epi32(first + (int32_t)(o0 + o4)),
                                                                 _mm_setr_epi32(0, 1, 2, 3)));
                    __m128i okv = _mm_cmpeq_epi32(wv, _mm_set1_epi32(-1));
                    for (int64_t q = 0; q < ncand; q++)
                        okv = _mm_or_si128(okv, _mm_cmpeq_epi32(dv, _mm_set1_epi32(cand[q])));
                    bad |= _mm_movemask_ps(_mm_castsi128_ps(okv)) != 0xF;
                }
#endif
                for (int64_t o = o4; o < no; o++) {
                    d[o] = (uint32_t)w[o] - (uint32_t)first - (uint32_t)(o0 + o);
                    ok[o] = w[o] == -1;
                }
                for (int64_t q = 0; q < ncand; q++)
                    for (int64_t o = o4; o < no; o++) ok[o] |= d[o] == (uint32_t)cand[q];
                for (int64_t o = o4; o < no; o++) bad |= !ok[o];
                i -= 64 - no;
            }
        }
    if (cand != cand_small) free(cand);
    if (bad) return 0;
    memset(dC, 0, sizeof(float) * (size_t)(g->P * Out));
    for (int64_t i = 0; i < n; i++)
        if (winners[i] >= 0) dC[winners[i]] = dPooled[i];
    return 1;
}

typedef int (*scatter_fn)(const geom_t *, const float *, const int32_t *, float *);
static const scatter_fn scatter_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_conv_scatter_winners);
int crnn_conv_scatter_winners(const geom_t *g, const float *dPooled, const int32_t *winners,
                              float *dC)
{
    return scatter_paths[crnn_current_isa()](g, dPooled, winners, dC);
}
