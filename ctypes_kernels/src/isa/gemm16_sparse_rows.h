/* gemm16_sparse_rows.h — crnn_gemm16_sparse_rows (core.h) on one ISA's vectors: rows of A
 * whose ±0 terms are left out (the conv backward's dcol). */
#include "gemm16_common.h"

/* core.h, crnn_gemm16_sparse_rows. Per row: the nonzero terms (ascending k, found a vector of
 * A at a time), each lane's fmas into its row of a lane buffer (N floats; only lanes with
 * terms are written), the tree over the lanes that have terms, +0 when any lane had none;
 * the tree's last add goes straight to C. */
void CAT(crnn_gemm16_sparse_rows, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K, const float *A,
                                              int64_t lda, const float *B, int64_t ldb, float *C,
                                              int64_t ldc, int32_t *flag)
{
    float *lb = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(16 * N));
    for (int64_t i = 0; i < M; i++) {
        const float *a = A + i * lda;
        float *ci = C + i * ldc;
        uint32_t have = 0;
        for (int64_t k0 = 0; k0 < K; k0 += 64) {    /* 64 terms' nonzero bits, then each */
            uint64_t nz = 0;
            for (int64_t k1 = k0; k1 < K && k1 < k0 + 64; k1 += VW) {
                const int nk = K - k1 < VW ? (int)(K - k1) : VW;
                nz |= (uint64_t)VNONZERO_BITS(nk == VW ? VLOADU(a + k1) : VLOADN(a + k1, nk)) << (k1 - k0);
            }
            for (; nz; nz &= nz - 1) {
                const int64_t k = k0 + __builtin_ctzll(nz);
                const int l = (int)(k & 15);
                const vec_t v = VSET1(a[k]);
                const float *w = B + k * ldb;
                float *d = lb + l * N;
                if (have >> l & 1)
                    for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VFMA(v, VLOADU(w + q), VLOADU(d + q)));
                else
                    for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VFMA(v, VLOADU(w + q), VZERO()));
                have |= 1u << l;
            }
        }
        if (!have) {                              /* no terms: every output +0 */
            memset(ci, 0, sizeof(float) * (size_t)N);
            flag[i] = 1;
            continue;
        }
        const int full = have == 0xFFFFu;
        int at[16];                               /* the buffer row holding lane l's partial */
        for (int l = 0; l < 16; l++) at[l] = l;
        for (int s = 8; s >= 2; s >>= 1) {       /* p[l] = p[l] + p[l+s], present lanes only */
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
        /* s = 1 into C: p[0] + p[1] (or the one present), then the empty lanes' +0 */
        const float *r0 = lb + at[have & 1 ? 0 : 1] * N, *r1 = lb + at[1] * N;
        const int both = have == 3;
        int zero = 0;
        for (int64_t q = 0; q < N; q += VW) {
            vec_t y = VLOADU(r0 + q);
            if (both) y = VADD(y, VLOADU(r1 + q));
            if (!full) y = VADD(y, VZERO());
            VSTOREU(ci + q, y);
            zero |= VANY_ZERO(y);
        }
        flag[i] = zero;
    }
}
