/* linear.c: y = x W^T + b and its backward (spec/linear.py, docs/backward.md). */
#include "spec.h"

static int bad_shape(int32_t T, int32_t I, int32_t O)
{
    return T < 0 || I < 0 || O < 0;
}

/* y[t][o] = dot16(x[t], W[o], I) + b[o]: the bias a separate rounding */
int32_t crnn_linear_forward(const float *x, const float *W, const float *b,
                            int32_t T, int32_t I, int32_t O, float *y)
{
    if (!x || !W || !b || !y || bad_shape(T, I, O))
        return CRNN_E_ARG;
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++)
            y[t * O + o] = spec_dot16(x + t * I, 1, W + o * I, 1, I) + b[o];
    return CRNN_OK;
}

/* dW[o][i] = dot over t of (dY[t][o], x[t][i]); db[o] = dot over t of (dY[t][o], 1);
 * dx[t][i] = dot over o of (dY[t][o], W[o][i]): rows of the transposed matrices */
int32_t crnn_linear_backward(const float *x, const float *W, const float *dY,
                             int32_t T, int32_t I, int32_t O,
                             float *dx, float *dW, float *db)
{
    if (!x || !W || !dY || !dW || !db || bad_shape(T, I, O))
        return CRNN_E_ARG;
    for (int64_t o = 0; o < O; o++) {
        for (int64_t i = 0; i < I; i++)
            dW[o * I + i] = spec_dot16(dY + o, O, x + i, I, T);
        db[o] = spec_dot16(dY + o, O, &spec_one, 0, T);
    }
    if (dx)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < I; i++)
                dx[t * I + i] = spec_dot16(dY + t * O, 1, W + i, I, O);
    return CRNN_OK;
}
