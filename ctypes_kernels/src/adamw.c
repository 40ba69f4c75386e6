/* adamw.c — one AdamW step on one tensor (docs/backward.md, "AdamW").
 *
 * Scalars computed in double and rounded once to float; per element every operation is a
 * separate float rounding (-ffp-contract=off: no fma), sqrt and division correctly rounded. */
#include <math.h>
#include "core.h"

int32_t crnn_adamw(float *p, float *m, float *v, const float *g, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd,
                   int32_t decay, double b1t, double b2t)
{
    if (n < 0 || (n > 0 && (!p || !m || !v || !g)) || (decay != 0 && decay != 1))
        return CRNN_E_ARG;
    if (!(b1t < 1.0) || !(b2t < 1.0) || !(b2t >= 0.0) || !(b1t >= 0.0)) return CRNN_E_ARG;
#if defined(CRNN_MUTANT_ADAMW_DECAY_ALL)   /* mutant (docs/mutants.md): every tensor decays */
    decay = 1;
#endif
    const float omb1 = (float)(1.0 - beta1);
    const float b2 = (float)beta2;
    const float omb2 = (float)(1.0 - beta2);
    const float epsf = (float)eps;
    const float dec = (float)(1.0 - lr * wd);
    const float stepSize = (float)(lr / (1.0 - b1t));
    const float sqrtC2 = (float)sqrt(1.0 - b2t);
    for (int64_t i = 0; i < n; i++) {
        float pi = p[i], mi = m[i], vi = v[i], gi = g[i];
        if (decay) pi = pi * dec;
        mi = mi + omb1 * (gi - mi);
        vi = (vi * b2) + (omb2 * (gi * gi));
        pi = pi - stepSize * (mi / ((sqrtf(vi) / sqrtC2) + epsf));
        p[i] = pi; m[i] = mi; v[i] = vi;
    }
    return CRNN_OK;
}
