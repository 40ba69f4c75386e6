/* act_impl.h — sigmoid and tanh with the vector macros of one ISA, included by each thin
 * src/isa/act_<isa>.c after its vec_*.h. Operation for operation the scalar definition in
 * src/activations.c (same order, same constants, branches as selects), so every lane gives
 * the scalar bits. A tail shorter than a vector is copied into a zeroed block, computed
 * whole, and copied back: lanes are independent, so the padding cannot affect it. */
#include <string.h>
#include "../core.h"
#include "../activations.h"

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

static inline vec_t exp_neg_v(vec_t v)
{
    vec_t shift = VSET1(ACT_SHIFT);
    vec_t n = VSUB(VFMA(v, VSET1(ACT_LOG2E), shift), shift);
    vec_t r = VFMA(n, VSET1(ACT_NEG_LN2_HI), v);
    r = VFMA(n, VSET1(ACT_NEG_LN2_LO), r);
    vec_t P = VFMA(VSET1(ACT_E6), r, VSET1(ACT_E5));
    P = VFMA(P, r, VSET1(ACT_E4));
    P = VFMA(P, r, VSET1(ACT_E3));
    P = VFMA(P, r, VSET1(ACT_E2));
    vec_t p = VADD(VFMA(P, VMUL(r, r), r), VSET1(1.0f));
    return VMUL(VMUL(p, VPOW2I(VADD(n, VSET1(ACT_SIXTY_FOUR)))), VSET1(ACT_TWO_M64));
}

static inline vec_t sigmoid_v(vec_t x)
{
    vec_t zero = VZERO(), one = VSET1(1.0f);
    vec_t lo = VSELECT(VCMPGE(x, zero), VSET1(ACT_SAT_MIN), VSET1(ACT_EXP_MIN));
    vec_t a = VSELECT(VCMPLT(x, zero), x, VNEG(x));
    vec_t v = VSELECT(VCMPGE(a, lo), a, lo);
    vec_t e = exp_neg_v(v);
    vec_t d = VADD(one, e);
    /* the scalar path's 1/d or e/d: the numerator selected first, one correctly rounded
     * division (the same quotient, half the divider's work) */
    vec_t y = VDIV(VSELECT(VCMPGE(x, zero), one, e), d);
    return VSELECT(VISNAN(x), VADD(x, x), y);
}

static inline vec_t tanh_v(vec_t x)
{
    vec_t zero = VZERO(), one = VSET1(1.0f), lo = VSET1(ACT_SAT_MIN);
    vmask_t negx = VCMPLT(x, zero);
    vec_t a = VSELECT(negx, VNEG(x), x);
    vec_t v = VNEG(VADD(a, a));
    v = VSELECT(VCMPGE(v, lo), v, lo);
    vec_t e = exp_neg_v(v);
    vec_t t = VDIV(VADD(e, e), VADD(one, e));
    vec_t large = VSUB(one, t);
    large = VSELECT(negx, VNEG(large), large);
    vec_t s = VMUL(x, x);
    vec_t P = VFMA(VSET1(ACT_T10), s, VSET1(ACT_T8));
    P = VFMA(P, s, VSET1(ACT_T6));
    P = VFMA(P, s, VSET1(ACT_T4));
    P = VFMA(P, s, VSET1(ACT_T2));
    vec_t small = VFMA(VMUL(x, s), P, x);
    vec_t y = VSELECT(VCMPLT(a, VSET1(ACT_TANH_SMALL)), small, large);
    y = VSELECT(VCMPLT(a, VSET1(ACT_TANH_TINY)), x, y);
    return VSELECT(VISNAN(x), VADD(x, x), y);
}

#define ACT_LOOP(name, f)                                                   \
    void CAT(name, ISA_SUFFIX)(const float *x, float *y, int64_t n)        \
    {                                                                       \
        int64_t k = 0;                                                      \
        for (; k + VW <= n; k += VW) VSTOREU(y + k, f(VLOADU(x + k)));      \
        if (k < n) {                                                        \
            float buf[VW];                                                  \
            memset(buf, 0, sizeof buf);                                     \
            memcpy(buf, x + k, sizeof(float) * (size_t)(n - k));            \
            VSTOREU(buf, f(VLOADU(buf)));                                   \
            memcpy(y + k, buf, sizeof(float) * (size_t)(n - k));            \
        }                                                                   \
    }

ACT_LOOP(crnn_sigmoid, sigmoid_v)
ACT_LOOP(crnn_tanh, tanh_v)
