/* gemm16_kn.h — crnn_gemm16_kn (C[i][j] = sum_k A(i,k) B[k][j], B read down its columns, any
 * strides) on one ISA's vectors. A register holds lane l of VW consecutive outputs j. The
 * lanes are computed two at a time (a and a+8: each lane's terms k = l, l+16, ... in
 * ascending order, two independent chains) and combined as soon as the tree allows, so the
 * tree is vertical adds in its own order. A block is MR rows x NR registers of outputs; the
 * last register of a row may be partial (masked loads and stores).
 * gemm16_kn_packed.h builds on the blocks defined here. */
#include "gemm16_common.h"

/* kn blocks: at most KN_MAX_REGS output registers, each with two accumulators while a pair
 * of lanes (a, a+8) runs (2 * KN_MAX_REGS independent fma chains cover the latency);
 * KN_NR_PREFERRED output registers per row of a block when M allows. Per term of a pair, a
 * block of MR x NR registers loads NR rows of B and MR splats of A for MR * NR fmas:
 * 512-bit (32 registers), 4 x 2 blocks (6 loads per 8 fmas, 16 accumulators); 256-bit (16
 * registers), 2 x 3 blocks where K is a compiled constant (5 loads per 6 fmas, 12
 * accumulators, B and a splat in the other registers), 3 x 2 elsewhere (kn_nr_preferred);
 * 128-bit, 3 x 2 blocks (the same counts; a panel of 16 columns is 4 registers, two blocks
 * of 2). Measured against the earlier shapes (4 x 1 with four lanes at a time on
 * 512-bit, 2 x 2 on 256-bit, 1 x 3 with four lanes and then 2 x 3 on 128-bit) by paired warm
 * A/B of the training step (docs/performance.md).
 * Two block variants chosen at run time, each measured faster on its paths:
 * KN_A_CONTIG_VARIANT, for A unpacked with a_k = 1 (its lanes one pointer, a known step: the
 * loop needs fewer registers), with K = 32 and 64 as constants on 256- and 128-bit
 * (KN_CONST_K_CONTIG: the LSTM's dW over T = 32, 64 steps, 10-17 % faster in C loops; on
 * 512-bit 6 % faster in C loops but the step 0.18 ms slower); KN_CONST_K_VARIANT (256-bit),
 * K = 16, 32, 64 as constants for the other operands. */
#define KN_A_CONTIG_VARIANT 1
#define KN_CONST_K_VARIANT (VW == 8)
#define KN_CONST_K_CONTIG (VW < 16)
#if VW == 16
#define KN_MAX_REGS 8
#define KN_NR_PREFERRED 2
#elif VW == 8
#define KN_MAX_REGS 6
#define KN_NR_PREFERRED 3
#else
#define KN_MAX_REGS 6
#define KN_NR_PREFERRED 2
#endif

/* Output registers per row of a block: KN_NR_PREFERRED when M fills the block's rows, else
 * as many as the block holds, at most KN_NR_ROW_MAX (a single row of 6 or 8 registers kept
 * more partials live than the registers hold: the one-line LSTM backward's dhRec, M = 1,
 * ran 0.08 ms slower on 256-bit; the step 0.46 ms). Every row block streams its column
 * block's whole B panel (K terms x NR registers); where that panel would not stay in L1,
 * fewer registers a row, never below 2: the LSTM backward's dx (K = 512) on 256-bit ran at
 * 74 GFLOP/s in 2 x 3 blocks and 94 in 3 x 2 (docs/performance.md) */
#ifndef KN_NR_ROW_MAX
#define KN_NR_ROW_MAX 4
#endif
#define KN_PANEL_BYTES 40960
/* On 256-bit, 2 x 3 only where K is one of the constants kn_shape compiles (32, 64): in the
 * loop over any other K its 12 accumulators, 3 rows of B and the splat take all 16
 * registers, and gcc kept one accumulator on the stack, a store and a reload on every term's
 * chain (a 256 x 256 product with K = 256 ran at 64 GFLOP/s, in 3 x 2 blocks at 97) */
static inline int kn_nr_preferred(int64_t K)
{
    return VW == 8 && K != 32 && K != 64 ? 2 : KN_NR_PREFERRED;
}
static inline int kn_nr_max(int64_t M, int64_t K)
{
    const int pref = kn_nr_preferred(K);
    if (M >= KN_MAX_REGS / pref) {
        int nr = pref;
        while (nr > 2 && K * nr * VW * (int64_t)sizeof(float) > KN_PANEL_BYTES) nr--;
        return nr;
    }
    int nr = KN_MAX_REGS / (int)M;
    if (M > 1 && pref < KN_NR_PREFERRED && nr > pref) nr = pref;   /* 2 rows x 3 spill alike */
    return nr < KN_NR_ROW_MAX ? nr : KN_NR_ROW_MAX;
}

/* Where lane l's terms are: operand X's term k = l + 16m is at X + off[l] + m*step (row
 * stride rs between the MR rows of A). Unpacked: off[l] = l*ld, step = 16*ld. Packed
 * (lane-major, below): the terms of lane 0, then lane 1, ..., each run contiguous. */
typedef struct {
    const float *p;
    int64_t off[16], step, rs;
    int64_t vs;           /* B: from one output register's columns to the next's */
    const int64_t *chunk; /* A of the sparse blocks: term 16m + l of a row at p + chunk[m] + l */
} kn_operand;

/* B's NR registers of one term into bv, the last one `last` columns wide */
AI void kn_load_b(const int MR, const int NR, const float *b, int64_t bvs, int last, vec_t *bv)
{
    UNROLL
    for (int v = 0; v < NR; v++) {
        bv[v] = v == NR - 1 && last < VW ? VLOADN(b + v * bvs, last) : VLOADU(b + v * bvs);
#if VW < 16 && defined(__GNUC__)
        /* keep B in a register for all MR rows instead of one memory operand per fma
         * (a load is the scarce resource when every splat is an instruction) */
        if (MR > 1) __asm__("" : VREG_CONSTRAINT(bv[v]));
#endif
    }
}

/* One term k of lane-partials x (MR x NR registers): x[r*NR + v] += A(r, k) * B(k, v). */
AI void kn_term(const int MR, const int NR, const float *a, int64_t ars, const float *b,
                int64_t bvs, int last, vec_t *x)
{
    vec_t bv[KN_MAX_REGS];
    kn_load_b(MR, NR, b, bvs, last, bv);
    UNROLL
    for (int r = 0; r < MR; r++) {
        vec_t av = VSET1(a[r * ars]);
        UNROLL
        for (int v = 0; v < NR; v++) x[r * NR + v] = VFMA(av, bv[v], x[r * NR + v]);
    }
}

/* The same for the sparse blocks: row r's A at rows[r][off], whole registers of B */
AI void ks_term(const int MR, const int NR, const float *const *rows, int64_t off, const float *b,
                int64_t bvs, vec_t *x)
{
    vec_t bv[KN_MAX_REGS];
    kn_load_b(MR, NR, b, bvs, VW, bv);
    UNROLL
    for (int r = 0; r < MR; r++) {
        vec_t av = VSET1(rows[r][off]);
        UNROLL
        for (int v = 0; v < NR; v++) x[r * NR + v] = VFMA(av, bv[v], x[r * NR + v]);
    }
}

/* Lanes a and a+8 together (two fma chains per output register), each lane's terms in
 * ascending order from +0; then the first tree level: y = p[a] + p[a+8]. SHORT (K < 16): a
 * lane a+8 without terms is left out of that add, and kn_block adds its +0 at the end. */
AI void kn_pair(const int MR, const int NR, const int A_CONTIG, const int SHORT, int a, int64_t K,
                const kn_operand *A, const kn_operand *B, int last, vec_t *y)
{
    enum { Q = KN_MAX_REGS };
    vec_t x0[Q], x8[Q];
    UNROLL
    for (int q = 0; q < MR * NR; q++) x0[q] = x8[q] = VZERO();
    const int64_t n8 = K > a + 8 ? (K - a - 8 + 15) / 16 : 0;
    const int64_t n0 = K > a ? (K - a + 15) / 16 : 0;
    const float *pa0 = A->p + (A_CONTIG ? a : A->off[a]);
    const float *pa8 = A_CONTIG ? pa0 + 8 : A->p + A->off[a + 8];
    const float *pb0 = B->p + B->off[a], *pb8 = B->p + B->off[a + 8];
    const int64_t as = A_CONTIG ? 16 : A->step, bs = B->step, ars = A->rs, bvs = B->vs;
    if (K <= 16) {        /* one chunk: a lane has at most one term (straight-line code) */
        if (n0) kn_term(MR, NR, pa0, ars, pb0, bvs, last, x0);
        if (SHORT && !n8) {
            UNROLL
            for (int q = 0; q < MR * NR; q++) y[q] = x0[q];
            return;
        }
        if (n8) kn_term(MR, NR, pa8, ars, pb8, bvs, last, x8);
    } else {
        int64_t m = 0;
        for (; m < n8; m++) {
            kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
            kn_term(MR, NR, pa8 + m * as, ars, pb8 + m * bs, bvs, last, x8);
        }
        if (n0 > m) kn_term(MR, NR, pa0 + m * as, ars, pb0 + m * bs, bvs, last, x0);
    }
    UNROLL
    for (int q = 0; q < MR * NR; q++) y[q] = VADD(x0[q], x8[q]);
}

/* kn_pair over the live terms of lanes a and a+8 only (gemm16_kn_sparse.h): bit c of
 * mk[16 * seg + l] marks lane l's term m = 32 * seg + c, each lane's marked terms in
 * ascending order from +0 (the full dot with the left-out ones missing); whole registers, A's
 * chunk m of 16 terms 16 m floats from a row's start (a row as it lies) or, with CHUNKS, at
 * A->chunk[m] (a tap's channels of a window read from the image), and B packed (16 floats a
 * term of a lane). */
AI void ks_pair(const int MR, const int NR, const int CHUNKS, int a, const kn_operand *A,
                const kn_operand *B, const uint32_t *mk, int64_t nseg, vec_t *y)
{
    enum { Q = KN_MAX_REGS };
    vec_t x0[Q], x8[Q];
    UNROLL
    for (int q = 0; q < MR * NR; q++) x0[q] = x8[q] = VZERO();
    enum { bs = 16 };
    /* row r's lane a at ra[r][ch], lane a+8 at ra[r][ch + 8]: one address a splat, no row
     * arithmetic in the loop (one-line conv1 / conv2 forward on the Zen 4: sse 0.370 -> 0.338 /
     * 0.293 -> 0.259 ms, avx2 0.208 -> 0.194 / 0.158 -> 0.142); on 512-bit (4 rows) the row
     * stride, where the pointers read conv1 0.144-0.148 -> 0.148-0.152 */
    const float *ra[KN_MAX_REGS];
    UNROLL
    for (int r = 0; r < MR; r++) ra[r] = A->p + r * A->rs + a;
    const int64_t bvs = VW < 16 ? VW : B->vs;     /* on 128/256-bit a panel's next register */
#if VW == 16
#define TERM(rows, off, b, x) kn_term(MR, NR, rows[0] + (off), A->rs, b, bvs, VW, x)
#else
#define TERM(rows, off, b, x) ks_term(MR, NR, rows, off, b, bvs, x)
#endif
    for (int64_t seg = 0; seg < nseg; seg++) {
        uint32_t m0 = mk[16 * seg + a], m8 = mk[16 * seg + a + 8];
        const int64_t *ch = CHUNKS ? A->chunk + 32 * seg : NULL;
#define ch(i) (CHUNKS ? ch[i] : 16 * (int64_t)(32 * seg + (i)))
        const float *pb0 = B->p + B->off[a] + 32 * seg * bs, *pb8 = B->p + B->off[a + 8] + 32 * seg * bs;
        for (; m0 && m8; m0 &= m0 - 1, m8 &= m8 - 1) {
            const uint32_t i = (uint32_t)__builtin_ctz(m0), j = (uint32_t)__builtin_ctz(m8);
            TERM(ra, ch(i), pb0 + i * bs, x0);
            TERM(ra, ch(j) + 8, pb8 + j * bs, x8);
        }
        for (; m0; m0 &= m0 - 1) {
            const uint32_t i = (uint32_t)__builtin_ctz(m0);
            TERM(ra, ch(i), pb0 + i * bs, x0);
        }
        for (; m8; m8 &= m8 - 1) {
            const uint32_t j = (uint32_t)__builtin_ctz(m8);
            TERM(ra, ch(j) + 8, pb8 + j * bs, x8);
        }
#undef ch
    }
#undef TERM
    UNROLL
    for (int q = 0; q < MR * NR; q++) y[q] = VADD(x0[q], x8[q]);
}

/* MR x NR registers of outputs: C[r*ldc + v*VW + e]; the last register holds `last` outputs.
 * The tree from the lane pairs, level by level: q_a = p[a] + p[a+8]; r_a = q_a + q_{a+4};
 * u_a = r_a + r_{a+2}; the result u_0 + u_1 — exactly the levels s = 8, 4, 2, 1. The pairs
 * run every term, or (SPARSE) only the terms mk marks (SPARSE == 2: A's chunks through
 * A->chunk, ks_pair); then the return value is nonzero when
 * some output came out -0.
 * SHORT, for K < 16: the tree leaves out the adds with the empty lanes a+8 (kn_pair) and
 * adds one +0 at the end. Same bits: the full tree of a dot with an empty lane is never -0
 * (every node above the lane has a child that is not -0), and the tree without those adds
 * differs from it only in the sign of a zero; adding +0 makes a zero +0 and keeps the rest. */
AI int kn_block(const int MR, const int NR, const int A_CONTIG, const int SPARSE, const int SHORT,
                int64_t K, const kn_operand *A, const kn_operand *B, const uint32_t *mk, int64_t nseg,
                float *C, int64_t ldc, int last, int masked)
{
    enum { Q = KN_MAX_REGS };
    vec_t u0[Q], u1[Q], t[Q];
    const int lastload = masked ? last : VW;
#define VSUM(d, a, b) UNROLL for (int q = 0; q < MR * NR; q++) d[q] = VADD(a[q], b[q])
#define PAIR(a, y) (SPARSE ? ks_pair(MR, NR, SPARSE == 2, a, A, B, mk, nseg, y)                    \
                           : kn_pair(MR, NR, A_CONTIG, SHORT, a, K, A, B, lastload, y))
    vec_t r[Q];
    for (int h = 0; h < 2; h++) {                          /* u_h from lanes h, h+2, ... */
        vec_t *u = h ? u1 : u0;
        PAIR(h, r);                                        /* q_h */
        PAIR(h + 4, t);                                    /* q_{h+4} */
        VSUM(r, r, t);                                     /* r_h */
        PAIR(h + 2, u);                                    /* q_{h+2} */
        PAIR(h + 6, t);                                    /* q_{h+6} */
        VSUM(u, u, t);                                     /* r_{h+2} */
        VSUM(u, r, u);                                     /* u_h = r_h + r_{h+2} */
    }
#undef PAIR
#undef VSUM
    int negz = 0;
    UNROLL
    for (int r = 0; r < MR; r++)
        UNROLL
        for (int v = 0; v < NR; v++) {
            float *c = C + r * ldc + v * VW;
            vec_t y = VADD(u0[r * NR + v], u1[r * NR + v]);
            if (SHORT) y = VADD(y, VZERO());           /* the empty lanes' +0 */
            if (SPARSE) negz |= VHAS_NEGZERO(y);   /* a column past `last`: +0 or NaN */
            if (v == NR - 1 && last < VW) VSTOREN(c, y, last);
            else VSTOREU(c, y);
        }
    return negz;
}

/* masked: B's last register has only `last` readable columns (else it is whole, zeros
 * beyond `last` in a packed panel); only `last` outputs are stored either way */
typedef void (*kn_block_fn)(int64_t, const kn_operand *, const kn_operand *, float *, int64_t,
                            int, int);
#define KN_SHAPE(mr, nr)                                                                           \
    static void kn_##mr##x##nr(int64_t K, const kn_operand *A, const kn_operand *B,                \
                               float *C, int64_t ldc, int last, int masked)                        \
    {                                                                                              \
        /* unpacked A, a_k = 1 */                                                                  \
        const int a_contig = KN_A_CONTIG_VARIANT && A->step == 16 && A->off[1] == 1;               \
        if (masked) kn_block(mr, nr, 0, 0, 0, K, A, B, NULL, 0, C, ldc, last, 1);                  \
        else if (a_contig && KN_CONST_K_CONTIG && K == 64)                                         \
            kn_block(mr, nr, 1, 0, 0, 64, A, B, NULL, 0, C, ldc, last, 0);                         \
        else if (a_contig && KN_CONST_K_CONTIG && K == 32)                                         \
            kn_block(mr, nr, 1, 0, 0, 32, A, B, NULL, 0, C, ldc, last, 0);                         \
        else if (a_contig) kn_block(mr, nr, 1, 0, 0, K, A, B, NULL, 0, C, ldc, last, 0);           \
        else if (KN_CONST_K_VARIANT && K == 32)                                                    \
            kn_block(mr, nr, 0, 0, 0, 32, A, B, NULL, 0, C, ldc, last, 0);                         \
        else if (KN_CONST_K_VARIANT && K == 16)                                                    \
            kn_block(mr, nr, 0, 0, 0, 16, A, B, NULL, 0, C, ldc, last, 0);                         \
        else if (KN_CONST_K_VARIANT && K == 64)                                                    \
            kn_block(mr, nr, 0, 0, 0, 64, A, B, NULL, 0, C, ldc, last, 0);                         \
        else kn_block(mr, nr, 0, 0, 0, K, A, B, NULL, 0, C, ldc, last, 0);                         \
    }
/* Every block shape a path reaches (kn_rows: mr <= KN_MAX_REGS / nr, nr <= kn_nr_max),
 * listed once: the functions and kn_shape's table both come from it. */
#define KN_SHAPES_ALL(X) X(1, 1) X(2, 1) X(1, 2) X(3, 1) X(1, 3) X(4, 1) X(2, 2) X(1, 4)           \
    X(5, 1) X(6, 1) X(3, 2) X(2, 3)
#if KN_MAX_REGS >= 8
#define KN_SHAPES(X) KN_SHAPES_ALL(X) X(7, 1) X(8, 1) X(4, 2) X(2, 4)
#else
#define KN_SHAPES(X) KN_SHAPES_ALL(X)
#endif
KN_SHAPES(KN_SHAPE)

/* A block family's lookup: static TYPE NAME(mr, nr) gives the function PREFIX_<mr>x<nr> for
 * every shape SHAPES lists (an X-macro of (mr, nr)), 0 for any other */
#define KN_LOOKUP_CASE(prefix, mr, nr) case mr * 16 + nr: return prefix##_##mr##x##nr;
#define KN_SHAPE_LOOKUP(TYPE, NAME, SHAPES, CASE)                                                  \
    static TYPE NAME(int mr, int nr)                                                               \
    {                                                                                              \
        switch (mr * 16 + nr) {                                                                    \
        SHAPES(CASE)                                                                               \
        default: return 0;                                                                         \
        }                                                                                          \
    }
#define KN_CASE(mr, nr) KN_LOOKUP_CASE(kn, mr, nr)
KN_SHAPE_LOOKUP(kn_block_fn, kn_shape, KN_SHAPES, KN_CASE)

/* lane l's first term in a lane-major packing: the number of k < K with k mod 16 < l */
static void lane_starts(int64_t K, int64_t width, int64_t off[16])
{
    int64_t at = 0;
    for (int l = 0; l < 16; l++) {
        off[l] = at * width;
        at += K > l ? (K - l + 15) / 16 : 0;
    }
}

#define KN_PACK_MIN_ROWS (2 * KN_MAX_REGS)   /* pack B's panel when it serves this many rows */
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

/* A packed lane-major in blocks of KN_MAX_REGS rows (ap[block][lane-major k][r], zero rows past
 * M) when its terms are strided and several column blocks reuse it; NULL otherwise (or
 * without memory: the unpacked operand, the same bits). */
static const float *kn_pack_a(int64_t M, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                              int64_t off[16])
{
    float *ap = crnn_scratch(CRNN_SCRATCH_PACK_A,
                             sizeof(float) * (size_t)(((M + KN_MAX_REGS - 1) / KN_MAX_REGS) * KN_MAX_REGS * K));
    if (!ap) return NULL;
    lane_starts(K, KN_MAX_REGS, off);
    for (int64_t i0 = 0; i0 < M; i0 += KN_MAX_REGS) {
        float *dst = ap + i0 * K;
        int mr = M - i0 < KN_MAX_REGS ? (int)(M - i0) : KN_MAX_REGS;
        if (a_i == 1 && mr == KN_MAX_REGS) {   /* the block's rows adjacent: one move a term */
            for (int l = 0; l < 16; l++)
                for (int64_t k = l; k < K; k += 16, dst += KN_MAX_REGS)
                    memcpy(dst, A + i0 + k * a_k, sizeof(float) * KN_MAX_REGS);
            continue;
        }
        for (int l = 0; l < 16; l++)
            for (int64_t k = l; k < K; k += 16, dst += KN_MAX_REGS)
                for (int r = 0; r < KN_MAX_REGS; r++)
                    dst[r] = r < mr ? A[(i0 + r) * a_i + k * a_k] : 0.0f;
    }
    return ap;
}

/* Every row block of one column block (nr registers from C's column 0, B described by Bo). */
static void kn_rows(int64_t M, int64_t K, const float *A, int64_t a_i, int64_t a_k,
                    const float *ap, const int64_t *offA, const kn_operand *Bo, int nr, int last,
                    int masked, float *C, int64_t ldc)
{
    /* A unpacked: the rows in the fewest blocks, as even as they go (the recurrences' 4 lines
     * as 2 + 2, not 3 + 1, whose one-row block has too few fma chains to cover the latency:
     * the avx2 step 0.18-0.26 ms shorter at batch 4, paired; docs/performance.md). Packed A
     * keeps whole blocks: its rows are grouped by KN_MAX_REGS. */
    const int mrmax = KN_MAX_REGS / nr;
    for (int64_t i = 0, blocks = (M + mrmax - 1) / mrmax; i < M; blocks--) {
        int mr = ap ? mrmax : (int)((M - i + blocks - 1) / blocks);
        if (M - i < mr) mr = (int)(M - i);
        kn_operand Ao;
        if (ap) {
            Ao.p = ap + (i / KN_MAX_REGS) * KN_MAX_REGS * K + i % KN_MAX_REGS;
            for (int l = 0; l < 16; l++) Ao.off[l] = offA[l];
            Ao.step = KN_MAX_REGS;
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

void CAT(crnn_gemm16_kn, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
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
    const int nrmax = kn_nr_max(M, K);
    float *bp = NULL;
    if (packB) {
        const int64_t nrp = nvec < nrmax ? nvec : nrmax;    /* the widest panel packed */
        bp = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(K * nrp * VW));
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
