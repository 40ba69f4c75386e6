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
 *   VW consecutive outputs j. The lanes are computed one after another (each lane's terms
 *   k = l, l+16, ... in ascending order) in the order 0,8,4,12,2,10,6,14,1,9,5,13,3,11,7,15,
 *   and combined as soon as the tree allows, so at most 5 partial sets are live and the tree
 *   is vertical adds in its own order. A block is MR rows x NR registers of outputs; the last
 *   register of a row may be partial (masked loads and stores). */
#include <stdlib.h>
#include <string.h>
#include "../core.h"

#define NV (16 / VW)
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* registers the kn block may fill with partial sets (5 per output register) */
#if VW == 16
#define KN_QMAX 4
#else
#define KN_QMAX 2
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

static void nt_rows(const int TR, int64_t i0, int64_t i1, int64_t N, int64_t K,
                    const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc)
{
    const int TC = VW / TR;
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
} kn_operand;

/* The partials of lane l for an MR x NR block: x[r*NR + v] lane e = sum over k = l, l+16, ...
 * of A(r, k) * B(k, v*VW + e), in ascending k, from +0. `last` < VW: the last register of
 * B's rows holds only `last` valid columns (masked loads). */
AI void kn_lane(const int MR, const int NR, int l, int64_t K, const kn_operand *A,
                const kn_operand *B, int last, vec_t *x)
{
    UNROLL
    for (int q = 0; q < MR * NR; q++) x[q] = VZERO();
    const float *a = A->p + A->off[l], *b = B->p + B->off[l];
    const int64_t as = A->step, bs = B->step, ars = A->rs;
    for (int64_t k = l; k < K; k += 16, a += as, b += bs) {
        vec_t bv[KN_QMAX];
        UNROLL
        for (int v = 0; v < NR; v++)
            bv[v] = v == NR - 1 && last < VW ? VLOADN(b + v * VW, last) : VLOADU(b + v * VW);
        UNROLL
        for (int r = 0; r < MR; r++) {
            vec_t av = VSET1(a[r * ars]);
            UNROLL
            for (int v = 0; v < NR; v++) x[r * NR + v] = VFMA(av, bv[v], x[r * NR + v]);
        }
    }
}

/* MR x NR registers of outputs: C[r*ldc + v*VW + e]; the last register holds `last` outputs. */
AI void kn_block(const int MR, const int NR, int64_t K, const kn_operand *A, const kn_operand *B,
                 float *C, int64_t ldc, int last, int masked)
{
    enum { Q = KN_QMAX };
    vec_t s0[Q], s1[Q], s2[Q], s3[Q], x[Q];
    const int lastload = masked ? last : VW;
#define LANE(l) kn_lane(MR, NR, (l), K, A, B, lastload, x)
#define KEEP(s) UNROLL for (int q = 0; q < MR * NR; q++) s[q] = x[q]
#define ADD(s)  UNROLL for (int q = 0; q < MR * NR; q++) x[q] = VADD(s[q], x[q])
    /* the tree, leaf by leaf: s0 holds a lane, s1 p[i]+p[i+8], s2 .. + p[i+4].., s3 .. */
    LANE(0);  KEEP(s0);
    LANE(8);  ADD(s0); KEEP(s1);                              /* q0 = p0 + p8 */
    LANE(4);  KEEP(s0);
    LANE(12); ADD(s0); ADD(s1); KEEP(s2);                     /* r0 = q0 + q4 */
    LANE(2);  KEEP(s0);
    LANE(10); ADD(s0); KEEP(s1);                              /* q2 */
    LANE(6);  KEEP(s0);
    LANE(14); ADD(s0); ADD(s1); ADD(s2); KEEP(s3);            /* u0 = r0 + (q2 + q6) */
    LANE(1);  KEEP(s0);
    LANE(9);  ADD(s0); KEEP(s1);                              /* q1 */
    LANE(5);  KEEP(s0);
    LANE(13); ADD(s0); ADD(s1); KEEP(s2);                     /* r1 = q1 + q5 */
    LANE(3);  KEEP(s0);
    LANE(11); ADD(s0); KEEP(s1);                              /* q3 */
    LANE(7);  KEEP(s0);
    LANE(15); ADD(s0); ADD(s1); ADD(s2); ADD(s3);             /* u0 + (r1 + (q3 + q7)) */
#undef LANE
#undef KEEP
#undef ADD
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
        for (int v = 0; v < NR; v++) {
            float *c = C + r * ldc + v * VW;
            if (v == NR - 1 && last < VW) VSTOREN(c, x[r * NR + v], last);
            else VSTOREU(c, x[r * NR + v]);
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
        if (masked) kn_block(mr, nr, K, A, B, C, ldc, last, 1);                              \
        else kn_block(mr, nr, K, A, B, C, ldc, last, 0);                                     \
    }
KN_SHAPE(1, 1)
KN_SHAPE(2, 1)
KN_SHAPE(1, 2)
#if KN_QMAX >= 4
KN_SHAPE(3, 1)
KN_SHAPE(4, 1)
KN_SHAPE(2, 2)
KN_SHAPE(1, 3)
KN_SHAPE(1, 4)
#endif

static kn_block_fn kn_shape(int mr, int nr)
{
    switch (mr * 8 + nr) {
    case 1 * 8 + 1: return kn_1x1;
    case 2 * 8 + 1: return kn_2x1;
    case 1 * 8 + 2: return kn_1x2;
#if KN_QMAX >= 4
    case 3 * 8 + 1: return kn_3x1;
    case 4 * 8 + 1: return kn_4x1;
    case 2 * 8 + 2: return kn_2x2;
    case 1 * 8 + 3: return kn_1x3;
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

void CAT(crnn_gemm16kn, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                    const float *A, int64_t a_i, int64_t a_k,
                                    const float *B, int64_t ldb, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    const int64_t nvec = (N + VW - 1) / VW;
    const int lastn = (int)(N - (nvec - 1) * VW);
    /* B: a panel of one register of columns, packed lane-major (rows l, l+16, ... of lane l
     * contiguous, the missing columns of a last partial register zero) when enough rows of
     * A reuse it: strided rows of a power-of-two width would fight over a few cache sets.
     * A: packed lane-major in blocks of KN_QMAX rows when its terms are strided (a_k != 1)
     * and several panels reuse it. Packing moves values only: the same terms, same order. */
    const int packB = M >= KN_PACK_MIN_ROWS && K >= 16;
    const int packA = packB && a_k != 1 && nvec > 1;
    float *bp = NULL, *ap = NULL;
    if (packB) {
        bp = malloc(sizeof(float) * (size_t)(K * VW));
        if (packA) ap = malloc(sizeof(float) * (size_t)(((M + KN_QMAX - 1) / KN_QMAX) * KN_QMAX * K));
        if (!bp || (packA && !ap)) {     /* no memory: the unpacked operands, same bits */
            free(bp);
            free(ap);
            bp = ap = NULL;
        }
    }
    int64_t lane_off[16], lane_offA[16];
    if (ap) {
        lane_starts(K, KN_QMAX, lane_offA);
        for (int64_t i0 = 0; i0 < M; i0 += KN_QMAX) {
            float *dst = ap + i0 * K;
            int mr = M - i0 < KN_QMAX ? (int)(M - i0) : KN_QMAX;
            for (int l = 0; l < 16; l++)
                for (int64_t k = l; k < K; k += 16, dst += KN_QMAX)
                    for (int r = 0; r < KN_QMAX; r++)
                        dst[r] = r < mr ? A[(i0 + r) * a_i + k * a_k] : 0.0f;
        }
    }
    if (bp) lane_starts(K, VW, lane_off);
    const int nrmax = bp || M >= KN_QMAX ? 1 : KN_QMAX / (int)M;
    for (int64_t jv = 0; jv < nvec; ) {
        int nr = nvec - jv < nrmax ? (int)(nvec - jv) : nrmax;
        int last = jv + nr == nvec ? lastn : VW;
        kn_operand Bo;
        if (bp) {
            float *dst = bp;
            for (int l = 0; l < 16; l++)
                for (int64_t k = l; k < K; k += 16, dst += VW) {
                    if (last == VW) memcpy(dst, B + k * ldb + jv * VW, sizeof(float) * VW);
                    else {
                        memset(dst, 0, sizeof(float) * VW);
                        memcpy(dst, B + k * ldb + jv * VW, sizeof(float) * (size_t)last);
                    }
                }
            Bo.p = bp;
            for (int l = 0; l < 16; l++) Bo.off[l] = lane_off[l];
            Bo.step = VW;
        } else {
            Bo.p = B + jv * VW;
            for (int l = 0; l < 16; l++) Bo.off[l] = l * ldb;
            Bo.step = 16 * ldb;
        }
        Bo.rs = 0;
        for (int64_t i = 0; i < M; ) {
            int mr = M - i < KN_QMAX / nr ? (int)(M - i) : KN_QMAX / nr;
            if (mr == 3 && KN_QMAX == 2) mr = 2;
            kn_operand Ao;
            if (ap) {
                Ao.p = ap + i * K;
                for (int l = 0; l < 16; l++) Ao.off[l] = lane_offA[l];
                Ao.step = KN_QMAX;
                Ao.rs = 1;
            } else {
                Ao.p = A + i * a_i;
                for (int l = 0; l < 16; l++) Ao.off[l] = l * a_k;
                Ao.step = 16 * a_k;
                Ao.rs = a_i;
            }
            kn_shape(mr, nr)(K, &Ao, &Bo, C + i * ldc + jv * VW, ldc, last, !bp && last < VW);
            i += mr;
        }
        jv += nr;
    }
    free(bp);
    free(ap);
}
