/* linear.c — y = x Wᵀ + b and its backward, every sum a dot16 (docs/backward.md). */
#include <stdlib.h>
#include "core.h"

int32_t crnn_linear_forward(const float *x, const float *W, const float *b,
                            int32_t T, int32_t I, int32_t O, float *y)
{
    if (T < 0 || I < 0 || O < 0 || !x || !W || !b || !y) return CRNN_E_ARG;
    crnn_gemm16_kn(T, O, I, x, I, 1, W, 1, I, y, O);     /* term i: x[t][i] * W[o][i] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++)
            y[t * O + o] = y[t * O + o] + b[o];
    return CRNN_OK;
}

/* dW[o][i] = dot_t(dY[t][o], x[t][i]); db[o] = dot_t(dY[t][o], 1); dx[t][i] = dot_o(dY[t][o], W[o][i]).
 * All three read their operands as stored (the kn layout: term t of dW is row t of dY and
 * of x, term o of dx is row o of W), term t or o into lane t or o mod 16. */
int32_t crnn_linear_backward(const float *x, const float *W, const float *dY,
                             int32_t T, int32_t I, int32_t O,
                             float *dx, float *dW, float *db)
{
    if (T < 0 || I < 0 || O < 0 || !x || !W || !dY || !dW || !db) return CRNN_E_ARG;
    size_t nT = (size_t)T;
    float *ones = crnn_scratch(CRNN_SCRATCH_LAYER, sizeof(float) * (nT + 1));
    if (!ones) return CRNN_E_NOMEM;
    for (size_t t = 0; t < nT; t++) ones[t] = 1.0f;
    crnn_gemm16_kn(O, I, T, dY, 1, O, x, I, 1, dW, I);
    crnn_gemm16_kn(1, O, T, ones, 0, 1, dY, O, 1, db, O);
    if (dx) crnn_gemm16_kn(T, I, O, dY, O, 1, W, I, 1, dx, I);
    return CRNN_OK;
}
