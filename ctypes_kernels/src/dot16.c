/* dot16.c — the 16-lane dot product and the gemm16 dispatcher. */
#include <math.h>
#include <stdlib.h>
#include "core.h"
#include "mutants.h"

void crnn_dot16_tail(float p[16], const float *a, const float *b, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        p[k] = fmaf(a[k], b[k], p[k]);
}

float crnn_dot16_scalar(const float *a, const float *b, int64_t n)
{
    float p[16] = {0};
    for (int64_t k = 0; k < n; k++)
        p[k % 16] = fmaf(a[k], b[k], p[k % 16]);
    return crnn_tree16(p);
}

int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    if (n < 0 || !out || (n > 0 && (!a || !b))) return CRNN_E_ARG;
    crnn_gemm16(1, 1, n, a, n, b, n, out, 1);
    return CRNN_OK;
}

static const crnn_gemm16_fn kernels[CRNN_NISA] = {
    crnn_gemm16_scalar, crnn_gemm16_sse, crnn_gemm16_avx2, crnn_gemm16_avx512,
};

typedef struct {
    crnn_gemm16_fn fn;
    int64_t M, N, K, lda, ldb, ldc;
    const float *A, *B;
    float *C;
    int by_rows;
} gemm_job;

static void gemm_range(void *ctx, int64_t begin, int64_t end)
{
    gemm_job *g = ctx;
    if (g->by_rows)
        g->fn(end - begin, g->N, g->K, g->A + begin * g->lda, g->lda, g->B, g->ldb,
              g->C + begin * g->ldc, g->ldc);
    else
        g->fn(g->M, end - begin, g->K, g->A, g->lda, g->B + begin * g->ldb, g->ldb,
              g->C + begin, g->ldc);
}

void crnn_gemm16(int64_t M, int64_t N, int64_t K,
                 const float *A, int64_t lda, const float *B, int64_t ldb,
                 float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    gemm_job g = {kernels[crnn_current_isa()], M, N, K, lda, ldb, ldc, A, B, C, M >= N};
#if defined(CRNN_MUTANT)   /* a mutant build only (docs/mutants.md): its kernel, if it has one */
    g.fn = crnn_mutant_gemm16(crnn_current_isa(), g.fn);
#endif
    /* Small products are not worth a thread; either way each output is whole. */
    if (M * N * (K + 16) < 4096 || crnn_current_threads() == 1) {
        gemm_range(&g, 0, g.by_rows ? M : N);
        return;
    }
    crnn_parallel_for(g.by_rows ? M : N, gemm_range, &g);
}

void crnn_transpose(const float *src, int64_t rows, int64_t cols, float *dst)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            dst[j * rows + i] = src[i * cols + j];
}
