/* adamw.c — one AdamW step on one tensor (docs/backward.md, "AdamW").
 *
 * Scalars computed in double and rounded once to float; per element every operation is a
 * separate float rounding (-ffp-contract=off: no fma), sqrt and division correctly rounded.
 * Elements are independent: a large tensor is split across threads, no bit depends on it. */
#include <math.h>
#include "core.h"
#include "adamw.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The scalar path (adamw.h): the definition, four at a time with SSE2 where that is the
 * baseline; the vector paths run it for their tails. */
void crnn_adamw_range_scalar(const adamw_job *j, int64_t i0, int64_t i1)
{
    float *p = j->p, *m = j->m, *v = j->v;
    const float *g = j->g;
    const float omb1 = j->omb1, b2 = j->b2, omb2 = j->omb2, epsf = j->epsf, dec = j->dec;
    const float stepSize = j->stepSize, sqrtC2 = j->sqrtC2;
    int64_t i = i0;
#if defined(__SSE2__)
    /* four elements at a time: the same operations in the same order (sqrt and division
     * are the correctly rounded IEEE ones in SSE too), whatever the -O level */
    const __m128 vomb1 = _mm_set1_ps(omb1), vb2 = _mm_set1_ps(b2), vomb2 = _mm_set1_ps(omb2);
    const __m128 veps = _mm_set1_ps(epsf), vdec = _mm_set1_ps(dec);
    const __m128 vstep = _mm_set1_ps(stepSize), vsc2 = _mm_set1_ps(sqrtC2);
    for (; i + 4 <= i1; i += 4) {
        __m128 pi = _mm_loadu_ps(p + i), mi = _mm_loadu_ps(m + i), vi = _mm_loadu_ps(v + i);
        __m128 gi = _mm_loadu_ps(g + i);
        if (j->decay) pi = _mm_mul_ps(pi, vdec);
        mi = _mm_add_ps(mi, _mm_mul_ps(vomb1, _mm_sub_ps(gi, mi)));
        vi = _mm_add_ps(_mm_mul_ps(vi, vb2), _mm_mul_ps(vomb2, _mm_mul_ps(gi, gi)));
        pi = _mm_sub_ps(pi, _mm_mul_ps(vstep, _mm_div_ps(mi, _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), vsc2), veps))));
        _mm_storeu_ps(p + i, pi);
        _mm_storeu_ps(m + i, mi);
        _mm_storeu_ps(v + i, vi);
    }
#endif
    for (; i < i1; i++) {
        float pi = p[i], mi = m[i], vi = v[i], gi = g[i];
        if (j->decay) pi = pi * dec;
        mi = mi + omb1 * (gi - mi);
        vi = (vi * b2) + (omb2 * (gi * gi));
        pi = pi - stepSize * (mi / ((sqrtf(vi) / sqrtC2) + epsf));
        p[i] = pi; m[i] = mi; v[i] = vi;
    }
}

static const crnn_adamw_range_fn paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_adamw_range);

#define ADAMW_BLOCK 4096
#define ADAMW_SPLIT 4      /* a tensor of at least this many blocks is split across threads */
static void adamw_blocks(void *ctx, int64_t b0, int64_t b1)   /* blocks of elements */
{
    const adamw_job *j = ctx;
    int64_t i1 = b1 * ADAMW_BLOCK < j->n ? b1 * ADAMW_BLOCK : j->n;
    paths[crnn_current_isa()](j, b0 * ADAMW_BLOCK, i1);
}

int32_t crnn_adamw(float *p, float *m, float *v, const float *g, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd,
                   int32_t decay, double b1t, double b2t)
{
    if (n < 0 || (n > 0 && (!p || !m || !v || !g)) || (decay != 0 && decay != 1))
        return CRNN_E_ARG;
    if (!(b1t < 1.0) || !(b2t < 1.0) || !(b2t >= 0.0) || !(b1t >= 0.0)) return CRNN_E_ARG;
    const float omb1 = (float)(1.0 - beta1);
    const float b2 = (float)beta2;
    const float omb2 = (float)(1.0 - beta2);
    const float epsf = (float)eps;
    const float dec = (float)(1.0 - lr * wd);
    const float stepSize = (float)(lr / (1.0 - b1t));
    const float sqrtC2 = (float)sqrt(1.0 - b2t);
    adamw_job j = {p, m, v, g, n, decay, omb1, b2, omb2, epsf, dec, stepSize, sqrtC2};
    if (n >= ADAMW_SPLIT * ADAMW_BLOCK) crnn_parallel_for((n + ADAMW_BLOCK - 1) / ADAMW_BLOCK, adamw_blocks, &j);
    else paths[crnn_current_isa()](&j, 0, n);
    return CRNN_OK;
}
