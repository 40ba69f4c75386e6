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

/* One channel: a position's row is written whole before the next (its kh runs of kw taps,
 * then the +0 columns), so a conv row's block is written once, front to back, however wide.
 * A position whose runs do not fit the moves below: element by element. */
static void one_channel_edge(const geom_t *g, const float *x, int64_t y, int64_t xo, float *row)
{
    for (int64_t ky = 0, k = 0; ky < g->kh; ky++) {
        const int64_t iy = y + ky - g->padH;
        for (int64_t kx = 0; kx < g->kw; kx++, k++) {
            const int64_t ix = xo - g->padW + kx;
            row[k] = iy >= 0 && iy < g->H && ix >= 0 && ix < g->W ? x[iy * g->W + ix] : 0.0f;
        }
    }
    for (int64_t k = g->K; k < g->KP; k++) row[k] = 0.0f;
}

/* The rest: every tap's run of kw <= 4 is one 4-float move inside x's row (a row outside the
 * image reads 4 zeros), the extra floats of a move landing where the next run, or the +0
 * columns, are written after it; the +0 columns in 4-float moves, the last one ending at KP. */
static void im2col_one_channel(const geom_t *g, const float *x, int64_t y, float *rows)
{
    static const float zeros[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int64_t kh = g->kh, kw = g->kw, K = g->K, KP = g->KP;
    int64_t lo = g->Wc, hi = g->Wc;
    const float *src[8];
    int64_t step[8];
    if (kw <= 4 && kh <= 8 && K - kw + 4 <= KP && g->W >= 4) {
        lo = g->padW;                                /* x0 = xo - padW >= 0 */
        hi = g->W - 4 + g->padW + 1;                 /* x0 + 4 <= W         */
        if (hi > g->Wc) hi = g->Wc;
        if (lo > hi) lo = hi;
        for (int64_t ky = 0; ky < kh; ky++) {
            const int64_t iy = y + ky - g->padH;
            const int in = iy >= 0 && iy < g->H;
            src[ky] = in ? x + iy * g->W : zeros;
            step[ky] = in;
        }
    }
    for (int64_t xo = 0; xo < lo; xo++) one_channel_edge(g, x, y, xo, rows + xo * KP);
    for (int64_t xo = lo; xo < hi; xo++) {
        float *row = rows + xo * KP;
        for (int64_t ky = 0; ky < kh; ky++)
            memcpy(row + ky * kw, src[ky] + (xo - g->padW) * step[ky], 4 * sizeof(float));
        if (KP - K >= 4) {
            for (int64_t q = K; q < KP - 4; q += 4) memcpy(row + q, zeros, 4 * sizeof(float));
            memcpy(row + KP - 4, zeros, 4 * sizeof(float));
        } else {
            for (int64_t q = K; q < KP; q++) row[q] = 0.0f;
        }
    }
    for (int64_t xo = hi; xo < g->Wc; xo++) one_channel_edge(g, x, y, xo, rows + xo * KP);
}

void crnn_conv_im2col_rows(void *ctx, int64_t y0, int64_t y1)
{
    const im2col_job *j = ctx;
    const geom_t *g = j->g;
    if (g->C == 1) {
        for (int64_t y = y0; y < y1; y++) im2col_one_channel(g, j->x, y, j->col + (y - j->y0) * g->Wc * g->KP);
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
