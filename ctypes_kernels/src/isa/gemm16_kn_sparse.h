/* gemm16_kn_sparse.h — crnn_gemm16_kn_packed_sparse (core.h): kn with B packed and the terms
 * k whose A is ±0 in every row of a block left out, through the terms and the tree of
 * gemm16_kn.h (included before). The conv forward's windows and the LSTM's x after a ReLU
 * and pool are 60-70 % +0; in blocks of 3 or 4 adjacent rows about half the terms are +0 in
 * all of them.
 *
 * Per block of KS_MR rows, each lane's live terms (k = l + 16m with some row's A(r, k) not
 * ±0) are marked in a bit mask once for every panel of B; kn_block then runs each lane's
 * marked terms in ascending m (ks_pair, in pairs (a, a+8) as kn_pair) and the same tree. A
 * block any of whose outputs comes out -0 is computed again with every term marked (core.h
 * says why no other output can differ).
 *
 * A row's chunk m of 16 terms is at chunk[m] from the row's start: 16 m for rows as they lie
 * (crnn_gemm16_kn_packed_sparse), a tap's channels of a window read straight from the
 * zero-padded image (crnn_gemm16_kn_packed_sparse_win: no im2col). */

#if VW == 16
#define KS_MR 4      /* 4 rows x 2 registers (two panels), as the dense 512-bit blocks */
#else
#define KS_MR 3      /* 3 rows x 2 registers: one panel on 256-bit, half of one on 128-bit */
#endif
#define KS_NR 2

/* Lane l's live terms of a block of mr rows as bits: bit c of mk[16 * seg + l] is term
 * m = 32 * seg + c (k = l + 16m), set when some row's A(r, k) is not ±0 (a NaN counts as
 * not ±0). A chunk of 16 terms at a time: each row's compare, the rows' compares OR-ed, one
 * bit into the lanes' masks (held in registers); returns the number of live terms. */
#define KS_NV (16 / VW)                       /* registers of a chunk's 16 lanes */
static int64_t ks_masks(int mr, int64_t K, const float *A, int64_t a_i, const int64_t *chunk,
                        int64_t nseg, uint32_t *mk)
{
    int64_t live = 0;
    for (int64_t seg = 0; seg < nseg; seg++) {
        vint_t acc[KS_NV];
        UNROLL
        for (int v = 0; v < KS_NV; v++) acc[v] = VISET1(0);
        for (int c = 0; c < 32 && 16 * (32 * seg + c) < K; c++) {
            const int64_t k = 16 * (32 * seg + c);
            if (k + 16 <= K) {                /* a whole chunk */
                const float *ac = A + (chunk ? chunk[32 * seg + c] : k);
                UNROLL
                for (int v = 0; v < KS_NV; v++) {
                    vmask_t nz = VNZ(VLOADU(ac + v * VW));
                    for (int r = 1; r < mr; r++) nz = VMASK_OR(nz, VNZ(VLOADU(ac + r * a_i + v * VW)));
                    acc[v] = VIOR_MASK(acc[v], nz, 1u << c);
                }
                continue;
            }
            for (int v = 0; v < KS_NV && k + v * VW < K; v++) {   /* the tail (rows as they lie) */
                const int64_t k1 = k + v * VW;
                const int nk = K - k1 < VW ? (int)(K - k1) : VW;
                for (int r = 0; r < mr; r++) {
                    const float *a = A + r * a_i + k1;
                    acc[v] = VIOR_NZ(acc[v], nk == VW ? VLOADU(a) : VLOADN(a, nk), 1u << c);
                }
            }
        }
        UNROLL
        for (int v = 0; v < KS_NV; v++) VISTOREU(mk + 16 * seg + v * VW, acc[v]);
        for (int l = 0; l < 16; l++) live += __builtin_popcount(mk[16 * seg + l]);
    }
    return live;
}

/* The operands of a panel's blocks: A unpacked by rows (term 16m + l at A + r*a_i + 16m + l,
 * or + chunk[m] + l; the caller moves A->p from block to block), B packed (core.h) */
static void ks_operands(const float *A, int64_t a_i, const int64_t *chunk, const float *pb,
                        const int64_t *offB, int64_t bvs, kn_operand *Ao, kn_operand *Bo)
{
    Ao->p = A;
    Bo->p = pb;
    for (int l = 0; l < 16; l++) {
        Ao->off[l] = l;
        Bo->off[l] = offB[l];
    }
    Ao->step = Bo->step = 16;
    Ao->rs = a_i;
    Ao->chunk = chunk;
    Bo->rs = 0;
    Bo->vs = bvs;
    Bo->chunk = NULL;
}

/* ks_<mr>x<nr>: kn_block over the marked terms of each lane (gemm16_kn.h), nonzero when an
 * output is -0. ks_rows_<mr>x<nr>: nblk blocks of mr rows in one call (block b's masks at
 * mk + b * per), a block with a -0 output again with every term (all). One call a panel
 * instead of one a block: one-line conv1 / conv2 / lstm0 forward on the Zen 4, sse -0.010 /
 * -0.006 / -0.008 ms, avx2 -0.005 / -0.003 / -0.002, avx512 -0.001 (docs/performance.md).
 * The redo is a call (noinline): one inlined copy of the block in the loop, not two. */
typedef void (*ks_rows_fn)(const kn_operand *, const kn_operand *, const uint32_t *, int64_t,
                           const uint32_t *, int64_t, float *, int64_t, int, int64_t);
#define KS_BLOCK(mr, nr, a, mk_, C_)                                                               \
    ((a)->chunk ? kn_block(mr, nr, 1, 2, 0, 0, a, B, mk_, nseg, C_, ldc, last, 0)                  \
                : kn_block(mr, nr, 1, 1, 0, 0, a, B, mk_, nseg, C_, ldc, last, 0))
#define KS_SHAPE(mr, nr)                                                                           \
    static __attribute__((noinline)) int ks_##mr##x##nr(const kn_operand *A, const kn_operand *B,  \
                              const uint32_t *mk, int64_t nseg, float *C, int64_t ldc, int last)   \
    {                                                                                              \
        return KS_BLOCK(mr, nr, A, mk, C);                                                         \
    }                                                                                              \
    static void ks_rows_##mr##x##nr(const kn_operand *A, const kn_operand *B, const uint32_t *mk,  \
                                    int64_t per, const uint32_t *all, int64_t nseg, float *C,      \
                                    int64_t ldc, int last, int64_t nblk)                           \
    {                                                                                              \
        kn_operand a = *A;                                                                         \
        for (int64_t b = 0; b < nblk; b++, a.p += mr * a.rs, mk += per, C += mr * ldc)             \
            if (KS_BLOCK(mr, nr, &a, mk, C)) ks_##mr##x##nr(&a, B, all, nseg, C, ldc, last);       \
    }
#if VW == 16
#define KS_SHAPES(X) X(1, 1) X(2, 1) X(3, 1) X(4, 1) X(1, 2) X(2, 2) X(3, 2) X(4, 2)
#else
#define KS_SHAPES(X) X(1, 1) X(2, 1) X(3, 1) X(1, 2) X(2, 2) X(3, 2)
#endif
KS_SHAPES(KS_SHAPE)
#define KS_CASE(mr, nr) KN_LOOKUP_CASE(ks_rows, mr, nr)
KN_SHAPE_LOOKUP(ks_rows_fn, ks_shape, KS_SHAPES, KS_CASE)

/* Every marked term of every lane (the full dot: a block's redo), for nseg segments */
static void ks_all_terms(int64_t K, int64_t nseg, uint32_t *all)
{
    for (int64_t seg = 0; seg < nseg; seg++)
        for (int l = 0; l < 16; l++) {
            const int64_t n = (K > l ? (K - l + 15) / 16 : 0) - 32 * seg;
            all[16 * seg + l] = n >= 32 ? ~0u : n > 0 ? (1u << n) - 1 : 0;
        }
}

/* The product with the chunk offsets given (coff, K % 16 == 0) or rows as they lie (NULL);
 * returns nonzero without memory for the masks. */
static int ks_product(int64_t M, int64_t N, int64_t K, const float *A, int64_t a_i,
                      const int64_t *coff, const float *Bp, float *C, int64_t ldc)
{
    const int64_t nseg = (K + 511) / 512, nblk = (M + KS_MR - 1) / KS_MR, per = 16 * nseg;
    uint32_t *mk = crnn_scratch(CRNN_SCRATCH_PACK_A, sizeof(uint32_t) * (size_t)((nblk + 1) * per + 1));
    if (!mk) return 1;
    uint32_t *all = mk + nblk * per;
    int64_t live = 0;
    for (int64_t b = 0; b < nblk; b++) {
        const int mr = M - b * KS_MR < KS_MR ? (int)(M - b * KS_MR) : KS_MR;
        live += ks_masks(mr, K, A + b * KS_MR * a_i, a_i, coff, nseg, mk + b * per);
    }
    /* rows as they lie with too few terms left out to pay for the masks' branches: the dense
     * kernel, the same bits */
    if (!coff && 8 * live > 7 * M * K) {
        CAT(crnn_gemm16_kn_packed, ISA_SUFFIX)(M, N, K, A, a_i, 1, Bp, C, ldc);
        return 0;
    }
    ks_all_terms(K, nseg, all);
    int64_t offB[16];
    lane_starts(K, 16, offB);
    const int64_t npanel = (N + 15) / 16;
#if VW == 16
    for (int64_t jp = 0; jp < npanel; jp += KS_NR) {      /* a register per panel */
        const int nr = npanel - jp < KS_NR ? (int)(npanel - jp) : KS_NR;
        const int last = jp + nr == npanel ? (int)(N - (npanel - 1) * 16) : VW;
        const float *pb = Bp + jp * 16 * K;
        float *Cj = C + jp * 16;
        const int64_t bvs = 16 * K;
#else
    for (int64_t v0 = 0; v0 < npanel * (16 / VW); v0 += KS_NR) {   /* registers of a panel */
        const int64_t jp = v0 / (16 / VW), cols = N - jp * 16 < 16 ? N - jp * 16 : 16;
        const int64_t c0 = v0 % (16 / VW) * VW;                    /* the panel's column */
        if (c0 >= cols) continue;
        const int64_t rest = (cols - c0 + VW - 1) / VW;
        const int nr = rest < KS_NR ? (int)rest : KS_NR;
        const int last = (int)(cols - c0 - (nr - 1) * VW) < VW ? (int)(cols - c0 - (nr - 1) * VW) : VW;
        const float *pb = Bp + jp * 16 * K + c0;
        float *Cj = C + jp * 16 + c0;
        const int64_t bvs = VW;
#endif
        kn_operand Ao, Bo;
        ks_operands(A, a_i, coff, pb, offB, bvs, &Ao, &Bo);
        const int64_t whole = M / KS_MR, left = M - whole * KS_MR;
        if (whole) ks_shape(KS_MR, nr)(&Ao, &Bo, mk, per, all, nseg, Cj, ldc, last, whole);
        Ao.p = A + whole * KS_MR * a_i;
        if (left)
            ks_shape((int)left, nr)(&Ao, &Bo, mk + whole * per, per, all, nseg,
                                    Cj + whole * KS_MR * ldc, ldc, last, 1);
    }
    return 0;
}

void CAT(crnn_gemm16_kn_packed_sparse, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                                   const float *A, int64_t a_i, int64_t a_k,
                                                   const float *Bp, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    /* the masks are built from rows of A; without memory for them, every term */
    if (a_k != 1 || ks_product(M, N, K, A, a_i, NULL, Bp, C, ldc))
        CAT(crnn_gemm16_kn_packed, ISA_SUFFIX)(M, N, K, A, a_i, a_k, Bp, C, ldc);
}

int CAT(crnn_gemm16_kn_packed_sparse_win, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                                      const float *A, int64_t a_i,
                                                      const int64_t *coff, const float *Bp,
                                                      float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return 0;
    return ks_product(M, N, K, A, a_i, coff, Bp, C, ldc);
}
