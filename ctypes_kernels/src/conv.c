/* conv.c — conv block (stride 1, channels-last) + fused ReLU/max pool, forward and backward
 * (docs/numerics.md and docs/backward.md, "Convolution block").
 *
 * Every dot goes through the gemm16 kernels (core.h) and has exactly the terms the docs
 * name, in their order: the forward is im2col then conv[p][o] = dot16(col[p], W[o]) over
 * KPadded (kn, W's rows gathered into the kernel's packed panels; a one-channel block reads
 * its window terms through taps into a zero-padded copy of x instead of an im2col, and so
 * does a block of 16, 32, ... channels whose windows are mostly +0, a tap's 16 channels at a
 * time); the backward
 * reads dC and col as they lie: dW[o][k] and db[o] are dots over p (kn with dC read down its
 * columns), dcol[p][k] = dot16 over o of dC[p][o] and W[o][k] (kn with W as stored). The pool
 * and the dx gather are element-wise; they are split across threads over independent
 * outputs only (rows of the pooled output, rows of dx), so no bit depends on the thread
 * count.
 *
 * This file holds the entry points and the forward's bands; the im2col is conv_im2col.c, the
 * bias and pool (and the pool's backward scatter) conv_pool.c, dW and db from the listed
 * terms conv_dw.c, the dx gather conv_dx.c. */
#include "conv.h"

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

/* The forward by bands of poolH conv rows (the rows of one row of pool windows; the last
 * band may hold the dropped rows): im2col of the band, its dots against the packed Wᵀ, the
 * bias, and the band's pool windows — the same operations per output as im2col of the
 * whole image and its dots, done while the band is in cache. With conv NULL (the batch
 * gradient, which reads only the pool's outputs) a band's conv values live in the thread's
 * band buffer and are not kept. */
typedef struct {
    const geom_t *g;
    const float *x, *Bp, *b;
    float *conv, *pooled;
    int32_t *winners;
    int64_t Kd;           /* the terms each dot runs over: KP, or K (dot_terms) */
    int sparse;           /* the window's ±0 terms left out (core.h) */
    const float *xpad;    /* x with its padding: the windows' source (taps or coff), no im2col */
    int64_t tap[16];      /* one channel, Kd = K <= 16: where window term k is, from a conv
                           * row's first cell in xpad */
    const int64_t *coff;  /* C % 16 == 0, sparse: where chunk m (a tap's 16 channels) is */
    int32_t rc;
} band_job;

static void conv_bands(void *ctx, int64_t b0, int64_t b1)
{
    band_job *j = ctx;
    const geom_t *g = j->g;
    const int64_t rows = g->poolH, Out = g->Out;
    const int64_t ncol = j->xpad ? 0 : rows * g->Wc * g->KP, nconv = j->conv ? 0 : rows * g->Wc * Out;
    const size_t nb = bytes_of(ncol + nconv + 16);
    float *col = ncol + nconv ? (nb ? crnn_scratch(CRNN_SCRATCH_BAND, nb) : NULL) : NULL;
    if (!col && ncol + nconv) {
        __atomic_store_n(&j->rc, CRNN_E_NOMEM, __ATOMIC_RELAXED);
        return;
    }
    float *const bandConv = nconv ? col + (ncol + 15) / 16 * 16 : NULL;
    fwd_job fj = {g, j->b, NULL, j->pooled, j->winners, 0};
    for (int64_t band = b0; band < b1; band++) {
        const int64_t y0 = band * rows, y1 = y0 + rows < g->Hc ? y0 + rows : g->Hc;
        float *const conv = j->conv ? j->conv + y0 * g->Wc * Out : bandConv;   /* row y0 */
        fj.conv = conv;
        fj.p0 = y0 * g->Wc;
        if (j->coff) {    /* the windows straight from the padded image, a conv row a call */
            for (int64_t y = y0; y < y1; y++)
                if (crnn_gemm16_kn_packed_sparse_win(g->Wc, Out, j->Kd, j->xpad + y * (g->W + 2 * g->padW) * g->C,
                                                     g->C, j->coff, j->Bp, conv + (y - y0) * g->Wc * Out, Out)) {
                    __atomic_store_n(&j->rc, CRNN_E_NOMEM, __ATOMIC_RELAXED);
                    return;
                }
        } else if (j->xpad) {
            for (int64_t y = y0; y < y1; y++)
                crnn_gemm16_kn_packed_taps(g->Wc, Out, j->Kd, j->xpad + y * (g->W + 2 * g->padW), 1,
                                           j->tap, j->Bp, conv + (y - y0) * g->Wc * Out, Out);
        } else {
            im2col_job ij = {g, j->x, col, y0};
            crnn_conv_im2col_rows(&ij, y0, y1);
            (j->sparse ? crnn_gemm16_kn_packed_sparse : crnn_gemm16_kn_packed)(
                (y1 - y0) * g->Wc, Out, j->Kd, col, g->KP, 1, j->Bp, conv, Out);
        }
        crnn_conv_bias_rows(&fj, y0 * g->Wc, y1 * g->Wc);
        if (band < g->Hp) crnn_conv_pool_rows(&fj, band, band + 1);
    }
}

/* The terms of the forward's dots. W's padding columns k >= K meet window values that are
 * +0. When the row is one chunk (KP = 16) those terms are alone in their lanes, and with every
 * padding W finite each is fma(+0, w, +0) = +0: the lane a dot over the K real terms leaves
 * untouched at +0. So the dots run over K terms, the same bits (with more chunks a padding
 * term would follow real ones in its lane, where +0 could turn a -0 partial into +0). */
static int64_t dot_terms(const geom_t *g, const float *Wt)
{
    if (g->KP != 16 || g->K == g->KP) return g->KP;
    for (int64_t o = 0; o < g->Out; o++)
        if (!crnn_all_finite(Wt + o * g->KP + g->K, g->KP - g->K)) return g->KP;
    return g->K;
}

static int32_t conv_forward(const float *x, int32_t H, int32_t W, int32_t C,
                            const float *Wt, const float *b, int32_t Out,
                            int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                            int32_t poolH, int32_t poolW,
                            float *conv, float *pooled, int32_t *winners)
{
    geom_t g;
    if (!x || !Wt || !b || !pooled || !winners) return CRNN_E_ARG;
    if (!make_geom(&g, H, W, C, Out, kh, kw, padH, padW, poolH, poolW)) return CRNN_E_ARG;
    /* bands of poolH conv rows: im2col, dots, bias and pool while the band is in cache */
    const int64_t Kd = dot_terms(&g, Wt);
    /* one channel with one chunk of terms: the windows read through taps from x with its
     * padding (the same values im2col would write), not copied out a row per position */
    const int taps = C == 1 && Kd == g.K && Kd <= 16;
    /* after a ReLU and pool most window values are +0: their terms are left out where every
     * W is finite (±0 * inf is NaN, not a zero term); with C % 16 == 0 each chunk of 16 terms
     * is one tap's channels, read from x with its padding */
    const int sparse = !taps && crnn_mostly_zero(x, (int64_t)H * W * C) && crnn_all_finite(Wt, g.Out * g.KP);
    const int win = sparse && C % 16 == 0;
    const int64_t Wx = g.W + 2 * g.padW, npad = taps || win ? (g.H + 2 * g.padH) * Wx * C : 0;
    const int64_t nchunk = win ? g.KP / 16 : 0, nBp = 16 * g.KP * ((g.Out + 15) / 16);
    size_t nb = bytes_of(nBp + npad + 2 * nchunk + 16);
    float *Bp = nb ? crnn_scratch(CRNN_SCRATCH_LAYER, nb) : NULL;
    if (!Bp) return CRNN_E_NOMEM;
    float *xpad = npad ? Bp + nBp : NULL;
    if (xpad) crnn_conv_pad(&g, x, xpad);
    int64_t *coff = win ? (int64_t *)(void *)(((uintptr_t)(Bp + nBp + npad) + 7) & ~(uintptr_t)7) : NULL;
    for (int64_t m = 0; m < nchunk; m++) coff[m] = crnn_conv_chunk_offset(&g, m);
    crnn_kn_pack(Kd, g.Out, Wt, 1, g.KP, Bp);       /* B(k, o) = Wt[o][k], packed once */
    band_job bj = {&g, x, Bp, b, conv, pooled, winners, Kd, sparse, xpad, {0}, coff, CRNN_OK};
    for (int64_t k = 0; taps && k < Kd; k++) bj.tap[k] = (k / g.kw) * Wx + k % g.kw;
    crnn_parallel_for_work((g.Hc + g.poolH - 1) / g.poolH, g.P * g.Out * g.KP, conv_bands, &bj);
    return bj.rc;
}

int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C,
                          const float *Wt, const float *b, int32_t Out,
                          int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                          int32_t poolH, int32_t poolW,
                          float *conv, float *pooled, int32_t *winners)
{
    if (!conv) return CRNN_E_ARG;
    return conv_forward(x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW, conv, pooled,
                        winners);
}

int32_t crnn_conv_forward_pooled(const float *x, int32_t H, int32_t W, int32_t C,
                                 const float *Wt, const float *b, int32_t Out,
                                 int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                                 int32_t poolH, int32_t poolW, float *pooled, int32_t *winners)
{
    return conv_forward(x, H, W, C, Wt, b, Out, kh, kw, padH, padW, poolH, poolW, NULL, pooled,
                        winners);
}

/* ---- backward --------------------------------------------------------------------- */

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
    if (!crnn_conv_scatter_winners(&g, dPooled, winners, dC)) return CRNN_E_ARG;
    /* dW and db from dC's nonzero terms; with one chunk of 16 columns (the first block) on a
     * path whose register holds a whole row of 16, the dense dots are faster while col and
     * dC stay within 2 MiB (a core's L2 here: beyond it they stream from further out, and the
     * lists win from a width of 768 on; docs/performance.md) */
    const int dense = g.KP == 16 && crnn_vector_floats() >= 16 &&
                      P * (KP + Out) * (int64_t)sizeof(float) <= ((int64_t)2 << 20);
    int listed = dense ? 0 : crnn_conv_dW_listed(&g, x, dC, dW, db);
    if (listed < 0) return CRNN_E_NOMEM;
    if (!listed) {
        crnn_conv_im2col(&g, x, col);
        crnn_gemm16_kn(Out, KP, P, dC, 1, Out, col, KP, 1, dW, KP);   /* dW[o][k] over p, P terms */
        for (int64_t p = 0; p < P; p++) ones[p] = 1.0f;
        crnn_gemm16_kn(1, Out, P, ones, 0, 1, dC, Out, 1, db, Out);   /* db[o] over p, P terms    */
    }
    if (dx) {
        float *dcol = col;
        /* dcol[p][k] over o with the ±0 dC terms left out (a position wins few channels, and
         * most windows are dead). A dcol value can then differ from the full dot only in the
         * sign of a zero (core.h), and no such sign reaches dx: the gather starts from +0, and
         * a sum that starts from +0 is never -0, so its bits do not depend on the signs of the
         * zeros it adds. No row needs redoing. Only the K columns the gather reads. */
        if (g.K % 16 == 0 && crnn_all_finite(Wt, Out * KP))
            crnn_gemm16_sparse_rows(P, g.K, Out, dC, Out, Wt, KP, dcol, KP, (int32_t *)ones);
        else   /* dcol[p][k] over o, every term */
            crnn_gemm16_kn(P, KP, Out, dC, Out, 1, Wt, KP, 1, dcol, KP);
        gather_job j = {&g, dcol, dx};
        crnn_parallel_for_work(g.H, g.P * g.KP, crnn_conv_gather_rows, &j);
    }
    return CRNN_OK;
}
