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

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The constants and tables, shared with the vector paths (src/isa/detmath_impl.h). */
#define DM_EXP_N 32
#define DM_LOG_N 32

/* ---- constants (bit patterns; decimal values in docs/decoding.md) -------- */
#define DM_POS_INF   0x7ff0000000000000ULL
#define DM_NEG_INF   0xfff0000000000000ULL
#define DM_QNAN      0x7ff8000000000000ULL  /* returned by log(x < 0)            */
#define DM_O_THRESH  0x40862e42fefa39efULL  /*  0x1.62e42fefa39efp+9  =  709.78... */
#define DM_U_THRESH  0xc0874910d52d3051ULL  /* -0x1.74910d52d3051p+9  = -745.13... */
#define DM_INVLN2N   0x40471547652b82feULL  /* RN(32/ln2)                        */
#define DM_SHIFT     0x4338000000000000ULL  /* 1.5 * 2^52                        */
#define DM_LN2HI     0x3fe62e42fee00000ULL  /* ln2 to 32 significant bits        */
#define DM_LN2LO     0x3dea39ef35793c76ULL  /* RN(ln2 - LN2HI)                   */
#define DM_LN2HIN    0x3f962e42fee00000ULL  /* LN2HI / 32                        */
#define DM_LN2LON    0x3d9a39ef35793c76ULL  /* LN2LO / 32                        */
#define DM_TWO54     0x4350000000000000ULL  /* 2^54                              */
#define DM_TWO1023   0x7fe0000000000000ULL  /* 2^1023                            */
#define DM_TWOM1022  0x0010000000000000ULL  /* 2^-1022                           */
#define DM_SPLIT     0x41a0000002000000ULL  /* 2^27 + 1 (Veltkamp splitter)      */

/* exp: Taylor coefficients 1/k!, k = 2..7 */
#define DM_E2 0x3fe0000000000000ULL
#define DM_E3 0x3fc5555555555555ULL
#define DM_E4 0x3fa5555555555555ULL
#define DM_E5 0x3f81111111111111ULL
#define DM_E6 0x3f56c16c16c16c17ULL
#define DM_E7 0x3f2a01a01a01a01aULL

/* log: Taylor coefficients (-1)^(k+1)/k, k = 2..12 */
#define DM_C2  0xbfe0000000000000ULL
#define DM_C3  0x3fd5555555555555ULL
#define DM_C4  0xbfd0000000000000ULL
#define DM_C5  0x3fc999999999999aULL
#define DM_C6  0xbfc5555555555555ULL
#define DM_C7  0x3fc2492492492492ULL
#define DM_C8  0xbfc0000000000000ULL
#define DM_C9  0x3fbc71c71c71c71cULL
#define DM_C10 0xbfb999999999999aULL
#define DM_C11 0x3fb745d1745d1746ULL
#define DM_C12 0xbfb5555555555555ULL

extern const uint64_t crnn_dm_exp_tab[2 * DM_EXP_N];   /* H_j, T_j */
extern const uint64_t crnn_dm_log_tab[3 * DM_LOG_N];   /* INVC_j, LOGC_HI_j, LOGC_LO_j */

double crnn_detmath_exp1(double x);
double crnn_detmath_log1(double x);

/* Arrays of them on each ISA path (detmath_paths.c, src/isa/detmath_<isa>.c): the same bits
 * as the functions above, element for element; the _n functions run the current path. */
#define CRNN_DECLARE_DETMATH(isa)                                              \
    void crnn_detmath_exp_n_##isa(const double *x, int64_t n, double *y);      \
    void crnn_detmath_log_n_##isa(const double *x, int64_t n, double *y);
CRNN_DECLARE_DETMATH(scalar)
CRNN_DECLARE_DETMATH(sse)
CRNN_DECLARE_DETMATH(avx2)
CRNN_DECLARE_DETMATH(avx512)
CRNN_DECLARE_DETMATH(neon)
void crnn_detmath_exp_n(const double *x, int64_t n, double *y);
void crnn_detmath_log_n(const double *x, int64_t n, double *y);

#ifdef __cplusplus
}
#endif

#endif /* CRNN_DETMATH_H */
