/* ctc.c: the CTC loss of one line and its logit gradient in binary64 with DetMath
 * (spec/ctc.py, docs/backward.md "CTC loss"). Blank is class 0. */
#include <math.h>
#include <stdlib.h>

#include "spec.h"

#define CUT -40.0

/* hi + log(1 + exp(lo - hi)), hi/lo the larger/smaller; hi when lo = -inf or lo - hi < -40 */
static double logadd(double a, double b)
{
    double hi = a >= b ? a : b, lo = a >= b ? b : a;
    if (lo == -INFINITY)
        return hi;
    double d = lo - hi;
    if (d < CUT)
        return hi;
    return hi + spec_log(1.0 + spec_exp(d));
}

/* lp[k] = (z[k] - m) - log(s): m the first maximum, s = +0 + exp(z[k] - m), k ascending */
static void log_softmax(const float *logits, int64_t K, double *lp)
{
    double m = logits[0];
    for (int64_t k = 1; k < K; k++)
        if ((double)logits[k] > m)
            m = logits[k];
    double s = 0.0;
    for (int64_t k = 0; k < K; k++)
        s = s + spec_exp((double)logits[k] - m);
    double ls = spec_log(s);
    for (int64_t k = 0; k < K; k++)
        lp[k] = ((double)logits[k] - m) - ls;
}

static int32_t ext_of(const int32_t *target, int64_t s)
{
    return s % 2 ? target[s / 2] : 0;
}

/* alpha[t][s] = logadd(logadd(alpha[t-1][s], alpha[t-1][s-1]), alpha[t-1][s-2]) + e[t][s],
 * the skip only between two different labels; beta the mirror image. Both include their
 * own step's emission e[t][s] = lp[t][ext[s]]. */
static void alpha_beta(const double *lp, int64_t T, int64_t K, const int32_t *target, int64_t S,
                       double *alpha, double *beta)
{
    for (int64_t s = 0; s < S; s++) {
        alpha[s] = s < 2 ? lp[ext_of(target, s)] : -INFINITY;
        beta[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * K + ext_of(target, s)] : -INFINITY;
    }
    for (int64_t t = 1; t < T; t++) {
        const double *a = alpha + (t - 1) * S;
        for (int64_t s = 0; s < S; s++) {
            int32_t e = ext_of(target, s);
            double one = s >= 1 ? a[s - 1] : -INFINITY;
            double two = s >= 2 && e != 0 && e != ext_of(target, s - 2) ? a[s - 2] : -INFINITY;
            alpha[t * S + s] = logadd(logadd(a[s], one), two) + lp[t * K + e];
        }
    }
    for (int64_t t = T - 2; t >= 0; t--) {
        const double *b = beta + (t + 1) * S;
        for (int64_t s = 0; s < S; s++) {
            int32_t e2 = s + 2 < S ? ext_of(target, s + 2) : 0;
            double one = s + 1 < S ? b[s + 1] : -INFINITY;
            double two = s + 2 < S && e2 != 0 && e2 != ext_of(target, s) ? b[s + 2] : -INFINITY;
            beta[t * S + s] = logadd(logadd(b[s], one), two) + lp[t * K + ext_of(target, s)];
        }
    }
}

/* acc[k] = -inf, then logadd(acc[k], alpha[t][s] + beta[t][s]) for ext[s] = k, s ascending;
 * dlogits[t][k] = float32(scale * (exp(lp[k]) - exp((acc[k] - lp[k]) - logP))) */
static void gradient(const double *lp, const double *alpha, const double *beta, int64_t T,
                     int64_t K, const int32_t *target, int64_t S, double logP, double scale,
                     double *acc, float *dlogits)
{
    for (int64_t t = 0; t < T; t++) {
        for (int64_t k = 0; k < K; k++)
            acc[k] = -INFINITY;
        for (int64_t s = 0; s < S; s++) {
            int32_t k = ext_of(target, s);
            acc[k] = logadd(acc[k], alpha[t * S + s] + beta[t * S + s]);
        }
        for (int64_t k = 0; k < K; k++) {
            double l = lp[t * K + k];
            double occ = spec_exp((acc[k] - l) - logP);
            dlogits[t * K + k] = (float)(scale * (spec_exp(l) - occ));
        }
    }
}

static int valid(const float *logits, int64_t T, int64_t K, const int32_t *target, int64_t L)
{
    for (int64_t i = 0; i < L; i++)
        if (target[i] < 1 || target[i] >= K)
            return 0;
    for (int64_t i = 0; i < T * K; i++)
        if (!isfinite(logits[i]))
            return 0;
    return 1;
}

int32_t crnn_ctc(const float *logits, int32_t T, int32_t K,
                 const int32_t *target, int32_t L, double scale,
                 double *loss, float *dlogits)
{
    int64_t TK = (int64_t)T * K, S = 2 * (int64_t)L + 1;
    if (T < 0 || K < 1 || L < 0 || !loss || (TK > 0 && (!logits || !dlogits)) ||
        (L > 0 && !target) || !valid(logits, T, K, target, L))
        return CRNN_E_ARG;
    for (int64_t i = 0; i < TK; i++)
        dlogits[i] = 0.0f;
    *loss = INFINITY;
    if (T == 0)
        return CRNN_OK;
    double *lp = malloc(sizeof(double) * (size_t)(TK + 2 * T * S + K));
    if (!lp)
        return CRNN_E_NOMEM;
    double *alpha = lp + TK, *beta = alpha + T * S, *acc = beta + T * S;
    for (int64_t t = 0; t < T; t++)
        log_softmax(logits + t * K, K, lp + t * K);
    alpha_beta(lp, T, K, target, S, alpha, beta);
    const double *last = alpha + (T - 1) * S;
    double logP = S == 1 ? last[0] : logadd(last[S - 1], last[S - 2]);
    if (logP != -INFINITY) {
        *loss = -logP;
        gradient(lp, alpha, beta, T, K, target, S, logP, scale, acc, dlogits);
    }
    free(lp);
    return CRNN_OK;
}
