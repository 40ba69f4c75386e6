/* lstm.c — the bidirectional LSTM layer, forward and backward (docs/numerics.md and
 * docs/backward.md, "LSTM layer"). Every sum is a dot16 through the gemm16 kernels; every
 * element-wise operation is one float32 rounding in the order written (no fma: the file is
 * compiled with -ffp-contract=off). sigmoid and tanh are the project's (activations.h).
 *
 * Threads: the two directions are independent, so they run in parallel (crnn_parallel_for
 * over d = 0, 1); the big products outside the recurrence go through crnn_gemm16 /
 * crnn_gemm16_kn, which split whole outputs. The per-step products inside a direction
 * (M = 1, latency-bound) call the selected ISA's kernel directly on the direction's thread.
 * Bits never depend on either. The backward reads every operand as stored (the kn layout:
 * dW and db are dots over t of dz's columns, dh and dx dots over the gate rows of W_hh and
 * W_ih), so nothing is transposed. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "activations.h"
#if defined(CRNN_MUTANT)   /* mutant builds only (docs/mutants.md) */
#include <math.h>
#include "mutants.h"
#endif
#if defined(CRNN_MUTANT_LSTM_GATES_IGFO)
#define ROW_F 2            /* mutant: the gate rows read as [i|g|f|o] */
#define ROW_G 1
#else
#define ROW_F 1            /* gate rows [i|f|g|o] */
#define ROW_G 2
#endif

/* the selected ISA's kernels (a mutant build's, if it changes the dots: core.h) */
static crnn_gemm16_fn gemm16_here(void) { return crnn_gemm16_kernel(); }

/* ---- forward ----------------------------------------------------------------------- */

typedef struct {
    int64_t T, H;
    const float *xw;      /* [T][8H]: xw[t][d*4H + g] = dot16(x[t], W_ih[d][g], I) */
    const float *W_hh, *b;
    float *out, *gates, *c, *tc, *hPrev;
    float *scratch;       /* per direction: z[4H], hw[4H] */
} fwd_ctx;

static void forward_dir(fwd_ctx *k, int d)
{
    const int64_t T = k->T, H = k->H, G = 4 * H;
    crnn_gemm16_fn gemm = gemm16_here();
    float *z = k->scratch + (size_t)d * 2 * G, *hw = z + G;
    const float *Whh = k->W_hh + (size_t)d * G * H, *b = k->b + (size_t)d * G;
    const float *h = NULL, *cp = NULL;    /* state of the step visited before (NULL: zeros) */
    for (int64_t s = 0; s < T; s++) {
        int64_t t = d == 0 ? s : T - 1 - s;
        float *hp = k->hPrev + ((size_t)d * T + t) * H;
        float *act = k->gates + ((size_t)d * T + t) * G;
        float *ct = k->c + ((size_t)d * T + t) * H, *tct = k->tc + ((size_t)d * T + t) * H;
        if (h) memcpy(hp, h, sizeof(float) * (size_t)H);
        else memset(hp, 0, sizeof(float) * (size_t)H);
        gemm(1, G, H, hp, H, Whh, H, hw, G);
        const float *xwt = k->xw + (size_t)t * 2 * G + (size_t)d * G;
#if defined(CRNN_MUTANT_LSTM_BIAS_GROUPING)
        for (int64_t g = 0; g < G; g++) z[g] = xwt[g] + (hw[g] + b[g]);   /* mutant */
#else
        for (int64_t g = 0; g < G; g++) z[g] = (xwt[g] + hw[g]) + b[g];
#endif
#if defined(CRNN_MUTANT_LSTM_GATES_IGFO)
        crnn_sigmoid_n(z, act, H);                       /* mutant: i, g, then f, o */
        crnn_tanh_n(z + H, act + H, H);
        crnn_sigmoid_n(z + 2 * H, act + 2 * H, 2 * H);
#else
        crnn_sigmoid_n(z, act, 2 * H);                   /* i, f */
        crnn_tanh_n(z + 2 * H, act + 2 * H, H);          /* g */
        crnn_sigmoid_n(z + 3 * H, act + 3 * H, H);       /* o */
#endif
        const float *i = act, *f = act + ROW_F * H, *g = act + ROW_G * H, *o = act + 3 * H;
        for (int64_t j = 0; j < H; j++) {
#if defined(CRNN_MUTANT_LSTM_CELL_FMA)
            ct[j] = fmaf(f[j], cp ? cp[j] : 0.0f, i[j] * g[j]);   /* mutant: contracted */
#else
            float fc = f[j] * (cp ? cp[j] : 0.0f);
            ct[j] = fc + i[j] * g[j];
#endif
        }
        crnn_tanh_n(ct, tct, H);
        float *ht = k->out + (size_t)t * 2 * H + (size_t)d * H;
        for (int64_t j = 0; j < H; j++) ht[j] = o[j] * tct[j];
        h = ht;
        cp = ct;
    }
}

static void forward_range(void *ctx, int64_t begin, int64_t end)
{
    for (int64_t d = begin; d < end; d++) forward_dir(ctx, (int)d);
}

int32_t crnn_lstm_forward(const float *x, int32_t T, int32_t I, int32_t H,
                          const float *W_ih, const float *W_hh, const float *b,
                          float *out, float *gates, float *c, float *tc, float *hPrev)
{
    if (T < 0 || I < 0 || H < 1 || !W_ih || !W_hh || !b) return CRNN_E_ARG;
    if (T > 0 && (!x || !out || !gates || !c || !tc || !hPrev)) return CRNN_E_ARG;
    const size_t G = 4 * (size_t)H;
    float *buf = crnn_scratch(CRNN_SCRATCH_LAYER, sizeof(float) * ((size_t)T * 2 * G + 4 * G));
    if (!buf) return CRNN_E_NOMEM;
    fwd_ctx k = {T, H, buf, W_hh, b, out, gates, c, tc, hPrev, buf + (size_t)T * 2 * G};
    crnn_gemm16_kn(T, 2 * (int64_t)G, I, x, I, 1, W_ih, 1, I, buf, 2 * (int64_t)G);
    crnn_parallel_for(2, forward_range, &k);
    return CRNN_OK;
}

/* ---- backward ---------------------------------------------------------------------- */

typedef struct {
    int64_t T, H;
    const float *gates, *c, *tc, *dOut;
    const float *W_hh;    /* [2][4H][H] */
    float *dz;            /* [T][8H]: dz[t][d*4H + g] */
    float *scratch;       /* per direction: dhRec[H], dcNext[H] */
} bwd_ctx;

static void backward_dir(bwd_ctx *k, int d)
{
    const int64_t T = k->T, H = k->H, G = 4 * H;
    crnn_gemm16kn_fn gemm = crnn_gemm16kn_kernel();
    float *dhRec = k->scratch + (size_t)d * 2 * H, *dcNext = dhRec + H;
    const float *Whh = k->W_hh + (size_t)d * G * H;
    memset(dhRec, 0, sizeof(float) * 2 * (size_t)H);   /* +0, both */
    for (int64_t s = 0; s < T; s++) {                   /* the forward's order, reversed */
        int64_t t = d == 0 ? T - 1 - s : s;
        int64_t prev = d == 0 ? t - 1 : t + 1;          /* visited before t in the forward */
        const float *cPrev = prev >= 0 && prev < T ? k->c + ((size_t)d * T + prev) * H : NULL;
        const float *act = k->gates + ((size_t)d * T + t) * G;
        const float *i = act, *f = act + ROW_F * H, *g = act + ROW_G * H, *o = act + 3 * H;
        const float *tct = k->tc + ((size_t)d * T + t) * H;
        const float *dO = k->dOut + (size_t)t * 2 * H + (size_t)d * H;
        float *dz = k->dz + (size_t)t * 2 * G + (size_t)d * G;
        for (int64_t j = 0; j < H; j++) {
            float dh = dO[j] + dhRec[j];
            float dtc = dh * o[j];
            float d_o = dh * tct[j];
            float dc = dcNext[j] + dtc * (1.0f - tct[j] * tct[j]);
            float di = dc * g[j];
            float dg = dc * i[j];
            float df = dc * (cPrev ? cPrev[j] : 0.0f);
#if defined(CRNN_MUTANT_LSTM_NO_DC_CARRY)
            dcNext[j] = 0.0f;                            /* mutant: the carry dc*f dropped */
#else
            dcNext[j] = dc * f[j];
#endif
            dz[j] = di * (i[j] * (1.0f - i[j]));
            dz[ROW_F * H + j] = df * (f[j] * (1.0f - f[j]));
            dz[ROW_G * H + j] = dg * (1.0f - g[j] * g[j]);
            dz[3 * H + j] = d_o * (o[j] * (1.0f - o[j]));
        }
        gemm(1, H, G, dz, 0, 1, Whh, H, 1, dhRec, H);      /* dhRec[j] = dot over 4H of dz, W_hh[.][j] */
    }
}

static void backward_range(void *ctx, int64_t begin, int64_t end)
{
    for (int64_t d = begin; d < end; d++) backward_dir(ctx, (int)d);
}

int32_t crnn_lstm_backward(const float *x, int32_t T, int32_t I, int32_t H,
                           const float *W_ih, const float *W_hh,
                           const float *gates, const float *c, const float *tc,
                           const float *hPrev, const float *dOut,
                           float *dW_ih, float *dW_hh, float *db, float *dx)
{
    if (T < 0 || I < 0 || H < 1 || !W_ih || !W_hh || !dW_ih || !dW_hh || !db) return CRNN_E_ARG;
    if (T > 0 && (!x || !gates || !c || !tc || !hPrev || !dOut)) return CRNN_E_ARG;
    const size_t nT = (size_t)T, G = 4 * (size_t)H, nH = (size_t)H;
    size_t n = nT * 2 * G      /* dz */
             + nT              /* ones */
             + 4 * nH + 1;     /* scratch */
    float *buf = crnn_scratch(CRNN_SCRATCH_LAYER, sizeof(float) * n);
    if (!buf) return CRNN_E_NOMEM;
    float *dz = buf, *ones = dz + nT * 2 * G, *scratch = ones + nT;
    bwd_ctx k = {T, H, gates, c, tc, dOut, W_hh, dz, scratch};
    crnn_parallel_for(2, backward_range, &k);

    /* dots over t, t ascending: columns of dz against rows of x, hPrev, ones */
    const int64_t G8 = 2 * (int64_t)G;
    for (size_t t = 0; t < nT; t++) ones[t] = 1.0f;
    crnn_gemm16_kn(G8, I, T, dz, 1, G8, x, I, 1, dW_ih, I);
    for (int d = 0; d < 2; d++)
        crnn_gemm16_kn((int64_t)G, H, T, dz + d * G, 1, G8, hPrev + d * nT * nH, H, 1,
                       dW_hh + d * G * nH, H);
    crnn_gemm16_kn(1, G8, T, ones, 0, 1, dz, G8, 1, db, G8);
    /* dx[t][i]: the dot over the 8H gates [dz_fwd | dz_rev] against W_ih[.][i] */
    if (dx) crnn_gemm16_kn(T, I, G8, dz, G8, 1, W_ih, I, 1, dx, I);
    return CRNN_OK;
}
