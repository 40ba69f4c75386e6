/* adamw.c: one AdamW step on one tensor (spec/adamw.py, docs/backward.md "AdamW"). */
#include <math.h>

#include "spec.h"

/* Every scalar computed in binary64 and rounded once to binary32; per element each
 * operation one binary32 rounding in exactly this grouping, no fma. The running products
 * b1t, b2t = beta^t must lie in [0, 1) (CRNN_E_ARG otherwise: at 1 the spec divides by 0). */
int32_t crnn_adamw(float *p, float *m, float *v, const float *g, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd,
                   int32_t decay, double b1t, double b2t)
{
    if (n < 0 || (n > 0 && (!p || !m || !v || !g)) || (decay != 0 && decay != 1) ||
        !(b1t >= 0.0 && b1t < 1.0) || !(b2t >= 0.0 && b2t < 1.0))
        return CRNN_E_ARG;
    float omb1 = (float)(1.0 - beta1), b2 = (float)beta2, omb2 = (float)(1.0 - beta2);
    float epsf = (float)eps, decayf = (float)(1.0 - lr * wd);
    float stepSize = (float)(lr / (1.0 - b1t)), sqrtC2 = (float)sqrt(1.0 - b2t);
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i];
        if (decay)
            pi = pi * decayf;
        m[i] = m[i] + omb1 * (g[i] - m[i]);
        v[i] = (v[i] * b2) + (omb2 * (g[i] * g[i]));
        p[i] = pi - stepSize * (m[i] / ((sqrtf(v[i]) / sqrtC2) + epsf));
    }
    return CRNN_OK;
}
