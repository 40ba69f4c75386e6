/* detmath.h — DetMath: the project's own double-precision exp and log.
 *
 * Plain + - * / only (no fma, no libm), a fixed operation order, exact
 * power-of-two scaling built from exponent bits. generators/spec/detmath.py
 * performs the same operations in the same order, so both give identical bits.
 * Algorithm, constants, special cases and measured accuracy: docs/decoding.md,
 * section "DetMath: exp and log". Compile with -ffp-contract=off, never -ffast-math.
 */
#ifndef CRNN_DETMATH_H
#define CRNN_DETMATH_H

#ifdef __cplusplus
extern "C" {
#endif

double crnn_detmath_exp1(double x);
double crnn_detmath_log1(double x);

#ifdef __cplusplus
}
#endif

#endif /* CRNN_DETMATH_H */
