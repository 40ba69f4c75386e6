/* spec.h: the executable spec (the NumPy modules of generators/spec) written again in scalar C.
 *
 * The reference port: every entry point of crnn_port.h, one file per spec module with the
 * spec module's name. Single thread, no SIMD, every operation one IEEE binary32/binary64
 * operation in the NumPy spec's order; fma only where the spec says fma (spec_fma).
 * Built by ctypes_kernels/build.py (build_reference) with -ffp-contract=off, never
 * -ffast-math. NumPy (generators/spec) stays the ground truth.
 */
#ifndef SPEC_H
#define SPEC_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "crnn_port.h"

#if defined(__FAST_MATH__) || (defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0)
#error "the reference port must be built without fast-math and with FLT_EVAL_METHOD 0"
#endif
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static inline uint32_t f32_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float f32_from(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline uint64_t f64_bits(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }
static inline double f64_from(uint64_t u) { double x; memcpy(&x, &u, 8); return x; }

/* a NaN made quiet with its sign and payload (what x86 returns for a NaN operand) */
static inline float quiet32(float x) { return f32_from(f32_bits(x) | 0x00400000u); }

/* the NaN an invalid operation makes (x86's default NaN, as NumPy's float64 gives it) */
#define DEFAULT_NAN32 0xFFC00000u

/* The internal functions below are not part of the ABI: not exported. */
#pragma GCC visibility push(hidden)

/* dot16.c */
extern const float spec_one;                       /* a row of ones: stride 0 */
float spec_fma_nan(float a, float b, float c);

/* fma(a, b, c) rounded once: the C library's fmaf (C99: correctly rounded); a NaN result
 * is the NaN the NumPy emulation makes (spec_fma_nan) */
static inline float spec_fma(float a, float b, float c)
{
    float r = fmaf(a, b, c);
    return r == r ? r : spec_fma_nan(a, b, c);
}

float spec_dot16(const float *a, ptrdiff_t sa, const float *b, ptrdiff_t sb, int64_t n);

/* activations.c */
float spec_sigmoid(float x);
float spec_tanh(float x);

/* detmath.c */
double spec_exp(double x);
double spec_log(double x);

/* step.c: the whole-model config (crnn_port.h's cfg vector) and the geometry of a line */
#define SPEC_MAX_BLOCKS 64
#define SPEC_MAX_LSTM 64

typedef struct {
    int32_t Out, kh, kw, padH, padW, poolH, poolW;   /* from cfg */
    int32_t H, W, C, Hc, Wc, Hp, Wp, KP;             /* for one width (spec_geometry) */
} SpecBlock;

typedef struct {
    int32_t Hin, Cin, nb, nl, hidden, classes;
    SpecBlock blk[SPEC_MAX_BLOCKS];
    int32_t nTensors;
    int64_t nParams;
} SpecModel;

int32_t spec_model(const int32_t *cfg, SpecModel *m);
int32_t spec_geometry(SpecModel *m, int32_t width);
int64_t spec_tensor_size(const SpecModel *m, int32_t i);
int32_t spec_lstm_input(const SpecModel *m, int32_t layer);

#pragma GCC visibility pop

#endif
