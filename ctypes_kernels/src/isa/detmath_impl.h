/* detmath_impl.h — DetMath exp and log over arrays, DM_W lanes at a time, included by each
 * thin src/isa/detmath_<isa>.c after it sets ISA_SUFFIX and DM_W (the path's doubles a
 * register). Operation for operation the scalar crnn_detmath_exp1 / crnn_detmath_log1 of
 * src/detmath.c on every lane (GCC/Clang vector extensions: each operator is the IEEE double
 * operation of each lane, nothing fused: the file is built with -ffp-contract=off), so every
 * lane gives the scalar bits.
 *
 * Only the common case runs in lanes: exp of -700 <= x <= 700 (a normal result: none of the
 * scalar code's special cases), log of a positive normal finite x. A vector with a lane
 * outside it is computed with that lane's input replaced by 0 (exp) or 1 (log) and the lane
 * then taken from the scalar function. The scalar code's integer conversions are exact, so
 * they are done on the bits: n from the shifter's low bits (bits(kd) = bits(1.5 * 2^52) + n),
 * (double)k as (1.5 * 2^52 + k) - 1.5 * 2^52. */
#include <stdint.h>
#include <string.h>
#include "../core.h"
#include "../detmath.h"

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

typedef double vd __attribute__((vector_size(8 * DM_W)));
typedef uint64_t vu __attribute__((vector_size(8 * DM_W)));
typedef int64_t vi __attribute__((vector_size(8 * DM_W)));

static inline vd d_splat(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    vd v;
    for (int l = 0; l < DM_W; l++) v[l] = d;
    return v;
}
static inline vu d_bits(vd v) { vu u; memcpy(&u, &v, sizeof u); return u; }
static inline vd d_from(vu u) { vd v; memcpy(&v, &u, sizeof v); return v; }
static inline vd d_load(const double *x) { vd v; memcpy(&v, x, sizeof v); return v; }

/* table entry tab[stride * j + at] of each lane */
static inline vd d_tab(const uint64_t *tab, int stride, int at, vu j)
{
    vu u;
    for (int l = 0; l < DM_W; l++) u[l] = tab[stride * j[l] + at];
    return d_from(u);
}

static inline vd exp_v(vd x)
{
    vd kd = x * d_splat(DM_INVLN2N) + d_splat(DM_SHIFT);
    const vu nb = d_bits(kd) - DM_SHIFT;                      /* n, two's complement */
    kd = kd - d_splat(DM_SHIFT);
    const vu j = nb & (DM_EXP_N - 1);
    /* 2^m, m = (n - j) / 32: (n - j + 1023 * 32) / 32 is the biased exponent, >= 1 here */
    const vu scale = ((nb - j + (uint64_t)1023 * DM_EXP_N) >> 5) << 52;
    vd hi = x - kd * d_splat(DM_LN2HIN);
    vd r = hi - kd * d_splat(DM_LN2LON);
    vd r2 = r * r;
    vd p = r2 * (d_splat(DM_E2) + r * (d_splat(DM_E3) + r * (d_splat(DM_E4) + r * (d_splat(DM_E5)
            + r * (d_splat(DM_E6) + r * d_splat(DM_E7))))));
    vd H = d_tab(crnn_dm_exp_tab, 2, 0, j), T = d_tab(crnn_dm_exp_tab, 2, 1, j);
    vd tmp = (T + r) + p;
    vd y = H + H * tmp;
    return y * d_from(scale);
}

static inline vd log_v(vd x)
{
    const vu ix = d_bits(x);
    const vu j = (ix >> 47) & (DM_LOG_N - 1);
    const vu up = (vu)(j >= 13) & 1;                         /* mantissa >= 1.40625: halve */
    const vu k = (ix >> 52) - 1023 + up;                     /* two's complement */
    vd m = d_from((ix & 0x000fffffffffffffULL) | ((1023 - up) << 52));
    vd invc = d_tab(crnn_dm_log_tab, 3, 0, j);
    vd p = m * invc;
    vd t = m * d_splat(DM_SPLIT);
    vd mh = t - (t - m);
    vd ml = m - mh;
    vd rl = (mh * invc - p) + ml * invc;
    vd rh = p - d_splat(0x3ff0000000000000ULL);
    vd r2 = rh * rh;
    vd q = r2 * (d_splat(DM_C2) + rh * (d_splat(DM_C3) + rh * (d_splat(DM_C4) + rh * (d_splat(DM_C5)
            + rh * (d_splat(DM_C6) + rh * (d_splat(DM_C7) + rh * (d_splat(DM_C8) + rh * (d_splat(DM_C9)
            + rh * (d_splat(DM_C10) + rh * (d_splat(DM_C11) + rh * d_splat(DM_C12)))))))))));
    vd dk = d_from(DM_SHIFT + k) - d_splat(DM_SHIFT);
    vd khi = dk * d_splat(DM_LN2HI);
    vd klo = dk * d_splat(DM_LN2LO);
    vd lchi = d_tab(crnn_dm_log_tab, 3, 1, j), lclo = d_tab(crnn_dm_log_tab, 3, 2, j);
    vd s1 = khi + lchi;
    vd bb = s1 - khi;
    vd e1 = (khi - (s1 - bb)) + (lchi - bb);
    vd s2 = s1 + rh;
    bb = s2 - s1;
    vd e2 = (s1 - (s2 - bb)) + (rh - bb);
    vd lo = ((((e1 + e2) + klo) + lclo) + (rl - rl * rh)) + q;
    return s2 + lo;
}

/* y[0..DM_W) = r where common, else the scalar function of x */
static inline void put_lanes(vd r, vu common, const double *x, double *y, double (*f1)(double))
{
    int all = 1;
    for (int l = 0; l < DM_W; l++) all &= common[l] != 0;
    if (all) {
        memcpy(y, &r, sizeof r);
        return;
    }
    for (int l = 0; l < DM_W; l++) y[l] = common[l] ? r[l] : f1(x[l]);
}

void CAT(crnn_detmath_exp_n, ISA_SUFFIX)(const double *x, int64_t n, double *y)
{
    int64_t i = 0;
    for (; i + DM_W <= n; i += DM_W) {
        const vd v = d_load(x + i);
        const vu common = (vu)((v >= -700.0) & (v <= 700.0));   /* NaN: not common */
        put_lanes(exp_v(d_from(d_bits(v) & common)), common, x + i, y + i, crnn_detmath_exp1);
    }
    for (; i < n; i++) y[i] = crnn_detmath_exp1(x[i]);
}

void CAT(crnn_detmath_log_n, ISA_SUFFIX)(const double *x, int64_t n, double *y)
{
    int64_t i = 0;
    for (; i + DM_W <= n; i += DM_W) {
        const vu ix = d_bits(d_load(x + i));
        /* a positive normal finite x: 2^-1022 <= x < inf (the sign bit makes ix large) */
        const vu common = (vu)((ix >= 0x0010000000000000ULL) & (ix < DM_POS_INF));
        put_lanes(log_v(d_from((ix & common) | (0x3ff0000000000000ULL & ~common))), common, x + i,
                  y + i, crnn_detmath_log1);
    }
    for (; i < n; i++) y[i] = crnn_detmath_log1(x[i]);
}
