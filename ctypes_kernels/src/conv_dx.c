/* conv_dx.c — the conv block's dx from dcol (docs/backward.md, "Convolution block"): each
 * input cell gathers the dcol taps that read it, split across threads by input rows. */
#include "conv.h"

#define GATHER_TAPS 64    /* taps listed at a time */
#define UNROLL _Pragma("GCC unroll 4")

/* d[c] = (first ? +0 : d[c]) + src[0][c] + ... + src[n-1][c], c < C, in that order; with
 * CELLS = 2 also the next cell, d[C + c] from src[t] + step (a cell's sum is a chain of
 * dependent adds; two cells' chains side by side keep the adder busy). A group of channels
 * in registers, stored once. */
static inline __attribute__((always_inline)) void sum_taps(const int CELLS, float *d,
                                                           const float *const *src, int64_t n,
                                                           int64_t C, const int first, int64_t step)
{
    int64_t c = 0;
#if defined(__SSE2__)
    for (; c + 16 <= C; c += 16) {
        __m128 a[CELLS][4];
        UNROLL for (int k = 0; k < CELLS; k++)
            UNROLL for (int q = 0; q < 4; q++) a[k][q] = first ? _mm_setzero_ps() : _mm_loadu_ps(d + k * C + c + 4 * q);
        for (int64_t t = 0; t < n; t++)
            UNROLL for (int k = 0; k < CELLS; k++)
                UNROLL for (int q = 0; q < 4; q++)
                    a[k][q] = _mm_add_ps(a[k][q], _mm_loadu_ps(src[t] + k * step + c + 4 * q));
        UNROLL for (int k = 0; k < CELLS; k++)
            UNROLL for (int q = 0; q < 4; q++) _mm_storeu_ps(d + k * C + c + 4 * q, a[k][q]);
    }
    for (; c + 4 <= C; c += 4) {
        __m128 a[CELLS];
        UNROLL for (int k = 0; k < CELLS; k++) a[k] = first ? _mm_setzero_ps() : _mm_loadu_ps(d + k * C + c);
        for (int64_t t = 0; t < n; t++)
            UNROLL for (int k = 0; k < CELLS; k++) a[k] = _mm_add_ps(a[k], _mm_loadu_ps(src[t] + k * step + c));
        UNROLL for (int k = 0; k < CELLS; k++) _mm_storeu_ps(d + k * C + c, a[k]);
    }
#endif
    for (; c < C; c++)
        for (int k = 0; k < CELLS; k++) {
            float a = first ? 0.0f : d[k * C + c];
            for (int64_t t = 0; t < n; t++) a = a + src[t][k * step + c];
            d[k * C + c] = a;
        }
}

/* dx[iy][ix][c] = +0 + dcol[p][(ky*kw+kx)*C + c] + ... over ky, then kx, ascending, for the
 * taps whose p = (iy+padH-ky, ix+padW-kx) lies inside the conv output. A cell's taps are
 * listed, up to GATHER_TAPS at a time; then each group of channels adds them in that order in
 * registers and is stored once (a kernel with more taps goes on from what dx holds). */
void crnn_conv_gather_rows(void *ctx, int64_t iy0, int64_t iy1)
{
    const gather_job *j = ctx;
    const geom_t *g = j->g;
    const int64_t C = g->C, ntap = g->kh * g->kw;
    const float *src[GATHER_TAPS];
    /* the cells whose taps all lie inside the conv output's columns: cell ix + 1 reads each
     * tap one position further on (KP floats) than cell ix, so they go in pairs */
    int64_t xa = g->kw - 1 - g->padW, xb = g->Wc - g->padW;
    if (xa < 0) xa = 0;
    if (xb > g->W) xb = g->W;
    if (ntap > GATHER_TAPS || xb < xa) xa = xb = 0;
    for (int64_t iy = iy0; iy < iy1; iy++)
        for (int64_t ix = 0; ix < g->W; ix++) {
            float *d = j->dx + (iy * g->W + ix) * C;
            if (ix >= xa && ix + 1 < xb) {
                int64_t n = 0;
                for (int64_t ky = 0; ky < g->kh; ky++) {
                    const int64_t py = iy + g->padH - ky;
                    if (py < 0 || py >= g->Hc) continue;
                    for (int64_t kx = 0; kx < g->kw; kx++)
                        src[n++] = j->dcol + (py * g->Wc + ix + g->padW - kx) * g->KP + (ky * g->kw + kx) * C;
                }
                sum_taps(2, d, src, n, C, 1, g->KP);
                ix++;
                continue;
            }
            for (int64_t t0 = 0; t0 < ntap; t0 += GATHER_TAPS) {
                int64_t n = 0;
                for (int64_t ky = t0 / g->kw, kx = t0 % g->kw, t = t0; t < ntap && t < t0 + GATHER_TAPS; t++) {
                    const int64_t py = iy + g->padH - ky, px = ix + g->padW - kx;
                    if (py >= 0 && py < g->Hc && px >= 0 && px < g->Wc)
                        src[n++] = j->dcol + (py * g->Wc + px) * g->KP + t * C;
                    if (++kx == g->kw) kx = 0, ky++;     /* t = ky*kw + kx */
                }
                if (t0 == 0) sum_taps(1, d, src, n, C, 1, 0);
                else sum_taps(1, d, src, n, C, 0, 0);
            }
        }
}
