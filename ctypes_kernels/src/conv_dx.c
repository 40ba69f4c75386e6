/* conv_dx.c — the conv block's dx from dcol (docs/backward.md, "Convolution block"): each
 * input cell gathers the dcol taps that read it, split across threads by input rows. */
#include "conv.h"

#define GATHER_TAPS 64    /* taps listed at a time */

/* d[c] = (first ? +0 : d[c]) + src[0][c] + ... + src[n-1][c], c < C, in that order; a group of
 * channels in registers, stored once */
static inline __attribute__((always_inline)) void sum_taps(float *d, const float *const *src,
                                                           int64_t n, int64_t C, const int first)
{
    int64_t c = 0;
#if defined(__SSE2__)
    for (; c + 16 <= C; c += 16) {
        __m128 a0 = first ? _mm_setzero_ps() : _mm_loadu_ps(d + c);
        __m128 a1 = first ? _mm_setzero_ps() : _mm_loadu_ps(d + c + 4);
        __m128 a2 = first ? _mm_setzero_ps() : _mm_loadu_ps(d + c + 8);
        __m128 a3 = first ? _mm_setzero_ps() : _mm_loadu_ps(d + c + 12);
        for (int64_t t = 0; t < n; t++) {
            const float *s = src[t] + c;
            a0 = _mm_add_ps(a0, _mm_loadu_ps(s));
            a1 = _mm_add_ps(a1, _mm_loadu_ps(s + 4));
            a2 = _mm_add_ps(a2, _mm_loadu_ps(s + 8));
            a3 = _mm_add_ps(a3, _mm_loadu_ps(s + 12));
        }
        _mm_storeu_ps(d + c, a0);
        _mm_storeu_ps(d + c + 4, a1);
        _mm_storeu_ps(d + c + 8, a2);
        _mm_storeu_ps(d + c + 12, a3);
    }
    for (; c + 4 <= C; c += 4) {
        __m128 a = first ? _mm_setzero_ps() : _mm_loadu_ps(d + c);
        for (int64_t t = 0; t < n; t++) a = _mm_add_ps(a, _mm_loadu_ps(src[t] + c));
        _mm_storeu_ps(d + c, a);
    }
#endif
    for (; c < C; c++) {
        float a = first ? 0.0f : d[c];
        for (int64_t t = 0; t < n; t++) a = a + src[t][c];
        d[c] = a;
    }
}

/* Two cells at once, each from +0: d (taps src[t]) and d + C (taps src[t] + step). A cell's
 * sum is a chain of dependent adds; two cells' chains side by side keep the adder busy. */
static void sum_taps2(float *d, const float *const *src, int64_t n, int64_t C, int64_t step)
{
    int64_t c = 0;
#if defined(__SSE2__)
    for (; c + 16 <= C; c += 16) {
        __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int64_t t = 0; t < n; t++) {
            const float *s = src[t] + c, *u = s + step;
            a0 = _mm_add_ps(a0, _mm_loadu_ps(s));
            a1 = _mm_add_ps(a1, _mm_loadu_ps(s + 4));
            a2 = _mm_add_ps(a2, _mm_loadu_ps(s + 8));
            a3 = _mm_add_ps(a3, _mm_loadu_ps(s + 12));
            b0 = _mm_add_ps(b0, _mm_loadu_ps(u));
            b1 = _mm_add_ps(b1, _mm_loadu_ps(u + 4));
            b2 = _mm_add_ps(b2, _mm_loadu_ps(u + 8));
            b3 = _mm_add_ps(b3, _mm_loadu_ps(u + 12));
        }
        _mm_storeu_ps(d + c, a0);
        _mm_storeu_ps(d + c + 4, a1);
        _mm_storeu_ps(d + c + 8, a2);
        _mm_storeu_ps(d + c + 12, a3);
        _mm_storeu_ps(d + C + c, b0);
        _mm_storeu_ps(d + C + c + 4, b1);
        _mm_storeu_ps(d + C + c + 8, b2);
        _mm_storeu_ps(d + C + c + 12, b3);
    }
    for (; c + 4 <= C; c += 4) {
        __m128 a = _mm_setzero_ps(), b = a;
        for (int64_t t = 0; t < n; t++) {
            a = _mm_add_ps(a, _mm_loadu_ps(src[t] + c));
            b = _mm_add_ps(b, _mm_loadu_ps(src[t] + step + c));
        }
        _mm_storeu_ps(d + c, a);
        _mm_storeu_ps(d + C + c, b);
    }
#endif
    for (; c < C; c++) {
        float a = 0.0f, b = 0.0f;
        for (int64_t t = 0; t < n; t++) {
            a = a + src[t][c];
            b = b + src[t][step + c];
        }
        d[c] = a;
        d[C + c] = b;
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
                sum_taps2(d, src, n, C, g->KP);
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
                if (t0 == 0) sum_taps(d, src, n, C, 1);
                else sum_taps(d, src, n, C, 0);
            }
        }
}
