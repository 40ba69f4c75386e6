/* mutants.c — the alternative kernels of the mutant catalogue (docs/mutants.md).
 *
 * Compiled into every build but empty unless CRNN_MUTANT is defined: the normal build never
 * defines it, so it contains none of this. A mutant build (ctypes_kernels.build.build(
 * mutant=NAME)) defines CRNN_MUTANT=NAME and CRNN_MUTANT_<NAME>=1; the mistakes that live
 * in one layer's own arithmetic are #if blocks in that layer's file, the ones in the dots are
 * kernels here, swapped in by crnn_mutant_gemm16 (called by the dispatcher in dot16.c and
 * the LSTM's per-step products in lstm.c). Every kernel computes exactly what the mistaken
 * port would: an emulated kernel uses the same fma per term, so its bits are those of a
 * vector implementation of the same mistake. */
#include "mutants.h"

#if defined(CRNN_MUTANT)

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The catalogue (harness/mutants.py lists the same names): a define for any other name is
 * a typo that would silently build the correct port, so it is an error. */
#if !(defined(CRNN_MUTANT_DOT8) || defined(CRNN_MUTANT_SEQUENTIAL) ||                       \
      defined(CRNN_MUTANT_TREE_PAIRS) || defined(CRNN_MUTANT_THREAD_SPLIT) ||               \
      defined(CRNN_MUTANT_AVX2_TAIL_DROP) || defined(CRNN_MUTANT_AVX2_TAIL_OVERREAD) ||     \
      defined(CRNN_MUTANT_VEC_TAIL_ZERO_PAD) || defined(CRNN_MUTANT_BIAS_FIRST) ||          \
      defined(CRNN_MUTANT_SIGMOID_EXPF) || defined(CRNN_MUTANT_LSTM_CELL_FMA) ||            \
      defined(CRNN_MUTANT_LSTM_NO_DC_CARRY) || defined(CRNN_MUTANT_LSTM_GATES_IGFO) ||      \
      defined(CRNN_MUTANT_LSTM_BIAS_GROUPING) || defined(CRNN_MUTANT_POOL_TIES_LAST) ||     \
      defined(CRNN_MUTANT_POOL_KEEPS_PARTIAL) || defined(CRNN_MUTANT_WINNER_WINDOW_RELATIVE) || \
      defined(CRNN_MUTANT_DX_TAPS_KX_FIRST) || defined(CRNN_MUTANT_CONV_CHW_TAPS) ||        \
      defined(CRNN_MUTANT_CTC_MEAN_BY_LENGTH) || defined(CRNN_MUTANT_CTC_GRAD_FLOAT) ||     \
      defined(CRNN_MUTANT_LOGSOFTMAX_DESCENDING) || defined(CRNN_MUTANT_BATCH_SUM_REVERSE) || \
      defined(CRNN_MUTANT_BATCH_LOSS_FINITE_ONLY) || defined(CRNN_MUTANT_NORM_FLOAT) ||     \
      defined(CRNN_MUTANT_ADAMW_DECAY_ALL) ||                                               \
      /* edge rules */                                                                      \
      defined(CRNN_MUTANT_CTC_LIBM) || defined(CRNN_MUTANT_POOL_MAXPS) ||                    \
      defined(CRNN_MUTANT_CONV_K_TERMS) || defined(CRNN_MUTANT_SPARSE_DW_NO_REDO) ||         \
      defined(CRNN_MUTANT_BATCH_SUM_ZERO_START) || defined(CRNN_MUTANT_CLIP_GE) ||           \
      defined(CRNN_MUTANT_CLIP_FACTOR_FLOAT) || defined(CRNN_MUTANT_ADAMW_DECAY_FLOAT) ||  \
      defined(CRNN_MUTANT_SIGMOID_CLAMP_88) || defined(CRNN_MUTANT_EXP_THRESHOLD_GE) || \
      /* legal orders */                                                                    \
      defined(CRNN_MUTANT_DOT_F64_ACC) || defined(CRNN_MUTANT_DOT_KAHAN) ||                 \
      defined(CRNN_MUTANT_DOT_RANDOM_ORDER) || defined(CRNN_MUTANT_CONTRACT_FAST) ||        \
      /* precision bugs */                                                                  \
      defined(CRNN_MUTANT_DOT_BF16) || defined(CRNN_MUTANT_DOT_TF32) ||                     \
      defined(CRNN_MUTANT_LSTM_C_FP16) || defined(CRNN_MUTANT_EXP_POLY_SHORT) ||            \
      defined(CRNN_MUTANT_ADAMW_STATE_BF16) || defined(CRNN_MUTANT_MASTER_FP16) ||          \
      defined(CRNN_MUTANT_CTC_FLOAT32))
#error "unknown CRNN_MUTANT: add it to the catalogue (mutants.c, harness/mutants.py, docs/mutants.md)"
#endif

#define STR_(x) #x
#define STR(x) STR_(x)
/* Marks a mutant build: harness/mutants.py checks that the library it gates is the mutant. */
const char crnn_mutant_name[] = STR(CRNN_MUTANT);

/* ---- emulated dots: lanes, reduction tree and tail rule of the mistaken port ----------- */

#define MUT_INLINE static inline __attribute__((always_inline))

enum { TREE_HALVING, TREE_PAIRS };

#if defined(CRNN_MUTANT_DOT8)
#define EMUL_LANES 8            /* an AVX2 port with one 8-lane accumulator */
#define EMUL_TREE TREE_HALVING
#define EMUL_PAD 0
#elif defined(CRNN_MUTANT_SEQUENTIAL)
#define EMUL_LANES 1            /* one fma chain */
#define EMUL_TREE TREE_HALVING
#define EMUL_PAD 0
#elif defined(CRNN_MUTANT_TREE_PAIRS)
#define EMUL_LANES 16           /* the tree adds neighbours: p[i] + p[i+1], then by 2, 4, 8 */
#define EMUL_TREE TREE_PAIRS
#define EMUL_PAD 0
#elif defined(CRNN_MUTANT_VEC_TAIL_ZERO_PAD)
#define EMUL_LANES 16           /* the right lanes and tree; the tail is padded with zeros */
#define EMUL_TREE TREE_HALVING
#define EMUL_PAD 1
#elif defined(CRNN_MUTANT_BIAS_FIRST)
#define EMUL_LANES 16           /* the right lanes and tree; lane 0 starts at the bias */
#define EMUL_TREE TREE_HALVING
#define EMUL_PAD 0
#endif

#if defined(CRNN_MUTANT_DOT_BF16) || defined(CRNN_MUTANT_DOT_TF32)
#define EMUL_LANES 16           /* the right lanes and tree; the operands rounded first */
#define EMUL_TREE TREE_HALVING
#define EMUL_PAD 0
#endif

#if defined(EMUL_LANES)
#if defined(CRNN_MUTANT_DOT_BF16)
#define EMUL_OPERAND(x) crnn_mutant_round_mantissa(x, 7)     /* bfloat16: 8 significant bits */
#elif defined(CRNN_MUTANT_DOT_TF32)
#define EMUL_OPERAND(x) crnn_mutant_round_mantissa(x, 10)    /* TF32: 11 significant bits */
#else
#define EMUL_OPERAND(x) (x)
#endif
/* p[k mod LANES] = fma(a[k], b[k], p[k mod LANES]) from +0 (lane 0 from init0), the tail
 * padded with fma(0, 0, p) up to a multiple of 16 when EMUL_PAD, then the tree. */
MUT_INLINE float emul_dot(const float *a, const float *b, int64_t n, float init0)
{
    float p[16] = {0};
    p[0] = init0;
    for (int64_t k = 0; k < n; k++)
        p[k % EMUL_LANES] = fmaf(EMUL_OPERAND(a[k]), EMUL_OPERAND(b[k]), p[k % EMUL_LANES]);
    if (EMUL_PAD)
        for (int64_t k = n; k % 16 != 0; k++)
            p[k % 16] = fmaf(0.0f, 0.0f, p[k % 16]);   /* +0 + -0 = +0: a -0 lane turns +0 */
    if (EMUL_TREE == TREE_PAIRS) {
        for (int s = 1; s < EMUL_LANES; s <<= 1)
            for (int i = 0; i < EMUL_LANES; i += 2 * s)
                p[i] = p[i] + p[i + s];
    } else {
        for (int s = EMUL_LANES / 2; s >= 1; s >>= 1)
            for (int i = 0; i < s; i++)
                p[i] = p[i] + p[i + s];
    }
    return p[0];
}

MUT_INLINE void emul_gemm_body(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               const float *B, int64_t ldb, const float *bias,
                               float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = emul_dot(A + i * lda, B + j * ldb, K, bias ? bias[j] : 0.0f);
}

static void emul_gemm_generic(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                              const float *B, int64_t ldb, const float *bias,
                              float *C, int64_t ldc)
{
    emul_gemm_body(M, N, K, A, lda, B, ldb, bias, C, ldc);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same emulation with the FMA3 instruction (glibc's software fmaf is ~15 ns a call):
 * an fma has one correct result, so the bits are the same. */
__attribute__((target("fma")))
static void emul_gemm_fma3(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc)
{
    emul_gemm_body(M, N, K, A, lda, B, ldb, bias, C, ldc);
}
#else
#define emul_gemm_fma3 emul_gemm_generic
#endif

static void emul_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                      const float *B, int64_t ldb, const float *bias, float *C, int64_t ldc)
{
    (crnn_cpu_has_fma3() ? emul_gemm_fma3 : emul_gemm_generic)(M, N, K, A, lda, B, ldb, bias, C, ldc);
}

static void gemm_emulated(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                          const float *B, int64_t ldb, float *C, int64_t ldc)
{
    emul_gemm(M, N, K, A, lda, B, ldb, NULL, C, ldc);
}
#endif /* EMUL_LANES */

#if defined(CRNN_MUTANT_DOT_F64_ACC) || defined(CRNN_MUTANT_DOT_KAHAN) || \
    defined(CRNN_MUTANT_DOT_RANDOM_ORDER)
/* Legal orders of the same sum: each dot accumulated in binary64 and rounded once;
 * compensated (Kahan) summation of the binary32 products; or L lanes (L from 2 to 40, a
 * pseudo-random function of the call's shape) combined by a pseudo-random tree. */
#if defined(CRNN_MUTANT_DOT_RANDOM_ORDER)
static uint32_t lcg(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return *s >> 8; }
#endif

MUT_INLINE float other_dot(const float *a, const float *b, int64_t n, uint32_t seed)
{
#if defined(CRNN_MUTANT_DOT_F64_ACC)
    (void)seed;
    double s = 0.0;
    for (int64_t k = 0; k < n; k++) s += (double)a[k] * (double)b[k];
    return (float)s;
#elif defined(CRNN_MUTANT_DOT_KAHAN)
    (void)seed;
    float s = 0.0f, c = 0.0f;
    for (int64_t k = 0; k < n; k++) {
        float y = a[k] * b[k] - c;
        float t = s + y;
        c = (t - s) - y;
        s = t;
    }
    return s;
#else
    float p[40] = {0};
    int L = 2 + (int)(lcg(&seed) % 39);
    for (int64_t k = 0; k < n; k++) p[k % L] = fmaf(a[k], b[k], p[k % L]);
    for (int m = L; m > 1; m--) {          /* add two lanes chosen at random, m lanes left */
        int i = (int)(lcg(&seed) % (uint32_t)m), j = (int)(lcg(&seed) % (uint32_t)(m - 1));
        if (j >= i) j++;
        if (i > j) { int t = i; i = j; j = t; }
        p[i] = p[i] + p[j];
        p[j] = p[m - 1];
    }
    return p[0];
#endif
}

static void gemm_other(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc)
{
    uint32_t seed = (uint32_t)(K * 2654435761u + (uint64_t)M * 40503u + (uint64_t)N * 977u);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = other_dot(A + i * lda, B + j * ldb, K, seed);
}
#endif

#if defined(CRNN_MUTANT_BIAS_FIRST)
void crnn_mutant_gemm16_bias_first(int64_t M, int64_t N, int64_t K,
                                   const float *A, int64_t lda, const float *B, int64_t ldb,
                                   const float *bias, float *C, int64_t ldc)
{
    emul_gemm(M, N, K, A, lda, B, ldb, bias, C, ldc);
}
#endif

/* ---- wrappers around the bundled kernel of one path ----------------------------------- */

#if defined(CRNN_MUTANT_VEC_TAIL_ZERO_PAD)
/* The vector paths pad a tail with zeros and run it as one more whole vector; a dot of whole
 * 16-term groups has no tail, so it is the bundled kernel's. */
#define VEC_WRAP(isa)                                                                        \
    static void tailpad_##isa(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, \
                              const float *B, int64_t ldb, float *C, int64_t ldc)          \
    {                                                                                       \
        if (K % 16 == 0) crnn_gemm16_##isa(M, N, K, A, lda, B, ldb, C, ldc);                 \
        else emul_gemm(M, N, K, A, lda, B, ldb, NULL, C, ldc);                              \
    }
VEC_WRAP(sse)
VEC_WRAP(avx2)
VEC_WRAP(avx512)
#endif

#if defined(CRNN_MUTANT_THREAD_SPLIT)
/* A long dot is split across the threads: each of the t = threads chunks (whole 16-term
 * groups) is a dot16 of its own, and the chunk results are added in order. With one thread
 * it is the bundled dot; with two or more the bits depend on t. */
#define SPLIT_MIN_K 256
static void split_gemm(crnn_gemm16_fn fn, int64_t M, int64_t N, int64_t K,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float *C, int64_t ldc)
{
    int64_t t = crnn_current_threads();
    float *tmp = t > 1 && K >= SPLIT_MIN_K ? malloc(sizeof(float) * (size_t)(M * N)) : NULL;
    if (!tmp) {
        fn(M, N, K, A, lda, B, ldb, C, ldc);
        return;
    }
    int64_t per = ((K + 15) / 16 + t - 1) / t * 16;
    fn(M, N, per, A, lda, B, ldb, C, ldc);
    for (int64_t k0 = per; k0 < K; k0 += per) {
        int64_t len = K - k0 < per ? K - k0 : per;
        fn(M, N, len, A + k0, lda, B + k0, ldb, tmp, N);
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = C[i * ldc + j] + tmp[i * N + j];
    }
    free(tmp);
}
#define SPLIT_WRAP(isa)                                                                     \
    static void split_##isa(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,  \
                            const float *B, int64_t ldb, float *C, int64_t ldc)           \
    {                                                                                      \
        split_gemm(crnn_gemm16_##isa, M, N, K, A, lda, B, ldb, C, ldc);                     \
    }
SPLIT_WRAP(scalar)
SPLIT_WRAP(sse)
SPLIT_WRAP(avx2)
SPLIT_WRAP(avx512)
#endif

#if defined(CRNN_MUTANT_AVX2_TAIL_DROP)
/* The AVX2 path runs whole 16-term groups only: the last K mod 16 terms are lost. */
static void avx2_tail_drop(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           const float *B, int64_t ldb, float *C, int64_t ldc)
{
    crnn_gemm16_avx2(M, N, K & ~(int64_t)15, A, lda, B, ldb, C, ldc);
}
#endif

#if defined(CRNN_MUTANT_AVX2_TAIL_OVERREAD)
/* The AVX2 path loads whole vectors over the tail: up to 15 elements past the end of each
 * row are read and used as terms (the next row's values, or whatever follows the buffer). */
static void avx2_tail_overread(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                               const float *B, int64_t ldb, float *C, int64_t ldc)
{
    crnn_gemm16_avx2(M, N, (K + 15) & ~(int64_t)15, A, lda, B, ldb, C, ldc);
}
#endif

crnn_gemm16_fn crnn_mutant_gemm16(int isa, crnn_gemm16_fn normal)
{
    (void)isa;
#if defined(CRNN_MUTANT_DOT8) || defined(CRNN_MUTANT_SEQUENTIAL) || defined(CRNN_MUTANT_TREE_PAIRS) || \
    defined(CRNN_MUTANT_DOT_BF16) || defined(CRNN_MUTANT_DOT_TF32)
    return gemm_emulated;                     /* every path */
#elif defined(CRNN_MUTANT_DOT_F64_ACC) || defined(CRNN_MUTANT_DOT_KAHAN) || \
    defined(CRNN_MUTANT_DOT_RANDOM_ORDER)
    return gemm_other;                        /* every path */
#elif defined(CRNN_MUTANT_VEC_TAIL_ZERO_PAD)
    static const crnn_gemm16_fn k[CRNN_NISA] = {NULL, tailpad_sse, tailpad_avx2, tailpad_avx512};
    return isa > 0 && isa < CRNN_NISA ? k[isa] : normal;   /* the vector paths only */
#elif defined(CRNN_MUTANT_THREAD_SPLIT)
    static const crnn_gemm16_fn k[CRNN_NISA] = {split_scalar, split_sse, split_avx2, split_avx512};
    return isa >= 0 && isa < CRNN_NISA ? k[isa] : normal;
#elif defined(CRNN_MUTANT_AVX2_TAIL_DROP)
    return isa == CRNN_ISA_AVX2 ? avx2_tail_drop : normal;
#elif defined(CRNN_MUTANT_AVX2_TAIL_OVERREAD)
    return isa == CRNN_ISA_AVX2 ? avx2_tail_overread : normal;
#else
    return normal;
#endif
}

/* x rounded to nearest even at `bits` explicit mantissa bits (bfloat16: 7, TF32 and binary16:
 * 10), exponent range unchanged: the reduced-precision storage of the precision mutants. */
float crnn_mutant_round_mantissa(float x, int bits)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u) return x;          /* inf, NaN */
    int drop = 23 - bits;
    uint32_t half = 1u << (drop - 1), low = u & ((1u << drop) - 1);
    u &= ~((1u << drop) - 1);
    if (low > half || (low == half && (u >> drop & 1u))) u += 1u << drop;
    memcpy(&x, &u, 4);
    return x;
}

#if defined(CRNN_MUTANT_SIGMOID_EXPF)
void crnn_mutant_sigmoid_expf(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = 1.0f / (1.0f + expf(-x[k]));
}
#endif

#else
/* The normal build: nothing (ISO C wants a translation unit to declare something). */
typedef int crnn_mutants_unused;
#endif
