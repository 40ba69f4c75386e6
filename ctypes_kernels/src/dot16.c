/* dot16.c — the 16-lane dot product and the gemm16 dispatcher. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__SSE2__)
/* Four rows k0..k0+3 (k0 % 4 == 0, same m = k0/16, lanes l..l+3) of a whole panel when B's
 * terms are adjacent (b_k = 1): 4 x 4 blocks of B transposed in registers. Values moved only. */
static void pack_rows4(const float *src, int64_t b_j, float *const dst[4])
{
    for (int e0 = 0; e0 < 16; e0 += 4) {
        __m128 r0 = _mm_loadu_ps(src + (e0 + 0) * b_j), r1 = _mm_loadu_ps(src + (e0 + 1) * b_j);
        __m128 r2 = _mm_loadu_ps(src + (e0 + 2) * b_j), r3 = _mm_loadu_ps(src + (e0 + 3) * b_j);
        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
        _mm_storeu_ps(dst[0] + e0, r0);
        _mm_storeu_ps(dst[1] + e0, r1);
        _mm_storeu_ps(dst[2] + e0, r2);
        _mm_storeu_ps(dst[3] + e0, r3);
    }
}
#endif

/* 1 when every src[i] is finite (x*0 is ±0 then, NaN otherwise; the OR of the bits is NaN
 * iff any is); with dst, src is copied there in the same pass */
static inline int finite_pass(float *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    int bad = 0;
#if defined(__SSE2__)
    __m128 acc0 = _mm_setzero_ps(), acc1 = _mm_setzero_ps(), zero = _mm_setzero_ps();
    for (; i + 8 <= n; i += 8) {      /* two chains: the mul's latency, not the loads */
        __m128 a = _mm_loadu_ps(src + i), b = _mm_loadu_ps(src + i + 4);
        if (dst) {
            _mm_storeu_ps(dst + i, a);
            _mm_storeu_ps(dst + i + 4, b);
        }
        acc0 = _mm_or_ps(acc0, _mm_mul_ps(a, zero));
        acc1 = _mm_or_ps(acc1, _mm_mul_ps(b, zero));
    }
    acc0 = _mm_or_ps(acc0, acc1);
    bad = _mm_movemask_ps(_mm_cmpunord_ps(acc0, acc0)) != 0;
#endif
    for (; i < n; i++) {
        if (dst) dst[i] = src[i];
        bad |= !(src[i] - src[i] == 0.0f);
    }
    return !bad;
}

int crnn_all_finite(const float *x, int64_t n) { return finite_pass(NULL, x, n); }
int crnn_copy_finite(float *dst, const float *src, int64_t n) { return finite_pass(dst, src, n); }

/* 1 when at least a quarter of x is ±0. The count from compare masks (each -1 where x is
 * ±0) subtracted lane-wise: no popcount, which this baseline-flags file would call libgcc
 * for (it was 0.8 % of the avx2 step). */
int crnn_mostly_zero(const float *x, int64_t n)
{
    int64_t i = 0, z = 0;
#if defined(__SSE2__)
    while (i + 4 <= n) {
        __m128i cnt = _mm_setzero_si128();
        const int64_t stop = n - i > ((int64_t)1 << 30) ? i + ((int64_t)1 << 30) : n;
        for (; i + 4 <= stop; i += 4)   /* at most 2^28 per lane: no wrap */
            cnt = _mm_sub_epi32(cnt, _mm_castps_si128(_mm_cmpeq_ps(_mm_loadu_ps(x + i), _mm_setzero_ps())));
        int32_t c[4];
        _mm_storeu_si128((__m128i *)c, cnt);
        z += (int64_t)c[0] + c[1] + c[2] + c[3];
    }
#endif
    for (; i < n; i++) z += x[i] == 0.0f;
    return crnn_zeros_enough(z, n);
}

int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    if (n < 0 || !out || (n > 0 && (!a || !b))) return CRNN_E_ARG;
    crnn_gemm16(1, 1, n, a, n, b, n, out, 1);
    return CRNN_OK;
}

static const crnn_gemm16_fn kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16);
static const crnn_gemm16_kn_fn kn_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_kn);
typedef crnn_gemm16_kn_packed_fn kn_packed_fn;
static const kn_packed_fn kn_packed_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_kn_packed);
static const kn_packed_fn kn_sparse_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_kn_packed_sparse);
typedef void (*kn_taps_fn)(int64_t, int64_t, int64_t, const float *, int64_t, const int64_t *,
                           const float *, float *, int64_t);
static const kn_taps_fn kn_taps_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_kn_packed_taps);

static crnn_gemm16_fn nt_kernel(void)
{
    return kernels[crnn_current_isa()];
}

static crnn_gemm16_kn_fn kn_kernel(void)
{
    return kn_kernels[crnn_current_isa()];
}

crnn_gemm16_fn crnn_gemm16_kernel(void) { return nt_kernel(); }
crnn_gemm16_kn_fn crnn_gemm16_kn_kernel(void) { return kn_kernel(); }
crnn_gemm16_kn_packed_fn crnn_gemm16_kn_packed_kernel(void)
{
    return kn_packed_kernels[crnn_current_isa()];
}

/* panels [jp0, jp1) of crnn_kn_pack (16 columns each) */
static void kn_pack_panels(int64_t K, int64_t N, const float *B, int64_t b_k, int64_t b_j,
                           float *Bp, int64_t jp0, int64_t jp1)
{
    int64_t start[16];
    for (int l = 0; l < 16; l++) start[l] = crnn_kn_lane_start(K, l);
    for (int64_t jp = jp0; jp < jp1; jp++) {
        const int64_t cols = N - jp * 16 < 16 ? N - jp * 16 : 16;
        float *panel = Bp + jp * 16 * K;
        int64_t k = 0;
#if defined(__SSE2__)
        if (b_k == 1 && cols == 16)
            for (; k + 4 <= K; k += 4) {
                float *dst[4];
                for (int q = 0; q < 4; q++) dst[q] = panel + (start[(k + q) % 16] + k / 16) * 16;
                pack_rows4(B + k + jp * 16 * b_j, b_j, dst);
            }
#endif
        for (; k < K; k++) {      /* row k: lane k % 16, its (k / 16)-th row */
            float *dst = panel + (start[k % 16] + k / 16) * 16;
            const float *src = B + k * b_k + jp * 16 * b_j;
            if (b_j == 1 && cols == 16) {   /* the row's 16 columns adjacent: one move */
                memcpy(dst, src, 16 * sizeof(float));
                continue;
            }
            for (int64_t e = 0; e < cols; e++) dst[e] = src[e * b_j];
            for (int64_t e = cols; e < 16; e++) dst[e] = 0.0f;
        }
    }
}

void crnn_kn_pack(int64_t K, int64_t N, const float *B, int64_t b_k, int64_t b_j, float *Bp)
{
    kn_pack_panels(K, N, B, b_k, b_j, Bp, 0, (N + 15) / 16);
}

typedef struct {
    int64_t K, N, b_k, b_j;
    const float *B;
    float *Bp;
} pack_job;

static void pack_range(void *ctx, int64_t jp0, int64_t jp1)
{
    const pack_job *p = ctx;
    kn_pack_panels(p->K, p->N, p->B, p->b_k, p->b_j, p->Bp, jp0, jp1);
}

void crnn_kn_pack_threads(int64_t K, int64_t N, const float *B, int64_t b_k, int64_t b_j, float *Bp)
{
    pack_job p = {K, N, b_k, b_j, B, Bp};
    crnn_parallel_for_work((N + 15) / 16, K * N, pack_range, &p);
}

/* Threads get whole blocks of rows (multiples of ROWS_Q) or of columns (multiples of
 * COLS_Q) of C, so each runs full register blocks; either way every output is whole. */
#define ROWS_Q 4
#define COLS_Q 16

typedef struct {
    crnn_gemm16_fn nt;       /* exactly one of nt, kn, kn_packed is set */
    crnn_gemm16_kn_fn kn;
    kn_packed_fn kn_packed;              /* B packed (crnn_gemm16_kn_packed) */
    int64_t M, N, K, a_i, a_k, ldb, b_j, ldc;
    const float *A, *B;
    float *C;
    int by_rows;
} gemm_job;

static void gemm_range(void *ctx, int64_t begin, int64_t end)
{
    const gemm_job *g = ctx;
    int64_t q = g->by_rows ? ROWS_Q : COLS_Q, lim = g->by_rows ? g->M : g->N;
    int64_t b = begin * q, e = end * q < lim ? end * q : lim;
    if (b >= e) return;
    if (g->kn_packed) {
        if (g->by_rows) g->kn_packed(e - b, g->N, g->K, g->A + b * g->a_i, g->a_i, g->a_k, g->B,
                               g->C + b * g->ldc, g->ldc);
        else g->kn_packed(g->M, e - b, g->K, g->A, g->a_i, g->a_k, g->B + (b / 16) * 16 * g->K,
                    g->C + b, g->ldc);
        return;
    }
    if (g->by_rows) {
        if (g->kn) g->kn(e - b, g->N, g->K, g->A + b * g->a_i, g->a_i, g->a_k, g->B, g->ldb,
                         g->b_j, g->C + b * g->ldc, g->ldc);
        else g->nt(e - b, g->N, g->K, g->A + b * g->a_i, g->a_i, g->B, g->ldb,
                   g->C + b * g->ldc, g->ldc);
    } else {
        if (g->kn) g->kn(g->M, e - b, g->K, g->A, g->a_i, g->a_k, g->B + b * g->b_j, g->ldb,
                         g->b_j, g->C + b, g->ldc);
        else g->nt(g->M, e - b, g->K, g->A, g->a_i, g->B + b * g->ldb, g->ldb, g->C + b, g->ldc);
    }
}

static void gemm_run(gemm_job *g)
{
    if (g->M <= 0 || g->N <= 0) return;
    int64_t rb = (g->M + ROWS_Q - 1) / ROWS_Q, cb = (g->N + COLS_Q - 1) / COLS_Q;
    int t = crnn_current_threads();
    if (t == 1 || g->M * g->N * (g->K + 16) < CRNN_SMALL_WORK) {
        g->by_rows = 1;
        gemm_range(g, 0, rb);
        return;
    }
    g->by_rows = rb >= cb || rb >= t;
    crnn_parallel_for(g->by_rows ? rb : cb, gemm_range, g);
}

void crnn_gemm16(int64_t M, int64_t N, int64_t K,
                 const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc)
{
    gemm_job g = {nt_kernel(), NULL, NULL, M, N, K, lda, 1, ldb, 1, ldc, A, B, C, 1};
    gemm_run(&g);
}

void crnn_gemm16_kn(int64_t M, int64_t N, int64_t K,
                    const float *A, int64_t a_i, int64_t a_k,
                    const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc)
{
    gemm_job g = {NULL, kn_kernel(), NULL, M, N, K, a_i, a_k, b_k, b_j, ldc, A, B, C, 1};
    gemm_run(&g);
}

void crnn_gemm16_kn_packed(int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                           float *C, int64_t ldc)
{
    gemm_job g = {NULL, NULL, kn_packed_kernels[crnn_current_isa()], M, N, K, a_i, a_k, 0, 1, ldc, A, Bp, C, 1};
    gemm_run(&g);
}

void crnn_gemm16_kn_packed_sparse(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                                  float *C, int64_t ldc)
{
    gemm_job g = {NULL, NULL, kn_sparse_kernels[crnn_current_isa()], M, N, K, a_i, a_k, 0, 1, ldc, A, Bp, C, 1};
    gemm_run(&g);
}

typedef int (*kn_win_fn)(int64_t, int64_t, int64_t, const float *, int64_t, const int64_t *,
                         const float *, float *, int64_t);
static const kn_win_fn kn_win_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_kn_packed_sparse_win);

int crnn_gemm16_kn_packed_sparse_win(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                                     const int64_t *coff, const float *Bp, float *C, int64_t ldc)
{
    return kn_win_kernels[crnn_current_isa()](M, N, K, A, a_i, coff, Bp, C, ldc);
}

void crnn_gemm16_kn_packed_taps(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                                const int64_t *tap, const float *Bp, float *C, int64_t ldc)
{
    if (M > 0 && N > 0 && K >= 0 && K <= 16) kn_taps_kernels[crnn_current_isa()](M, N, K, A, a_i, tap, Bp, C, ldc);
}

/* The row-split kernels below: whole rows per thread, or all on this thread when the work
 * (multiply-adds) is small (crnn_parallel_for_work). */

static const crnn_gemm16_listed_fn listed_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_listed);

typedef struct {
    crnn_gemm16_listed_fn fn;
    int64_t nb, ldc;
    const crnn_term *terms;
    const int32_t *start, *len, *coff;
    const float *B;
    float *C;
    int32_t *negz;
} listed_job;

static void listed_range(void *ctx, int64_t b, int64_t e)
{
    const listed_job *j = ctx;
    if (b < e)
        j->fn(e - b, j->nb, j->terms, j->start + 16 * b, j->len + 16 * b, j->B, j->coff,
              j->C + b * j->ldc, j->ldc, j->negz + b);
}

void crnn_gemm16_listed(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                        const int32_t *len, const float *B, const int32_t *coff, float *C,
                        int64_t ldc, int32_t *negz)
{
    listed_job j = {listed_kernels[crnn_current_isa()], nb, ldc, terms, start, len, coff, B, C, negz};
    if (M > 0 && nb > 0) crnn_parallel_for_work(M, M > 1 ? CRNN_SMALL_WORK : 0, listed_range, &j);
}


static void (*const sparse_rows_kernels[CRNN_NISA])(int64_t, int64_t, int64_t, const float *, int64_t,
                                            const float *, int64_t, float *, int64_t, int32_t *) = CRNN_ISA_TABLE(crnn_gemm16_sparse_rows);

typedef struct {
    int isa;
    int64_t N, K, lda, ldb, ldc;
    const float *A, *B;
    float *C;
    int32_t *flag;
} sparse_rows_job;

static void sparse_rows_range(void *ctx, int64_t b, int64_t e)
{
    const sparse_rows_job *j = ctx;
    if (b < e)
        sparse_rows_kernels[j->isa](e - b, j->N, j->K, j->A + b * j->lda, j->lda, j->B, j->ldb,
                           j->C + b * j->ldc, j->ldc, j->flag + b);
}

void crnn_gemm16_sparse_rows(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const float *B, int64_t ldb, float *C, int64_t ldc, int32_t *flag)
{
    sparse_rows_job j = {crnn_current_isa(), N, K, lda, ldb, ldc, A, B, C, flag};
    if (M > 0 && N > 0) crnn_parallel_for_work(M, M * N * K, sparse_rows_range, &j);
}

typedef void (*cols_fn)(int64_t, const float *, const float *, int64_t, const int32_t *, int64_t,
                        float *);
static const cols_fn cols_kernels[CRNN_NISA] = CRNN_ISA_TABLE(crnn_gemm16_cols);

void crnn_gemm16_cols(int64_t K, const float *a, const float *B, int64_t ldb, const int32_t *cols,
                      int64_t n, float *c)
{
    if (n > 0) cols_kernels[crnn_current_isa()](K, a, B, ldb, cols, n, c);
}
