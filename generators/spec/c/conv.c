/* conv.c: the conv block, stride 1, channels-last, + fused ReLU and max pool, forward and
 * backward (spec/conv.py; docs/numerics.md and docs/backward.md, "Convolution block"). */
#include <stdlib.h>

#include "spec.h"

typedef struct {
    int64_t H, W, C, Out, kh, kw, padH, padW, poolH, poolW;
    int64_t Hc, Wc, P, Hp, Wp, K, KP;
} Geo;

static int geometry(Geo *g, int32_t H, int32_t W, int32_t C, int32_t Out, int32_t kh,
                    int32_t kw, int32_t padH, int32_t padW, int32_t poolH, int32_t poolW)
{
    if (H < 1 || W < 1 || C < 1 || Out < 1 || kh < 1 || kw < 1 || padH < 0 || padW < 0 ||
        poolH < 1 || poolW < 1)
        return 0;
    *g = (Geo){.H = H, .W = W, .C = C, .Out = Out, .kh = kh, .kw = kw, .padH = padH,
               .padW = padW, .poolH = poolH, .poolW = poolW};
    g->Hc = g->H + 2 * g->padH - g->kh + 1;
    g->Wc = g->W + 2 * g->padW - g->kw + 1;
    g->P = g->Hc * g->Wc;
    g->Hp = g->Hc >= 1 ? g->Hc / g->poolH : 0;
    g->Wp = g->Wc >= 1 ? g->Wc / g->poolW : 0;
    g->K = g->kh * g->kw * g->C;
    g->KP = (g->K + 15) / 16 * 16;
    return g->Hc >= 1 && g->Wc >= 1 && g->Hp >= 1 && g->Wp >= 1;
}

/* col[k] of position p = (y, x): x[y + ky - padH][x + kx - padW][c] with
 * k = (ky*kw + kx)*C + c, +0 outside the image and in the padding columns */
static void im2col_row(const Geo *g, const float *x, int64_t p, float *col)
{
    int64_t y = p / g->Wc, xx = p % g->Wc;
    for (int64_t k = 0; k < g->KP; k++)
        col[k] = 0.0f;
    for (int64_t ky = 0; ky < g->kh; ky++) {
        int64_t iy = y + ky - g->padH;
        for (int64_t kx = 0; kx < g->kw; kx++) {
            int64_t ix = xx + kx - g->padW;
            if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W)
                continue;
            for (int64_t c = 0; c < g->C; c++)
                col[(ky * g->kw + kx) * g->C + c] = x[(iy * g->W + ix) * g->C + c];
        }
    }
}

/* per window and channel: a running maximum from +0, rows outer, columns inner; a cell
 * replaces it only when strictly greater (first of equal maxima wins; -0, NaN never win) */
static void relu_maxpool(const Geo *g, const float *conv, float *pooled, int32_t *winners)
{
    for (int64_t oy = 0; oy < g->Hp; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++)
            for (int64_t o = 0; o < g->Out; o++) {
                float m = 0.0f;
                int32_t winner = -1;
                for (int64_t dy = 0; dy < g->poolH; dy++)
                    for (int64_t dx = 0; dx < g->poolW; dx++) {
                        int64_t p = (oy * g->poolH + dy) * g->Wc + (ox * g->poolW + dx);
                        float v = conv[p * g->Out + o];
                        if (v > m) {
                            m = v;
                            winner = (int32_t)(p * g->Out + o);
                        }
                    }
                pooled[(oy * g->Wp + ox) * g->Out + o] = m;
                winners[(oy * g->Wp + ox) * g->Out + o] = winner;
            }
}

/* conv[p][o] = dot16(col[p], Wt[o], KPadded) + b[o]: the padding zeros are terms */
int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C,
                          const float *Wt, const float *b, int32_t Out,
                          int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                          int32_t poolH, int32_t poolW,
                          float *conv, float *pooled, int32_t *winners)
{
    Geo g;
    if (!x || !Wt || !b || !conv || !pooled || !winners ||
        !geometry(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW))
        return CRNN_E_ARG;
    float *col = malloc(sizeof(float) * (size_t)g.KP);
    if (!col)
        return CRNN_E_NOMEM;
    for (int64_t p = 0; p < g.P; p++) {
        im2col_row(&g, x, p, col);
        for (int64_t o = 0; o < g.Out; o++)
            conv[p * g.Out + o] = spec_dot16(col, 1, Wt + o * g.KP, 1, g.KP) + b[o];
    }
    free(col);
    relu_maxpool(&g, conv, pooled, winners);
    return CRNN_OK;
}

/* dC: dPooled at each window's winner, +0 elsewhere (an assignment); 0 when a winner is
 * neither -1 nor a cell of its own window and channel */
static int pool_backward(const Geo *g, const float *dPooled, const int32_t *winners, float *dC)
{
    for (int64_t i = 0; i < g->P * g->Out; i++)
        dC[i] = 0.0f;
    for (int64_t oy = 0; oy < g->Hp; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++)
            for (int64_t o = 0; o < g->Out; o++) {
                int64_t w = winners[(oy * g->Wp + ox) * g->Out + o];
                if (w == -1)
                    continue;
                int64_t p = w / g->Out, y = p / g->Wc, xx = p % g->Wc;
                if (w < 0 || w % g->Out != o || y / g->poolH != oy || y >= g->Hp * g->poolH ||
                    xx / g->poolW != ox || xx >= g->Wp * g->poolW)
                    return 0;
                dC[w] = dPooled[(oy * g->Wp + ox) * g->Out + o];
            }
    return 1;
}

/* dx[iy][ix][c] = +0, then + dcol[p][(ky*kw + kx)*C + c] over ky, kx ascending for the taps
 * whose position p = (iy + padH - ky, ix + padW - kx) lies in the conv output */
static void col2im(const Geo *g, const float *dcol, float *dx)
{
    for (int64_t iy = 0; iy < g->H; iy++)
        for (int64_t ix = 0; ix < g->W; ix++)
            for (int64_t c = 0; c < g->C; c++) {
                float acc = 0.0f;
                for (int64_t ky = 0; ky < g->kh; ky++)
                    for (int64_t kx = 0; kx < g->kw; kx++) {
                        int64_t y = iy + g->padH - ky, xx = ix + g->padW - kx;
                        int64_t k = (ky * g->kw + kx) * g->C + c;
                        if (y >= 0 && y < g->Hc && xx >= 0 && xx < g->Wc)
                            acc = acc + dcol[(y * g->Wc + xx) * g->KP + k];
                    }
                dx[(iy * g->W + ix) * g->C + c] = acc;
            }
}

/* db[o] = dot16 over p of (dC[p][o], 1); dW[o][k] = dot16 over p of (dC[p][o], col[p][k]);
 * dcol[p][k] = dot16 over o of (dC[p][o], Wt[o][k]); dx the gather of dcol */
int32_t crnn_conv_backward(const float *x, int32_t H, int32_t W, int32_t C,
                           const float *Wt, int32_t Out,
                           int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                           int32_t poolH, int32_t poolW,
                           const float *dPooled, const int32_t *winners,
                           float *dW, float *db, float *dx)
{
    Geo g;
    if (!x || !Wt || !dPooled || !winners || !dW || !db ||
        !geometry(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW))
        return CRNN_E_ARG;
    size_t n = (size_t)(g.P * g.Out + g.P * g.KP + (dx ? g.P * g.KP : 0));
    float *dC = malloc(sizeof(float) * n);
    if (!dC)
        return CRNN_E_NOMEM;
    float *col = dC + g.P * g.Out, *dcol = col + g.P * g.KP;
    if (!pool_backward(&g, dPooled, winners, dC)) {
        free(dC);
        return CRNN_E_ARG;
    }
    for (int64_t p = 0; p < g.P; p++)
        im2col_row(&g, x, p, col + p * g.KP);
    for (int64_t o = 0; o < g.Out; o++) {
        db[o] = spec_dot16(dC + o, g.Out, &spec_one, 0, g.P);
        for (int64_t k = 0; k < g.KP; k++)
            dW[o * g.KP + k] = spec_dot16(dC + o, g.Out, col + k, g.KP, g.P);
    }
    if (dx) {
        for (int64_t p = 0; p < g.P; p++)
            for (int64_t k = 0; k < g.KP; k++)
                dcol[p * g.KP + k] = spec_dot16(dC + p * g.Out, 1, Wt + k, g.KP, g.Out);
        col2im(&g, dcol, dx);
    }
    free(dC);
    return CRNN_OK;
}
