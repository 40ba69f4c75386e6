/* conv_im2col.c — the conv block's im2col (docs/numerics.md, "Convolution block"): col[p][k]
 * = x[y+ky-padH][x+kx-padW][c] with k = (ky*kw + kx)*C + c, +0 outside the image and in the
 * padding columns K..KPadded, split across threads by conv rows. */
#include <string.h>
#include "conv.h"

/* dst[0..n) = src[0..n) in 16-byte moves (small runs: no call to memcpy) */
static inline void copy_floats(float *dst, const float *src, int64_t n)
{
    int64_t q = 0;
    for (; q + 4 <= n; q += 4) memcpy(dst + q, src + q, 4 * sizeof(float));
    for (; q < n; q++) dst[q] = src[q];
}

void crnn_conv_im2col_rows(void *ctx, int64_t y0, int64_t y1)
{
    const im2col_job *j = ctx;
    const geom_t *g = j->g;
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
    for (int64_t y = y0; y < y1; y++)
        for (int64_t xo = 0; xo < g->Wc; xo++) {
            float *row = j->col + ((y - j->y0) * g->Wc + xo) * g->KP;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = y + ky - g->padH;
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
            }
            for (int64_t k = g->K; k < g->KP; k++) row[k] = 0.0f;
        }
}

void crnn_conv_im2col(const geom_t *g, const float *x, float *col)
{
    im2col_job j = {g, x, col, 0};
    crnn_parallel_for_work(g->Hc, g->P * g->KP, crnn_conv_im2col_rows, &j);
}

void crnn_conv_pad(const geom_t *g, const float *x, float *xpad)
{
    const int64_t Wx = g->W + 2 * g->padW, C = g->C;
    memset(xpad, 0, sizeof(float) * (size_t)((g->H + 2 * g->padH) * Wx * C));
    for (int64_t iy = 0; iy < g->H; iy++)
        memcpy(xpad + ((iy + g->padH) * Wx + g->padW) * C, x + iy * g->W * C,
               sizeof(float) * (size_t)(g->W * C));
}
