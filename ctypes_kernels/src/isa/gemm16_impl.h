/* gemm16_impl.h — the one vector algorithm of gemm16, included by each thin per-ISA file
 * after its vec_*.h. Lane l of the 16 partials lives in vector l / VW, element l % VW, so
 * term k still goes to lane k mod 16 whatever the vector width. Whole 16-term groups are
 * vector fmas; the last n % 16 terms are added lane by lane (crnn_dot16_tail), so a lane
 * that receives no term keeps its value exactly (no zero padding). */
#include "../core.h"

#define NV (16 / VW)
#define NJ 4            /* outputs per pass: columns j0 .. j0+3 of one row */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

static inline float finish(const vec_t *acc, const float *a, const float *b, int64_t k0, int64_t K)
{
    float p[16];
    for (int v = 0; v < NV; v++) VSTOREU(p + v * VW, acc[v]);
    crnn_dot16_tail(p, a + k0, b + k0, K - k0);
    return crnn_tree16(p);
}

static void row_block(int64_t nj, int64_t K, const float *a, const float *B, int64_t ldb, float *c)
{
    vec_t acc[NJ][NV];
    int64_t kfull = K & ~(int64_t)15;
    for (int j = 0; j < NJ; j++)
        for (int v = 0; v < NV; v++) acc[j][v] = VZERO();
    if (nj == NJ) {
        for (int64_t k = 0; k < kfull; k += 16)
            for (int v = 0; v < NV; v++) {
                vec_t av = VLOADU(a + k + v * VW);
                for (int j = 0; j < NJ; j++)
                    acc[j][v] = VFMA(av, VLOADU(B + j * ldb + k + v * VW), acc[j][v]);
            }
    } else {
        for (int64_t k = 0; k < kfull; k += 16)
            for (int v = 0; v < NV; v++) {
                vec_t av = VLOADU(a + k + v * VW);
                for (int j = 0; j < nj; j++)
                    acc[j][v] = VFMA(av, VLOADU(B + j * ldb + k + v * VW), acc[j][v]);
            }
    }
    for (int j = 0; j < nj; j++) c[j] = finish(acc[j], a, B + j * ldb, kfull, K);
}

void CAT(crnn_gemm16, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                  const float *A, int64_t lda,
                                  const float *B, int64_t ldb,
                                  float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j0 = 0; j0 < N; j0 += NJ) {
            int64_t nj = N - j0 < NJ ? N - j0 : NJ;
            row_block(nj, K, A + i * lda, B + j0 * ldb, ldb, C + i * ldc + j0);
        }
}
