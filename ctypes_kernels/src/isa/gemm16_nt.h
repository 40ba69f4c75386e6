/* gemm16_nt.h — crnn_gemm16 (C = A Bᵀ, both operands read along k) on one ISA's vectors.
 * An output's 16 partials are the lanes of its NV = 16/VW accumulators. A tile of VW outputs
 * (4x4 on 512-bit, 2x4 on 256-bit, 2x2 on 128-bit, or one row of VW when M is small) is
 * accumulated in passes that fit the register file; the last K mod 16 terms go through a
 * masked fma (the other lanes unchanged). The levels s >= VW of the tree add whole
 * registers; the rest (vtree_tile in vec_*.h) brings the VW outputs together with shuffles
 * so each add is still lane i + lane i+s of one output, and returns the VW results in one
 * register. */
#include "gemm16_common.h"

#if VW == 16
#define NT_PASS_OUTPUTS 16      /* outputs accumulated at once */
#define NT_TILE_ROWS 4         /* rows of the big tile */
#elif VW == 8
#define NT_PASS_OUTPUTS 4
#define NT_TILE_ROWS 2
#else
#define NT_PASS_OUTPUTS 2
#define NT_TILE_ROWS 2
#endif

/* The VW outputs of a tile of TR rows of A (ar) x VW/TR rows of B (bc):
 * out[r * TC + c] = dot16(ar[r], bc[c], K) */
AI void nt_tile_out(const int TR, int64_t K, const float *const *ar, const float *const *bc,
                    float *out)
{
    const int TC = VW / TR;
    const int64_t kfull = K & ~(int64_t)15;
    const int tail = (int)(K - kfull);
    vec_t red[VW];
    UNROLL
    for (int p = 0; p < VW / NT_PASS_OUTPUTS; p++) {
        vec_t acc[NT_PASS_OUTPUTS][NV];
        UNROLL
        for (int o = 0; o < NT_PASS_OUTPUTS; o++)
            UNROLL
            for (int v = 0; v < NV; v++) acc[o][v] = VZERO();
        for (int64_t k = 0; k < kfull; k += 16)
            UNROLL
            for (int v = 0; v < NV; v++)
                UNROLL
                for (int o = 0; o < NT_PASS_OUTPUTS; o++) {
                    const int q = p * NT_PASS_OUTPUTS + o;
                    acc[o][v] = VFMA(VLOADU(ar[q / TC] + k + v * VW),
                                     VLOADU(bc[q % TC] + k + v * VW), acc[o][v]);
                }
        if (tail) {
            UNROLL
            for (int v = 0; v < NV; v++) {
                const int n = tail - v * VW;
                if (n <= 0) break;
                UNROLL
                for (int o = 0; o < NT_PASS_OUTPUTS; o++) {
                    const int q = p * NT_PASS_OUTPUTS + o;
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
                for (int o = 0; o < NT_PASS_OUTPUTS; o++) acc[o][v] = VADD(acc[o][v], acc[o][v + s]);
        UNROLL
        for (int o = 0; o < NT_PASS_OUTPUTS; o++) red[p * NT_PASS_OUTPUTS + o] = acc[o][0];
    }
    VSTOREU(out, vtree_tile(red));
}

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
    float out[VW];
    nt_tile_out(TR, K, ar, bc, out);
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

/* One output (M = N = 1, as a gradient norm's dot of a tensor with itself): its NV
 * accumulators alone, instead of a tile whose other outputs repeat it. The same lanes, the
 * same tree (vtree_tile of VW copies; lane 0 is the output). */
AI void nt_one(int64_t K, const float *a, const float *b, float *c)
{
    const int64_t kfull = K & ~(int64_t)15;
    const int tail = (int)(K - kfull);
    vec_t acc[NV], red[VW];
    UNROLL
    for (int v = 0; v < NV; v++) acc[v] = VZERO();
    for (int64_t k = 0; k < kfull; k += 16)
        UNROLL
        for (int v = 0; v < NV; v++) acc[v] = VFMA(VLOADU(a + k + v * VW), VLOADU(b + k + v * VW), acc[v]);
    UNROLL
    for (int v = 0; v < NV; v++) {
        const int n = tail - v * VW;
        if (n <= 0) break;
        const float *ak = a + kfull + v * VW, *bk = b + kfull + v * VW;
        acc[v] = n >= VW ? VFMA(VLOADU(ak), VLOADU(bk), acc[v]) : VFMA_N(VLOADN(ak, n), VLOADN(bk, n), acc[v], n);
    }
    UNROLL
    for (int s = NV / 2; s >= 1; s >>= 1)
        UNROLL
        for (int v = 0; v < s; v++) acc[v] = VADD(acc[v], acc[v + s]);
    UNROLL
    for (int o = 0; o < VW; o++) red[o] = acc[0];
    float out[VW];
    VSTOREU(out, vtree_tile(red));
    *c = out[0];
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
            else nt_tile(NT_TILE_ROWS, K, A + i * lda, lda, nr, B + j * ldb, ldb, nc, C + i * ldc + j, ldc);
        }
    }
}

void CAT(crnn_gemm16, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t lda,
                                  const float *B, int64_t ldb,
                                  float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    if (M == 1 && N == 1) {
        nt_one(K, A, B, C);
        return;
    }
    if (M > 1 && M < NT_TILE_ROWS) {     /* a few rows: one tile (rows repeated, not stored), B read once */
        nt_rows(NT_TILE_ROWS, 0, M, N, K, A, lda, B, ldb, C, ldc);
        return;
    }
    /* full tiles of NT_TILE_ROWS rows, the remaining rows one at a time */
    int64_t mt = M >= NT_TILE_ROWS ? M / NT_TILE_ROWS * NT_TILE_ROWS : 0;
    if (mt) nt_rows(NT_TILE_ROWS, 0, mt, N, K, A, lda, B, ldb, C, ldc);
    if (mt < M) nt_rows(1, mt, M, N, K, A, lda, B, ldb, C, ldc);
}

/* core.h, crnn_gemm16_cols: c[cols[j]] = dot16(a, B + cols[j] * ldb, K) for j < n, the listed
 * rows of B VW at a time in a one-row tile (the same lanes and tree as every nt output) */
void CAT(crnn_gemm16_cols, ISA_SUFFIX)(int64_t K, const float *a, const float *B, int64_t ldb,
                                       const int32_t *cols, int64_t n, float *c)
{
    const float *ar[1] = {a}, *bc[VW];
    for (int64_t j = 0; j < n; j += VW) {
        const int nc = n - j < VW ? (int)(n - j) : VW;
        UNROLL
        for (int q = 0; q < VW; q++) bc[q] = B + (int64_t)cols[j + (q < nc ? q : nc - 1)] * ldb;
        float out[VW];
        nt_tile_out(1, K, ar, bc, out);
        for (int q = 0; q < nc; q++) c[cols[j + q]] = out[q];
    }
}
