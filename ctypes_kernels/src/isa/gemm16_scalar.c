/* gemm16 on the scalar path: the readable definition, one dot16 per output. */
#include "../core.h"

void crnn_gemm16_scalar(int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb,
                        float *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            C[i * ldc + j] = crnn_dot16_scalar(A + i * lda, B + j * ldb, K);
}
