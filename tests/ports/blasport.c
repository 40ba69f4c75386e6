/* blasport.c — a plain-C port of the conv block written the way a port on an fp32 BLAS is:
 * im2col, then a blocked sgemm whose summation order for output position p depends on p's
 * place in a register block (as OpenBLAS's Haswell and Zen kernels do), then ReLU + max pool.
 * Every order is legal (docs/tolerances.md, "What 'legal' covers"), so two cells whose input
 * windows are identical ("twins") may differ by a few ulps here where the spec has them equal.
 * Exports the core and crnn_conv_forward / crnn_conv_backward only: gate it with
 * `--layers conv`. One thread and the scalar path whatever it is asked (so every ISA x
 * thread count gives the same bits).
 *
 *   -DBP_TIES_LAST   the pool's tie rule is >= (of equal maxima of its own values the last
 *                    wins): a broken port, which the float64 tier's winners must fail
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "crnn_port.h"

static int g_threads = 1;

int32_t crnn_abi_version(void) { return CRNN_ABI_VERSION; }
uint32_t crnn_isa_available(void) { return 1u << CRNN_ISA_SCALAR; }
int32_t crnn_set_isa(int32_t isa) { return isa == CRNN_ISA_SCALAR ? CRNN_OK : CRNN_E_ISA; }
int32_t crnn_get_isa(void) { return CRNN_ISA_SCALAR; }
int32_t crnn_set_threads(int32_t n)
{
    if (n < 1 || n > 256) return CRNN_E_ARG;
    g_threads = n;
    return CRNN_OK;
}
int32_t crnn_get_threads(void) { return g_threads; }

/* ---- four legal orders of one dot a . b of n terms plus a bias ---------------------- */

static float dot_sequential(const float *a, const float *b, int64_t n, float bias)
{
    float s = 0.0f;
    for (int64_t k = 0; k < n; k++) s = s + a[k] * b[k];
    return s + bias;
}

static float dot_lanes_fma(const float *a, const float *b, int64_t n, int lanes, float bias)
{
    float p[16] = {0};
    for (int64_t k = 0; k < n; k++) p[k % lanes] = fmaf(a[k], b[k], p[k % lanes]);
    for (int s = lanes / 2; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++) p[i] = p[i] + p[i + s];
    return p[0] + bias;
}

static float dot_reversed_bias_first(const float *a, const float *b, int64_t n, float bias)
{
    float s = bias;
    for (int64_t k = n - 1; k >= 0; k--) s = fmaf(a[k], b[k], s);
    return s;
}

/* The order of output row p: its place in a register block of 4 rows. */
static float dot_block(int64_t p, const float *a, const float *b, int64_t n, float bias)
{
    switch (p % 4) {
    case 0: return dot_sequential(a, b, n, bias);
    case 1: return dot_lanes_fma(a, b, n, 8, bias);
    case 2: return dot_lanes_fma(a, b, n, 16, bias);
    default: return dot_reversed_bias_first(a, b, n, bias);
    }
}

/* A strided sum over n terms a[i*sa] * b[i*sb] in 8 lanes (the backward's gemms). */
static float dot_strided8(const float *a, int64_t sa, const float *b, int64_t sb, int64_t n)
{
    float p[8] = {0};
    for (int64_t i = 0; i < n; i++) p[i % 8] = p[i % 8] + a[i * sa] * b[i * sb];
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

/* ---- the block ------------------------------------------------------------------------ */

typedef struct { int64_t H, W, C, Out, kh, kw, padH, padW, poolH, poolW, Hc, Wc, P, Hp, Wp, KP; } geo_t;

static int geometry(geo_t *g, int32_t H, int32_t W, int32_t C, int32_t Out, int32_t kh,
                    int32_t kw, int32_t padH, int32_t padW, int32_t poolH, int32_t poolW)
{
    if (H < 1 || W < 1 || C < 1 || Out < 1 || kh < 1 || kw < 1 || padH < 0 || padW < 0 ||
        poolH < 1 || poolW < 1) return CRNN_E_ARG;
    *g = (geo_t){H, W, C, Out, kh, kw, padH, padW, poolH, poolW, 0, 0, 0, 0, 0, 0};
    g->Hc = H + 2 * padH - kh + 1;
    g->Wc = W + 2 * padW - kw + 1;
    if (g->Hc < 1 || g->Wc < 1) return CRNN_E_ARG;
    g->P = g->Hc * g->Wc;
    g->Hp = g->Hc / poolH;
    g->Wp = g->Wc / poolW;
    g->KP = (kh * kw * C + 15) / 16 * 16;
    return CRNN_OK;
}

static float *im2col(const geo_t *g, const float *x)
{
    float *col = calloc((size_t)(g->P * g->KP), sizeof(float));
    if (!col) return NULL;
    for (int64_t y = 0; y < g->Hc; y++)
        for (int64_t xx = 0; xx < g->Wc; xx++)
            for (int64_t ky = 0; ky < g->kh; ky++)
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t iy = y + ky - g->padH, ix = xx + kx - g->padW;
                    if (iy < 0 || iy >= g->H || ix < 0 || ix >= g->W) continue;
                    memcpy(col + (y * g->Wc + xx) * g->KP + (ky * g->kw + kx) * g->C,
                           x + (iy * g->W + ix) * g->C, (size_t)g->C * sizeof(float));
                }
    return col;
}

int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C, const float *Wt,
                          const float *b, int32_t Out, int32_t kh, int32_t kw, int32_t padH,
                          int32_t padW, int32_t poolH, int32_t poolW, float *conv, float *pooled,
                          int32_t *winners)
{
    geo_t g;
    if (!x || !Wt || !b || !conv || !pooled || !winners) return CRNN_E_ARG;
    if (geometry(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW)) return CRNN_E_ARG;
    float *col = im2col(&g, x);
    if (!col) return CRNN_E_NOMEM;
    for (int64_t p = 0; p < g.P; p++)
        for (int64_t o = 0; o < Out; o++)
            conv[p * Out + o] = dot_block(p, col + p * g.KP, Wt + o * g.KP, g.KP, b[o]);
    free(col);
    /* ReLU + pool on this port's own values: running max from +0, rows then columns */
    for (int64_t oy = 0; oy < g.Hp; oy++)
        for (int64_t ox = 0; ox < g.Wp; ox++)
            for (int64_t o = 0; o < Out; o++) {
                float m = 0.0f;
                int32_t w = -1;
                for (int64_t dy = 0; dy < poolH; dy++)
                    for (int64_t dx = 0; dx < poolW; dx++) {
                        int64_t cell = ((oy * poolH + dy) * g.Wc + ox * poolW + dx) * Out + o;
#ifdef BP_TIES_LAST
                        if (conv[cell] >= m) { m = conv[cell]; w = (int32_t)cell; }
#else
                        if (conv[cell] > m) { m = conv[cell]; w = (int32_t)cell; }
#endif
                    }
                pooled[(oy * g.Wp + ox) * Out + o] = w < 0 ? 0.0f : m;
                winners[(oy * g.Wp + ox) * Out + o] = w;
            }
    return CRNN_OK;
}

int32_t crnn_conv_backward(const float *x, int32_t H, int32_t W, int32_t C, const float *Wt,
                           int32_t Out, int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                           int32_t poolH, int32_t poolW, const float *dPooled,
                           const int32_t *winners, float *dW, float *db, float *dx)
{
    geo_t g;
    if (!x || !Wt || !dPooled || !winners || !dW || !db) return CRNN_E_ARG;
    if (geometry(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW)) return CRNN_E_ARG;
    float *dC = calloc((size_t)(g.P * Out), sizeof(float));
    float *col = im2col(&g, x);
    float *dcol = dx ? malloc((size_t)(g.P * g.KP) * sizeof(float)) : NULL;
    if (!dC || !col || (dx && !dcol)) { free(dC); free(col); free(dcol); return CRNN_E_NOMEM; }
    for (int64_t i = 0; i < g.Hp * g.Wp * Out; i++)
        if (winners[i] >= 0) dC[winners[i]] = dPooled[i];
    static const float one = 1.0f;
    for (int64_t o = 0; o < Out; o++) {
        db[o] = dot_strided8(dC + o, Out, &one, 0, g.P);
        for (int64_t k = 0; k < g.KP; k++)
            dW[o * g.KP + k] = dot_strided8(dC + o, Out, col + k, g.KP, g.P);
    }
    if (dx) {
        for (int64_t p = 0; p < g.P; p++)
            for (int64_t k = 0; k < g.KP; k++)
                dcol[p * g.KP + k] = dot_strided8(dC + p * Out, 1, Wt + k, g.KP, Out);
        /* the taps in reverse order: any order of the kh*kw additions is legal */
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++)
                for (int64_t c = 0; c < C; c++) {
                    float s = 0.0f;
                    for (int64_t t = kh * kw - 1; t >= 0; t--) {
                        int64_t ky = t / kw, kx = t % kw;
                        int64_t y = iy + padH - ky, xx = ix + padW - kx;
                        if (y < 0 || y >= g.Hc || xx < 0 || xx >= g.Wc) continue;
                        s = s + dcol[(y * g.Wc + xx) * g.KP + t * C + c];
                    }
                    dx[(iy * W + ix) * C + c] = s;
                }
    }
    free(dC);
    free(col);
    free(dcol);
    return CRNN_OK;
}
