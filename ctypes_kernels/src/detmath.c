/* detmath.c — DetMath: the project's own double-precision exp and log.
 *
 * Table-driven (32 entries each), plain + - * / only, no fma, no libm, every
 * operation a single IEEE 754 double operation rounded to nearest even, in the
 * order the parentheses give. generators/spec/detmath.py performs the same
 * operations in the same order, so both give identical bits.
 * docs/decoding.md, "DetMath: exp and log", is the prose version (algorithm,
 * how the tables are generated, every constant, measured accuracy).
 *
 * Must be compiled with -ffp-contract=off (no fused multiply-add) and
 * without -ffast-math; the SSE2 double arithmetic of x86-64 (no x87 excess
 * precision) is assumed.
 */
#include <stdint.h>
#include <string.h>

#include "../crnn_port.h"
#include "detmath.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   /* belt and braces; GCC ignores the pragma */
#endif

#if defined(__FAST_MATH__)
#error "detmath.c must not be compiled with -ffast-math"
#endif
#if defined(__FLT_EVAL_METHOD__) && __FLT_EVAL_METHOD__ != 0
#error "detmath.c needs FLT_EVAL_METHOD == 0 (no excess precision)"
#endif

static double dm_d(uint64_t u) { double d; memcpy(&d, &u, sizeof d); return d; }
static uint64_t dm_u(double d) { uint64_t u; memcpy(&u, &d, sizeof u); return u; }

/* Tables, generated with mpmath (docs/decoding.md gives the rule):
 *   exp: H_j = RN(2^(j/32)), T_j = RN((2^(j/32) - H_j) / H_j).
 *   log: INVC_j = 1 for j = 0 and j = 31, else d_j / (1 + (j + 1/2)/32) rounded
 *        to 20 significant bits, d_j = 1 for j < 13 and 2 otherwise;
 *        LOGC_HI_j + LOGC_LO_j = -log(INVC_j) as a double-double. */
const uint64_t crnn_dm_exp_tab[2 * DM_EXP_N] = {  /* H_j, T_j */
    0x3ff0000000000000ULL, 0x0000000000000000ULL,  /*  0 */
    0x3ff059b0d3158574ULL, 0x3c8cd2523567f613ULL,  /*  1 */
    0x3ff0b5586cf9890fULL, 0x3c979aa65d837b6dULL,  /*  2 */
    0x3ff11301d0125b51ULL, 0xbc9556522a2fbd0eULL,  /*  3 */
    0x3ff172b83c7d517bULL, 0xbc801b15eaa59348ULL,  /*  4 */
    0x3ff1d4873168b9aaULL, 0x3c9aecf73e3a2f60ULL,  /*  5 */
    0x3ff2387a6e756238ULL, 0x3c968efde3a8a894ULL,  /*  6 */
    0x3ff29e9df51fdee1ULL, 0x3c82f7e16d09ab31ULL,  /*  7 */
    0x3ff306fe0a31b715ULL, 0x3c834d754db0abb6ULL,  /*  8 */
    0x3ff371a7373aa9cbULL, 0xbc924aedcc4b5068ULL,  /*  9 */
    0x3ff3dea64c123422ULL, 0x3c859f48a72a4c6dULL,  /* 10 */
    0x3ff44e086061892dULL, 0x3c4363ed60c2ac11ULL,  /* 11 */
    0x3ff4bfdad5362a27ULL, 0x3c7690cebb7aafb0ULL,  /* 12 */
    0x3ff5342b569d4f82ULL, 0xbc78dec6bd0f385fULL,  /* 13 */
    0x3ff5ab07dd485429ULL, 0x3c9063e1e21c5409ULL,  /* 14 */
    0x3ff6247eb03a5585ULL, 0xbc8c33c53bef4da8ULL,  /* 15 */
    0x3ff6a09e667f3bcdULL, 0xbc93b3efbf5e2228ULL,  /* 16 */
    0x3ff71f75e8ec5f74ULL, 0xbc781f647e5a3ecfULL,  /* 17 */
    0x3ff7a11473eb0187ULL, 0xbc7b32dcb94da51dULL,  /* 18 */
    0x3ff82589994cce13ULL, 0xbc9369b6f13b3734ULL,  /* 19 */
    0x3ff8ace5422aa0dbULL, 0x3c8db72fc1f0eab4ULL,  /* 20 */
    0x3ff93737b0cdc5e5ULL, 0xbc5da9b88b6c1e29ULL,  /* 21 */
    0x3ff9c49182a3f090ULL, 0x3c71affc2b91ce27ULL,  /* 22 */
    0x3ffa5503b23e255dULL, 0xbc91bbd1d3bcbb15ULL,  /* 23 */
    0x3ffae89f995ad3adULL, 0x3c8c1a7792cb3387ULL,  /* 24 */
    0x3ffb7f76f2fb5e47ULL, 0xbc68d6f438ad9334ULL,  /* 25 */
    0x3ffc199bdd85529cULL, 0x3c736eae30af0cb3ULL,  /* 26 */
    0x3ffcb720dcef9069ULL, 0x3c676b2c6c921968ULL,  /* 27 */
    0x3ffd5818dcfba487ULL, 0x3c74a385a63d07a7ULL,  /* 28 */
    0x3ffdfc97337b9b5fULL, 0xbc82d52107b43e1fULL,  /* 29 */
    0x3ffea4afa2a490daULL, 0xbc8ff7128fd391f0ULL,  /* 30 */
    0x3fff50765b6e4540ULL, 0x3c8a64a931d185eeULL,  /* 31 */
};
const uint64_t crnn_dm_log_tab[3 * DM_LOG_N] = {  /* INVC_j, LOGC_HI_j, LOGC_LO_j */
    0x3ff0000000000000ULL, 0x0000000000000000ULL, 0x0000000000000000ULL,  /*  0 */
    0x3fee913200000000ULL, 0x3fa774537632e48cULL, 0x3c4189c5532d6361ULL,  /*  1 */
    0x3fedae6000000000ULL, 0x3fb341db961bd9d1ULL, 0xbc5b5449cd169766ULL,  /*  2 */
    0x3fecd85600000000ULL, 0x3fba9271fa4ae0abULL, 0x3c594be2e01c350fULL,  /*  3 */
    0x3fec0e0800000000ULL, 0x3fc0d779fcd0a299ULL, 0x3c69877c5f5d38a6ULL,  /*  4 */
    0x3feb4e8200000000ULL, 0x3fc44d2a0ccb7f02ULL, 0x3c69f4187eea93baULL,  /*  5 */
    0x3fea98f000000000ULL, 0x3fc7ab860210e209ULL, 0x3c4bbf6b2e0c0605ULL,  /*  6 */
    0x3fe9ec8e00000000ULL, 0x3fcaf3cc2e80c837ULL, 0xbc5388f848751cc9ULL,  /*  7 */
    0x3fe948b000000000ULL, 0x3fce270c6e2b0be6ULL, 0xbc456ecd50915690ULL,  /*  8 */
    0x3fe8acba00000000ULL, 0x3fd0a32272739cc5ULL, 0x3c77c9aea8934f83ULL,  /*  9 */
    0x3fe8181800000000ULL, 0x3fd229423bcf7986ULL, 0xbc776f595b40cf5aULL,  /* 10 */
    0x3fe78a4c00000000ULL, 0x3fd3a64db56949b2ULL, 0xbc6c61766e7eb650ULL,  /* 11 */
    0x3fe702e000000000ULL, 0x3fd51aae872dfa2dULL, 0x3c439d256c6a008eULL,  /* 12 */
    0x3ff6816800000000ULL, 0xbfd5d5bd9f595f10ULL, 0x3c7654169e2111f8ULL,  /* 13 */
    0x3ff6058200000000ULL, 0xbfd4718f9271bd89ULL, 0xbc397a52bcbd6569ULL,  /* 14 */
    0x3ff58ed200000000ULL, 0xbfd314f151d35c42ULL, 0x3c73d6d5c9e62a60ULL,  /* 15 */
    0x3ff51d0800000000ULL, 0xbfd1bf99a35a6b75ULL, 0x3c612ae0d979ef79ULL,  /* 16 */
    0x3ff4afd600000000ULL, 0xbfd07136704d50e0ULL, 0xbc7cd16457c0dddeULL,  /* 17 */
    0x3ff446f800000000ULL, 0xbfce530c7fe709d2ULL, 0xbc42128aec50baebULL,  /* 18 */
    0x3ff3e22c00000000ULL, 0xbfcbd082783bc21dULL, 0xbc3cb58b440627f0ULL,  /* 19 */
    0x3ff3813800000000ULL, 0xbfc95a5a5cf7013fULL, 0xbc5142afb2a614e8ULL,  /* 20 */
    0x3ff323e400000000ULL, 0xbfc6f0174b75542cULL, 0x3c68baa06dc7498fULL,  /* 21 */
    0x3ff2c9fc00000000ULL, 0xbfc4914243339ed1ULL, 0x3c508deda083577bULL,  /* 22 */
    0x3ff2735000000000ULL, 0xbfc23d6c2a49a902ULL, 0x3c670d2c0ce8481eULL,  /* 23 */
    0x3ff21fb800000000ULL, 0xbfbfe89839dbbce6ULL, 0x3c5aad5ecca04e3bULL,  /* 24 */
    0x3ff1cf0600000000ULL, 0xbfbb6abecdad2b94ULL, 0x3c409ff8f18641e2ULL,  /* 25 */
    0x3ff1811800000000ULL, 0xbfb700d20aeac061ULL, 0x3c272610cbd807b0ULL,  /* 26 */
    0x3ff135c800000000ULL, 0xbfb2aa03a4471725ULL, 0x3c5d15e8e285094cULL,  /* 27 */
    0x3ff0ecf600000000ULL, 0xbfaccb854ddd663cULL, 0x3c4dd953b288548aULL,  /* 28 */
    0x3ff0a68200000000ULL, 0xbfa466cc542d0a5aULL, 0x3c4ac69841116b38ULL,  /* 29 */
    0x3ff0624e00000000ULL, 0xbf98493028c8bb9fULL, 0x3c3d123e5b7d9bfcULL,  /* 30 */
    0x3ff0000000000000ULL, 0x0000000000000000ULL, 0x0000000000000000ULL,  /* 31 */
};

double crnn_detmath_exp1(double x)
{
    double kd, hi, r, r2, p, tmp, H, T, y, scale, st, lo, yh;
    int64_t n, j, m;

    if (x != x) return x;                                    /* NaN: returned unchanged */
    if (x > dm_d(DM_O_THRESH)) return dm_d(DM_POS_INF);      /* incl. +inf */
    if (x < dm_d(DM_U_THRESH)) return 0.0;                   /* incl. -inf: +0 */

    /* n = round-to-nearest-even(x * 32/ln2) with the 1.5*2^52 shifter */
    kd = x * dm_d(DM_INVLN2N) + dm_d(DM_SHIFT);
    kd = kd - dm_d(DM_SHIFT);
    n = (int64_t)kd;                                         /* exact, |n| <= 34401 */
    j = n & (DM_EXP_N - 1);                                  /* 0..31 */
    m = (n - j) / DM_EXP_N;                                  /* exact: floor(n / 32) */

    /* r = x - n ln2/32; kd*LN2HIN and x - kd*LN2HIN are exact */
    hi = x - kd * dm_d(DM_LN2HIN);
    r = hi - kd * dm_d(DM_LN2LON);

    /* exp(r) - 1 = r + r^2 (1/2 + r (1/6 + ...)),  2^(j/32) = H (1 + T) */
    r2 = r * r;
    p = r2 * (dm_d(DM_E2) + r * (dm_d(DM_E3) + r * (dm_d(DM_E4) + r * (dm_d(DM_E5)
            + r * (dm_d(DM_E6) + r * dm_d(DM_E7))))));
    H = dm_d(crnn_dm_exp_tab[2 * j]);
    T = dm_d(crnn_dm_exp_tab[2 * j + 1]);
    tmp = (T + r) + p;

    if (m > -1022) {
        y = H + H * tmp;                                     /* in [0.997, 1.995) */
        if (m == 1024) return (y * dm_d(DM_TWO1023)) * 2.0;
        return y * dm_d((uint64_t)(m + 1023) << 52);         /* exact, normal */
    }
    /* m <= -1022: the result is below 2^-1021 and may be subnormal.
     * scale = H * 2^(m+1022) is normal and exact; y = result * 2^1022. */
    scale = dm_d(dm_u(H) + ((uint64_t)(m + 1022) << 52));
    st = scale * tmp;
    y = scale + st;
    if (y < 1.0) {
        /* round y once onto the grid 2^-52 (the subnormal grid after scaling) */
        lo = (scale - y) + st;
        yh = 1.0 + y;
        lo = ((1.0 - yh) + y) + lo;
        y = (yh + lo) - 1.0;
    }
    return y * dm_d(DM_TWOM1022);                            /* exact */
}

double crnn_detmath_log1(double x)
{
    uint64_t ix = dm_u(x);
    int64_t k = 0, j, up;
    double m, invc, p, t, mh, ml, rh, rl, r2, q, dk, khi, klo, s1, s2, bb, e1, e2, lo;

    if (x != x) return x;                                    /* NaN: returned unchanged */
    if (x == 0.0) return dm_d(DM_NEG_INF);                   /* log(+-0) = -inf */
    if (ix >> 63) return dm_d(DM_QNAN);                      /* x < 0, incl. -inf */
    if (ix == DM_POS_INF) return x;                          /* log(+inf) = +inf */

    if (ix < 0x0010000000000000ULL) {                        /* subnormal: normalize */
        ix = dm_u(x * dm_d(DM_TWO54));                       /* exact */
        k = -54;
    }
    k += (int64_t)(ix >> 52) - 1023;
    j = (int64_t)((ix >> 47) & (DM_LOG_N - 1));              /* top 5 fraction bits */
    up = j >= 13 ? 1 : 0;                                    /* mantissa >= 1.40625: halve */
    m = dm_d((ix & 0x000fffffffffffffULL) | ((uint64_t)(1023 - up) << 52));
    k += up;                                                 /* x = 2^k m, m in [0.703, 1.406) */

    /* r = m * INVC_j - 1 exactly as rh + rl (Dekker product; INVC_j has 20 bits) */
    invc = dm_d(crnn_dm_log_tab[3 * j]);
    p = m * invc;
    t = m * dm_d(DM_SPLIT);
    mh = t - (t - m);
    ml = m - mh;
    rl = (mh * invc - p) + ml * invc;
    rh = p - 1.0;                                            /* exact */

    /* log1p(r) - r ~= q(rh) - rl*rh */
    r2 = rh * rh;
    q = r2 * (dm_d(DM_C2) + rh * (dm_d(DM_C3) + rh * (dm_d(DM_C4) + rh * (dm_d(DM_C5)
            + rh * (dm_d(DM_C6) + rh * (dm_d(DM_C7) + rh * (dm_d(DM_C8) + rh * (dm_d(DM_C9)
            + rh * (dm_d(DM_C10) + rh * (dm_d(DM_C11) + rh * dm_d(DM_C12)))))))))));

    /* log x = k ln2 + LOGC_j + rh + rl + (log1p(r) - r) */
    dk = (double)k;
    khi = dk * dm_d(DM_LN2HI);                               /* exact */
    klo = dk * dm_d(DM_LN2LO);
    s1 = khi + dm_d(crnn_dm_log_tab[3 * j + 1]);                  /* two-sum: s1 + e1 exact */
    bb = s1 - khi;
    e1 = (khi - (s1 - bb)) + (dm_d(crnn_dm_log_tab[3 * j + 1]) - bb);
    s2 = s1 + rh;                                            /* two-sum: s2 + e2 exact */
    bb = s2 - s1;
    e2 = (s1 - (s2 - bb)) + (rh - bb);
    lo = ((((e1 + e2) + klo) + dm_d(crnn_dm_log_tab[3 * j + 2])) + (rl - rl * rh)) + q;
    return s2 + lo;
}

int32_t crnn_detmath_exp(const double *x, int64_t n, double *y)
{
    int64_t i;
    if (n < 0) return CRNN_E_ARG;
    if (n > 0 && (x == NULL || y == NULL)) return CRNN_E_ARG;
    for (i = 0; i < n; ++i) y[i] = crnn_detmath_exp1(x[i]);
    return CRNN_OK;
}

int32_t crnn_detmath_log(const double *x, int64_t n, double *y)
{
    int64_t i;
    if (n < 0) return CRNN_E_ARG;
    if (n > 0 && (x == NULL || y == NULL)) return CRNN_E_ARG;
    for (i = 0; i < n; ++i) y[i] = crnn_detmath_log1(x[i]);
    return CRNN_OK;
}
