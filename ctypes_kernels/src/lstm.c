/* lstm.c — the bidirectional LSTM layer, forward and backward (docs/numerics.md and
 * docs/backward.md, "LSTM layer"). Every sum is a dot16 through the gemm16 kernels; every
 * element-wise operation is one float32 rounding in the order written (no fma: the file is
 * compiled with -ffp-contract=off). sigmoid and tanh are the project's (activations.h).
 *
 * Threads: the two directions are independent, so they run in parallel (crnn_parallel_for_work
 * over d = 0, 1; on this thread when the recurrence's products are small); the big products outside the recurrence go through crnn_gemm16 /
 * crnn_gemm16_kn, which split whole outputs. The per-step products inside a direction
 * (M = lines, latency-bound) call the selected ISA's kernel directly on the direction's
 * thread. Bits never depend on either. The backward reads every operand as stored (the kn
 * layout: dW and db are dots over t of dz's columns, dh and dx dots over the gate rows of
 * W_hh and W_ih), so nothing is transposed.
 *
 * The *_lines entry points (core.h) run several lines of the same length through the layer
 * at once, sharing the reads of the weights; the ABI entry points are the one-line case of
 * the same code. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "activations.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#define LSTM_SSE 1         /* the element-wise cell math four at a time, the same operations */
#else
#define LSTM_SSE 0
#endif
#define ROW_F 1            /* gate rows [i|f|g|o] */
#define ROW_G 2

/* ---- forward ----------------------------------------------------------------------- */

/* nl lines of the same length T through the layer together (crnn_lstm_forward is nl = 1;
 * the batch gradient passes all lines of a length): per step, the nl rows h of the lines
 * meet W_hh in one product, so W_hh is read once per step for all of them. Every output is
 * still its own dot16; nothing is shared between lines but the weights. */
typedef struct {
    int nl;
    int64_t T, H;
    const float *xw;      /* [nl][T][8H]: xw[l][t][d*4H + g] = dot16(x_l[t], W_ih[d][g], I) */
    const float *W_hh, *b;
    float *const *out, *const *gates, *const *c, *const *tc, *const *hPrev;
    float *scratch;       /* per direction: hm[nl][H], hw[nl][4H], z[4H] */
    float *W_hhp;         /* nl > 1: per direction, W_hhᵀ packed for kn (core.h) */
} fwd_ctx;

static void forward_dir(fwd_ctx *k, int d)
{
    const int nl = k->nl;
    const int64_t T = k->T, H = k->H, G = 4 * H;
    crnn_gemm16_fn gemm = crnn_gemm16_kernel();
    crnn_gemm16_kn_packed_fn gemmp = crnn_gemm16_kn_packed_kernel();
    const float *Whh = k->W_hh + (size_t)d * G * H;
    float *hm = k->scratch + (size_t)d * nl * (H + G + G), *hw = hm + nl * H, *zs = hw + nl * G;
    float *Whhp = k->W_hhp + (size_t)d * ((G + 15) / 16) * 16 * H;
    const float *b = k->b + (size_t)d * G;
    if (nl > 1) crnn_kn_pack(H, G, Whh, 1, H, Whhp);   /* B(j, g) = W_hh[d][g][j], on d's thread */
    for (int64_t s = 0; s < T; s++) {
        int64_t t = d == 0 ? s : T - 1 - s;
        int64_t prev = d == 0 ? t - 1 : t + 1;          /* the step visited before t */
        for (int li = 0; li < nl; li++) {               /* hPrev[t] = h of that step, or +0 */
            float *hp = k->hPrev[li] + ((size_t)d * T + t) * H;
            if (s > 0) memcpy(hp, k->out[li] + (size_t)prev * 2 * H + (size_t)d * H, sizeof(float) * (size_t)H);
            else memset(hp, 0, sizeof(float) * (size_t)H);
            memcpy(hm + li * H, hp, sizeof(float) * (size_t)H);
        }
        /* hw[l][g] = dot16(h_l, W_hh[g], H): one line, h in registers (nt); several, W_hhᵀ
         * packed and read once for all of them (kn) */
        if (nl == 1) gemm(nl, G, H, hm, H, Whh, H, hw, G);
        else gemmp(nl, G, H, hm, H, 1, Whhp, hw, G);
        for (int li = 0; li < nl; li++) {
            float *act = k->gates[li] + ((size_t)d * T + t) * G;
            float *ct = k->c[li] + ((size_t)d * T + t) * H, *tct = k->tc[li] + ((size_t)d * T + t) * H;
            const float *cp = s > 0 ? k->c[li] + ((size_t)d * T + prev) * H : NULL;
            const float *xwt = k->xw + ((size_t)li * T + t) * 2 * G + (size_t)d * G;
            const float *hwl = hw + li * G;
            float *z = zs;
            int64_t g0 = 0;
#if LSTM_SSE
            for (; g0 + 4 <= G; g0 += 4)
                _mm_storeu_ps(z + g0, _mm_add_ps(_mm_add_ps(_mm_loadu_ps(xwt + g0), _mm_loadu_ps(hwl + g0)),
                                                 _mm_loadu_ps(b + g0)));
#endif
            for (int64_t g = g0; g < G; g++) z[g] = (xwt[g] + hwl[g]) + b[g];
            crnn_sigmoid_n(z, act, 2 * H);                   /* i, f */
            crnn_tanh_n(z + 2 * H, act + 2 * H, H);          /* g */
            crnn_sigmoid_n(z + 3 * H, act + 3 * H, H);       /* o */
            const float *i = act, *f = act + ROW_F * H, *g = act + ROW_G * H, *o = act + 3 * H;
            int64_t j0 = 0;
#if LSTM_SSE
            for (; j0 + 4 <= H; j0 += 4) {          /* c = (f * cPrev) + (i * g) */
                __m128 cp4 = cp ? _mm_loadu_ps(cp + j0) : _mm_setzero_ps();
                __m128 fc = _mm_mul_ps(_mm_loadu_ps(f + j0), cp4);
                _mm_storeu_ps(ct + j0, _mm_add_ps(fc, _mm_mul_ps(_mm_loadu_ps(i + j0), _mm_loadu_ps(g + j0))));
            }
#endif
            for (int64_t j = j0; j < H; j++) {
                float fc = f[j] * (cp ? cp[j] : 0.0f);
                ct[j] = fc + i[j] * g[j];
            }
            crnn_tanh_n(ct, tct, H);
            float *ht = k->out[li] + (size_t)t * 2 * H + (size_t)d * H;
            j0 = 0;
#if LSTM_SSE
            for (; j0 + 4 <= H; j0 += 4)
                _mm_storeu_ps(ht + j0, _mm_mul_ps(_mm_loadu_ps(o + j0), _mm_loadu_ps(tct + j0)));
#endif
            for (int64_t j = j0; j < H; j++) ht[j] = o[j] * tct[j];
        }
    }
}

static void forward_range(void *ctx, int64_t begin, int64_t end)
{
    for (int64_t d = begin; d < end; d++) forward_dir(ctx, (int)d);
}

/* xw of lines [begin, end): x_l·W_ihᵀ against the packed W_ih, its ±0 terms left out
 * where that is exact (core.h) */
typedef struct {
    int nl;
    int64_t T, I, N;
    const float *const *x;
    const float *Wp;
    float *xw;
    int finite, zeros1;
} xw_ctx;

static void xw_range(void *ctx, int64_t begin, int64_t end)
{
    const xw_ctx *j = ctx;
    for (int64_t li = begin; li < end; li++) {
        const int sparse = j->finite && (j->nl == 1 ? j->zeros1 : crnn_mostly_zero(j->x[li], j->T * j->I));
        (sparse ? crnn_gemm16_kn_packed_sparse : crnn_gemm16_kn_packed)(
            j->T, j->N, j->I, j->x[li], j->I, 1, j->Wp, j->xw + li * j->T * j->N, j->N);
    }
}

int32_t crnn_lstm_forward_lines(int nl, const float *const *x, int32_t T, int32_t I, int32_t H,
                                const float *W_ih, const float *W_hh, const float *b,
                                float *const *out, float *const *gates, float *const *c,
                                float *const *tc, float *const *hPrev, int finiteW)
{
    if (nl < 1 || T < 0 || I < 0 || H < 1 || !W_ih || !W_hh || !b) return CRNN_E_ARG;
    for (int li = 0; li < nl && T > 0; li++)
        if (!x[li] || !out[li] || !gates[li] || !c[li] || !tc[li] || !hPrev[li]) return CRNN_E_ARG;
    const size_t G = 4 * (size_t)H, nT = (size_t)T, nI = (size_t)I;
    /* W_ihᵀ packed once, shared by every line's x·W_ihᵀ. After a conv block's ReLU and pool
     * most of x is +0: those terms are left out where every W_ih is finite (core.h) */
    const int64_t nx = (int64_t)T * I;
    const int zeros1 = nl == 1 && crnn_mostly_zero(x[0], nx);
    const int finite = (nl > 1 || zeros1)
                       && (finiteW >= 0 ? finiteW : crnn_all_finite(W_ih, 2 * (int64_t)G * I));
    const int pack = nl > 1 || (zeros1 && finite);   /* else one dense line: W_ih as it lies */
    const size_t packed = pack ? (2 * G + 15) / 16 * 16 * nI : 0;
    const size_t hpacked = nl > 1 ? (G + 15) / 16 * 16 * (size_t)H : 0;   /* W_hhᵀ of a direction */
    float *buf = crnn_scratch(CRNN_SCRATCH_LAYER,
                              sizeof(float) * ((size_t)nl * nT * 2 * G + 2 * (size_t)nl * (H + 2 * G)
                                               + packed + 2 * hpacked + 1));
    if (!buf) return CRNN_E_NOMEM;
    float *xw = buf, *scratch = xw + (size_t)nl * nT * 2 * G, *Wp = scratch + 2 * (size_t)nl * (H + 2 * G);
    float *Whhp = Wp + packed;
    if (!pack) {
        crnn_gemm16_kn(T, 2 * (int64_t)G, I, x[0], I, 1, W_ih, 1, I, xw, 2 * (int64_t)G);
    } else {
        crnn_kn_pack_threads(I, 2 * (int64_t)G, W_ih, 1, I, Wp);
        xw_ctx j = {nl, T, I, 2 * (int64_t)G, x, Wp, xw, finite, zeros1};
        /* a line a job, whole on one thread, when there are at least as many lines as
         * threads (no barrier between them); else each product splits its rows */
        const int threads = crnn_current_threads();
        if (threads > 1 && nl >= threads && (double)nx * 2.0 * (double)G >= CRNN_SMALL_WORK)
            crnn_parallel_for(nl, xw_range, &j);
        else
            xw_range(&j, 0, nl);
    }
    fwd_ctx k = {nl, T, H, xw, W_hh, b, out, gates, c, tc, hPrev, scratch, Whhp};
    crnn_parallel_for_work(2, 2 * (int64_t)nl * T * (int64_t)G * H, forward_range, &k);
    return CRNN_OK;
}

int32_t crnn_lstm_forward(const float *x, int32_t T, int32_t I, int32_t H,
                          const float *W_ih, const float *W_hh, const float *b,
                          float *out, float *gates, float *c, float *tc, float *hPrev)
{
    if (T < 0 || I < 0 || H < 1 || !W_ih || !W_hh || !b) return CRNN_E_ARG;
    if (T > 0 && (!x || !out || !gates || !c || !tc || !hPrev)) return CRNN_E_ARG;
    return crnn_lstm_forward_lines(1, &x, T, I, H, W_ih, W_hh, b, &out, &gates, &c, &tc, &hPrev, -1);
}

/* ---- backward ---------------------------------------------------------------------- */

/* live_dx's operands from W [rows][I]: Bd[g][j] = W[g][order[j]] for the nD dense columns,
 * Wr[r][g] = W[g][order[nD + r]] for the nR others live somewhere (rows of Wᵀ) */
typedef struct {
    const float *W;
    int64_t rows, I, nD, nR;
    const int32_t *order;
    float *Bd, *Wr;
} gather_job;

/* rows [g0, g1) of W, eight at a time */
static void gather_columns(const gather_job *j, int64_t g0, int64_t g1)
{
    const int64_t I = j->I, nD = j->nD, nR = j->nR, rows = j->rows;
    const float *W = j->W;
    const int32_t *R = j->order + nD;
    for (int64_t g = g0; g < g1; g++)
        for (int64_t c = 0; c < nD; c++) j->Bd[g * nD + c] = W[g * I + j->order[c]];
    int64_t g = g0;
    for (; g + 8 <= g1; g += 8)
        for (int64_t r = 0; r < nR; r++)
            for (int q = 0; q < 8; q++) j->Wr[r * rows + g + q] = W[(g + q) * I + R[r]];
    for (; g < g1; g++)
        for (int64_t r = 0; r < nR; r++) j->Wr[r * rows + g] = W[g * I + R[r]];
}

typedef struct {
    int nl;
    int64_t T, H;
    const float *const *gates, *const *c, *const *tc, *const *dOut;
    const float *W_hh;    /* [2][4H][H] */
    float *W_hhp;         /* nl > 1: per direction, W_hh packed for kn (core.h) */
    float *dz;            /* [nl][T][8H]: dz[l][t][d*4H + g] */
    float *scratch;       /* per direction: dhRec[nl][H], dcNext[nl][H] */
    const gather_job *gather;   /* NULL, or live_dx's operands: direction d's rows of W_ih */
} bwd_ctx;

static void backward_dir(bwd_ctx *k, int d)
{
    const int nl = k->nl;
    const int64_t T = k->T, H = k->H, G = 4 * H;
    crnn_gemm16_kn_fn gemm = crnn_gemm16_kn_kernel();
    crnn_gemm16_kn_packed_fn gemmp = crnn_gemm16_kn_packed_kernel();
    float *dhRec = k->scratch + (size_t)d * 2 * nl * H, *dcNext = dhRec + nl * H;
    const float *Whh = k->W_hh + (size_t)d * G * H;
    float *Whhp = k->W_hhp ? k->W_hhp + (size_t)d * ((H + 15) / 16) * 16 * G : NULL;
    if (Whhp) crnn_kn_pack(G, H, Whh, H, 1, Whhp);      /* on d's thread */
    memset(dhRec, 0, sizeof(float) * 2 * (size_t)nl * H);   /* +0, all */
    for (int64_t s = 0; s < T; s++) {                   /* the forward's order, reversed */
        int64_t t = d == 0 ? T - 1 - s : s;
        int64_t prev = d == 0 ? t - 1 : t + 1;          /* visited before t in the forward */
        for (int li = 0; li < nl; li++) {
            const float *cPrev = prev >= 0 && prev < T ? k->c[li] + ((size_t)d * T + prev) * H : NULL;
            const float *act = k->gates[li] + ((size_t)d * T + t) * G;
            const float *i = act, *f = act + ROW_F * H, *g = act + ROW_G * H, *o = act + 3 * H;
            const float *tct = k->tc[li] + ((size_t)d * T + t) * H;
            const float *dO = k->dOut[li] + (size_t)t * 2 * H + (size_t)d * H;
            float *dz = k->dz + ((size_t)li * T + t) * 2 * G + (size_t)d * G;
            float *dhR = dhRec + li * H, *dcN = dcNext + li * H;
            int64_t j0 = 0;
#if LSTM_SSE
            const __m128 one = _mm_set1_ps(1.0f);
            for (; j0 + 4 <= H; j0 += 4) {          /* the scalar loop below, four at a time */
#define L4(p) _mm_loadu_ps((p) + j0)
                __m128 i4 = L4(i), f4 = L4(f), g4 = L4(g), o4 = L4(o), tc4 = L4(tct);
                __m128 dh = _mm_add_ps(L4(dO), L4(dhR));
                __m128 dtc = _mm_mul_ps(dh, o4);
                __m128 d_o = _mm_mul_ps(dh, tc4);
                __m128 dc = _mm_add_ps(L4(dcN), _mm_mul_ps(dtc, _mm_sub_ps(one, _mm_mul_ps(tc4, tc4))));
                __m128 di = _mm_mul_ps(dc, g4);
                __m128 dg = _mm_mul_ps(dc, i4);
                __m128 df = _mm_mul_ps(dc, cPrev ? L4(cPrev) : _mm_setzero_ps());
                _mm_storeu_ps(dcN + j0, _mm_mul_ps(dc, f4));
                _mm_storeu_ps(dz + j0, _mm_mul_ps(di, _mm_mul_ps(i4, _mm_sub_ps(one, i4))));
                _mm_storeu_ps(dz + ROW_F * H + j0, _mm_mul_ps(df, _mm_mul_ps(f4, _mm_sub_ps(one, f4))));
                _mm_storeu_ps(dz + ROW_G * H + j0, _mm_mul_ps(dg, _mm_sub_ps(one, _mm_mul_ps(g4, g4))));
                _mm_storeu_ps(dz + 3 * H + j0, _mm_mul_ps(d_o, _mm_mul_ps(o4, _mm_sub_ps(one, o4))));
#undef L4
            }
#endif
            for (int64_t j = j0; j < H; j++) {
                float dh = dO[j] + dhR[j];
                float dtc = dh * o[j];
                float d_o = dh * tct[j];
                float dc = dcN[j] + dtc * (1.0f - tct[j] * tct[j]);
                float di = dc * g[j];
                float dg = dc * i[j];
                float df = dc * (cPrev ? cPrev[j] : 0.0f);
                dcN[j] = dc * f[j];
                dz[j] = di * (i[j] * (1.0f - i[j]));
                dz[ROW_F * H + j] = df * (f[j] * (1.0f - f[j]));
                dz[ROW_G * H + j] = dg * (1.0f - g[j] * g[j]);
                dz[3 * H + j] = d_o * (o[j] * (1.0f - o[j]));
            }
        }
        /* dhRec[l][j] = dot over 4H of dz_l, W_hh[.][j]: all lines in one product (several
         * lines: W_hh packed, each row block streaming one panel) */
        const float *dzt = k->dz + (size_t)t * 2 * G + (size_t)d * G;
        if (Whhp) gemmp(nl, H, G, dzt, T * 2 * G, 1, Whhp, dhRec, H);
        else gemm(nl, H, G, dzt, T * 2 * G, 1, Whh, H, 1, dhRec, H);
    }
}

/* dst[j][i] = src[i * lds + j], i < rows, j < cols (values moved only) */
static void transpose_rows(int64_t rows, int64_t cols, const float *src, int64_t lds, float *dst)
{
    int64_t j0 = 0, i0 = 0;
#if LSTM_SSE
    for (; j0 + 4 <= cols; j0 += 4)
        for (i0 = 0; i0 + 4 <= rows; i0 += 4) {
            const float *a = src + i0 * lds + j0;
            __m128 r0 = _mm_loadu_ps(a), r1 = _mm_loadu_ps(a + lds);
            __m128 r2 = _mm_loadu_ps(a + 2 * lds), r3 = _mm_loadu_ps(a + 3 * lds);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *b = dst + j0 * rows + i0;
            _mm_storeu_ps(b, r0);
            _mm_storeu_ps(b + rows, r1);
            _mm_storeu_ps(b + 2 * rows, r2);
            _mm_storeu_ps(b + 3 * rows, r3);
        }
    for (int64_t j = 0; j < j0; j++)            /* the rows past the last 4 */
        for (int64_t i = i0; i < rows; i++) dst[j * rows + i] = src[i * lds + j];
#endif
    for (int64_t j = j0; j < cols; j++)
        for (int64_t i = 0; i < rows; i++) dst[j * rows + i] = src[i * lds + j];
}

/* each direction's recurrence, then (on its thread, off the calling thread's serial path)
 * its half of the operands the dx by column kind needs */
static void backward_range(void *ctx, int64_t begin, int64_t end)
{
    const bwd_ctx *k = ctx;
    for (int64_t d = begin; d < end; d++) {
        backward_dir(ctx, (int)d);
        if (k->gather) gather_columns(k->gather, d * 4 * k->H, (d + 1) * 4 * k->H);
    }
}

/* After the recurrence, per line li and direction d: dots over t, t ascending, of dz's
 * columns against the rows of x, hPrev and ones (dW_ih, dW_hh, db); and dx[t][i] for the
 * columns i of half d, the dot over the 8H gates [dz_fwd | dz_rev] against W_ih[.][i]. */
typedef struct {
    int nl;
    int64_t T, I, H;
    const float *const *x, *const *hPrev;
    const float *W_ih, *dz, *ones;
    float *const *dW_ih, *const *dW_hh, *const *db, *const *dx;
    float *dzT;           /* [chunks][dzTn]: dz gates by rows, then live_dx's outputs */
    int64_t dzTn;         /* max(4H, I) * T */
    int chunks;           /* > 1: one a thread, dx's columns in halves; 1: dx whole in d = 1 */
    /* NULL: every dx; else live_dx's operands (gather_job: order lists the nD dense columns,
     * then the nR others live somewhere, then those never live; Bd, Wr as gathered) */
    const gather_job *live;
    int32_t *cols;        /* [chunks][I]: a step's live columns */
    const int32_t *sparse;   /* [nl]: the line's x at least a quarter ±0 (live_dx pays) */
} grad_ctx;

/* [a0, a1) of n listed columns: halves when each direction's job takes half of dx, all in
 * d = 1 otherwise */
static void dx_share(const grad_ctx *k, int64_t n, int d, int64_t *a0, int64_t *a1)
{
    const int64_t h = k->chunks == 1 ? 0 : n / 2;
    *a0 = d == 0 ? 0 : h;
    *a1 = d == 0 ? h : n;
}

/* dx[t][i] wherever x[t][i] is not ±0; elsewhere +0 or that same dot. In the batch
 * gradient x is the last conv block's pool output, +0 exactly where the pool passed no
 * value (its winner is none), and the pool's backward reads dx only at the others. Each
 * output is the same dot over the 8H gates, [dz_fwd | dz_rev] against W_ih[.][i]:
 * - a dense column (x live at half the batch's steps or more): at every step, in one kn
 *   product against the gathered columns, the outputs then moved to their places;
 * - the others: only at the steps where x is live, one nt dot each against the column's
 *   row of W_ihᵀ; +0 at the rest (a column never live is +0 throughout). */
static void live_dx(const grad_ctx *k, int li, int d, float *out, int32_t *cols)
{
    const gather_job *g = k->live;
    const int64_t T = k->T, I = k->I, G8 = 8 * k->H, nD = g->nD;
    const int64_t rest = I - nD;    /* g->nR live somewhere, then the never-live (+0) */
    const float *dz = k->dz + (size_t)li * T * G8, *x = k->x[li];
    float *dx = k->dx[li];
    int64_t a0, a1;
    dx_share(k, nD, d, &a0, &a1);
    if (a1 > a0) {
        const int64_t n = a1 - a0;
        crnn_gemm16_kn(T, n, G8, dz, G8, 1, g->Bd + a0, nD, 1, out, n);
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < n; j++) dx[t * I + g->order[a0 + j]] = out[t * n + j];
    }
    const int32_t *R = g->order + nD;
    dx_share(k, rest, d, &a0, &a1);
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * I;
        float *dxt = dx + t * I;
        int64_t n = 0;
        for (int64_t r = a0; r < a1; r++) {   /* no branch: the live ones are overwritten */
            dxt[R[r]] = 0.0f;
            cols[n] = (int32_t)r;
            n += xt[R[r]] != 0.0f;               /* NaN included */
        }
        crnn_gemm16_cols(G8, dz + t * G8, g->Wr, G8, cols, n, out);
        for (int64_t j = 0; j < n; j++) dxt[R[cols[j]]] = out[cols[j]];
    }
}

static void line_dir_grads(grad_ctx *k, int li, int d, float *dzT, int32_t *cols)
{
    const int64_t T = k->T, I = k->I, H = k->H, G = 4 * H, G8 = 2 * G;
    const float *dz = k->dz + (size_t)li * T * G8;
    /* the dots' A rows (a gate over t) made contiguous once for both products, so neither
     * packs its strided terms */
    transpose_rows(T, G, dz + d * G, G8, dzT);
    crnn_gemm16_kn(G, I, T, dzT, T, 1, k->x[li], I, 1, k->dW_ih[2 * li + d], I);
    crnn_gemm16_kn(G, H, T, dzT, T, 1, k->hPrev[li] + d * T * H, H, 1, k->dW_hh[2 * li + d], H);
    crnn_gemm16_kn(1, G, T, k->ones, 0, 1, dz + d * G, G8, 1, k->db[2 * li + d], G);
    if (k->dx[li] && k->live && k->sparse[li]) {
        live_dx(k, li, d, dzT, cols);
    } else if (k->dx[li]) {   /* columns [i0, i1): each half of W_ih is packed by one job only */
        int64_t half = k->chunks == 1 ? 0 : (I / 2 + 15) / 16 * 16;
        if (half > I) half = I / 2;
        const int64_t i0 = d == 0 ? 0 : half, i1 = d == 0 ? half : I;
        if (i1 > i0)
            crnn_gemm16_kn(T, i1 - i0, G8, dz, G8, 1, k->W_ih + i0, I, 1, k->dx[li] + i0, I);
    }
}

/* chunk c of `chunks`: its share of the 2 nl jobs, with its own dzT */
static void grad_range(void *ctx, int64_t begin, int64_t end)
{
    grad_ctx *k = ctx;
    const int64_t jobs = 2 * (int64_t)k->nl;
    for (int64_t c = begin; c < end; c++)
        for (int64_t j = c * jobs / k->chunks; j < (c + 1) * jobs / k->chunks; j++)
            line_dir_grads(k, (int)(j / 2), (int)(j % 2), k->dzT + c * k->dzTn,
                           k->cols ? k->cols + c * k->I : NULL);
}

/* live_dx in the batch gradient (dxLive), on every path (on the 512-bit one it paid on a
 * Zen 4, whose 512-bit fmas run on 256-bit units, and cost nothing measurable on a Xeon:
 * docs/performance.md) */
static int live_dx_wanted(int nl, int64_t T, int64_t I, float *const *dx, int dxLive)
{
    int any = 0;
    for (int li = 0; li < nl; li++) any |= dx[li] != NULL;
    return any && dxLive && T > 0 && I > 0;
}

/* A column whose x is live (not ±0) at half the batch's steps or more is dense: its dx
 * comes from the kn product at every step. Per output, the vector kn blocks run the whole
 * product faster than an nt dot, which streams its own row of W_ihᵀ (2 KiB) from L2, and
 * less than half of x's columns are live at half the steps (docs/performance.md: 1/4, 1/3,
 * 1/2 and 3/4 measured alike). Without vectors the nt dots of the live outputs are the
 * cheaper: no column is dense. */
static int64_t dense_steps(int nl, int64_t T)
{
    const int64_t steps = (int64_t)nl * T;
    return crnn_vector_floats() > 1 ? (steps + 1) / 2 : steps + 1;
}

/* count[i]: the steps of the batch at which x[.][i] is live (not ±0; NaN is); sparse[li]:
 * at least a quarter of line li's x is ±0 (crnn_mostly_zero's test, from the same count) */
static void count_live(int nl, const float *const *x, int64_t T, int64_t I, int32_t *count,
                       int32_t *sparse)
{
    int64_t before = 0;
    for (int64_t i = 0; i < I; i++) count[i] = 0;
    for (int li = 0; li < nl; li++) {
        for (int64_t t = 0; t < T; t++) {
            const float *xt = x[li] + t * I;
            int64_t i = 0;
#if LSTM_SSE
            for (; i + 4 <= I; i += 4) {   /* a live lane's mask is -1 */
                __m128i live = _mm_castps_si128(_mm_cmpneq_ps(_mm_loadu_ps(xt + i), _mm_setzero_ps()));
                __m128i c = _mm_loadu_si128((const __m128i *)(count + i));
                _mm_storeu_si128((__m128i *)(count + i), _mm_sub_epi32(c, live));
            }
#endif
            for (; i < I; i++) count[i] += xt[i] != 0.0f;
        }
        int64_t after = 0;
        for (int64_t i = 0; i < I; i++) after += count[i];
        sparse[li] = crnn_zeros_enough(T * I - (after - before), T * I);
        before = after;
    }
}

/* order: the dense columns (live at dense_steps or more), the others live somewhere, the
 * columns never live; each ascending. *nD, *nR: the first two groups' sizes. count: I ints
 * of scratch; sparse: count_live's per-line flags. */
static void split_columns(int nl, const float *const *x, int64_t T, int64_t I, int32_t *count,
                          int32_t *sparse, int32_t *order, int64_t *nD, int64_t *nR)
{
    count_live(nl, x, T, I, count, sparse);
    const int64_t thr = dense_steps(nl, T);
    int64_t n = 0;
    for (int64_t i = 0; i < I; i++)
        if (count[i] >= thr) order[n++] = (int32_t)i;
    *nD = n;
    for (int64_t i = 0; i < I; i++)
        if (count[i] > 0 && count[i] < thr) order[n++] = (int32_t)i;
    *nR = n - *nD;
    for (int64_t i = 0; i < I; i++)
        if (count[i] == 0) order[n++] = (int32_t)i;
}

int32_t crnn_lstm_backward_lines(int nl, const float *const *x, int32_t T, int32_t I, int32_t H,
                                 const float *W_ih, const float *W_hh,
                                 const float *const *gates, const float *const *c,
                                 const float *const *tc, const float *const *hPrev,
                                 const float *const *dOut, float *const *dW_ih,
                                 float *const *dW_hh, float *const *db, float *const *dx,
                                 int dxLive)
{
    if (nl < 1 || T < 0 || I < 0 || H < 1 || !W_ih || !W_hh) return CRNN_E_ARG;
    for (int li = 0; li < nl; li++) {
        for (int d = 0; d < 2; d++)
            if (!dW_ih[2 * li + d] || !dW_hh[2 * li + d] || !db[2 * li + d]) return CRNN_E_ARG;
        if (T > 0 && (!x[li] || !gates[li] || !c[li] || !tc[li] || !hPrev[li] || !dOut[li]))
            return CRNN_E_ARG;
    }
    const size_t nT = (size_t)T, G = 4 * (size_t)H, nH = (size_t)H;
    const size_t packed = nl > 1 ? (nH + 15) / 16 * 16 * G : 0;   /* W_hh of a direction */
    /* After the recurrence every line and direction is a job of about the same size (its
     * dW, and half of the line's dx columns), run whole on one thread: with at least as
     * many jobs as threads, no product is split and no barrier waits between them; else the
     * products split their outputs across the threads, one job after another (dx whole).
     * The same outputs either way. */
    const int64_t jobs = 2 * (int64_t)nl;
    const double work = (double)jobs * T * (double)G * (2.0 * I + H);   /* no int64 overflow */
    const int threads = crnn_current_threads();
    const int chunks = threads > 1 && jobs >= threads && work >= CRNN_SMALL_WORK ? threads : 1;
    const int live = live_dx_wanted(nl, T, I, dx, dxLive);
    const size_t nI = (size_t)I, wt = live ? 2 * G * nI + (size_t)(chunks + 1) * nI + (size_t)nl + 16 : 0;
    const size_t dzTn = (G > nI ? G : nI) * nT;
    size_t n = (size_t)nl * nT * 2 * G   /* dz */
             + (size_t)chunks * dzTn     /* dzT: a line's and direction's dz, gates by rows */
             + nT                        /* ones */
             + 4 * (size_t)nl * nH + 1   /* scratch */
             + 2 * packed + wt;
    float *buf = crnn_scratch(CRNN_SCRATCH_LAYER, sizeof(float) * n);
    if (!buf) return CRNN_E_NOMEM;
    float *dzall = buf, *dzT = dzall + (size_t)nl * nT * 2 * G, *ones = dzT + (size_t)chunks * dzTn;
    float *scratch = ones + nT;
    float *Whhp = nl > 1 ? scratch + 4 * (size_t)nl * nH + 1 : NULL;
    grad_ctx gk = {nl, T, I, H, x, hPrev, W_ih, dzall, ones, dW_ih, dW_hh, db, dx, dzT,
                   (int64_t)dzTn, chunks, NULL, NULL, NULL};
    gather_job gj = {W_ih, 2 * (int64_t)G, I, 0, 0, NULL, NULL, NULL};
    if (live) {           /* after W_hh's panels, on 64 bytes */
        float *w = scratch + 4 * (size_t)nl * nH + 1 + 2 * packed;
        w += (16 - (uintptr_t)w / sizeof(float) % 16) % 16;
        int32_t *order = (int32_t *)(w + 2 * G * nI);
        int32_t *sparse = order + (size_t)(chunks + 1) * nI;
        gk.cols = order + nI;
        gk.sparse = sparse;
        split_columns(nl, x, T, I, gk.cols, sparse, order, &gj.nD, &gj.nR);
        gj.order = order;
        gj.Bd = w;
        gj.Wr = w + 2 * G * (size_t)gj.nD;
        gk.live = &gj;
    }
    bwd_ctx k = {nl, T, H, gates, c, tc, dOut, W_hh, Whhp, dzall, scratch, live ? &gj : NULL};
    crnn_parallel_for_work(2, 2 * (int64_t)nl * T * (int64_t)G * H, backward_range, &k);

    for (size_t t = 0; t < nT; t++) ones[t] = 1.0f;
    if (chunks > 1) crnn_parallel_for(chunks, grad_range, &gk);
    else grad_range(&gk, 0, 1);
    return CRNN_OK;
}

int32_t crnn_lstm_backward(const float *x, int32_t T, int32_t I, int32_t H,
                           const float *W_ih, const float *W_hh,
                           const float *gates, const float *c, const float *tc,
                           const float *hPrev, const float *dOut,
                           float *dW_ih, float *dW_hh, float *db, float *dx)
{
    if (T < 0 || I < 0 || H < 1 || !W_ih || !W_hh || !dW_ih || !dW_hh || !db) return CRNN_E_ARG;
    if (T > 0 && (!x || !gates || !c || !tc || !hPrev || !dOut)) return CRNN_E_ARG;
    const size_t G = 4 * (size_t)H;   /* the ABI's gradients are stacked [2][...] */
    float *gWih[2] = {dW_ih, dW_ih + G * (size_t)I}, *gWhh[2] = {dW_hh, dW_hh + G * (size_t)H},
          *gb[2] = {db, db + G};
    return crnn_lstm_backward_lines(1, &x, T, I, H, W_ih, W_hh, &gates, &c, &tc, &hPrev, &dOut,
                                    gWih, gWhh, gb, &dx, 0);
}
