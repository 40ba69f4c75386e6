/* conv.c — conv block (stride 1, channels-last) + fused ReLU/max pool, forward and backward
 * (docs/numerics.md and docs/backward.md, "Convolution block").
 *
 * Every dot goes through the gemm16 kernels (core.h) and has exactly the terms the docs
 * name, in their order: the forward is im2col then conv[p][o] = dot16(col[p], W[o]) over
 * KPadded (kn, W's rows gathered into the kernel's packed panels); the backward
 * reads dC and col as they lie: dW[o][k] and db[o] are dots over p (kn with dC read down its
 * columns), dcol[p][k] = dot16 over o of dC[p][o] and W[o][k] (kn with W as stored). The pool
 * and the dx gather are element-wise; they are split across threads over independent
 * outputs only (rows of the pooled output, rows of dx), so no bit depends on the thread
 * count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(CRNN_MUTANT)   /* mutant builds only (docs/mutants.md) */
#include "mutants.h"
#endif

typedef struct {
    int64_t H, W, C, Out, kh, kw, padH, padW, poolH, poolW;
    int64_t Hc, Wc, P, Hp, Wp, K, KP;
} geom_t;

/* Fills g; returns 0 for a shape the ABI rejects (CRNN_E_ARG). */
static int make_geom(geom_t *g, int32_t H, int32_t W, int32_t C, int32_t Out,
                     int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                     int32_t poolH, int32_t poolW)
{
    if (H < 1 || W < 1 || C < 1 || Out < 1 || kh < 1 || kw < 1 || padH < 0 || padW < 0 ||
        poolH < 1 || poolW < 1)
        return 0;
    g->H = H; g->W = W; g->C = C; g->Out = Out; g->kh = kh; g->kw = kw;
    g->padH = padH; g->padW = padW; g->poolH = poolH; g->poolW = poolW;
    g->Hc = (int64_t)H + 2 * (int64_t)padH - kh + 1;
    g->Wc = (int64_t)W + 2 * (int64_t)padW - kw + 1;
    if (g->Hc < 1 || g->Wc < 1 || g->Hc > INT32_MAX || g->Wc > INT32_MAX) return 0;
    g->Hp = g->Hc / poolH;
    g->Wp = g->Wc / poolW;
    if (g->Hp < 1 || g->Wp < 1) return 0;
    /* winners are int32 flat indices p*Out + o */
    if (g->Hc > INT32_MAX / g->Wc) return 0;
    g->P = g->Hc * g->Wc;
    if (g->P > INT32_MAX / Out) return 0;
    if ((int64_t)kh * kw > INT32_MAX / C) return 0;
    g->K = (int64_t)kh * kw * C;
    g->KP = (g->K + 15) / 16 * 16;
    return 1;
}

/* Element count -> bytes, or 0 when it cannot be allocated (treated as CRNN_E_NOMEM). */
static size_t bytes_of(int64_t n)
{
    if (n < 0 || (uint64_t)n > (SIZE_MAX / sizeof(float)) / 8) return 0;
    return (size_t)n * sizeof(float);
}

/* ---- im2col: col[p][k] = x[y+ky-padH][x+kx-padW][c], +0 outside and in the padding ---- */
typedef struct {
    const geom_t *g;
    const float *x;
    float *col;           /* col row of position p = y*Wc + x: col + (p - y0*Wc)*KP */
    int64_t y0;
} im2col_job;

/* d[i] = d[i] + s[i], i < n: one rounding each, four at a time where SSE2 is the baseline
 * (any -O level vectorizes it the same way) */
static inline void add_floats(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(d + i, _mm_add_ps(_mm_loadu_ps(d + i), _mm_loadu_ps(s + i)));
#endif
    for (; i < n; i++) d[i] = d[i] + s[i];
}

/* dst[0..n) = src[0..n) in 16-byte moves (small runs: no call to memcpy) */
static inline void copy_floats(float *dst, const float *src, int64_t n)
{
    int64_t q = 0;
    for (; q + 4 <= n; q += 4) memcpy(dst + q, src + q, 4 * sizeof(float));
    for (; q < n; q++) dst[q] = src[q];
}

static void im2col_rows(void *ctx, int64_t y0, int64_t y1)
{
    const im2col_job *j = ctx;
    const geom_t *g = j->g;
#if !defined(CRNN_MUTANT)
    if (g->C == 1) {   /* one channel: column k of a conv row is a shifted input row */
        for (int64_t y = y0; y < y1; y++) {
            float *rows = j->col + (y - j->y0) * g->Wc * g->KP;
            memset(rows, 0, sizeof(float) * (size_t)(g->Wc * g->KP));
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = y + ky - g->padH;
                if (iy < 0 || iy >= g->H) continue;
                const float *xr = j->x + iy * g->W;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    const int64_t k = ky * g->kw + kx, sh = kx - g->padW;
                    int64_t lo = -sh > 0 ? -sh : 0, hi = g->W - sh < g->Wc ? g->W - sh : g->Wc;
                    float *dst = rows + k;
                    for (int64_t xo = lo; xo < hi; xo++) dst[xo * g->KP] = xr[xo + sh];
                }
            }
        }
        return;
    }
#endif
    for (int64_t y = y0; y < y1; y++)
        for (int64_t xo = 0; xo < g->Wc; xo++) {
            float *row = j->col + ((y - j->y0) * g->Wc + xo) * g->KP;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = y + ky - g->padH;
#if defined(CRNN_MUTANT_CONV_CHW_TAPS)   /* mutant: k = (c*kh + ky)*kw + kx, PyTorch's order */
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t ix = xo + kx - g->padW;
                    int inside = iy >= 0 && iy < g->H && ix >= 0 && ix < g->W;
                    for (int64_t c = 0; c < g->C; c++)
                        row[(c * g->kh + ky) * g->kw + kx] =
                            inside ? j->x[(iy * g->W + ix) * g->C + c] : 0.0f;
                }
#else
                /* the taps kx = 0..kw-1 of kernel row ky, k = (ky*kw + kx)*C + c, are
                 * x[iy][xo + kx - padW][0..C): contiguous in x; +0 outside the image */
                float *dst = row + ky * g->kw * g->C;
                const int64_t run = g->kw * g->C;
                int64_t x0 = xo - g->padW;
                if (iy < 0 || iy >= g->H) {
                    for (int64_t q = 0; q < run; q++) dst[q] = 0.0f;
                } else if (x0 >= 0 && x0 + g->kw <= g->W) {
                    copy_floats(dst, j->x + (iy * g->W + x0) * g->C, run);
                } else {
                    int64_t lo = x0 < 0 ? -x0 : 0, hi = x0 + g->kw > g->W ? g->W - x0 : g->kw;
                    if (hi < lo) hi = lo;
                    for (int64_t q = 0; q < lo * g->C; q++) dst[q] = 0.0f;
                    copy_floats(dst + lo * g->C, j->x + (iy * g->W + x0 + lo) * g->C, (hi - lo) * g->C);
                    for (int64_t q = hi * g->C; q < run; q++) dst[q] = 0.0f;
                }
#endif
            }
            for (int64_t k = g->K; k < g->KP; k++) row[k] = 0.0f;
        }
}

static void im2col(const geom_t *g, const float *x, float *col)
{
    im2col_job j = {g, x, col, 0};
    crnn_parallel_for_work(g->Hc, g->P * g->KP, im2col_rows, &j);
}

/* ---- forward: bias, then the pool over rows of windows ------------------------------- */
typedef struct {
    const geom_t *g;
    const float *b;
    float *conv, *pooled;
    int32_t *winners;
} fwd_job;

static void bias_rows(void *ctx, int64_t p0, int64_t p1)
{
    const fwd_job *j = ctx;
    int64_t Out = j->g->Out;
    for (int64_t p = p0; p < p1; p++) add_floats(j->conv + p * Out, j->b, Out);
}

/* Running maximum from +0, window rows outer, columns inner, replaced only when strictly
 * greater: the first of equal maxima wins, -0 and NaN never win; winner p*Out + o or -1.
 * Channels innermost (a block of them per window), written as selects so it vectorizes. */
#define POOL_OB 64
static void pool_rows(void *ctx, int64_t oy0, int64_t oy1)
{
    const fwd_job *j = ctx;
    const geom_t *g = j->g;
    int64_t Out = g->Out;
#if defined(__SSE2__) && !defined(CRNN_MUTANT)
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
                            __m128 v = _mm_loadu_ps(j->conv + p * Out + o);
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
#if defined(CRNN_MUTANT_POOL_KEEPS_PARTIAL)   /* mutant: the last windows take the leftovers */
                int64_t ph = oy == g->Hp - 1 ? g->Hc - oy * g->poolH : g->poolH;
                int64_t pw = ox == g->Wp - 1 ? g->Wc - ox * g->poolW : g->poolW;
#else
                int64_t ph = g->poolH, pw = g->poolW;
#endif
                for (int64_t dy = 0; dy < ph; dy++)
                    for (int64_t dx = 0; dx < pw; dx++) {
                        int64_t p = (oy * g->poolH + dy) * g->Wc + ox * g->poolW + dx;
                        const float *row = j->conv + p * Out + o0;
#if defined(CRNN_MUTANT_WINNER_WINDOW_RELATIVE)   /* mutant: the cell within the window */
                        int32_t base = (int32_t)((dy * g->poolW + dx) * Out + o0);
#else
                        int32_t base = (int32_t)(p * Out + o0);
#endif
                        int64_t o = 0;
#if defined(__SSE2__) && !defined(CRNN_MUTANT)
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
#if defined(CRNN_MUTANT_POOL_TIES_LAST)
                            int better = v >= m[o];    /* mutant: >=, the last maximum wins */
#else
                            int better = v > m[o];
#endif
#if defined(CRNN_MUTANT_POOL_MAXPS)   /* mutant: the value by maxps(m, v), which returns v
                                       * when m > v is false: on equality (-0 after +0), NaN */
                            m[o] = m[o] > v ? m[o] : v;
#else
                            m[o] = better ? v : m[o];
#endif
                            w[o] = better ? base + (int32_t)o : w[o];
                        }
                    }
                int64_t at = (oy * g->Wp + ox) * Out + o0;
                memcpy(j->pooled + at, m, sizeof(float) * (size_t)no);
                memcpy(j->winners + at, w, sizeof(int32_t) * (size_t)no);
            }
}

#if !defined(CRNN_MUTANT)
/* The forward by bands of poolH conv rows (the rows of one row of pool windows; the last
 * band may hold the dropped rows): im2col of the band, its dots against the packed Wᵀ, the
 * bias, and the band's pool windows — the same operations per output as the whole-image
 * order, done while the band is in cache. */
typedef struct {
    const geom_t *g;
    const float *x, *Bp, *b;
    float *conv, *pooled;
    int32_t *winners;
    int32_t rc;
} band_job;

static void conv_bands(void *ctx, int64_t b0, int64_t b1)
{
    band_job *j = ctx;
    const geom_t *g = j->g;
    const int64_t rows = g->poolH, Out = g->Out;
    float *col = crnn_scratch(CRNN_SCRATCH_BAND, bytes_of(rows * g->Wc * g->KP) + 1);
    if (!col) {
        __atomic_store_n(&j->rc, CRNN_E_NOMEM, __ATOMIC_RELAXED);
        return;
    }
    fwd_job fj = {g, j->b, j->conv, j->pooled, j->winners};
    for (int64_t band = b0; band < b1; band++) {
        const int64_t y0 = band * rows, y1 = y0 + rows < g->Hc ? y0 + rows : g->Hc;
        im2col_job ij = {g, j->x, col, y0};
        im2col_rows(&ij, y0, y1);
        crnn_gemm16_kn_packed((y1 - y0) * g->Wc, Out, g->KP, col, g->KP, 1, j->Bp,
                              j->conv + y0 * g->Wc * Out, Out);
        bias_rows(&fj, y0 * g->Wc, y1 * g->Wc);
        if (band < g->Hp) pool_rows(&fj, band, band + 1);
    }
}
#endif

int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C,
                          const float *Wt, const float *b, int32_t Out,
                          int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                          int32_t poolH, int32_t poolW,
                          float *conv, float *pooled, int32_t *winners)
{
    geom_t g;
    if (!x || !Wt || !b || !conv || !pooled || !winners) return CRNN_E_ARG;
    if (!make_geom(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW)) return CRNN_E_ARG;
#if !defined(CRNN_MUTANT)
    {   /* bands of poolH conv rows: im2col, dots, bias and pool while the band is in cache */
        size_t nb = bytes_of(16 * g.KP * ((g.Out + 15) / 16));
        float *Bp = nb ? crnn_scratch(CRNN_SCRATCH_LAYER, nb) : NULL;
        if (!Bp) return CRNN_E_NOMEM;
        crnn_kn_pack(g.KP, g.Out, Wt, 1, g.KP, Bp);     /* B(k, o) = Wt[o][k], packed once */
        band_job bj = {&g, x, Bp, b, conv, pooled, winners, CRNN_OK};
        crnn_parallel_for_work((g.Hc + g.poolH - 1) / g.poolH, g.P * g.Out * g.KP, conv_bands, &bj);
        return bj.rc;
    }
#endif
    size_t nb = bytes_of(g.P * g.KP);
    float *col = nb ? crnn_scratch(CRNN_SCRATCH_LAYER, nb) : NULL;
    if (!col) return CRNN_E_NOMEM;
    im2col(&g, x, col);
#if defined(CRNN_MUTANT_BIAS_FIRST)   /* mutant: the bias starts lane 0 of each dot */
    crnn_mutant_gemm16_bias_first(g.P, g.Out, g.KP, col, g.KP, Wt, g.KP, b, conv, g.Out);
    fwd_job j = {&g, b, conv, pooled, winners};
    (void)bias_rows;
#else
    /* term k of conv[p][o]: col[p][k] * Wt[o][k] (B(k, o) = Wt[o*KP + k]) */
#if defined(CRNN_MUTANT_CONV_K_TERMS)   /* mutant: the dots over the K real taps only */
    crnn_gemm16_kn(g.P, g.Out, g.K, col, g.KP, 1, Wt, 1, g.KP, conv, g.Out);
#else
    crnn_gemm16_kn(g.P, g.Out, g.KP, col, g.KP, 1, Wt, 1, g.KP, conv, g.Out);
#endif
    fwd_job j = {&g, b, conv, pooled, winners};
    crnn_parallel_for_work(g.P, g.P * g.Out, bias_rows, &j);
#endif
    crnn_parallel_for_work(g.Hp, g.P * g.Out, pool_rows, &j);
    return CRNN_OK;
}

/* ---- backward --------------------------------------------------------------------- */

#if defined(__SSE2__) && !defined(CRNN_MUTANT)
/* scatter_winners for Out % 4 == 0, in one pass and without branches: every cell of every
 * window gets dPooled where the winner names it and +0 elsewhere (four channels at a time),
 * the dropped rows and columns +0; a winner that names no cell of its window and is not -1
 * makes the whole result invalid (dC is scratch; the caller stops). */
static int winners_to_dC(const geom_t *g, const float *dPooled, const int32_t *winners,
                         float *dC)
{
    const int64_t Out = g->Out, Wc = g->Wc, rowsUsed = g->Hp * g->poolH;
    const int64_t colsUsed = g->Wp * g->poolW;
    const __m128i lane = _mm_setr_epi32(0, 1, 2, 3), none = _mm_set1_epi32(-1);
    __m128i bad = _mm_setzero_si128();
    for (int64_t oy = 0; oy < g->Hp; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++) {
            const int64_t at = (oy * g->Wp + ox) * Out;
            const int64_t p0 = oy * g->poolH * Wc + ox * g->poolW;
            for (int64_t o = 0; o < Out; o += 4) {
                const __m128i w = _mm_loadu_si128((const __m128i *)(winners + at + o));
                const __m128 d = _mm_loadu_ps(dPooled + at + o);
                __m128i hit = _mm_cmpeq_epi32(w, none);
                for (int64_t dy = 0; dy < g->poolH; dy++)
                    for (int64_t dx = 0; dx < g->poolW; dx++) {
                        const int64_t p = p0 + dy * Wc + dx;
                        const __m128i eq = _mm_cmpeq_epi32(
                            w, _mm_add_epi32(_mm_set1_epi32((int32_t)(p * Out + o)), lane));
                        hit = _mm_or_si128(hit, eq);
                        _mm_storeu_ps(dC + p * Out + o, _mm_and_ps(_mm_castsi128_ps(eq), d));
                    }
                bad = _mm_or_si128(bad, _mm_andnot_si128(hit, none));
            }
        }
    for (int64_t y = 0; y < rowsUsed; y++)          /* dropped columns of the used rows */
        if (colsUsed < Wc)
            memset(dC + (y * Wc + colsUsed) * Out, 0, sizeof(float) * (size_t)((Wc - colsUsed) * Out));
    if (rowsUsed < g->Hc)                           /* dropped rows */
        memset(dC + rowsUsed * Wc * Out, 0, sizeof(float) * (size_t)((g->Hc - rowsUsed) * Wc * Out));
    return _mm_movemask_epi8(bad) == 0;
}
#endif

/* dC[p][o] = dPooled at each window's winner, +0 elsewhere. Every winner must be -1 or a
 * cell of its own window and channel; anything else is CRNN_E_ARG. */
static int scatter_winners(const geom_t *g, const float *dPooled, const int32_t *winners,
                           float *dC)
{
#if defined(__SSE2__) && !defined(CRNN_MUTANT)
    if (g->Out % 4 == 0) return winners_to_dC(g, dPooled, winners, dC);
#endif
    int64_t Out = g->Out, n = g->Hp * g->Wp * Out;
#if defined(CRNN_MUTANT_WINNER_WINDOW_RELATIVE)
    /* mutant: its own backward reads its window-relative winners back */
    int64_t cells = g->poolH * g->poolW * Out;
    for (int64_t i = 0; i < n; i++)
        if (winners[i] != -1 && (winners[i] < 0 || winners[i] >= cells || winners[i] % Out != i % Out))
            return 0;
    memset(dC, 0, sizeof(float) * (size_t)(g->P * Out));
    for (int64_t i = 0; i < n; i++) {
        if (winners[i] < 0) continue;
        int64_t win = i / Out, oy = win / g->Wp, ox = win % g->Wp, l = winners[i] / Out;
        int64_t p = (oy * g->poolH + l / g->poolW) * g->Wc + ox * g->poolW + l % g->poolW;
        dC[p * Out + i % Out] = dPooled[i];
    }
    return 1;
#else
#if defined(CRNN_MUTANT_POOL_KEEPS_PARTIAL)
    for (int64_t i = 0; i < n; i++) {
        int64_t w = winners[i];
        if (w == -1) continue;
        int64_t o = i % Out, win = i / Out, oy = win / g->Wp, ox = win % g->Wp;
        if (w < 0 || w >= g->P * Out || w % Out != o) return 0;
        int64_t p = w / Out, py = p / g->Wc, px = p % g->Wc;
        /* mutant: leftovers belong to the last window */
        int64_t wy = py / g->poolH < g->Hp ? py / g->poolH : g->Hp - 1;
        int64_t wx = px / g->poolW < g->Wp ? px / g->poolW : g->Wp - 1;
        if (wy != oy || wx != ox) return 0;
    }
#else
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
#endif
    memset(dC, 0, sizeof(float) * (size_t)(g->P * Out));
    for (int64_t i = 0; i < n; i++)
        if (winners[i] >= 0) dC[winners[i]] = dPooled[i];
    return 1;
#endif
}

typedef struct {
    const geom_t *g;
    const float *dcol;
    float *dx;
} gather_job;

/* dx[iy][ix][c] = +0 + dcol[p][(ky*kw+kx)*C + c] + ... over ky, then kx, ascending, for the
 * taps whose p = (iy+padH-ky, ix+padW-kx) lies inside the conv output. */
static void gather_rows(void *ctx, int64_t iy0, int64_t iy1)
{
    const gather_job *j = ctx;
    const geom_t *g = j->g;
    int64_t C = g->C;
    for (int64_t iy = iy0; iy < iy1; iy++)
        for (int64_t ix = 0; ix < g->W; ix++) {
            float *d = j->dx + (iy * g->W + ix) * C;
            for (int64_t c = 0; c < C; c++) d[c] = 0.0f;
#if defined(CRNN_MUTANT_DX_TAPS_KX_FIRST)   /* mutant: the taps gathered kx outer, ky inner */
            for (int64_t kx = 0; kx < g->kw; kx++) {
                int64_t px = ix + g->padW - kx;
                if (px < 0 || px >= g->Wc) continue;
                for (int64_t ky = 0; ky < g->kh; ky++) {
                    int64_t py = iy + g->padH - ky;
                    if (py < 0 || py >= g->Hc) continue;
                    const float *s = j->dcol + (py * g->Wc + px) * g->KP + (ky * g->kw + kx) * C;
                    for (int64_t c = 0; c < C; c++) d[c] = d[c] + s[c];
                }
            }
            continue;
#endif
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t py = iy + g->padH - ky;
                if (py < 0 || py >= g->Hc) continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t px = ix + g->padW - kx;
                    if (px < 0 || px >= g->Wc) continue;
#if defined(CRNN_MUTANT_CONV_CHW_TAPS)   /* mutant: its own channel-major tap order */
                    const float *s = j->dcol + (py * g->Wc + px) * g->KP;
                    for (int64_t c = 0; c < C; c++)
                        d[c] = d[c] + s[(c * g->kh + ky) * g->kw + kx];
#else
                    add_floats(d, j->dcol + (py * g->Wc + px) * g->KP + (ky * g->kw + kx) * C, C);
#endif
                }
            }
        }
}

#if !defined(CRNN_MUTANT) || defined(CRNN_MUTANT_SPARSE_DW_NO_REDO)
/* ---- dW and db from the listed terms of dC ---------------------------------------------
 * dC is +0 away from the pool winners (3 of 4 positions for a 2x2 pool), and a term with
 * dC = ±0 and a finite window value has an exact zero product. dW[o][k] and db[o] are
 * therefore computed from each channel's nonzero dC terms only, each lane's terms in
 * ascending p (crnn_gemm16_listed); a row with a -0 lane partial, where a left-out term
 * could have mattered, is recomputed with every term (core.h says why that is exact). */

/* 1 when every x is finite (x*0 is ±0 then, NaN otherwise; the OR of the bits is NaN iff
 * any is) */
static int all_finite(const float *x, int64_t n)
{
    int64_t i = 0;
    int bad = 0;
#if defined(__SSE2__)
    __m128 acc = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4) acc = _mm_or_ps(acc, _mm_mul_ps(_mm_loadu_ps(x + i), _mm_setzero_ps()));
    bad = _mm_movemask_ps(_mm_cmpunord_ps(acc, acc)) != 0;
#endif
    for (; i < n; i++) bad |= !(x[i] - x[i] == 0.0f);
    return !bad;
}

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
    const int64_t C = g->C, nb = g->KP / 16;
    if (!cs->direct) {
        im2col(g, x, B);
        for (int64_t c = 0; c < nb; c++) coff[c] = (int32_t)(16 * c);
        return;
    }
    memset(B, 0, sizeof(float) * (size_t)((g->H + 2 * g->padH) * cs->Wx * C));
    for (int64_t iy = 0; iy < g->H; iy++)
        memcpy(B + ((iy + g->padH) * cs->Wx + g->padW) * C, x + iy * g->W * C,
               sizeof(float) * (size_t)(g->W * C));
    for (int64_t c = 0; c < nb; c++) {              /* 16 channels of one tap */
        const int64_t tap = 16 * c / C;
        coff[c] = (int32_t)(((tap / g->kw) * cs->Wx + tap % g->kw) * C + 16 * c % C);
    }
}

/* Slot o*16 + l (cap terms from terms + (o*16 + l)*cap) gets channel o's nonzero dC[p][o],
 * p ≡ l (mod 16), in ascending p: rows p in order, each value written every time and the
 * length advanced only for a nonzero (no branch to mispredict), 8 channels a pass so the
 * 128 slots being appended to stay in L1. */
static void list_terms(const geom_t *g, const colsrc_t *cs, const float *dC, int64_t cap,
                       crnn_term *terms, int32_t *start, int32_t *len, int32_t *roff)
{
    const int64_t P = g->P, Out = g->Out;
    for (int64_t p = 0; p < P; p++) roff[p] = (int32_t)col_roff(g, cs, p);
    for (int64_t sl = 0; sl < 16 * Out; sl++) {
        start[sl] = (int32_t)(sl * cap);
        len[sl] = 0;
    }
    for (int64_t o0 = 0; o0 < Out; o0 += 8) {
        const int64_t o1 = o0 + 8 < Out ? o0 + 8 : Out;
        for (int64_t p = 0; p < P; p++) {
            const float *row = dC + p * Out;
            int32_t *ln = len + p % 16;
            crnn_term *at = terms + (p % 16) * cap;
            const int32_t off = roff[p];
            for (int64_t o = o0; o < o1; o++) {
                const float v = row[o];
                const int32_t n = ln[16 * o];
                crnn_term *t = at + o * 16 * cap + n;
                t->v = v;
                t->off = off;
                ln[16 * o] = n + (v != 0.0f);
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
 * finite: ±0 * inf is NaN, so no term may be left out; too few chunks to gain; offsets
 * beyond int32), -1 without memory. */
#define LISTED_MIN_CHUNKS 4   /* listing costs a pass over dC; a chunk saves ~3/4 of P*Out fmas */
static int dW_listed(const geom_t *g, const float *x, const float *dC, float *dW, float *db)
{
    const int64_t C = g->C, Out = g->Out, P = g->P, KP = g->KP, nb = KP / 16;
    const colsrc_t cs0 = {NULL, g->W + 2 * g->padW, C % 16 == 0};
    const int64_t nB = cs0.direct ? (g->H + 2 * g->padH) * cs0.Wx * C : P * KP;
    /* a slot holds at most one term a window and one a position of its lane; +1: it is
     * written once past its last term */
    const int64_t perlane = (P + 15) / 16, windows = g->Hp * g->Wp;
    const int64_t cap = (perlane < windows ? perlane : windows) + 1, nslot = 16 * Out;
    if (nb < LISTED_MIN_CHUNKS || nB + 16 > INT32_MAX || cap * nslot > INT32_MAX ||
        !all_finite(x, g->H * g->W * C))
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
#if !defined(CRNN_MUTANT_SPARSE_DW_NO_REDO)   /* mutant: a -0 lane is kept (no redo) */
        if (negz[o]) dW_row_dense(g, &cs, coff, dC, o, dW + o * KP);
#else
        (void)dW_row_dense;
#endif
        db[o] = db_listed(g, dC, terms, start, len, o);
    }
    return 1;
}
#endif

int32_t crnn_conv_backward(const float *x, int32_t H, int32_t W, int32_t C,
                           const float *Wt, int32_t Out,
                           int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                           int32_t poolH, int32_t poolW,
                           const float *dPooled, const int32_t *winners,
                           float *dW, float *db, float *dx)
{
    geom_t g;
    if (!x || !Wt || !dPooled || !winners || !dW || !db) return CRNN_E_ARG;
    if (!make_geom(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW)) return CRNN_E_ARG;
    int64_t P = g.P, KP = g.KP;
    /* col and dcol share one buffer (col is dead once dW is done) */
    int64_t n = P * KP            /* col, then dcol */
              + P * Out           /* dC */
              + P;                /* ones */
    size_t nb = bytes_of(n);
    float *buf = nb ? crnn_scratch(CRNN_SCRATCH_LAYER, nb) : NULL;
    if (!buf) return CRNN_E_NOMEM;
    float *col = buf, *dC = col + P * KP, *ones = dC + P * Out;
    if (!scatter_winners(&g, dPooled, winners, dC)) return CRNN_E_ARG;
#if !defined(CRNN_MUTANT) || defined(CRNN_MUTANT_SPARSE_DW_NO_REDO)
    int listed = dW_listed(&g, x, dC, dW, db);
    if (listed < 0) return CRNN_E_NOMEM;
    if (!listed)
#endif
    {
        im2col(&g, x, col);
        crnn_gemm16_kn(Out, KP, P, dC, 1, Out, col, KP, 1, dW, KP);   /* dW[o][k] over p, P terms */
        for (int64_t p = 0; p < P; p++) ones[p] = 1.0f;
        crnn_gemm16_kn(1, Out, P, ones, 0, 1, dC, Out, 1, db, Out);   /* db[o] over p, P terms    */
    }
    if (dx) {
        float *dcol = col;
#if !defined(CRNN_MUTANT)
        /* dcol[p][k] over o with the ±0 dC terms left out (a position wins few channels, and
         * most windows are dead). A dcol value can then differ from the full dot only in the
         * sign of a zero (core.h), and no such sign reaches dx: the gather starts from +0, and
         * a sum that starts from +0 is never -0, so its bits do not depend on the signs of the
         * zeros it adds. No row needs redoing. Only the K columns the gather reads. */
        if (g.K % 16 == 0 && Out <= CRNN_SPARSE_MAXK && all_finite(Wt, Out * KP))
            crnn_gemm16_sparse_rows(P, g.K, Out, dC, Out, Wt, KP, dcol, KP, (int32_t *)ones);
        else
#endif
        crnn_gemm16_kn(P, KP, Out, dC, Out, 1, Wt, KP, 1, dcol, KP);  /* dcol[p][k] over o */
        gather_job j = {&g, dcol, dx};
        crnn_parallel_for_work(g.H, g.P * g.KP, gather_rows, &j);
    }
    return CRNN_OK;
}
