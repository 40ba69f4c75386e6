/* conv.h — what the conv block's files share (conv.c holds the entry points): the geometry
 * of one call, the im2col, the pool, the dx gather and the listed dW. Not part of the ABI. */
#ifndef CRNN_CONV_H
#define CRNN_CONV_H

#include "core.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef struct {
    int64_t H, W, C, Out, kh, kw, padH, padW, poolH, poolW;
    int64_t Hc, Wc, P, Hp, Wp, K, KP;
} geom_t;

/* d[i] = d[i] + s[i], i < n: one rounding each, four at a time where SSE2 is the baseline
 * (any -O level vectorizes it the same way) */
static inline void crnn_conv_add_floats(float *d, const float *s, int64_t n)
{
    int64_t i = 0;
#if defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(d + i, _mm_add_ps(_mm_loadu_ps(d + i), _mm_loadu_ps(s + i)));
#endif
    for (; i < n; i++) d[i] = d[i] + s[i];
}

/* conv_im2col.c: col[p][k] = x[y+ky-padH][x+kx-padW][c], +0 outside and in the padding */
typedef struct {
    const geom_t *g;
    const float *x;
    float *col;           /* col row of position p = y*Wc + x: col + (p - y0*Wc)*KP */
    int64_t y0;
} im2col_job;
void crnn_conv_im2col_rows(void *ctx, int64_t y0, int64_t y1);   /* conv rows y0..y1 of j */
void crnn_conv_im2col(const geom_t *g, const float *x, float *col);  /* every row, threaded */
/* The windows without an im2col: xpad = x with padH rows and padW columns of +0 around it
 * ((H + 2 padH) x (W + 2 padW) x C); with C % 16 == 0, chunk m of a window row (16 channels
 * of tap 16m / C) starts crnn_conv_chunk_offset(g, m) floats from the window's first cell */
void crnn_conv_pad(const geom_t *g, const float *x, float *xpad);
static inline int64_t crnn_conv_chunk_offset(const geom_t *g, int64_t m)
{
    const int64_t tap = 16 * m / g->C;
    return ((tap / g->kw) * (g->W + 2 * g->padW) + tap % g->kw) * g->C + 16 * m % g->C;
}

/* conv_pool.c: the bias, the pool over rows of windows and its backward scatter */
typedef struct {
    const geom_t *g;
    const float *b;
    float *conv, *pooled;   /* conv[0] holds the outputs of conv position p0 */
    int32_t *winners;
    int64_t p0;
} fwd_job;

/* The bias over positions p0..p1 and the pool over rows of windows oy0..oy1, each on the
 * selected ISA's path (a dispatcher) and as each path's own (conv_pool.c the scalar one,
 * src/isa/conv_pool_<isa>.c the vector ones). */
#define CRNN_CONV_ON_EVERY_PATH(name)                                                        \
    void name(void *ctx, int64_t begin, int64_t end);                                        \
    void name##_scalar(void *ctx, int64_t begin, int64_t end);                               \
    void name##_sse(void *ctx, int64_t begin, int64_t end);                                  \
    void name##_avx2(void *ctx, int64_t begin, int64_t end);                                 \
    void name##_avx512(void *ctx, int64_t begin, int64_t end);                               \
    void name##_neon(void *ctx, int64_t begin, int64_t end);
CRNN_CONV_ON_EVERY_PATH(crnn_conv_bias_rows)
CRNN_CONV_ON_EVERY_PATH(crnn_conv_pool_rows)
/* The pool's backward: dC[p][o] = dPooled at each window's winner, +0 elsewhere; returns 0
 * when a winner is neither -1 nor a cell of its own window and channel (CRNN_E_ARG). On the
 * selected ISA's path, and as each path's own. */
#define CRNN_SCATTER_ON(name)                                                                \
    int name(const geom_t *g, const float *dPooled, const int32_t *winners, float *dC);
CRNN_SCATTER_ON(crnn_conv_scatter_winners)
CRNN_SCATTER_ON(crnn_conv_scatter_winners_scalar)
CRNN_SCATTER_ON(crnn_conv_scatter_winners_sse)
CRNN_SCATTER_ON(crnn_conv_scatter_winners_avx2)
CRNN_SCATTER_ON(crnn_conv_scatter_winners_avx512)
CRNN_SCATTER_ON(crnn_conv_scatter_winners_neon)
/* dC's rows and columns that no window holds: +0 (the vector scatters write the rest) */
void crnn_conv_zero_dropped(const geom_t *g, float *dC);

/* conv_dx.c: dx from dcol, the taps gathered per input cell */
typedef struct {
    const geom_t *g;
    const float *dcol;
    float *dx;
} gather_job;
void crnn_conv_gather_rows(void *ctx, int64_t iy0, int64_t iy1);

/* conv_dw.c: dW and db from the listed (nonzero) terms of dC */
int crnn_conv_dW_listed(const geom_t *g, const float *x, const float *dC, float *dW, float *db);

#endif
