/* activations.c — sigmoid and tanh, the scalar definition (docs/numerics.md).
 *
 * Every operation is one IEEE binary32 operation rounded to nearest even, in the order
 * written; fmaf is the fused multiply-add (one rounding). Branches are written as selects on
 * values that were all computed, exactly as the vector paths (src/isa/act_impl.h) and the
 * NumPy spec (generators/spec/activations.py) do, so that all of them give the same bits. */
#include <math.h>
#include <string.h>
#include "core.h"
#include "activations.h"

/* 2^k for an integral k in [-126, 127]: the exponent bits, built directly (exact). */
static inline float pow2i(float k)
{
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e^v for v in [-104, 0] (the callers clamp). */
static inline float exp_neg(float v)
{
    float n = fmaf(v, ACT_LOG2E, ACT_SHIFT) - ACT_SHIFT;   /* nearest integer to v*log2(e) */
    float r = fmaf(n, ACT_NEG_LN2_HI, v);                  /* exact */
    r = fmaf(n, ACT_NEG_LN2_LO, r);
    float P = fmaf(ACT_E6, r, ACT_E5);
    P = fmaf(P, r, ACT_E4);
    P = fmaf(P, r, ACT_E3);
    P = fmaf(P, r, ACT_E2);
    float p = fmaf(P, r * r, r) + 1.0f;                     /* e^r */
    return (p * pow2i(n + ACT_SIXTY_FOUR)) * ACT_TWO_M64;   /* p * 2^n, one rounding at most */
}

float crnn_sigmoid1(float x)
{
    float a = x < 0.0f ? x : -x;                     /* -|x| */
    float v = a >= ACT_EXP_MIN ? a : ACT_EXP_MIN;    /* clamp; NaN becomes -104 */
    float e = exp_neg(v);
    float d = 1.0f + e;
    float pos = 1.0f / d, neg = e / d;
    float y = x >= 0.0f ? pos : neg;
    return x != x ? x + x : y;
}

float crnn_tanh1(float x)
{
    float a = x < 0.0f ? -x : x;                     /* |x| */
    float v = -(a + a);
    v = v >= ACT_EXP_MIN ? v : ACT_EXP_MIN;          /* clamp; NaN becomes -104 */
    float e = exp_neg(v);
    float t = (e + e) / (1.0f + e);
    float large = 1.0f - t;
    large = x < 0.0f ? -large : large;
    float s = x * x;
    float P = fmaf(ACT_T10, s, ACT_T8);
    P = fmaf(P, s, ACT_T6);
    P = fmaf(P, s, ACT_T4);
    P = fmaf(P, s, ACT_T2);
    float small = fmaf(x * s, P, x);
    float y = a < ACT_TANH_SMALL ? small : large;
    y = a < ACT_TANH_TINY ? x : y;
    return x != x ? x + x : y;
}

typedef void (*act_fn)(const float *, float *, int64_t);

static void sigmoid_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = crnn_sigmoid1(x[k]);
}

static void tanh_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = crnn_tanh1(x[k]);
}

static const act_fn sigmoid_paths[CRNN_NISA] = {
    sigmoid_scalar, crnn_sigmoid_sse, crnn_sigmoid_avx2, crnn_sigmoid_avx512,
};
static const act_fn tanh_paths[CRNN_NISA] = {
    tanh_scalar, crnn_tanh_sse, crnn_tanh_avx2, crnn_tanh_avx512,
};

void crnn_sigmoid_n(const float *x, float *y, int64_t n)
{
    if (n > 0) sigmoid_paths[crnn_current_isa()](x, y, n);
}

void crnn_tanh_n(const float *x, float *y, int64_t n)
{
    if (n > 0) tanh_paths[crnn_current_isa()](x, y, n);
}

/* ---- ABI: whole arrays, split into chunks across threads (elements are independent) ---- */

typedef struct {
    act_fn fn;
    const float *x;
    float *y;
} act_job;

static void act_range(void *ctx, int64_t begin, int64_t end)
{
    act_job *j = ctx;
    j->fn(j->x + begin, j->y + begin, end - begin);
}

static int32_t act_abi(const act_fn *paths, const float *x, int64_t n, float *y)
{
    if (n < 0 || (n > 0 && (!x || !y))) return CRNN_E_ARG;
    if (n == 0) return CRNN_OK;
    act_job j = {paths[crnn_current_isa()], x, y};
    if (n < 65536 || crnn_current_threads() == 1) act_range(&j, 0, n);
    else crnn_parallel_for(n, act_range, &j);
    return CRNN_OK;
}

int32_t crnn_sigmoid(const float *x, int64_t n, float *y) { return act_abi(sigmoid_paths, x, n, y); }
int32_t crnn_tanh(const float *x, int64_t n, float *y) { return act_abi(tanh_paths, x, n, y); }
