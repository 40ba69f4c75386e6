/* gemm16_impl.h — the vector algorithms of gemm16, included by each thin per-ISA file after
 * its vec_*.h. Both compute every output as dot16 (docs/numerics.md): 16 partials from +0,
 * term k into lane k mod 16 in ascending k, then the tree p[i] + p[i+s] for s = 8, 4, 2, 1.
 * Only where the partials live differs; no output ever shares a partial with another, and a
 * lane that receives no term keeps its +0 (no zero padding).
 *
 * nt (C = A Bᵀ, both read along k): an output's 16 partials are the lanes of its NV = 16/VW
 *   accumulators. A tile of VW outputs (4x4 on 512-bit, 2x4 on 256-bit, 2x2 on 128-bit, or
 *   one row of VW when M is small) is accumulated in passes that fit the register file; the
 *   last K mod 16 terms go through a masked fma (the other lanes unchanged). The levels
 *   s >= VW of the tree add whole registers; the rest (vtree_tile in vec_*.h) brings the VW
 *   outputs together with shuffles so each add is still lane i + lane i+s of one output, and
 *   returns the VW results in one register.
 * kn (C[i][j] = sum_k A(i,k) B[k][j], B read down its columns): a register holds lane l of
 *   VW consecutive outputs j. The lanes are computed four at a time (a, a+8, a+4, a+12 for
 *   a = 0, 2, 1, 3: each lane's terms k = l, l+16, ... in ascending order, four independent
 *   chains) and combined as soon as the tree allows, so the tree is vertical adds in its own
 *   order. A block is MR rows x NR registers of outputs; the last register of a row may be
 *   partial (masked loads and stores). */
#include <string.h>
#include "../core.h"

#define NV (16 / VW)
#ifndef VREG_CONSTRAINT
#define VREG_CONSTRAINT "+x"     /* an SSE/AVX register */
#endif
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* kn blocks: at most KN_QMAX output registers, each with KN_LG accumulators while a group
 * of KN_LG lanes runs (enough independent fma chains to cover the latency).
 * 512-bit (32 registers): the fma takes A's splat from memory for free, so blocks are rows
 * of A (up to 4 x 1: one load of B per 4 fmas), four lanes at a time.
 * 256-bit (16 registers): a splat is an instruction of its own, so blocks are 2 x 2 (one
 * splat and one load per 2 fmas), two lanes at a time; 128-bit: 1 x 3, four lanes at a time.
 * Two block variants chosen at run time, each measured faster on its paths (paired warm
 * A/B of the training step, docs/performance.md): KN_AU, for A unpacked with a_k = 1 (its
 * four lanes one pointer, a known step: the loop needs fewer registers); KN_KSPEC (256-bit),
 * K = 16, 32, 64 as constants. */
#define KN_AU 1
#define KN_KSPEC (VW == 8)
#if VW == 16
#define KN_QMAX 4
#define KN_NR_PREF 1
#define KN_LG 4
#elif VW == 8
#define KN_QMAX 4
#define KN_NR_PREF 2
#define KN_LG 2
#else
#define KN_QMAX 3
#define KN_NR_PREF 3
#define KN_LG 4
#endif

/* ================================ nt ===================================== */

#if VW == 16
#define NT_PASS 16      /* outputs accumulated at once */
#define NT_TR 4         /* rows of the big tile */
#elif VW == 8
#define NT_PASS 4
#define NT_TR 2
#else
#define NT_PASS 2
#define NT_TR 2
#endif

/* One tile of TR x (VW/TR) outputs: rows nr <= TR of A, columns nc <= VW/TR of B are valid
 * (the others repeat the last valid one and are not stored). */
AI void nt_tile(const int TR, int64_t K, const float *A, int64_t lda, int nr,
                const float *B, int64_t ldb, int nc, float *C, int64_t ldc)
{
    const int TC = VW / TR;
    const float *ar[VW], *bc[VW];
    UNROLL
    for (int r = 0; r < TR; r++) ar[r] = A + (r < nr ? r : nr - 1) * lda;
    UNROLL
    for (int c = 0; c < TC; c++) bc[c] = B + (c < nc ? c : nc - 1) * ldb;
    const int64_t kfull = K & ~(int64_t)15;
    const int tail = (int)(K - kfull);
    vec_t red[VW];
    UNROLL
    for (int p = 0; p < VW / NT_PASS; p++) {
        vec_t acc[NT_PASS][NV];
        UNROLL
        for (int o = 0; o < NT_PASS; o++)
            UNROLL
            for (int v = 0; v < NV; v++) acc[o][v] = VZERO();
        for (int64_t k = 0; k < kfull; k += 16)
            UNROLL
            for (int v = 0; v < NV; v++)
                UNROLL
                for (int o = 0; o < NT_PASS; o++) {
                    const int q = p * NT_PASS + o;
                    acc[o][v] = VFMA(VLOADU(ar[q / TC] + k + v * VW),
                                     VLOADU(bc[q % TC] + k + v * VW), acc[o][v]);
                }
        if (tail) {
            UNROLL
            for (int v = 0; v < NV; v++) {
                const int n = tail - v * VW;
                if (n <= 0) break;
                UNROLL
                for (int o = 0; o < NT_PASS; o++) {
                    const int q = p * NT_PASS + o;
                    const float *a = ar[q / TC] + kfull + v * VW, *b = bc[q % TC] + kfull + v * VW;
                    acc[o][v] = n >= VW ? VFMA(VLOADU(a), VLOADU(b), acc[o][v])
                                        : VFMA_N(VLOADN(a, n), VLOADN(b, n), acc[o][v], n);
                }
            }
        }
        UNROLL
        for (int s = NV / 2; s >= 1; s >>= 1)     /* tree levels s*VW >= VW: whole registers */
            UNROLL
            for (int v = 0; v < s; v++)
                UNROLL
                for (int o = 0; o < NT_PASS; o++) acc[o][v] = VADD(acc[o][v], acc[o][v + s]);
        UNROLL
        for (int o = 0; o < NT_PASS; o++) red[p * NT_PASS + o] = acc[o][0];
    }
    float out[VW];
    VSTOREU(out, vtree_tile(red));
    for (int r = 0; r < nr; r++) {
        if (nc == TC) memcpy(C + r * ldc, out + r * TC, sizeof(float) * (size_t)TC);
        else
            for (int c = 0; c < nc; c++) C[r * ldc + c] = out[r * TC + c];
    }
}

/* One row of A against VW rows of B with K = 16*nk, nk <= 8 (an LSTM step's h·W_hhᵀ): the
 * row of A stays in registers and each row of B is read straight through, one stream at a
 * time; the same lanes, the same tree. */
#define NT_SHORT_NK (8 / NV)
AI void nt_row_short(int nk, const float *a, const float *B, int64_t ldb, int nc, float *c)
{
    vec_t av[NT_SHORT_NK][NV], red[VW];
    UNROLL
    for (int kk = 0; kk < NT_SHORT_NK; kk++)
        UNROLL
        for (int v = 0; v < NV; v++) av[kk][v] = kk < nk ? VLOADU(a + kk * 16 + v * VW) : VZERO();
    UNROLL
    for (int o = 0; o < VW; o++) {
        const float *b = B + (o < nc ? o : nc - 1) * ldb;
        vec_t x[NV];
        UNROLL
        for (int v = 0; v < NV; v++) x[v] = VZERO();
        UNROLL
        for (int kk = 0; kk < NT_SHORT_NK; kk++)
            if (kk < nk)
                UNROLL
                for (int v = 0; v < NV; v++) x[v] = VFMA(av[kk][v], VLOADU(b + kk * 16 + v * VW), x[v]);
        UNROLL
        for (int s = NV / 2; s >= 1; s >>= 1)
            UNROLL
            for (int v = 0; v < s; v++) x[v] = VADD(x[v], x[v + s]);
        red[o] = x[0];
    }
    float out[VW];
    VSTOREU(out, vtree_tile(red));
    memcpy(c, out, sizeof(float) * (size_t)nc);
}

AI void nt_rows(const int TR, int64_t i0, int64_t i1, int64_t N, int64_t K,
                const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    const int TC = VW / TR;
    if (TR == 1 && K % 16 == 0 && K > 0 && K <= 16 * NT_SHORT_NK) {
        for (int64_t i = i0; i < i1; i++)
            for (int64_t j = 0; j < N; j += VW)
                nt_row_short((int)(K / 16), A + i * lda, B + j * ldb, ldb,
                             N - j < VW ? (int)(N - j) : VW, C + i * ldc + j);
        return;
    }
    for (int64_t i = i0; i < i1; i += TR) {
        int nr = i1 - i < TR ? (int)(i1 - i) : TR;
        for (int64_t j = 0; j < N; j += TC) {
            int nc = N - j < TC ? (int)(N - j) : TC;
            if (TR == 1) nt_tile(1, K, A + i * lda, lda, nr, B + j * ldb, ldb, nc, C + i * ldc + j, ldc);
            else nt_tile(NT_TR, K, A + i * lda, lda, nr, B + j * ldb, ldb, nc, C + i * ldc + j, ldc);
        }
    }
}

void CAT(crnn_gemm16, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t lda,
                                  const float *B, int64_t ldb,
                                  float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (M > 1 && M < NT_TR) {     /* a few rows: one tile (rows repeated, not stored), B read once */
        nt_rows(NT_TR, 0, M, N, K, A, lda, B, ldb, C, ldc);
        return;
    }
    /* full tiles of NT_TR rows, the remaining rows one at a time */
    int64_t mt = M >= NT_TR ? M / NT_TR * NT_TR : 0;
    if (mt) nt_rows(NT_TR, 0, mt, N, K, A, lda, B, ldb, C, ldc);
    if (mt < M) nt_rows(1, mt, M, N, K, A, lda, B, ldb, C, ldc);
}

/* ================================ kn ===================================== */

/* Where lane l's terms are: operand X's term k = l + 16m is at X + off[l] + m*step (row
 * stride rs between the MR rows of A). Unpacked: off[l] = l*ld, step = 16*ld. Packed
 * (lane-major, below): the terms of lane 0, then lane 1, ..., each run contiguous. */
typedef struct {
    const float *p;
    int64_t off[16], step, rs;
    int64_t vs;           /* B: from one output register's columns to the next's */
} kn_operand;

/* One term k of lane-partials x (MR x NR registers): x[r*NR + v] += A(r, k) * B(k, v). */
AI void kn_term(const int MR, const int NR, const float *a, int64_t ars, const float *b,
                int64_t bvs, int last, vec_t *x)
{
    vec_t bv[KN_QMAX];
    UNROLL
    for (int v = 0; v < NR; v++) {
        bv[v] = v == NR - 1 && last < VW ? VLOADN(b + v * bvs, last) : VLOADU(b + v * bvs);
#if VW < 16 && defined(__GNUC__)
        /* keep B in a register for all MR rows instead of one memory operand per fma
         * (a load is the scarce resource when every splat is an instruction) */
        if (MR > 1) __asm__("" : VREG_CONSTRAINT(bv[v]));
#endif
    }
    UNROLL
    for (int r = 0; r < MR; r++) {
        vec_t av = VSET1(a[r * ars]);
        UNROLL
        for (int v = 0; v < NR; v++) x[r * NR + v] = VFMA(av, bv[v], x[r * NR + v]);
    }
}

/* Lanes a, a+8, a+4, a+12 (a < 4) together — four independent fma chains per output
 * register, enough to cover the fma latency — each lane's terms k = l, l+16, ... in
 * ascending order from +0; then the first two tree levels of that group:
 * y = (p[a] + p[a+8]) + (p[a+4] + p[a+12]). */
AI void kn_group(const int MR, const int NR, const int AU, int a, int64_t K, const kn_operand *A,
                 const kn_operand *B, int last, vec_t *y)
{
    enum { Q = KN_QMAX };
    vec_t x0[Q], x8[Q], x4[Q], x12[Q];
    UNROLL
    for (int q = 0; q < MR * NR; q++) x0[q] = x8[q] = x4[q] = x12[q] = VZERO();
    /* terms per lane: ceil((K - l) / 16); lane a has the most, a+12 the fewest (one less
     * at most), so all four run together for the fewest and the others finish alone */
    const int64_t n12 = K > a + 12 ? (K - a - 12 + 15) / 16 : 0;
    const int64_t n8 = K > a + 8 ? (K - a - 8 + 15) / 16 : 0;
    const int64_t n4 = K > a + 4 ? (K - a - 4 + 15) / 16 : 0;
    const int64_t n0 = K > a ? (K - a + 15) / 16 : 0;
    /* AU: A's lanes are consecutive floats (a_k = 1, unpacked): one pointer for all four,
     * a known step (fewer registers in the loop) */
    const float *pa0 = A->p + (AU ? a : A->off[a]);
    const float *pa8 = AU ? pa0 + 8 : A->p + A->off[a + 8];
    const float *pa4 = AU ? pa0 + 4 : A->p + A->off[a + 4];
    const float *pa12 = AU ? pa0 + 12 : A->p + A->off[a + 12];
    const float *pb0 = B->p + B->off[a], *pb8 = B->p + B->off[a + 8];
    const float *pb4 = B->p + B->off[a + 4], *pb12 = B->p + B->off[a + 12];
    const int64_t as = AU ? 16 : A->step, bs = B->step, ars = A->rs, bvs = B->vs;
    int64_t m = 0;
    for (; m < n12; m++) {
        kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
        kn_term(MR, NR, pa8 + m * as, ars, pb8 + m * bs, bvs, last, x8);
        kn_term(MR, NR, pa4 + m * as, ars, pb4 + m * bs, bvs, last, x4);
        kn_term(MR, NR, pa12 + m * as, ars, pb12 + m * bs, bvs, last, x12);
    }
    if (n0 > m) kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
    if (n8 > m) kn_term(MR, NR, pa8 + m * as, ars, pb8 + m * bs, bvs, last, x8);
    if (n4 > m) kn_term(MR, NR, pa4 + m * as, ars, pb4 + m * bs, bvs, last, x4);
    UNROLL
    for (int q = 0; q < MR * NR; q++)
        y[q] = VADD(VADD(x0[q], x8[q]), VADD(x4[q], x12[q]));
}

/* Lanes a and a+8 together (two fma chains per output register), each lane's terms in
 * ascending order from +0; then the first tree level: y = p[a] + p[a+8]. */
AI void kn_pair(const int MR, const int NR, const int AU, int a, int64_t K, const kn_operand *A,
                const kn_operand *B, int last, vec_t *y)
{
    enum { Q = KN_QMAX };
    vec_t x0[Q], x8[Q];
    UNROLL
    for (int q = 0; q < MR * NR; q++) x0[q] = x8[q] = VZERO();
    const int64_t n8 = K > a + 8 ? (K - a - 8 + 15) / 16 : 0;
    const int64_t n0 = K > a ? (K - a + 15) / 16 : 0;
    const float *pa0 = A->p + (AU ? a : A->off[a]);
    const float *pa8 = AU ? pa0 + 8 : A->p + A->off[a + 8];
    const float *pb0 = B->p + B->off[a], *pb8 = B->p + B->off[a + 8];
    const int64_t as = AU ? 16 : A->step, bs = B->step, ars = A->rs, bvs = B->vs;
    int64_t m = 0;
    for (; m < n8; m++) {
        kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
        kn_term(MR, NR, pa8 + m * as, ars, pb8 + m * bs, bvs, last, x8);
    }
    if (n0 > m) kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
    UNROLL
    for (int q = 0; q < MR * NR; q++) y[q] = VADD(x0[q], x8[q]);
}

/* MR x NR registers of outputs: C[r*ldc + v*VW + e]; the last register holds `last` outputs.
 * The tree from the groups, level by level: q_a = p[a] + p[a+8]; r_a = q_a + q_{a+4};
 * u_a = r_a + r_{a+2}; the result u_0 + u_1 — exactly the levels s = 8, 4, 2, 1. */
AI void kn_block(const int MR, const int NR, const int AU, int64_t K, const kn_operand *A,
                 const kn_operand *B, float *C, int64_t ldc, int last, int masked)
{
    enum { Q = KN_QMAX };
    vec_t u0[Q], u1[Q], t[Q];
    const int lastload = masked ? last : VW;
#define VSUM(d, a, b) UNROLL for (int q = 0; q < MR * NR; q++) d[q] = VADD(a[q], b[q])
#if KN_LG == 4
    kn_group(MR, NR, AU, 0, K, A, B, lastload, u0);        /* r0 */
    kn_group(MR, NR, AU, 2, K, A, B, lastload, t);         /* r2 */
    VSUM(u0, u0, t);
    kn_group(MR, NR, AU, 1, K, A, B, lastload, u1);        /* r1 */
    kn_group(MR, NR, AU, 3, K, A, B, lastload, t);         /* r3 */
    VSUM(u1, u1, t);
#else
    vec_t r[Q];
    for (int h = 0; h < 2; h++) {                          /* u_h from lanes h, h+2, ... */
        vec_t *u = h ? u1 : u0;
        kn_pair(MR, NR, AU, h, K, A, B, lastload, r);      /* q_h */
        kn_pair(MR, NR, AU, h + 4, K, A, B, lastload, t);  /* q_{h+4} */
        VSUM(r, r, t);                                     /* r_h */
        kn_pair(MR, NR, AU, h + 2, K, A, B, lastload, u);  /* q_{h+2} */
        kn_pair(MR, NR, AU, h + 6, K, A, B, lastload, t);  /* q_{h+6} */
        VSUM(u, u, t);                                     /* r_{h+2} */
        VSUM(u, r, u);                                     /* u_h = r_h + r_{h+2} */
    }
#endif
#undef VSUM
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
        for (int v = 0; v < NR; v++) {
            float *c = C + r * ldc + v * VW;
            vec_t y = VADD(u0[r * NR + v], u1[r * NR + v]);
            if (v == NR - 1 && last < VW) VSTOREN(c, y, last);
            else VSTOREU(c, y);
        }
}

/* masked: B's last register has only `last` readable columns (else it is whole, zeros
 * beyond `last` in a packed panel); only `last` outputs are stored either way */
typedef void (*kn_block_fn)(int64_t, const kn_operand *, const kn_operand *, float *, int64_t,
                            int, int);
#define KN_SHAPE(mr, nr)                                                                     \
    static void kn_##mr##x##nr(int64_t K, const kn_operand *A, const kn_operand *B,          \
                               float *C, int64_t ldc, int last, int masked)                  \
    {                                                                                        \
        const int au = KN_AU && A->step == 16 && A->off[1] == 1;  /* unpacked A, a_k = 1 */  \
        if (masked) kn_block(mr, nr, 0, K, A, B, C, ldc, last, 1);                           \
        else if (au) kn_block(mr, nr, 1, K, A, B, C, ldc, last, 0);                          \
        else if (KN_KSPEC && K == 32) kn_block(mr, nr, 0, 32, A, B, C, ldc, last, 0);        \
        else if (KN_KSPEC && K == 16) kn_block(mr, nr, 0, 16, A, B, C, ldc, last, 0);        \
        else if (KN_KSPEC && K == 64) kn_block(mr, nr, 0, 64, A, B, C, ldc, last, 0);        \
        else kn_block(mr, nr, 0, K, A, B, C, ldc, last, 0);                                  \
    }
KN_SHAPE(1, 1)
KN_SHAPE(2, 1)
KN_SHAPE(1, 2)
KN_SHAPE(3, 1)
KN_SHAPE(1, 3)
#if KN_QMAX >= 4
KN_SHAPE(4, 1)
KN_SHAPE(2, 2)
KN_SHAPE(1, 4)
#endif

static kn_block_fn kn_shape(int mr, int nr)
{
    switch (mr * 8 + nr) {
    case 1 * 8 + 1: return kn_1x1;
    case 2 * 8 + 1: return kn_2x1;
    case 1 * 8 + 2: return kn_1x2;
    case 3 * 8 + 1: return kn_3x1;
    case 1 * 8 + 3: return kn_1x3;
#if KN_QMAX >= 4
    case 4 * 8 + 1: return kn_4x1;
    case 2 * 8 + 2: return kn_2x2;
    case 1 * 8 + 4: return kn_1x4;
#endif
    default: return 0;
    }
}

/* lane l's first term in a lane-major packing: the number of k < K with k mod 16 < l */
static void lane_starts(int64_t K, int64_t width, int64_t off[16])
{
    int64_t at = 0;
    for (int l = 0; l < 16; l++) {
        off[l] = at * width;
        at += K > l ? (K - l + 15) / 16 : 0;
    }
}

#define KN_PACK_MIN_ROWS (2 * KN_QMAX)   /* pack B's panel when it serves this many rows */
#ifndef KN_PACK_STRIDE
#define KN_PACK_STRIDE 4
#endif

/* Without scratch memory for a panel that must be gathered (b_j != 1): the definition per
 * output (fmaf is the FMA instruction in this file) — the same bits, slowly. */
static void kn_plain(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                     const float *B, int64_t b_k, int64_t b_j, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float p[16] = {0};
            for (int64_t k = 0; k < K; k++)
                p[k % 16] = __builtin_fmaf(A[i * a_i + k * a_k], B[k * b_k + j * b_j], p[k % 16]);
            C[i * ldc + j] = crnn_tree16(p);
        }
}

/* A packed lane-major in blocks of KN_QMAX rows (ap[block][lane-major k][r], zero rows past
 * M) when its terms are strided and several column blocks reuse it; NULL otherwise (or
 * without memory: the unpacked operand, the same bits). */
static const float *kn_pack_a(int64_t M, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                              int64_t off[16])
{
    float *ap = crnn_scratch(CRNN_SCRATCH_PACK_A,
                             sizeof(float) * (size_t)(((M + KN_QMAX - 1) / KN_QMAX) * KN_QMAX * K));
    if (!ap) return NULL;
    lane_starts(K, KN_QMAX, off);
    for (int64_t i0 = 0; i0 < M; i0 += KN_QMAX) {
        float *dst = ap + i0 * K;
        int mr = M - i0 < KN_QMAX ? (int)(M - i0) : KN_QMAX;
        if (a_i == 1 && mr == KN_QMAX) {   /* the block's rows adjacent: one move a term */
            for (int l = 0; l < 16; l++)
                for (int64_t k = l; k < K; k += 16, dst += KN_QMAX)
                    memcpy(dst, A + i0 + k * a_k, sizeof(float) * KN_QMAX);
            continue;
        }
        for (int l = 0; l < 16; l++)
            for (int64_t k = l; k < K; k += 16, dst += KN_QMAX)
                for (int r = 0; r < KN_QMAX; r++)
                    dst[r] = r < mr ? A[(i0 + r) * a_i + k * a_k] : 0.0f;
    }
    return ap;
}

/* Every row block of one column block (nr registers from C's column 0, B described by Bo). */
static void kn_rows(int64_t M, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                    const float *ap, const int64_t *offA, const kn_operand *Bo, int nr, int last,
                    int masked, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; ) {
        int mr = KN_QMAX / nr;
        if (M - i < mr) mr = (int)(M - i);
        if (mr == 3 && nr > 1) mr = 1;
        kn_operand Ao;
        if (ap) {
            Ao.p = ap + (i / KN_QMAX) * KN_QMAX * K + i % KN_QMAX;
            for (int l = 0; l < 16; l++) Ao.off[l] = offA[l];
            Ao.step = KN_QMAX;
            Ao.rs = 1;
        } else {
            Ao.p = A + i * a_i;
            for (int l = 0; l < 16; l++) Ao.off[l] = l * a_k;
            Ao.step = 16 * a_k;
            Ao.rs = a_i;
        }
        kn_shape(mr, nr)(K, &Ao, Bo, C + i * ldc, ldc, last, masked);
        i += mr;
    }
}

void CAT(crnn_gemm16kn, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                    const float *A, int64_t a_i, int64_t a_k,
                                    const float *B, int64_t b_k, int64_t b_j,
                                    float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    const int64_t nvec = (N + VW - 1) / VW;
    const int lastn = (int)(N - (nvec - 1) * VW);
    /* B: a panel of NR registers of columns is packed lane-major (rows l, l+16, ... of lane
     * l contiguous, the missing columns of a last partial register zero) when enough rows of
     * A reuse it — contiguous streams, and no strided rows of a power-of-two width fighting
     * over a few cache sets — and always when B's columns are strided (b_j != 1: the panel
     * gathers them). A: packed when its terms are strided (a_k != 1) and several panels
     * reuse it. Packing moves values only: the same terms, in the same order. */
    const int packB = (M >= KN_PACK_MIN_ROWS && K >= 16) || b_j != 1;
    const int nrmax = M >= KN_QMAX / KN_NR_PREF ? KN_NR_PREF : KN_QMAX / (int)M;
    float *bp = NULL;
    if (packB) {
        bp = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(K * nrmax * VW));
        if (!bp && b_j != 1) {
            kn_plain(M, N, K, A, a_i, a_k, B, b_k, b_j, C, ldc);
            return;
        }
    }
    int64_t offA[16];
    const float *ap = bp && a_k != 1 && nvec > 1 ? kn_pack_a(M, K, A, a_i, a_k, offA) : NULL;
    for (int64_t jv = 0; jv < nvec; ) {
        int nr = nvec - jv < nrmax ? (int)(nvec - jv) : nrmax;
        int last = jv + nr == nvec ? lastn : VW;
        const int64_t width = (int64_t)nr * VW, valid = (nr - 1) * (int64_t)VW + last;
        kn_operand Bo;
        if (bp) {        /* the panel's rows lane-major, `width` floats each, zeros past N */
            float *dst = bp;
            const float *src = B + jv * VW * b_j;
            if (b_j == 1) {
                for (int l = 0; l < 16; l++)
                    for (int64_t k = l; k < K; k += 16, dst += width)
                        for (int v = 0; v < nr; v++) {
                            const float *row = src + k * b_k + v * VW;
                            int n = v < nr - 1 ? VW : last;
                            VSTOREU(dst + v * VW, n == VW ? VLOADU(row) : VLOADN(row, n));
                        }
            } else {
                for (int l = 0; l < 16; l++)
                    for (int64_t k = l; k < K; k += 16, dst += width) {
                        for (int64_t e = 0; e < valid; e++) dst[e] = src[k * b_k + e * b_j];
                        for (int64_t e = valid; e < width; e++) dst[e] = 0.0f;
                    }
            }
            Bo.p = bp;
            lane_starts(K, width, Bo.off);
            Bo.step = width;
        } else {
            Bo.p = B + jv * VW;
            for (int l = 0; l < 16; l++) Bo.off[l] = l * b_k;
            Bo.step = 16 * b_k;
        }
        Bo.rs = 0;
        Bo.vs = VW;
        kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, !bp && last < VW, C + jv * VW, ldc);
        jv += nr;
    }
}

/* kn with B already packed (core.h, crnn_gemm16_kn_packed): panels of 16 columns, each the
 * rows of lane 0, then lane 1, ..., 16 floats a row, zeros past N. */
void CAT(crnn_gemm16knp, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                     const float *A, int64_t a_i, int64_t a_k,
                                     const float *Bp, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    const int64_t npanel = (N + 15) / 16;
    const int nrmax = M >= KN_QMAX / KN_NR_PREF ? KN_NR_PREF : KN_QMAX / (int)M;
    int64_t offA[16], offB[16];
    const float *ap = a_k != 1 && N > VW ? kn_pack_a(M, K, A, a_i, a_k, offA) : NULL;
    lane_starts(K, 16, offB);
#if VW == 16
    /* one register per panel: a block of nr registers spans nr panels (16*K apart) */
    for (int64_t jp = 0; jp < npanel; ) {
        int nr = npanel - jp < nrmax ? (int)(npanel - jp) : nrmax;
        int last = jp + nr == npanel ? (int)(N - (npanel - 1) * 16) : VW;
        kn_operand Bo;
        Bo.p = Bp + jp * 16 * K;
        for (int l = 0; l < 16; l++) Bo.off[l] = offB[l];
        Bo.step = 16;
        Bo.rs = 0;
        Bo.vs = 16 * K;
        kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, 0, C + jp * 16, ldc);
        jp += nr;
    }
#else
    for (int64_t jp = 0; jp < npanel; jp++) {
        const int64_t cols = N - jp * 16 < 16 ? N - jp * 16 : 16;
        const int nv = (int)((cols + VW - 1) / VW);
        for (int v0 = 0; v0 < nv; ) {
            int nr = nv - v0 < nrmax ? nv - v0 : nrmax;
            int last = v0 + nr == nv ? (int)(cols - (nv - 1) * VW) : VW;
            kn_operand Bo;
            Bo.p = Bp + jp * 16 * K + v0 * VW;
            for (int l = 0; l < 16; l++) Bo.off[l] = offB[l];
            Bo.step = 16;
            Bo.rs = 0;
            Bo.vs = VW;
            kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, 0, C + jp * 16 + v0 * VW, ldc);
            v0 += nr;
        }
    }
#endif
}

/* ============================ listed terms =============================== */

/* core.h, crnn_gemm16_listed: per output row and lane, the listed terms' fmas into the
 * registers of LS_PASS 16-column chunks (one chain per register, in list order), the 16
 * lane partials through a small buffer, then the tree as vertical adds; a -0 lane partial
 * under a ±0 output is reported, not fixed (elsewhere the sign of a zero cannot reach the
 * output: the tree of partials equal up to the signs of zeros is equal unless it is zero). */
#define LS_PASS (VW == 16 ? 9 : VW == 8 ? 5 : 3)

AI void ls_lane(const int NCH, const crnn_term *t, int32_t n, const float *B,
                const int32_t *coff, float *out)
{
    vec_t acc[LS_PASS * NV];
    UNROLL
    for (int q = 0; q < NCH * NV; q++) acc[q] = VZERO();
    for (int32_t e = 0; e < n; e++) {
        const vec_t a = VSET1(t[e].v);
        const float *b = B + t[e].off;
        UNROLL
        for (int c = 0; c < NCH; c++)
            UNROLL
            for (int v = 0; v < NV; v++)
                acc[c * NV + v] = VFMA(a, VLOADU(b + coff[c] + v * VW), acc[c * NV + v]);
    }
    UNROLL
    for (int q = 0; q < NCH * NV; q++) VSTOREU(out + q * VW, acc[q]);
}

static void ls_lanes(int nch, const crnn_term *terms, const int32_t *start, const int32_t *len,
                     const float *B, const int32_t *coff, float *lb)
{
    for (int l = 0; l < 16; l++) {
        const crnn_term *t = terms + start[l];
        const int32_t n = len[l];
        float *out = lb + l * nch * 16;
        switch (nch) {
#define LS_CASE(k) case k: ls_lane(k, t, n, B, coff, out); break;
        LS_CASE(1) LS_CASE(2) LS_CASE(3)
#if LS_PASS > 3
        LS_CASE(4) LS_CASE(5)
#endif
#if LS_PASS > 5
        LS_CASE(6) LS_CASE(7) LS_CASE(8) LS_CASE(9)
#endif
#undef LS_CASE
        }
    }
}

void CAT(crnn_gemm16ls, ISA_SUFFIX)(int64_t M, int64_t nb, const crnn_term *terms,
                                    const int32_t *start, const int32_t *len, const float *B,
                                    const int32_t *coff, float *C, int64_t ldc, int32_t *negz)
{
    float lb[16 * LS_PASS * 16];          /* [lane][column of the pass] */
    for (int64_t i = 0; i < M; i++) {
        int neg = 0;
        for (int64_t c0 = 0; c0 < nb; c0 += LS_PASS) {
            const int nch = nb - c0 < LS_PASS ? (int)(nb - c0) : LS_PASS;
            const int64_t width = (int64_t)nch * 16;
            ls_lanes(nch, terms, start + 16 * i, len + 16 * i, B, coff + c0, lb);
            for (int64_t q = 0; q < width; q += VW) {
                vec_t x[16];
                UNROLL
                for (int l = 0; l < 16; l++) x[l] = VLOADU(lb + l * width + q);
                UNROLL
                for (int s = 8; s >= 1; s >>= 1)
                    UNROLL
                    for (int l = 0; l < s; l++) x[l] = VADD(x[l], x[l + s]);
                VSTOREU(C + i * ldc + c0 * 16 + q, x[0]);
                /* a lane's -0 can only show in an output that is ±0 */
                if (VANY_ZERO(x[0]))
                    for (int l = 0; l < 16; l++) neg |= VHAS_NEGZERO(VLOADU(lb + l * width + q));
            }
        }
        negz[i] = neg;
    }
}


/* ======================= sparse rows of A (core.h) ======================== */

/* core.h, crnn_gemm16_sparse_rows. Per row: the nonzero terms (ascending k, without
 * branches), each lane's fmas into its row of a lane buffer (N floats; only lanes with
 * terms are written), the tree over the lanes that have terms, +0 when any lane had none. */
void CAT(crnn_gemm16sp, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K, const float *A,
                                    int64_t lda, const float *B, int64_t ldb, float *C,
                                    int64_t ldc, int32_t *flag)
{
    float *lb = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(16 * N));
    int32_t ek[CRNN_SPARSE_MAXK];
    float ev[CRNN_SPARSE_MAXK];
    for (int64_t i = 0; i < M; i++) {
        const float *a = A + i * lda;
        float *ci = C + i * ldc;
        int n = 0;
        for (int64_t k = 0; k < K; k++) {
            ek[n] = (int32_t)k;
            ev[n] = a[k];
            n += a[k] != 0.0f;
        }
        uint32_t have = 0;
        for (int e = 0; e < n; e++) {
            const int l = ek[e] & 15;
            const vec_t v = VSET1(ev[e]);
            const float *w = B + (int64_t)ek[e] * ldb;
            float *d = lb + l * N;
            if (have >> l & 1)
                for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VFMA(v, VLOADU(w + q), VLOADU(d + q)));
            else
                for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VFMA(v, VLOADU(w + q), VZERO()));
            have |= 1u << l;
        }
        const int full = have == 0xFFFFu;
        int at[16];                               /* the buffer row holding lane l's partial */
        for (int l = 0; l < 16; l++) at[l] = l;
        for (int s = 8; s >= 1; s >>= 1) {       /* p[l] = p[l] + p[l+s], present lanes only */
            for (uint32_t m = have >> s; m; m &= m - 1) {
                const int l = __builtin_ctz(m);
                if (have >> l & 1) {
                    float *d = lb + at[l] * N;
                    const float *e = lb + at[l + s] * N;
                    for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VADD(VLOADU(d + q), VLOADU(e + q)));
                } else {
                    at[l] = at[l + s];            /* p[l] = +0 + p[l+s]: the +0 comes at the end */
                }
            }
            have = (have | have >> s) & ((1u << s) - 1);
        }
        int zero = 0;
        if (!have) {                              /* no terms: every output +0 */
            memset(ci, 0, sizeof(float) * (size_t)N);
        } else {
            const float *r = lb + at[0] * N;
            for (int64_t q = 0; q < N; q += VW) {
                vec_t y = VLOADU(r + q);
                if (!full) y = VADD(y, VZERO());  /* the empty lanes' +0: -0 becomes +0 */
                VSTOREU(ci + q, y);
                zero |= VANY_ZERO(y);
            }
        }
        flag[i] = zero;
    }
}
