/* core.h — internal interfaces of the bundled port (not part of the ABI). */
#ifndef CRNN_CORE_H
#define CRNN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include "../crnn_port.h"

#define CRNN_NISA 5

/* The x86 paths (the sse, avx2 and avx512 files of src/isa/, cpuid) are built on x86 only,
 * the neon path (the neon files of src/isa/) on aarch64 only; elsewhere those files compile
 * empty, crnn_isa_available does not report them and crnn_set_isa refuses them, so their
 * slots in the dispatch tables stay unused. */
#if defined(__x86_64__) || defined(__i386__)
#define CRNN_X86 1
#define CRNN_ISA_TABLE(prefix) \
    {prefix##_scalar, prefix##_sse, prefix##_avx2, prefix##_avx512, 0}
#elif defined(__aarch64__)
#define CRNN_X86 0
#define CRNN_ISA_TABLE(prefix) {prefix##_scalar, 0, 0, 0, prefix##_neon}
#else
#define CRNN_X86 0
#define CRNN_ISA_TABLE(prefix) {prefix##_scalar, 0, 0, 0, 0}
#endif

/* The fixed reduction tree of dot16: for s = 8, 4, 2, 1: p[i] = p[i] + p[i+s]. */
static inline float crnn_tree16(float p[16])
{
    for (int s = 8; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++)
            p[i] = p[i] + p[i + s];
    return p[0];
}

/* Two layouts of the same product; both compute every output as one dot16 of exactly K
 * terms, term k in lane k mod 16, whatever the ISA, the blocking or the thread split.
 *
 * "nt": C[i*ldc + j] = dot16(A + i*lda, B + j*ldb, K): both operands are read along rows
 *       (k contiguous). The vector paths hold an output's 16 partials across the lanes of
 *       its accumulator(s) and reduce a tile of outputs together with shuffles.
 * "kn": C[i*ldc + j] = dot16 over k of A[i*a_i + k*a_k] and B[k*b_k + j*b_j]: any strides.
 *       The vector paths hold lane l of VW consecutive outputs j per register (B's term k
 *       for those outputs is a row of B when b_j = 1, else gathered into a packed panel) and
 *       the 16 lanes in separate registers, so the tree is plain vertical adds. This covers
 *       dx = dY W (W's rows), dW = dYᵀ x (dots over time or positions, down the columns),
 *       a vector times a matrix, and with b_j != 1 also C = A Wᵀ, without transposing. */
typedef void (*crnn_gemm16_fn)(int64_t M, int64_t N, int64_t K,
                               const float *A, int64_t lda,
                               const float *B, int64_t ldb,
                               float *C, int64_t ldc);
typedef void (*crnn_gemm16_kn_fn)(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t a_i, int64_t a_k,
                                  const float *B, int64_t b_k, int64_t b_j,
                                  float *C, int64_t ldc);
#define CRNN_DECLARE_GEMM16(isa)                                                                 \
    void crnn_gemm16_##isa(int64_t, int64_t, int64_t, const float *, int64_t,                    \
                           const float *, int64_t, float *, int64_t);                            \
    void crnn_gemm16_kn_##isa(int64_t, int64_t, int64_t, const float *, int64_t, int64_t,        \
                              const float *, int64_t, int64_t, float *, int64_t);                \
    void crnn_gemm16_kn_packed_##isa(int64_t, int64_t, int64_t, const float *, int64_t, int64_t, \
                                     const float *, float *, int64_t);                           \
    void crnn_gemm16_kn_packed_sparse_##isa(int64_t, int64_t, int64_t, const float *, int64_t,   \
                                            int64_t, const float *, float *, int64_t);          \
    void crnn_gemm16_kn_packed_taps_##isa(int64_t, int64_t, int64_t, const float *, int64_t,     \
                                          const int64_t *, const float *, float *, int64_t);      \
    int crnn_gemm16_kn_packed_sparse_win_##isa(int64_t, int64_t, int64_t, const float *, int64_t, \
                                               const int64_t *, const float *, float *, int64_t); \
    void crnn_gemm16_cols_##isa(int64_t, const float *, const float *, int64_t, const int32_t *, \
                                int64_t, float *);
CRNN_DECLARE_GEMM16(scalar)
/* The scalar nt with the C library's fmaf (variant 0) or FMA3 (1, if the CPU has it): tests. */
void crnn_gemm16_scalar_variant(int variant, int64_t M, int64_t N, int64_t K,
                                const float *A, int64_t lda, const float *B, int64_t ldb,
                                float *C, int64_t ldc);
CRNN_DECLARE_GEMM16(sse)
CRNN_DECLARE_GEMM16(avx2)
CRNN_DECLARE_GEMM16(avx512)
CRNN_DECLARE_GEMM16(neon)

/* Dispatch on the selected ISA and split whole outputs (blocks of rows or of columns of C)
 * across the selected number of threads; run on the calling thread inside a parallel chunk. */
void crnn_gemm16(int64_t M, int64_t N, int64_t K,
                 const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc);
void crnn_gemm16_kn(int64_t M, int64_t N, int64_t K,
                    const float *A, int64_t a_i, int64_t a_k,
                    const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc);
/* kn with B given packed, as the kernels pack it themselves (a caller that builds B anyway,
 * like the conv backward's im2col, writes it in this layout and saves a copy): panels of 16
 * columns; panel jp holds the rows k of lane 0 (k = 0, 16, 32, ...), then those of lane 1,
 * ..., each row 16 floats (columns 16*jp .. 16*jp + 15, +0 past N). */
void crnn_gemm16_kn_packed(int64_t M, int64_t N, int64_t K,
                           const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                           float *C, int64_t ldc);
/* The same product with the terms k whose A(i, k) is ±0 in every row of a block of adjacent
 * rows left out (every B finite; a_k = 1, else every term). Exact: a left-out term has an
 * exact-zero product, which changes a lane partial only when that partial is -0 (-0 + +0 =
 * +0), and a step with a nonzero product forgets the sign of a zero partial; so, step by
 * step, the shortened lane equals the full one or is -0 where the full one is +0. The tree
 * keeps that relation (a sum of such pairs is equal unless both results are zeros, and then
 * the shortened one is the -0), so an output can differ from the full dot only when it comes
 * out -0, and the kernel computes such a block again with every term. */
void crnn_gemm16_kn_packed_sparse(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                                  float *C, int64_t ldc);
/* The same sparse product with a row's terms read through chunk offsets: term 16m + l of row
 * i at A[i * a_i + coff[m] + l] (K % 16 == 0): the windows of an image with C % 16 == 0
 * channels read from a zero-padded copy (coff[m]: the tap and channels of chunk m), no
 * im2col. On the calling thread; returns nonzero without memory for the masks. */
int crnn_gemm16_kn_packed_sparse_win(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                                     const int64_t *coff, const float *Bp, float *C, int64_t ldc);
/* The same product for K <= 16 (one term a lane) with A's term k of row i at
 * A[i * a_i + tap[k]]: the windows of a one-channel image read from a zero-padded copy, no
 * im2col (tap[k] = ky * padded width + kx). The same dot16 bits; on the calling thread. */
void crnn_gemm16_kn_packed_taps(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                                const int64_t *tap, const float *Bp, float *C, int64_t ldc);
/* 1 when every x[i] (i < n) is finite: then x * (±0) is an exact zero. */
int crnn_all_finite(const float *x, int64_t n);
/* dst[i] = src[i] for i < n; returns crnn_all_finite(src, n), found in the same pass. */
int crnn_copy_finite(float *dst, const float *src, int64_t n);
/* 1 when at least a quarter of x[i] (i < n) is ±0: enough zero terms for the sparse
 * kernel's masks to pay (after a ReLU and pool 64-68 % are; an image 1.6 %). */
int crnn_mostly_zero(const float *x, int64_t n);
/* That test from a count already made: `zeros` of n values are ±0. */
static inline int crnn_zeros_enough(int64_t zeros, int64_t n) { return 4 * zeros >= n; }
/* Index of B(k, j) in that layout. */
static inline int64_t crnn_kn_packed_index(int64_t K, int64_t k, int64_t j)
{
    int64_t l = k % 16, before = 0;
    for (int64_t m = 0; m < l; m++) before += K > m ? (K - m + 15) / 16 : 0;
    return (j / 16) * 16 * K + (before + k / 16) * 16 + j % 16;
}
/* The first row of lane l in a panel: the number of k < K with k mod 16 < l. */
static inline int64_t crnn_kn_lane_start(int64_t K, int l)
{
    int64_t before = 0;
    for (int m = 0; m < l; m++) before += K > m ? (K - m + 15) / 16 : 0;
    return before;
}

/* B(k, j) = B[k*b_k + j*b_j], k < K, j < N, into that layout (Bp holds 16*K*ceil(N/16)). */
void crnn_kn_pack(int64_t K, int64_t N, const float *B, int64_t b_k, int64_t b_j, float *Bp);
/* The same, its panels split across the threads: a weight packed before a product whose
 * rows the threads share is not left to the calling thread alone. */
void crnn_kn_pack_threads(int64_t K, int64_t N, const float *B, int64_t b_k, int64_t b_j, float *Bp);

/* Listed terms: dots most of whose terms are known to be exact zeros (a = ±0 times a finite
 * b), as in a conv dW whose dC is +0 away from the pool winners. Term t of a list has the
 * value a = v and reads B at B + off + coff[c] + e for column 16*c + e. Output row i's lane
 * l lists its nonzero terms in ascending term order: len[16*i + l] of them from
 * terms + start[16*i + l]. C[i*ldc + j] (j < 16*nb) = the tree of the 16 lane partials, each the fmas of its
 * listed terms in order from +0.
 *
 * Leaving out a term whose product is an exact zero changes a lane partial only when the
 * partial is -0 at that point (-0 + +0 = +0); a partial that is not -0 at the end is the
 * full dot's lane partial (both sequences agree up to the sign of a zero, and a step with a
 * nonzero product forgets that sign). So negz[i] = 1 when some lane partial of row i ended
 * at -0: the caller recomputes that row with every term; the other rows are exact. */
typedef struct {
    float v;
    int32_t off;
} crnn_term;
typedef void (*crnn_gemm16_listed_fn)(int64_t M, int64_t nb, const crnn_term *terms,
                                      const int32_t *start, const int32_t *len, const float *B,
                                      const int32_t *coff, float *C, int64_t ldc, int32_t *negz);
#define CRNN_DECLARE_GEMM16_LISTED(isa)                                                              \
    void crnn_gemm16_listed_##isa(int64_t, int64_t, const crnn_term *, const int32_t *,              \
                                  const int32_t *, const float *, const int32_t *, float *, int64_t, \
                                  int32_t *);
CRNN_DECLARE_GEMM16_LISTED(scalar)
CRNN_DECLARE_GEMM16_LISTED(sse)
CRNN_DECLARE_GEMM16_LISTED(avx2)
CRNN_DECLARE_GEMM16_LISTED(avx512)
CRNN_DECLARE_GEMM16_LISTED(neon)
/* The selected ISA's listed-terms kernel, rows split across the threads. */
void crnn_gemm16_listed(int64_t M, int64_t nb, const crnn_term *terms, const int32_t *start,
                        const int32_t *len, const float *B, const int32_t *coff, float *C,
                        int64_t ldc, int32_t *negz);

/* Sparse rows of A (row-major) times B (row-major): C[i*ldc + j] (j < N, N % 16 == 0) =
 * dot16 over k < K of A[i*lda + k] * B[k*ldb + j], with the terms whose A is ±0 left out
 * (every B finite). Each lane's nonzero terms run as fmas from +0 in ascending k; a lane
 * with none is +0 in the full dot too, so the tree adds only the lanes that have terms, in
 * the tree's own pairing, and one +0 at the end when any lane was empty (the full tree's
 * result cannot be -0 then). As for crnn_gemm16_listed, the result can differ from the full
 * dot only in the sign of a zero output: flag[i] = 1 when row i has a ±0 output, for a
 * caller whose result can show that sign to redo it with every term (the conv's dcol need
 * not: dx is a sum from +0). */
#define CRNN_DECLARE_GEMM16_SPARSE_ROWS(isa)                                                             \
    void crnn_gemm16_sparse_rows_##isa(int64_t, int64_t, int64_t, const float *, int64_t, const float *, \
                                       int64_t, float *, int64_t, int32_t *);
CRNN_DECLARE_GEMM16_SPARSE_ROWS(scalar)
CRNN_DECLARE_GEMM16_SPARSE_ROWS(sse)
CRNN_DECLARE_GEMM16_SPARSE_ROWS(avx2)
CRNN_DECLARE_GEMM16_SPARSE_ROWS(avx512)
CRNN_DECLARE_GEMM16_SPARSE_ROWS(neon)
void crnn_gemm16_sparse_rows(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                             const float *B, int64_t ldb, float *C, int64_t ldc, int32_t *flag);

/* c[cols[j]] = dot16(a, B + cols[j] * ldb, K) for j < n: one row of A against the listed rows
 * of B (nt), the other entries of c untouched; on the calling thread. The batch gradient's
 * first LSTM layer computes its dx only where the pool that made x passes a gradient. */
void crnn_gemm16_cols(int64_t K, const float *a, const float *B, int64_t ldb, const int32_t *cols,
                      int64_t n, float *c);

/* The selected ISA's kernels, to call on the current thread only. */
typedef void (*crnn_gemm16_kn_packed_fn)(int64_t M, int64_t N, int64_t K,
                                         const float *A, int64_t a_i, int64_t a_k, const float *Bp,
                                         float *C, int64_t ldc);
crnn_gemm16_fn crnn_gemm16_kernel(void);
crnn_gemm16_kn_fn crnn_gemm16_kn_kernel(void);
crnn_gemm16_kn_packed_fn crnn_gemm16_kn_packed_kernel(void);

/* A buffer of at least `bytes` owned by the calling thread and kept for its next calls
 * (scratch.c), or NULL when it cannot be allocated. One per slot, by nesting level: the batch
 * gradient (BATCH) runs lines (LINE), which call layer entry points (LAYER), which call the
 * gemm16 kernels (PACK_A/B); the contents are not kept. */
#define CRNN_SCRATCH_LAYER  0
#define CRNN_SCRATCH_PACK_A 1
#define CRNN_SCRATCH_PACK_B 2
#define CRNN_SCRATCH_LINE   3
#define CRNN_SCRATCH_BATCH  4
#define CRNN_SCRATCH_BAND   5   /* a band of rows inside a layer (conv forward) */
#define CRNN_SCRATCH_GATHER 6   /* rows a scalar kernel gathers before its walk */
#define CRNN_SCRATCH_SLOTS  7
void *crnn_scratch(int slot, size_t bytes);

/* crnn_conv_forward without its conv output (conv.c): each band's conv values are kept only
 * while its pool windows are taken (the batch gradient reads the pooled values and winners) */
int32_t crnn_conv_forward_pooled(const float *x, int32_t H, int32_t W, int32_t C,
                                 const float *Wt, const float *b, int32_t Out,
                                 int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                                 int32_t poolH, int32_t poolW, float *pooled, int32_t *winners);

/* The LSTM layer (lstm.c) for nl lines of the same length T at once, each line's tensors
 * where the ABI entry points put them (crnn_lstm_forward/backward are nl = 1), except the
 * backward's weight gradients: dW_ih, dW_hh and db hold a pointer per line and direction
 * ([2 * line + d]), so the batch gradient writes them straight into each line's gradient.
 * finiteW: 1 or 0 when the caller knows whether every W_ih is finite, -1 to find out here.
 * dxLive: dx[t][i] where x[t][i] is not ±0, +0 or the same dot elsewhere (x a pool's
 * output whose backward reads dx only where the pool passed a value); 0: every dx. */
int32_t crnn_lstm_forward_lines(int nl, const float *const *x, int32_t T, int32_t I, int32_t H,
                                const float *W_ih, const float *W_hh, const float *b,
                                float *const *out, float *const *gates, float *const *c,
                                float *const *tc, float *const *hPrev, int finiteW);
int32_t crnn_lstm_backward_lines(int nl, const float *const *x, int32_t T, int32_t I, int32_t H,
                                 const float *W_ih, const float *W_hh,
                                 const float *const *gates, const float *const *c,
                                 const float *const *tc, const float *const *hPrev,
                                 const float *const *dOut, float *const *dW_ih,
                                 float *const *dW_hh, float *const *db, float *const *dx,
                                 int dxLive);

/* Runs fn(ctx, begin, end) over [0, n) split into contiguous chunks, one per thread. */
typedef void (*crnn_range_fn)(void *ctx, int64_t begin, int64_t end);
void crnn_parallel_for(int64_t n, crnn_range_fn fn, void *ctx);
/* The same when `work` (the call's multiply-adds or element steps) is at least
 * CRNN_SMALL_WORK; below it fn(ctx, 0, n) on the calling thread, since waking a worker
 * costs more than such a call. Every output is computed whole either way: same bits. */
#define CRNN_SMALL_WORK 65536
void crnn_parallel_for_work(int64_t n, int64_t work, crnn_range_fn fn, void *ctx);

int crnn_current_isa(void);
/* Floats a vector of the current path holds (1 on the scalar path): for the choices between
 * algorithms that give the same bits, where the faster one depends on the width. */
int crnn_vector_floats(void);
/* The threads a call may use: the setting, or 1 inside a chunk of a parallel_for. */
int crnn_current_threads(void);
int crnn_in_chunk(void);

/* 1 when the CPU has FMA3 (the scalar definition then uses the instruction: same bits). */
int crnn_cpu_has_fma3(void);

#endif
