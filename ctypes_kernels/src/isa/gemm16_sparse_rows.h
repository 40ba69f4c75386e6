/* gemm16_sparse_rows.h — crnn_gemm16_sparse_rows (core.h) on one ISA's vectors: rows of A
 * whose ±0 terms are left out (the conv backward's dcol). */
#include "gemm16_common.h"

/* d = x + y over the row's N outputs, an operand being fma(v, p[q], +0): a lane's single
 * term (v its A value, p its row of B), or a partial already in the lane buffer (v = 1, p the
 * buffer row; fma(1, x, +0) is x, or +0 for a -0: zero signs only, core.h). TO_C: the tree's
 * last add, into C, with the empty lanes' +0 unless every lane had terms (full); returns
 * nonzero when an output is ±0. ONE: x alone (a row with one lane). */
AI int sr_pass(const int TO_C, const int ONE, int64_t N, vec_t xv, const float *xp, vec_t yv,
               const float *yp, int full, float *d)
{
    int zero = 0;
    for (int64_t q = 0; q < N; q += VW) {
        vec_t r = VFMA(xv, VLOADU(xp + q), VZERO());
        if (!ONE) r = VADD(r, VFMA(yv, VLOADU(yp + q), VZERO()));
        if (TO_C && !full) r = VADD(r, VZERO());
        VSTOREU(d + q, r);
        if (TO_C) zero |= VANY_ZERO(r);
    }
    return zero;
}

/* core.h, crnn_gemm16_sparse_rows. Per row: the nonzero terms (ascending k, found a vector of
 * A at a time); a lane with one term stays an operand (its A value and row of B), a lane's
 * second and later terms are fma'd into its row of a lane buffer (N floats). Then the tree
 * over the lanes that have terms, an add a pass, a single term computed in the add that takes
 * it; where only lane l+s has terms, lane l takes its operand (the +0 comes at the end); the
 * last add straight into C. */
void CAT(crnn_gemm16_sparse_rows, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K, const float *A,
                                              int64_t lda, const float *B, int64_t ldb, float *C,
                                              int64_t ldc, int32_t *flag)
{
    float *lb = crnn_scratch(CRNN_SCRATCH_PACK_B, sizeof(float) * (size_t)(16 * N));
    if (!lb) {            /* no memory for the lane buffer: the definition needs none */
        crnn_gemm16_sparse_rows_scalar(M, N, K, A, lda, B, ldb, C, ldc, flag);
        return;
    }
    const vec_t one = VSET1(1.0f);
    for (int64_t i = 0; i < M; i++) {
        const float *a = A + i * lda;
        float *ci = C + i * ldc;
        vec_t ov[16];
        const float *op[16];
        uint32_t have = 0, inbuf = 0;
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
                if (!(have >> l & 1)) {
                    ov[l] = v;
                    op[l] = w;
                    have |= 1u << l;
                    continue;
                }
                float *d = lb + l * N;
                if (!(inbuf >> l & 1)) {                 /* the lane's first two terms */
                    const vec_t v0 = ov[l];
                    const float *w0 = op[l];
                    for (int64_t q = 0; q < N; q += VW)
                        VSTOREU(d + q, VFMA(v, VLOADU(w + q), VFMA(v0, VLOADU(w0 + q), VZERO())));
                    inbuf |= 1u << l;
                    ov[l] = one;
                    op[l] = d;
                } else {
                    for (int64_t q = 0; q < N; q += VW) VSTOREU(d + q, VFMA(v, VLOADU(w + q), VLOADU(d + q)));
                }
            }
        }
        if (!have) {                              /* no terms: every output +0 */
            memset(ci, 0, sizeof(float) * (size_t)N);
            flag[i] = 1;
            continue;
        }
        const int full = have == 0xFFFFu;
        for (int s = 8; s >= 2; s >>= 1) {       /* p[l] = p[l] + p[l+s], present lanes only */
            const uint32_t lo = have & ((1u << s) - 1), hi = have >> s;
            for (uint32_t m = lo & hi; m; m &= m - 1) {
                const int l = __builtin_ctz(m);
                float *d = lb + l * N;             /* no live operand but lane l's is in row l */
                sr_pass(0, 0, N, ov[l], op[l], ov[l + s], op[l + s], 0, d);
                ov[l] = one;
                op[l] = d;
            }
            for (uint32_t m = hi & ~lo; m; m &= m - 1) {
                const int l = __builtin_ctz(m);
                ov[l] = ov[l + s];
                op[l] = op[l + s];
            }
            have = lo | hi;
        }
        /* s = 1 into C: p[0] + p[1], or the one present */
        if (have == 3) flag[i] = sr_pass(1, 0, N, ov[0], op[0], ov[1], op[1], full, ci);
        else if (have == 1) flag[i] = sr_pass(1, 1, N, ov[0], op[0], one, NULL, full, ci);
        else flag[i] = sr_pass(1, 1, N, ov[1], op[1], one, NULL, full, ci);
    }
}
