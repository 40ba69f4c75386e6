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

/* The definitions are always_inline so that the scalar path can also be compiled into a
 * function with the FMA3 instruction enabled (below): same operations, same bits. */
#define ACT_INLINE static inline __attribute__((always_inline))

/* 2^k for an integral k in [-126, 127]: the exponent bits, built directly (exact). */
ACT_INLINE float pow2i(float k)
{
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* e^v for v in [-104, 0] (the callers clamp: sigmoid of x < 0 at -104, tanh and sigmoid of
 * x >= 0 at -32, below which their results are +-1 whatever e is). */
ACT_INLINE float exp_neg(float v)
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

ACT_INLINE float sigmoid_def(float x)
{
    float a = x < 0.0f ? x : -x;                     /* -|x| */
    float lo = x >= 0.0f ? ACT_SAT_MIN : ACT_EXP_MIN;
    float v = a >= lo ? a : lo;                      /* clamp; NaN becomes -104 */
    float e = exp_neg(v);
    float d = 1.0f + e;
    float pos = 1.0f / d, neg = e / d;
    float y = x >= 0.0f ? pos : neg;
    return x != x ? x + x : y;
}

ACT_INLINE float tanh_def(float x)
{
    float a = x < 0.0f ? -x : x;                     /* |x| */
    float v = -(a + a);
    v = v >= ACT_SAT_MIN ? v : ACT_SAT_MIN;          /* clamp; NaN becomes -32 */
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

float crnn_sigmoid1(float x) { return sigmoid_def(x); }
float crnn_tanh1(float x) { return tanh_def(x); }

/* The scalar path. fmaf is one correctly rounded operation on every machine, but in code built
 * for baseline x86-64 the C library computes it in software (about 15 ns). Where the CPU has
 * FMA3, the same definitions compiled with the instruction enabled give the same bits, since
 * an fma has exactly one correct result; only the speed differs. */
typedef void (*act_fn)(const float *, float *, int64_t);

static void sigmoid_generic(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = sigmoid_def(x[k]);
}

static void tanh_generic(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = tanh_def(x[k]);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("fma"))) static void sigmoid_fma3(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = sigmoid_def(x[k]);
}

__attribute__((target("fma"))) static void tanh_fma3(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) y[k] = tanh_def(x[k]);
}

#else
#define sigmoid_fma3 sigmoid_generic
#define tanh_fma3 tanh_generic
#endif

void crnn_sigmoid_scalar(const float *x, float *y, int64_t n)
{
    (crnn_cpu_has_fma3() ? sigmoid_fma3 : sigmoid_generic)(x, y, n);
}

void crnn_tanh_scalar(const float *x, float *y, int64_t n)
{
    (crnn_cpu_has_fma3() ? tanh_fma3 : tanh_generic)(x, y, n);
}

/* Both variants, for the tests (tests/c/exhaustive_act.c): 0 = C library fmaf, 1 = FMA3. */
void crnn_act_scalar_variant(int fn, int variant, const float *x, float *y, int64_t n)
{
    act_fn f = fn == 0 ? (variant && crnn_cpu_has_fma3() ? sigmoid_fma3 : sigmoid_generic)
                       : (variant && crnn_cpu_has_fma3() ? tanh_fma3 : tanh_generic);
    f(x, y, n);
}

static const act_fn sigmoid_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_sigmoid);
static const act_fn tanh_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_tanh);

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
    crnn_parallel_for_work(n, n, act_range, &j);
    return CRNN_OK;
}

int32_t crnn_sigmoid(const float *x, int64_t n, float *y) { return act_abi(sigmoid_paths, x, n, y); }
int32_t crnn_tanh(const float *x, int64_t n, float *y) { return act_abi(tanh_paths, x, n, y); }
