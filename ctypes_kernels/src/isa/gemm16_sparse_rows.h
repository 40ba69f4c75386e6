/* gemm16_sparse_rows.h — crnn_gemm16_sparse_rows (core.h) on one ISA's vectors: rows of A
 * whose ±0 terms are left out (the conv backward's dcol). */
#include "gemm16_common.h"

/* core.h, crnn_gemm16_sparse_rows. Per row: the nonzero terms (ascending k, without
 * branches), each lane's fmas into its row of a lane buffer (N floats; only lanes with
 * terms are written), the tree over the lanes that have terms, +0 when any lane had none. */
void CAT(crnn_gemm16_sparse_rows, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K, const float *A,
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
