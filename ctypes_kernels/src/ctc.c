/* ctc.c — CTC loss of one line and its logit gradient (docs/backward.md, "CTC loss").
 *
 * Scalar binary64 with the DetMath exp and log (detmath.h), compiled with -ffp-contract=off,
 * so every path and generators/spec/ctc.py give the same bits. Blank = 0. */
#include <math.h>
#include <stdlib.h>
#include "core.h"
#include "detmath.h"

#define NEG_INF (-INFINITY)

/* hi + log(1 + exp(lo - hi)), hi/lo the larger/smaller argument; hi when lo is -inf or
 * lo - hi < -40 (log(1 + e^-40) = 4.2e-18: under half an ulp of any |hi| >= 1/16). */
static double logadd(double a, double b)
{
    double hi = a > b ? a : b, lo = a > b ? b : a;
    if (lo == NEG_INF) return hi;
    double d = lo - hi;
    if (d < -40.0) return hi;
    return hi + crnn_detmath_log1(1.0 + crnn_detmath_exp1(d));
}

int32_t crnn_ctc(const float *logits, int32_t T, int32_t K,
                 const int32_t *target, int32_t L, double scale,
                 double *loss, float *dlogits)
{
    if (T < 0 || K < 1 || L < 0 || !loss || (T > 0 && (!logits || !dlogits)) || (L > 0 && !target))
        return CRNN_E_ARG;
    for (int32_t i = 0; i < L; i++)
        if (target[i] < 1 || target[i] >= K) return CRNN_E_ARG;
    for (int64_t i = 0; i < (int64_t)T * K; i++)
        if (!isfinite(logits[i])) return CRNN_E_ARG;

    const int64_t S = 2 * (int64_t)L + 1, nTK = (int64_t)T * K;
    for (int64_t i = 0; i < nTK; i++) dlogits[i] = 0.0f;
    if (T == 0) { *loss = INFINITY; return CRNN_OK; }

    double *lp = malloc(sizeof(double) * ((size_t)nTK * 2 + (size_t)T * S * 2 + (size_t)S));
    int32_t *ext = malloc(sizeof(int32_t) * (size_t)S);
    if (!lp || !ext) { free(lp); free(ext); return CRNN_E_NOMEM; }
    double *acc = lp + nTK, *alpha = acc + nTK, *beta = alpha + (size_t)T * S;
    double *u = beta + (size_t)T * S;   /* a step's inner logadds */
    for (int64_t s = 0; s < S; s++) ext[s] = (s & 1) ? target[s >> 1] : 0;

    /* 1. log softmax, classes summed in ascending order */
    for (int64_t t = 0; t < T; t++) {
        const float *z = logits + t * K;
        double m = z[0];
        for (int32_t k = 1; k < K; k++) if ((double)z[k] > m) m = z[k];
        double s = 0.0;
        for (int32_t k = 0; k < K; k++) s = s + crnn_detmath_exp1((double)z[k] - m);
        double ls = crnn_detmath_log1(s);
        for (int32_t k = 0; k < K; k++) lp[t * K + k] = ((double)z[k] - m) - ls;
    }

    /* 2. alpha and beta, both including their own step's emission. A step's inner logadds
     * for every s first, then the outer ones: the same operations per entry, but each pass
     * is independent logadds the core can overlap (one entry's two nested logadds are a
     * chain too long to overlap with the next entry's). */
    for (int64_t s = 0; s < S; s++)
        alpha[s] = s < 2 ? lp[ext[s]] : NEG_INF;
    for (int64_t t = 1; t < T; t++) {
        const double *a = alpha + (t - 1) * S;
        double *out = alpha + t * S;
        for (int64_t s = 0; s < S; s++) u[s] = logadd(a[s], s >= 1 ? a[s - 1] : NEG_INF);
        for (int64_t s = 0; s < S; s++) {
            double two = (s >= 2 && ext[s] != 0 && ext[s] != ext[s - 2]) ? a[s - 2] : NEG_INF;
            out[s] = logadd(u[s], two) + lp[t * K + ext[s]];
        }
    }
    for (int64_t s = 0; s < S; s++)
        beta[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * K + ext[s]] : NEG_INF;
    for (int64_t t = T - 2; t >= 0; t--) {
        const double *bn = beta + (t + 1) * S;
        double *out = beta + t * S;
        for (int64_t s = 0; s < S; s++) u[s] = logadd(bn[s], s + 1 < S ? bn[s + 1] : NEG_INF);
        for (int64_t s = 0; s < S; s++) {
            double two = (s + 2 < S && ext[s + 2] != 0 && ext[s + 2] != ext[s]) ? bn[s + 2] : NEG_INF;
            out[s] = logadd(u[s], two) + lp[t * K + ext[s]];
        }
    }

    /* 3. logP and the loss */
    const double *last = alpha + (T - 1) * S;
    double logP = S == 1 ? last[0] : logadd(last[S - 1], last[S - 2]);
    if (logP == NEG_INF) {
        *loss = INFINITY;
        free(lp); free(ext);
        return CRNN_OK;
    }
    *loss = -logP;

    /* 4. acc[t][k]: logadd over the entries labelled k, ascending; then the gradient (s the
     * outer loop: each acc[t][k] still takes its entries in ascending s, and the T logadds
     * of one s are independent) */
    for (int64_t i = 0; i < nTK; i++) acc[i] = NEG_INF;
    for (int64_t s = 0; s < S; s++)
        for (int64_t t = 0; t < T; t++) {
            double *ak = acc + t * K + ext[s];
            *ak = logadd(*ak, alpha[t * S + s] + beta[t * S + s]);
        }
    for (int64_t i = 0; i < nTK; i++) {
        double occ = crnn_detmath_exp1((acc[i] - lp[i]) - logP);
        dlogits[i] = (float)(scale * (crnn_detmath_exp1(lp[i]) - occ));
    }
    free(lp); free(ext);
    return CRNN_OK;
}
