/* gemm16 on the scalar path: the readable definition, one dot16 per output.
 *
 * dot16 (docs/numerics.md): 16 partials from +0, term k into lane k mod 16 in ascending k,
 * then the tree p[i] = p[i] + p[i+s] for s = 8, 4, 2, 1. The loop below is that definition
 * with k written as k0 + l (l = k mod 16).
 *
 * fmaf is one correctly rounded operation on every machine, but code built for baseline
 * x86-64 calls the C library for it. Where the CPU has FMA3 the same definition is also
 * compiled with the instruction enabled (target("fma")), and used: an fma has exactly one
 * correct result, so only the speed differs. */
#include <math.h>
#include <string.h>
#include "../core.h"

#define AI static inline __attribute__((always_inline))

/* dot16 over k < n of a[k*as] * b[k*bs] */
AI float dot16_def(const float *a, int64_t as, const float *b, int64_t bs, int64_t n)
{
    float p[16];
    for (int l = 0; l < 16; l++) p[l] = 0.0f;
    int64_t k0 = 0;
    for (; k0 + 16 <= n; k0 += 16)
        for (int l = 0; l < 16; l++)
            p[l] = fmaf(a[(k0 + l) * as], b[(k0 + l) * bs], p[l]);
    for (int l = 0; k0 + l < n; l++)
        p[l] = fmaf(a[(k0 + l) * as], b[(k0 + l) * bs], p[l]);
    for (int s = 8; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++) p[i] = p[i] + p[i + s];
    return p[0];
}

AI void nt_def(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
               const float *B, int64_t ldb, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = dot16_def(A + i * lda, 1, B + j * ldb, 1, K);
}

/* kn: the same definition for each output C[i][j], term k = A(i, k) * B[k][j]; a block of
 * up to 16 outputs of one row is walked together (B read along its rows when b_j = 1). With
 * a list `ks` of n terms, only those (the row's terms whose A is not ±0: core.h,
 * crnn_gemm16_kn_packed_sparse; B finite); returns nonzero when an output came out -0, the
 * one case where that can differ from every term. */
enum { KN_JB = 16 };
AI int kn_row_def(const int32_t *ks, int64_t n, const float *a, int64_t a_k, const float *B,
                  int64_t b_k, int64_t b_j, const int64_t *lane0, const int32_t *rowoff, int nj,
                  float *c)
{
    float p[16][KN_JB];                   /* p[lane][output] */
    for (int l = 0; l < 16; l++)
        for (int jj = 0; jj < KN_JB; jj++) p[l][jj] = 0.0f;
    /* B packed, every term: lane by lane, its rows one after another in the panel (each
     * lane's terms still in ascending k; the panel's columns past nj are zeros, not stored) */
    for (int l = 0; lane0 && !ks && l < 16; l++) {
        const float *b = B + lane0[l] * 16;
        for (int64_t k = l; k < n; k += 16, b += 16) {
            const float ak = a[k * a_k];
            for (int jj = 0; jj < KN_JB; jj++) p[l][jj] = fmaf(ak, b[jj], p[l][jj]);
        }
    }
    for (int64_t t = 0; !(lane0 && !ks) && t < n; t++) {
        const int64_t k = ks ? ks[t] : t;
        const float ak = a[k * a_k];
        /* B's row k: k * b_k, or where a packed panel holds it (rowoff, core.h) */
        const float *b = rowoff ? B + rowoff[k] : B + k * b_k;
        float *pl = p[k % 16];
        if (b_j == 1 && nj == KN_JB)      /* a fixed count: vectorizes at -O2 as well */
            for (int jj = 0; jj < KN_JB; jj++) pl[jj] = fmaf(ak, b[jj], pl[jj]);
        else if (b_j == 1)
            for (int jj = 0; jj < nj; jj++) pl[jj] = fmaf(ak, b[jj], pl[jj]);
        else
            for (int jj = 0; jj < nj; jj++) pl[jj] = fmaf(ak, b[jj * b_j], pl[jj]);
    }
    /* the tree of every output of the block, a level at a time: each output's adds are its
     * own, and side by side they do not wait for each other (an output's levels one after
     * another made a chain through memory: the scalar step 12 % slower) */
    for (int s = 8; s >= 1; s >>= 1)
        for (int l = 0; l < s; l++)
            for (int jj = 0; jj < KN_JB; jj++) p[l][jj] = p[l][jj] + p[l + s][jj];
    int negz = 0;
    for (int jj = 0; jj < nj; jj++) {
        c[jj] = p[0][jj];
        negz |= p[0][jj] == 0.0f && signbit(p[0][jj]);
    }
    return negz;
}

/* every term, or (ks: room for K indices) each row's terms whose A is not ±0; B as rows
 * (b_k, b_j) or, with lane0 (the first row of each lane, crnn_kn_lane_start), packed in
 * panels of 16 columns (core.h) and read where it lies: every term lane by lane, the listed
 * terms through rowoff (row k of a panel starts rowoff[k] floats in) */
AI void kn_def(int32_t *ks, int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
               int64_t a_k, const float *B, int64_t b_k, int64_t b_j, const int64_t *lane0,
               const int32_t *rowoff, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        const float *a = A + i * a_i;
        int64_t n = K;
        if (ks) {                          /* the row's live terms, without a branch */
            n = 0;
            for (int64_t k = 0; k < K; k++) {
                ks[n] = (int32_t)k;
                n += a[k * a_k] != 0.0f;
            }
        }
        for (int64_t j0 = 0; j0 < N; j0 += KN_JB) {
            const int nj = N - j0 < KN_JB ? (int)(N - j0) : KN_JB;
            const float *b = lane0 ? B + j0 * K : B + j0 * b_j;   /* panel j0 / 16 */
            float *c = C + i * ldc + j0;
            if (kn_row_def(ks, n, a, a_k, b, b_k, b_j, lane0, rowoff, nj, c) && ks)
                kn_row_def(NULL, K, a, a_k, b, b_k, b_j, lane0, NULL, nj, c);   /* every term */
        }
    }
}

static void nt_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc)
{
    nt_def(M, N, K, A, lda, B, ldb, C, ldc);
}

static void kn_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                       const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc)
{
    kn_def(NULL, M, N, K, A, a_i, a_k, B, b_k, b_j, NULL, NULL, C, ldc);
}

static void kn_packed_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                              int64_t a_k, const float *Bp, const int64_t *lane0, float *C,
                              int64_t ldc)
{
    kn_def(NULL, M, N, K, A, a_i, a_k, Bp, 0, 1, lane0, NULL, C, ldc);
}

static void kn_sparse_generic(int32_t *ks, int64_t M, int64_t N, int64_t K, const float *A,
                              int64_t a_i, const float *Bp, const int64_t *lane0,
                              const int32_t *rowoff, float *C, int64_t ldc)
{
    kn_def(ks, M, N, K, A, a_i, 1, Bp, 0, 1, lane0, rowoff, C, ldc);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("fma")))
static void nt_fma3(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                    const float *B, int64_t ldb, float *C, int64_t ldc)
{
    nt_def(M, N, K, A, lda, B, ldb, C, ldc);
}

__attribute__((target("fma")))
static void kn_fma3(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                    const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc)
{
    kn_def(NULL, M, N, K, A, a_i, a_k, B, b_k, b_j, NULL, NULL, C, ldc);
}

__attribute__((target("fma")))
static void kn_packed_fma3(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                           int64_t a_k, const float *Bp, const int64_t *lane0, float *C,
                           int64_t ldc)
{
    kn_def(NULL, M, N, K, A, a_i, a_k, Bp, 0, 1, lane0, NULL, C, ldc);
}

__attribute__((target("fma")))
static void kn_sparse_fma3(int32_t *ks, int64_t M, int64_t N, int64_t K, const float *A,
                           int64_t a_i, const float *Bp, const int64_t *lane0,
                           const int32_t *rowoff, float *C, int64_t ldc)
{
    kn_def(ks, M, N, K, A, a_i, 1, Bp, 0, 1, lane0, rowoff, C, ldc);
}

#else
#define nt_fma3 nt_generic
#define kn_fma3 kn_generic
#define kn_packed_fma3 kn_packed_generic
#define kn_sparse_fma3 kn_sparse_generic
#endif

void crnn_gemm16_scalar(int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb,
                        float *C, int64_t ldc)
{
    (crnn_cpu_has_fma3() ? nt_fma3 : nt_generic)(M, N, K, A, lda, B, ldb, C, ldc);
}

void crnn_gemm16_kn_scalar(int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t a_i, int64_t a_k,
                           const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc)
{
    if (a_k == 1 && b_k == 1 && K >= 64) {   /* long dots along k: one output at a time */
        (crnn_cpu_has_fma3() ? nt_fma3 : nt_generic)(M, N, K, A, a_i, B, b_j, C, ldc);
        return;
    }
    /* B's columns strided: copy B into rows [K][N] first (values moved, not changed), so
     * the walk over 16 outputs reads contiguous memory */
    float *Bt = b_j != 1 && M > 1 ? crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(K * N)) : NULL;
    if (Bt) {
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++) Bt[k * N + j] = B[k * b_k + j * b_j];
        B = Bt;
        b_k = N;
        b_j = 1;
    }
    (crnn_cpu_has_fma3() ? kn_fma3 : kn_generic)(M, N, K, A, a_i, a_k, B, b_k, b_j, C, ldc);
}

/* core.h, crnn_gemm16_cols: the listed rows of B, each output the definition */
void crnn_gemm16_cols_scalar(int64_t K, const float *a, const float *B, int64_t ldb,
                             const int32_t *cols, int64_t n, float *c)
{
    const crnn_gemm16_fn nt = crnn_cpu_has_fma3() ? nt_fma3 : nt_generic;
    for (int64_t j = 0; j < n; j++) nt(1, 1, K, a, K, B + (int64_t)cols[j] * ldb, ldb, c + cols[j], 1);
}

/* Both variants, for tests: 0 = the C library's fmaf, 1 = FMA3 (0 without it). */
void crnn_gemm16_scalar_variant(int variant, int64_t M, int64_t N, int64_t K,
                                const float *A, int64_t lda, const float *B, int64_t ldb,
                                float *C, int64_t ldc)
{
    (variant && crnn_cpu_has_fma3() ? nt_fma3 : nt_generic)(M, N, K, A, lda, B, ldb, C, ldc);
}

/* lane0[l]: lane l's first row in a packed panel; returns where each row k starts
 * (lane0[k % 16] + k / 16 rows in, 16 floats a row), in scratch (NULL without it) */
static const int32_t *packed_rows(int64_t K, int64_t lane0[16])
{
    for (int l = 0; l < 16; l++) lane0[l] = crnn_kn_lane_start(K, l);
    int32_t *rowoff = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(int32_t) * (size_t)(K + 1));
    if (rowoff)
        for (int64_t k = 0; k < K; k++) rowoff[k] = (int32_t)((lane0[k % 16] + k / 16) * 16);
    return rowoff;
}

/* kn with B packed (core.h), read where it lies: the same walk. */
void crnn_gemm16_kn_packed_scalar(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                                  float *C, int64_t ldc)
{
    int64_t lane0[16];
    for (int l = 0; l < 16; l++) lane0[l] = crnn_kn_lane_start(K, l);
    (crnn_cpu_has_fma3() ? kn_packed_fma3 : kn_packed_generic)(M, N, K, A, a_i, a_k, Bp, lane0, C, ldc);
}

/* kn with B packed and A's term k at A[i * a_i + tap[k]], K <= 16 (core.h): blocks of rows
 * gathered, then the walk above */
void crnn_gemm16_kn_packed_taps_scalar(int64_t M, int64_t N, int64_t K, const float *A,
                                       int64_t a_i, const int64_t *tap, const float *Bp,
                                       float *C, int64_t ldc)
{
    enum { ROWS = 64 };
    float a[ROWS * 16];
    for (int64_t i0 = 0; i0 < M; i0 += ROWS) {
        const int64_t m = M - i0 < ROWS ? M - i0 : ROWS;
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < K; k++) a[i * K + k] = A[(i0 + i) * a_i + tap[k]];
        crnn_gemm16_kn_packed_scalar(m, N, K, a, K, 1, Bp, C + i0 * ldc, ldc);
    }
}

/* The same with the ±0 terms of each row of A left out (core.h), a row's 16 outputs again
 * with every term when one of them came out -0. */
void crnn_gemm16_kn_packed_sparse_scalar(int64_t M, int64_t N, int64_t K,
                                         const float *A, int64_t a_i, int64_t a_k,
                                         const float *Bp, float *C, int64_t ldc)
{
    int32_t *ks = a_k == 1 && K <= INT32_MAX / 16
        ? crnn_scratch(CRNN_SCRATCH_PACK_A, sizeof(int32_t) * (size_t)(K + 1)) : NULL;
    int64_t lane0[16];
    const int32_t *rowoff = ks ? packed_rows(K, lane0) : NULL;
    if (!rowoff) {
        crnn_gemm16_kn_packed_scalar(M, N, K, A, a_i, a_k, Bp, C, ldc);
        return;
    }
    (crnn_cpu_has_fma3() ? kn_sparse_fma3 : kn_sparse_generic)(ks, M, N, K, A, a_i, Bp, lane0, rowoff, C, ldc);
}

/* The same with A's terms read through a window's chunk offsets (core.h,
 * crnn_gemm16_kn_packed_sparse_win): blocks of rows gathered (values moved only) through
 * the walk above; nonzero without memory */
int crnn_gemm16_kn_packed_sparse_win_scalar(int64_t M, int64_t N, int64_t K, const float *A,
                                            int64_t a_i, const int64_t *coff, const float *Bp,
                                            float *C, int64_t ldc)
{
    enum { ROWS = 64 };
    int32_t *ks = K <= INT32_MAX / 16 ? crnn_scratch(CRNN_SCRATCH_PACK_A, sizeof(int32_t) * (size_t)(K + 1)) : NULL;
    float *rows = crnn_scratch(CRNN_SCRATCH_GATHER, sizeof(float) * (size_t)(ROWS * K + 1));
    int64_t lane0[16];
    const int32_t *rowoff = ks && rows ? packed_rows(K, lane0) : NULL;
    if (!rowoff) return 1;
    for (int64_t i0 = 0; i0 < M; i0 += ROWS) {
        const int64_t m = M - i0 < ROWS ? M - i0 : ROWS;
        for (int64_t i = 0; i < m; i++)          /* a chunk of 16 terms a move */
            for (int64_t c = 0; c < K / 16; c++)
                memcpy(rows + i * K + 16 * c, A + (i0 + i) * a_i + coff[c], 16 * sizeof(float));
        (crnn_cpu_has_fma3() ? kn_sparse_fma3 : kn_sparse_generic)(ks, m, N, K, rows, K, Bp, lane0,
                                                                   rowoff, C + i0 * ldc, ldc);
    }
    return 0;
}

/* Listed terms (core.h, crnn_gemm16_listed): the definition for 16 columns at a time —
 * each lane's listed fmas in order from +0, a -0 lane partial reported, the tree. */
AI void listed_def(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                   const int32_t *len, const float *B, const int32_t *coff, float *C, int64_t ldc,
                   int32_t *negz)
{
    for (int64_t i = 0; i < M; i++) {
        int neg = 0;
        for (int64_t c = 0; c < nb; c++) {
            float p[16][16];                   /* p[lane][column] */
            for (int l = 0; l < 16; l++) {
                for (int e = 0; e < 16; e++) p[l][e] = 0.0f;
                for (int32_t m = start[16 * i + l]; m < start[16 * i + l] + len[16 * i + l]; m++) {
                    const float *b = B + terms[m].off + coff[c];
                    for (int e = 0; e < 16; e++) p[l][e] = fmaf(terms[m].v, b[e], p[l][e]);
                }
                for (int e = 0; e < 16; e++) neg |= p[l][e] == 0.0f && signbit(p[l][e]);
            }
            for (int s = 8; s >= 1; s >>= 1)   /* the tree, a level at a time (kn_row_def) */
                for (int l = 0; l < s; l++)
                    for (int e = 0; e < 16; e++) p[l][e] = p[l][e] + p[l + s][e];
            for (int e = 0; e < 16; e++) C[i * ldc + c * 16 + e] = p[0][e];
        }
        negz[i] = neg;
    }
}

static void listed_generic(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                           const int32_t *len, const float *B, const int32_t *coff, float *C,
                           int64_t ldc, int32_t *negz)
{
    listed_def(M, nb, terms, start, len, B, coff, C, ldc, negz);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("fma")))
static void listed_fma3(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                        const int32_t *len, const float *B, const int32_t *coff, float *C,
                        int64_t ldc, int32_t *negz)
{
    listed_def(M, nb, terms, start, len, B, coff, C, ldc, negz);
}
#else
#define listed_fma3 listed_generic
#endif

void crnn_gemm16_listed_scalar(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                               const int32_t *len, const float *B, const int32_t *coff, float *C,
                               int64_t ldc, int32_t *negz)
{
    (crnn_cpu_has_fma3() ? listed_fma3 : listed_generic)(M, nb, terms, start, len, B, coff, C, ldc, negz);
}


/* Sparse rows of A (core.h, crnn_gemm16_sparse_rows): the definition with the ±0 terms of A
 * left out, 16 outputs at a time. A lane that gets no term is +0, and it is left out of the
 * tree as well: p[l] + p[l+s] where both lanes have terms, the one that has where only one
 * does; then +0 is added when some lane had none (x + +0 = x unless x is ±0, and the full
 * tree, one of whose leaves is +0, cannot end at -0): the full dot's bits wherever they
 * are not ±0, for a fraction of the adds when few lanes have terms. */
AI void sparse_rows_def(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                        int64_t ldb, float *C, int64_t ldc, int32_t *flag)
{
    for (int64_t i = 0; i < M; i++) {
        flag[i] = 0;
        for (int64_t j0 = 0; j0 < N; j0 += 16) {
            float p[16][16];                   /* p[lane][output] */
            unsigned have = 0;                 /* lanes with terms */
            for (int64_t k = 0; k < K; k++) {
                const float a = A[i * lda + k];
                if (a == 0.0f) continue;
                float *pl = p[k % 16];
                if (!(have >> (k % 16) & 1))
                    for (int e = 0; e < 16; e++) pl[e] = 0.0f;
                have |= 1u << (k % 16);
                for (int e = 0; e < 16; e++) pl[e] = fmaf(a, B[k * ldb + j0 + e], pl[e]);
            }
            const int full = have == 0xFFFFu;
            for (int s = 8; s >= 1; s >>= 1) {
                for (int l = 0; l < s; l++) {
                    if (!(have >> (l + s) & 1)) continue;
                    if (have >> l & 1)
                        for (int e = 0; e < 16; e++) p[l][e] = p[l][e] + p[l + s][e];
                    else
                        for (int e = 0; e < 16; e++) p[l][e] = p[l + s][e];
                }
                have = (have | have >> s) & ((1u << s) - 1);
            }
            for (int e = 0; e < 16; e++) {
                const float y = !have ? 0.0f : full ? p[0][e] : p[0][e] + 0.0f;
                C[i * ldc + j0 + e] = y;
                flag[i] |= y == 0.0f;
            }
        }
    }
}

static void sparse_rows_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                const float *B, int64_t ldb, float *C, int64_t ldc, int32_t *flag)
{
    sparse_rows_def(M, N, K, A, lda, B, ldb, C, ldc, flag);
}

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("fma")))
static void sparse_rows_fma3(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const float *B, int64_t ldb, float *C, int64_t ldc, int32_t *flag)
{
    sparse_rows_def(M, N, K, A, lda, B, ldb, C, ldc, flag);
}
#else
#define sparse_rows_fma3 sparse_rows_generic
#endif

void crnn_gemm16_sparse_rows_scalar(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                                    const float *B, int64_t ldb, float *C, int64_t ldc, int32_t *flag)
{
    (crnn_cpu_has_fma3() ? sparse_rows_fma3 : sparse_rows_generic)(M, N, K, A, lda, B, ldb, C, ldc, flag);
}
