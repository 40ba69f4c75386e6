/* gemm16_kn_packed.h — crnn_gemm16_kn_packed: kn with a B its caller already wrote in the
 * kernels' packed layout (core.h), through the blocks of gemm16_kn.h (included before). */

/* The blocks of the taps: K <= 16, the straight-line pairs; K < 16 with the short tree
 * (kn_block, SHORT: the conv's first block has K = 9 taps, compiled as a constant). A call
 * runs nblk blocks of mr rows one after another (A's rows rs apart). On 128- and 256-bit one
 * call takes every whole block of a column block; on 512-bit each block is its own call,
 * where the loop inside ran slower (one-line conv0 forward on the Zen 4: avx2 0.098 ->
 * 0.092 ms, sse 0.163 -> 0.161, avx512 0.058 -> 0.073; docs/performance.md). */
#define KT_BLOCKS_A_CALL (VW < 16)
#define KT_BLOCK(mr, nr, a, C_)                                                                    \
    (K == 9 ? kn_block(mr, nr, 0, 0, 1, 9, a, B, NULL, 0, C_, ldc, last, 0)                        \
     : K < 16 ? kn_block(mr, nr, 0, 0, 1, K, a, B, NULL, 0, C_, ldc, last, 0)                      \
              : kn_block(mr, nr, 0, 0, 0, K, a, B, NULL, 0, C_, ldc, last, 0))
#define KT_SHAPE(mr, nr)                                                                           \
    static void kt_##mr##x##nr(int64_t K, const kn_operand *A, const kn_operand *B, float *C,      \
                               int64_t ldc, int last, int64_t nblk)                                \
    {                                                                                              \
        if (!KT_BLOCKS_A_CALL) {                                                                   \
            KT_BLOCK(mr, nr, A, C);                                                                \
            return;                                                                                \
        }                                                                                          \
        kn_operand a = *A;                                                                         \
        for (int64_t b = 0; b < nblk; b++, a.p += mr * a.rs, C += mr * ldc)                        \
            KT_BLOCK(mr, nr, &a, C);                                                               \
    }
KN_SHAPES(KT_SHAPE)
typedef void (*kt_block_fn)(int64_t, const kn_operand *, const kn_operand *, float *, int64_t, int,
                            int64_t);
#define KT_CASE(mr, nr) KN_LOOKUP_CASE(kt, mr, nr)
KN_SHAPE_LOOKUP(kt_block_fn, kt_shape, KN_SHAPES, KT_CASE)

/* Every row block of one column block with A's term k (K <= 16: one a lane) of row i at
 * A + i*a_i + tap[k] (crnn_gemm16_kn_packed_taps) */
static void kn_rows_taps(int64_t M, int64_t K, const float *A, int64_t a_i, const int64_t *tap,
                         const kn_operand *Bo, int nr, int last, float *C, int64_t ldc)
{
    kn_operand Ao;
    for (int l = 0; l < 16; l++) Ao.off[l] = l < K ? tap[l] : 0;
    Ao.step = 0;          /* no second term in a lane (and not the contiguous variant) */
    Ao.rs = a_i;
    const int mr = KN_MAX_REGS / nr;
    const int64_t whole = M / mr * mr, per = KT_BLOCKS_A_CALL ? M / mr : 1;
    for (int64_t i = 0; i < whole; i += per * mr) {
        Ao.p = A + i * a_i;
        kt_shape(mr, nr)(K, &Ao, Bo, C + i * ldc, ldc, last, per);
    }
    Ao.p = A + whole * a_i;
    if (M > whole) kt_shape((int)(M - whole), nr)(K, &Ao, Bo, C + whole * ldc, ldc, last, 1);
}

/* kn with B already packed (core.h, crnn_gemm16_kn_packed): panels of 16 columns, each the
 * rows of lane 0, then lane 1, ..., 16 floats a row, zeros past N. With tap (K <= 16), A's
 * terms are where tap says (crnn_gemm16_kn_packed_taps). */
static void kn_packed_panels(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                             int64_t a_k, const int64_t *tap, const float *Bp, float *C,
                             int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    const int64_t npanel = (N + 15) / 16;
    const int nrmax = kn_nr_max(M, K);
    int64_t offA[16], offB[16];
    const float *ap = !tap && a_k != 1 && N > VW ? kn_pack_a(M, K, A, a_i, a_k, offA) : NULL;
#define KN_ROWS(C_)                                                                                \
    (tap ? kn_rows_taps(M, K, A, a_i, tap, &Bo, nr, last, (C_), ldc)                               \
         : kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, 0, (C_), ldc))
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
        KN_ROWS(C + jp * 16);
        jp += nr;
    }
#else
    for (int64_t jp = 0; jp < npanel; jp++) {
        const int64_t cols = N - jp * 16 < 16 ? N - jp * 16 : 16;
        const int nv = (int)((cols + VW - 1) / VW);
        /* the panel's registers in the fewest blocks of at most nrmax, as even as they go: on
         * 128-bit 4 as 2 + 2, not 3 + 1 (docs/performance.md) */
        for (int v0 = 0, blocks = (nv + nrmax - 1) / nrmax; v0 < nv; blocks--) {
            int nr = (nv - v0 + blocks - 1) / blocks;
            int last = v0 + nr == nv ? (int)(cols - (nv - 1) * VW) : VW;
            kn_operand Bo;
            Bo.p = Bp + jp * 16 * K + v0 * VW;
            for (int l = 0; l < 16; l++) Bo.off[l] = offB[l];
            Bo.step = 16;
            Bo.rs = 0;
            Bo.vs = VW;
            KN_ROWS(C + jp * 16 + v0 * VW);
            v0 += nr;
        }
    }
#endif
#undef KN_ROWS
}

void CAT(crnn_gemm16_kn_packed, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                            const float *A, int64_t a_i, int64_t a_k,
                                            const float *Bp, float *C, int64_t ldc)
{
    kn_packed_panels(M, N, K, A, a_i, a_k, NULL, Bp, C, ldc);
}

void CAT(crnn_gemm16_kn_packed_taps, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                                 const float *A, int64_t a_i, const int64_t *tap,
                                                 const float *Bp, float *C, int64_t ldc)
{
    kn_packed_panels(M, N, K, A, a_i, 1, tap, Bp, C, ldc);
}
