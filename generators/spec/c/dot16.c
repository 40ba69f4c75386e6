/* dot16.c: the exact fma (spec/fma.py) and the 16-lane dot product (spec/dot16.py). */
#include "spec.h"

const float spec_one = 1.0f;

/* The NaN of fma(a, b, c) as the NumPy emulation (spec/fma.py) makes it in its vector
 * loops: a*b in binary64 (a's NaN before b's; inf*0 the default NaN), then + c (the
 * product's NaN before c's; inf - inf the default NaN), then narrowed to binary32 (quiet,
 * sign and top payload bits kept). The C library's fmaf picks another operand's NaN when
 * several are NaN, and c's NaN for fma(inf, 0, NaN). */
float spec_fma_nan(float a, float b, float c)
{
    if (a != a)
        return quiet32(a);
    if (b != b)
        return quiet32(b);
    if ((isinf(a) && b == 0.0f) || (a == 0.0f && isinf(b)))
        return f32_from(DEFAULT_NAN32);
    if (c != c)
        return quiet32(c);
    return f32_from(DEFAULT_NAN32);
}

/* Exactly n terms a[k*sa] * b[k*sb]: term k into lane k mod 16 (lanes past the last term
 * keep their value: no zero padding), then the halving tree s = 8, 4, 2, 1. */
static inline __attribute__((always_inline))
float dot16(const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb, int64_t n)
{
    float p[16];
    for (int i = 0; i < 16; i++)
        p[i] = 0.0f;
#ifdef SPEC_BREAK_DOT16_ZERO_PAD
    /* a deliberately broken reference (tests): the tail padded with zero terms */
    int64_t padded = (n + 15) / 16 * 16;
    for (int64_t k = 0; k < padded; k++)
        p[k & 15] = spec_fma(k < n ? a[k * sa] : 0.0f, k < n ? b[k * sb] : 0.0f, p[k & 15]);
#else
    for (int64_t k = 0; k < n; k++)
        p[k & 15] = spec_fma(a[k * sa], b[k * sb], p[k & 15]);
#endif
    for (int s = 8; s >= 1; s /= 2)
        for (int i = 0; i < s; i++)
            p[i] = p[i] + p[i + s];
    return p[0];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The same loop compiled for CPUs with the fma instruction, where fmaf is that instruction
 * inline instead of a call: every fma still rounds once, so the bits are the same. */
__attribute__((target("fma")))
static float dot16_fma(const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb, int64_t n)
{
    return dot16(a, sa, b, sb, n);
}
#endif

float spec_dot16(const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb, int64_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    static int fma = -1;
    if (fma < 0) {
        __builtin_cpu_init();
        fma = __builtin_cpu_supports("fma") ? 1 : 0;
    }
    if (fma)
        return dot16_fma(a, sa, b, sb, n);
#endif
    return dot16(a, sa, b, sb, n);
}

int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
    if (n < 0 || !out || (n > 0 && (!a || !b)))
        return CRNN_E_ARG;
    *out = spec_dot16(a, 1, b, 1, n);
    return CRNN_OK;
}
