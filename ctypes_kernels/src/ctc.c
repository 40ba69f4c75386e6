/* ctc.c — CTC loss of one line and its logit gradient (docs/backward.md, "CTC loss").
 *
 * Binary64 with the DetMath exp and log (detmath.h), compiled with -ffp-contract=off, so
 * every path and generators/spec/ctc.py give the same bits. Blank = 0. The exps and logs of
 * a step run over arrays on the current ISA path (crnn_detmath_exp_n / _log_n: the same bits
 * as the element functions); everything around them is the scalar definition. */
#include <math.h>
#include <stdlib.h>
#include "core.h"
#include "detmath.h"

#define NEG_INF (-INFINITY)

/* logadd(a, b) = hi + log(1 + exp(lo - hi)), hi/lo the larger/smaller argument; hi when lo
 * is -inf or lo - hi < -40 (log(1 + e^-40) = 4.2e-18: under half an ulp of any
 * |hi| >= 1/16). la_parts gives hi, and d = lo - hi where the log is needed (else 0). */
static inline int la_parts(double a, double b, double *hi, double *d)
{
    double h = a > b ? a : b, lo = a > b ? b : a;
    *hi = h;
    if (lo == NEG_INF) { *d = 0.0; return 0; }
    *d = lo - h;
    if (*d < -40.0) { *d = 0.0; return 0; }
    return 1;
}

static double logadd(double a, double b)
{
    double hi, d;
    if (!la_parts(a, b, &hi, &d)) return hi;
    return hi + crnn_detmath_log1(1.0 + crnn_detmath_exp1(d));
}

/* The length an array of n runs at on the path's exp_n and log_n (w lanes: the path's
 * doubles a vector, a power of two): a tail of more than half a vector is padded to a whole
 * one, a shorter tail left to the scalar functions (the same bits either way; a vector costs
 * about as much as half its lanes' scalar calls, docs/performance.md) */
static inline int64_t padded(int64_t n, int64_t w)
{
    const int64_t tail = n & (w - 1);
    return 2 * tail > w ? n - tail + w : n;
}

/* out[i] = logadd(a[i], b[i]), i < n (out may be a): the same operations, the exps and logs
 * over the array, padded with d = 0 to n8 = padded(n, lanes); w holds 2 n8 doubles, need n
 * flags (whether entry i takes the log) */
static void logadd_n(const double *a, const double *b, int64_t n, int64_t lanes, double *out,
                     double *w, unsigned char *need)
{
    const int64_t n8 = padded(n, lanes);
    double *hi = w, *d = w + n8;
    for (int64_t i = 0; i < n; i++) need[i] = (unsigned char)la_parts(a[i], b[i], hi + i, d + i);
    for (int64_t i = n; i < n8; i++) d[i] = 0.0;
    crnn_detmath_exp_n(d, n8, d);
    for (int64_t i = 0; i < n8; i++) d[i] = 1.0 + d[i];
    crnn_detmath_log_n(d, n8, d);
    for (int64_t i = 0; i < n; i++) out[i] = need[i] ? hi[i] + d[i] : hi[i];
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

    const int64_t vf = crnn_vector_floats(), lanes = vf > 1 ? vf / 2 : 1;   /* doubles a vector */
    const int64_t K8 = padded(K, lanes);
    const int64_t most = S > T ? (S > K ? S : K) : (T > K ? T : K);   /* a step's entries */
    const int64_t nw = (most + lanes - 1) & -lanes;                    /* >= any padded() */
    double *lp = malloc(sizeof(double) * ((size_t)nTK * 3 + (size_t)T * S * 2 + (size_t)nw * 5));
    int32_t *ext = malloc(sizeof(int32_t) * (size_t)S + (size_t)nw);
    if (!lp || !ext) { free(lp); free(ext); return CRNN_E_NOMEM; }
    unsigned char *need = (unsigned char *)(ext + S);            /* logadd_n's flags */
    double *acc = lp + nTK, *ex = acc + nTK, *alpha = ex + nTK, *beta = alpha + (size_t)T * S;
    double *u = beta + (size_t)T * S, *v = u + nw, *w = v + nw;   /* w: logadd_n's 2 nw */
    for (int64_t s = 0; s < S; s++) ext[s] = (s & 1) ? target[s >> 1] : 0;

    /* 1. log softmax, classes summed in ascending order */
    for (int64_t t = 0; t < T; t++) {
        const float *z = logits + t * K;
        double m = z[0];
        for (int32_t k = 1; k < K; k++) if ((double)z[k] > m) m = z[k];
        for (int32_t k = 0; k < K; k++) u[k] = (double)z[k] - m;
        for (int64_t k = K; k < K8; k++) u[k] = 0.0;
        crnn_detmath_exp_n(u, K8, u);
        double s = 0.0;
        for (int32_t k = 0; k < K; k++) s = s + u[k];
        double ls = crnn_detmath_log1(s);
        for (int32_t k = 0; k < K; k++) lp[t * K + k] = ((double)z[k] - m) - ls;
    }

    /* 2. alpha and beta, both including their own step's emission: per step the inner
     * logadds of every s, then the outer ones (the same operations per entry) */
    for (int64_t s = 0; s < S; s++)
        alpha[s] = s < 2 ? lp[ext[s]] : NEG_INF;
    for (int64_t t = 1; t < T; t++) {
        const double *a = alpha + (t - 1) * S;
        double *out = alpha + t * S;
        for (int64_t s = 0; s < S; s++) v[s] = s >= 1 ? a[s - 1] : NEG_INF;
        logadd_n(a, v, S, lanes, u, w, need);
        for (int64_t s = 0; s < S; s++)
            v[s] = (s >= 2 && ext[s] != 0 && ext[s] != ext[s - 2]) ? a[s - 2] : NEG_INF;
        logadd_n(u, v, S, lanes, out, w, need);
        for (int64_t s = 0; s < S; s++) out[s] = out[s] + lp[t * K + ext[s]];
    }
    for (int64_t s = 0; s < S; s++)
        beta[(T - 1) * S + s] = s >= S - 2 ? lp[(T - 1) * K + ext[s]] : NEG_INF;
    for (int64_t t = T - 2; t >= 0; t--) {
        const double *bn = beta + (t + 1) * S;
        double *out = beta + t * S;
        for (int64_t s = 0; s < S; s++) v[s] = s + 1 < S ? bn[s + 1] : NEG_INF;
        logadd_n(bn, v, S, lanes, u, w, need);
        for (int64_t s = 0; s < S; s++)
            v[s] = (s + 2 < S && ext[s + 2] != 0 && ext[s + 2] != ext[s]) ? bn[s + 2] : NEG_INF;
        logadd_n(u, v, S, lanes, out, w, need);
        for (int64_t s = 0; s < S; s++) out[s] = out[s] + lp[t * K + ext[s]];
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

    /* 4. acc[t][k]: logadd over the entries labelled k, ascending s (s the outer loop: the T
     * logadds of one s are independent); then the gradient */
    for (int64_t i = 0; i < nTK; i++) acc[i] = NEG_INF;
    for (int64_t s = 0; s < S; s++) {
        for (int64_t t = 0; t < T; t++) {
            u[t] = acc[t * K + ext[s]];
            v[t] = alpha[t * S + s] + beta[t * S + s];
        }
        logadd_n(u, v, T, lanes, u, w, need);
        for (int64_t t = 0; t < T; t++) acc[t * K + ext[s]] = u[t];
    }
    for (int64_t i = 0; i < nTK; i++) acc[i] = (acc[i] - lp[i]) - logP;
    crnn_detmath_exp_n(acc, nTK, acc);          /* occ */
    crnn_detmath_exp_n(lp, nTK, ex);
    for (int64_t i = 0; i < nTK; i++) {
        double occ = acc[i];
        dlogits[i] = (float)(scale * (ex[i] - occ));
    }
    free(lp); free(ext);
    return CRNN_OK;
}
