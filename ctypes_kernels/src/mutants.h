/* mutants.h — deliberate porting mistakes for the gate's mutant catalogue
 * (docs/mutants.md). Nothing here exists in the normal build: every declaration is behind
 * CRNN_MUTANT, which only ctypes_kernels.build.build(mutant=NAME) defines (together with
 * CRNN_MUTANT_<NAME>). A shared source file swaps a mutant in with a narrow #if block. */
#ifndef CRNN_MUTANTS_H
#define CRNN_MUTANTS_H

#include "core.h"

#if defined(CRNN_MUTANT)

/* The gemm16 kernel the selected mutant runs on ISA path `isa` in place of `normal` (the
 * bundled kernel of that path); `normal` itself for mutants that do not touch the dots.
 * Used by the gemm16 dispatcher (dot16.c) and the LSTM's per-step products (lstm.c). */
crnn_gemm16_fn crnn_mutant_gemm16(int isa, crnn_gemm16_fn normal);

/* x rounded to `bits` explicit mantissa bits (round to nearest even): the reduced-precision
 * storage of the precision mutants (bfloat16 7, TF32 and binary16 10). */
float crnn_mutant_round_mantissa(float x, int bits);

/* sigmoid_expf: 1/(1 + expf(-x)) with the C library's expf, for every ISA path. */
void crnn_mutant_sigmoid_expf(const float *x, float *y, int64_t n);

/* bias_first: C[i][j] = dot16 whose lane 0 starts at bias[j] instead of +0 (the bias added
 * before the dot instead of after it). */
void crnn_mutant_gemm16_bias_first(int64_t M, int64_t N, int64_t K,
                                   const float *A, int64_t lda, const float *B, int64_t ldb,
                                   const float *bias, float *C, int64_t ldc);

#endif
#endif
