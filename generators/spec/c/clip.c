/* clip.c: the global gradient norm and clipping (spec/clip.py, docs/backward.md). */
#include <math.h>

#include "spec.h"

/* norm = sqrt(+0 + double(dot16(g_0, g_0)) + double(dot16(g_1, g_1)) + ...), in tensor
 * order; when enabled and norm > limit (strictly), g = g * float32(limit / (norm + 1e-6)).
 * An enabled limit must be >= 0 (not NaN). */
int32_t crnn_clip_gradients(float *grads, const int64_t *sizes, int32_t nTensors,
                            double limit, int32_t enabled, double *norm)
{
    if (nTensors < 0 || !norm || (nTensors > 0 && !sizes) || (enabled != 0 && enabled != 1) ||
        (enabled && !(limit >= 0.0)))
        return CRNN_E_ARG;
    int64_t total = 0;
    for (int32_t i = 0; i < nTensors; i++) {
        if (sizes[i] < 0)
            return CRNN_E_ARG;
        total += sizes[i];
    }
    if (total > 0 && !grads)
        return CRNN_E_ARG;
    double sum = 0.0;
    int64_t at = 0;
    for (int32_t i = 0; i < nTensors; i++) {
        sum = sum + (double)spec_dot16(grads + at, 1, grads + at, 1, sizes[i]);
        at += sizes[i];
    }
    *norm = sqrt(sum);
    if (enabled && *norm > limit) {
        float f = (float)(limit / (*norm + 1e-6));
        for (int64_t k = 0; k < total; k++)
            grads[k] = grads[k] * f;
    }
    return CRNN_OK;
}
