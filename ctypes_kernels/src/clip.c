/* clip.c — global gradient norm and clipping (docs/backward.md, "Batch gradient, clipping").
 *
 * norm = sqrt(sum over tensors in order of (double)dot16(g, g)), the sum in double from +0;
 * when enabled and norm > limit, every element is multiplied by (float)(limit / (norm + 1e-6)). */
#include <math.h>
#include "core.h"

int32_t crnn_clip_gradients(float *grads, const int64_t *sizes, int32_t nTensors,
                            double limit, int32_t enabled, double *norm)
{
    if (nTensors < 0 || !norm || (nTensors > 0 && !sizes) || (enabled != 0 && enabled != 1))
        return CRNN_E_ARG;
    if (enabled && !(limit >= 0.0)) return CRNN_E_ARG;
    int64_t total = 0;
    for (int32_t i = 0; i < nTensors; i++) {
        if (sizes[i] < 0) return CRNN_E_ARG;
        total += sizes[i];
    }
    if (total > 0 && !grads) return CRNN_E_ARG;

    double sumsq = 0.0;
    const float *g = grads;
    for (int32_t i = 0; i < nTensors; i++) {
        float d = 0.0f;
        if (sizes[i] > 0) crnn_gemm16(1, 1, sizes[i], g, sizes[i], g, sizes[i], &d, 1);
        sumsq = sumsq + (double)d;
        g += sizes[i];
    }
    double n = sqrt(sumsq);
    *norm = n;
    if (enabled && n > limit) {
        float f = (float)(limit / (n + 1e-6));
        for (int64_t k = 0; k < total; k++) grads[k] = grads[k] * f;
    }
    return CRNN_OK;
}
