/* conv_dx.c — the conv block's dx from dcol (docs/backward.md, "Convolution block"): each
 * input cell gathers the dcol taps that read it, split across threads by input rows. */
#include <stdlib.h>
#include "conv.h"

/* dx[iy][ix][c] = +0 + dcol[p][(ky*kw+kx)*C + c] + ... over ky, then kx, ascending, for the
 * taps whose p = (iy+padH-ky, ix+padW-kx) lies inside the conv output. A cell's taps are
 * listed first; then each group of channels adds them in that order in registers and is
 * stored once. */
void crnn_conv_gather_rows(void *ctx, int64_t iy0, int64_t iy1)
{
    const gather_job *j = ctx;
    const geom_t *g = j->g;
    const int64_t C = g->C, ntap = g->kh * g->kw;
    const float *stack_src[64];
    const float **src = ntap <= 64 ? stack_src : malloc(sizeof(float *) * (size_t)ntap);
    if (!src) {       /* no memory for the list: each tap added into dx in turn */
        for (int64_t iy = iy0; iy < iy1; iy++)
            for (int64_t ix = 0; ix < g->W; ix++) {
                float *d = j->dx + (iy * g->W + ix) * C;
                for (int64_t c = 0; c < C; c++) d[c] = 0.0f;
                for (int64_t ky = 0; ky < g->kh; ky++)
                    for (int64_t kx = 0; kx < g->kw; kx++) {
                        const int64_t py = iy + g->padH - ky, px = ix + g->padW - kx;
                        if (py >= 0 && py < g->Hc && px >= 0 && px < g->Wc)
                            crnn_conv_add_floats(d, j->dcol + (py * g->Wc + px) * g->KP + (ky * g->kw + kx) * C, C);
                    }
            }
        return;
    }
    for (int64_t iy = iy0; iy < iy1; iy++)
        for (int64_t ix = 0; ix < g->W; ix++) {
            int64_t n = 0;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                const int64_t py = iy + g->padH - ky;
                if (py < 0 || py >= g->Hc) continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    const int64_t px = ix + g->padW - kx;
                    if (px < 0 || px >= g->Wc) continue;
                    src[n++] = j->dcol + (py * g->Wc + px) * g->KP + (ky * g->kw + kx) * C;
                }
            }
            float *d = j->dx + (iy * g->W + ix) * C;
            int64_t c = 0;
#if defined(__SSE2__)
            for (; c + 16 <= C; c += 16) {
                __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
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
                __m128 a = _mm_setzero_ps();
                for (int64_t t = 0; t < n; t++) a = _mm_add_ps(a, _mm_loadu_ps(src[t] + c));
                _mm_storeu_ps(d + c, a);
            }
#endif
            for (; c < C; c++) {
                float a = 0.0f;
                for (int64_t t = 0; t < n; t++) a = a + src[t][c];
                d[c] = a;
            }
        }
    if (src != stack_src) free(src);
}
