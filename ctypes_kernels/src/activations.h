/* activations.h — the project's float32 sigmoid and tanh (docs/numerics.md, "sigmoid and tanh").
 *
 * activations.c holds the scalar definition; src/isa/act_impl.h is the same formula with the
 * vector macros of each ISA; generators/spec/activations.py is the NumPy emulation. All give
 * identical bits for all 2^32 inputs. The constants live here so every path shares them. */
#ifndef CRNN_ACTIVATIONS_H
#define CRNN_ACTIVATIONS_H

#include <stdint.h>

/* exp_neg(v), v in [-104, 0] */
#define ACT_LOG2E       0x1.715476p+0f    /* float32(1/ln 2) */
#define ACT_SHIFT       0x1.8p+23f        /* 1.5*2^23: fma(v, LOG2E, SHIFT) - SHIFT rounds to an integer */
#define ACT_NEG_LN2_HI  (-0x1.62e430p-1f) /* -float32(ln 2) */
#define ACT_NEG_LN2_LO  0x1.05c610p-29f   /* -(ln 2 - LN2_HI), rounded */
#define ACT_E2          0x1.fffffcp-2f    /* e^r = 1 + r + r^2 (E2 + E3 r + E4 r^2 + E5 r^3 + E6 r^4) */
#define ACT_E3          0x1.555492p-3f
#define ACT_E4          0x1.5558f2p-5f
#define ACT_E5          0x1.123a20p-7f
#define ACT_E6          0x1.6a23d0p-10f
#define ACT_EXP_MIN     (-0x1.ap+6f)      /* -104: e^-104 rounds to +0 */
#define ACT_SAT_MIN     (-0x1p+5f)        /* -32: where the result is +-1 whatever e is (no subnormal e) */
#define ACT_SIXTY_FOUR  64.0f
#define ACT_TWO_M64     0x1p-64f
/* tanh */
#define ACT_T2          (-0x1.55554ap-2f) /* tanh x = x + x^3 (T2 + T4 s + T6 s^2 + T8 s^3 + T10 s^4) */
#define ACT_T4          0x1.110d1ep-3f
#define ACT_T6          (-0x1.b92728p-5f)
#define ACT_T8          0x1.593152p-6f
#define ACT_T10         (-0x1.9ae9e8p-8f)
#define ACT_TANH_SMALL  0x1.19999ap-1f    /* 0.55 */
#define ACT_TANH_TINY   0x1p-12f

/* The scalar definitions (one element). */
float crnn_sigmoid1(float x);
float crnn_tanh1(float x);

/* The scalar path over an array (the definitions; with the FMA3 instruction where the CPU has
 * it, else the C library's fmaf: the same bits). */
void crnn_sigmoid_scalar(const float *x, float *y, int64_t n);
void crnn_tanh_scalar(const float *x, float *y, int64_t n);
/* fn 0 sigmoid / 1 tanh; variant 0 C library fmaf, 1 FMA3 (falls back to 0 without it). */
void crnn_act_scalar_variant(int fn, int variant, const float *x, float *y, int64_t n);

/* y[k] = f(x[k]) for k < n on the selected ISA path, on the calling thread.
 * x and y may be the same buffer. */
void crnn_sigmoid_n(const float *x, float *y, int64_t n);
void crnn_tanh_n(const float *x, float *y, int64_t n);

/* per-ISA vector paths (src/isa/act_<isa>.c) */
void crnn_sigmoid_sse(const float *x, float *y, int64_t n);
void crnn_sigmoid_avx2(const float *x, float *y, int64_t n);
void crnn_sigmoid_avx512(const float *x, float *y, int64_t n);
void crnn_tanh_sse(const float *x, float *y, int64_t n);
void crnn_tanh_avx2(const float *x, float *y, int64_t n);
void crnn_tanh_avx512(const float *x, float *y, int64_t n);
void crnn_sigmoid_neon(const float *x, float *y, int64_t n);
void crnn_tanh_neon(const float *x, float *y, int64_t n);

#endif
