/* activations.c: sigmoid and tanh, the project's float32 approximations
 * (spec/activations.py, docs/numerics.md "sigmoid and tanh"). Constants from the spec. */
#include "spec.h"

#define LOG2E 0x1.715476p+0f        /* float32(1/ln 2) */
#define SHIFT 0x1.8p+23f            /* 1.5*2^23: adding it rounds to an integer */
#define NEG_LN2_HI -0x1.62e430p-1f  /* -float32(ln 2) */
#define NEG_LN2_LO 0x1.05c610p-29f  /* -(ln 2 - LN2_HI), rounded to float32 */
#define E2 0x1.fffffcp-2f
#define E3 0x1.555492p-3f
#define E4 0x1.5558f2p-5f
#define E5 0x1.123a20p-7f
#define E6 0x1.6a23d0p-10f
#define EXP_MIN -0x1.ap+6f          /* -104 */
#define SAT_MIN -0x1p+5f            /* -32: tanh, and sigmoid of x >= 0, are +-1 below it */
#define TWO_M64 0x1p-64f
#define T2 -0x1.55554ap-2f
#define T4 0x1.110d1ep-3f
#define T6 -0x1.b92728p-5f
#define T8 0x1.593152p-6f
#define T10 -0x1.9ae9e8p-8f
#define TANH_SMALL 0x1.19999ap-1f   /* 0.55 */
#define TANH_TINY 0x1p-12f

/* 2^k for an integral k in [-126, 127], from its exponent bits */
static float pow2(float k)
{
    return f32_from((uint32_t)((int32_t)k + 127) << 23);
}

/* e^v for v in [-104, 0] (callers clamp) */
static float exp_neg(float v)
{
    float n = spec_fma(v, LOG2E, SHIFT) - SHIFT;
    float r = spec_fma(n, NEG_LN2_HI, v);
    r = spec_fma(n, NEG_LN2_LO, r);
    float P = spec_fma(E6, r, E5);
    P = spec_fma(P, r, E4);
    P = spec_fma(P, r, E3);
    P = spec_fma(P, r, E2);
    float p = spec_fma(P, r * r, r) + 1.0f;
    return (p * pow2(n + 64.0f)) * TWO_M64;
}

float spec_sigmoid(float x)
{
    float a = x < 0.0f ? x : -x;                 /* -|x| */
    float lo = x >= 0.0f ? SAT_MIN : EXP_MIN;
    float v = a >= lo ? a : lo;                  /* clamp; NaN becomes -104 too */
    float e = exp_neg(v);
    float d = 1.0f + e;
    float y = x >= 0.0f ? 1.0f / d : e / d;
    return x != x ? quiet32(x) : y;              /* x + x: the NaN quiet, payload kept */
}

/* 1 - 2e/(1 + e), e = e^(-2|x|), with x's sign */
static float tanh_large(float x, float a)
{
    float v = -(a + a);
    v = v >= SAT_MIN ? v : SAT_MIN;
    float e = exp_neg(v);
    float t = (e + e) / (1.0f + e);
    float large = 1.0f - t;
    return x < 0.0f ? -large : large;
}

/* x + x^3 P(x^2) */
static float tanh_small(float x)
{
    float s = x * x;
    float P = spec_fma(T10, s, T8);
    P = spec_fma(P, s, T6);
    P = spec_fma(P, s, T4);
    P = spec_fma(P, s, T2);
    return spec_fma(x * s, P, x);
}

float spec_tanh(float x)
{
    float a = x < 0.0f ? -x : x;                 /* |x| */
    float y;
    if (!(a < TANH_SMALL))                       /* NaN too: overwritten below */
        y = tanh_large(x, a);
    else if (a >= TANH_TINY)
        y = tanh_small(x);
    else
        y = x;
    return x != x ? quiet32(x) : y;
}

static int32_t map(float (*f)(float), const float *x, int64_t n, float *y)
{
    if (n < 0 || (n > 0 && (!x || !y)))
        return CRNN_E_ARG;
    for (int64_t i = 0; i < n; i++)
        y[i] = f(x[i]);
    return CRNN_OK;
}

int32_t crnn_sigmoid(const float *x, int64_t n, float *y) { return map(spec_sigmoid, x, n, y); }

int32_t crnn_tanh(const float *x, int64_t n, float *y) { return map(spec_tanh, x, n, y); }
