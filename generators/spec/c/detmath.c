/* detmath.c: DetMath, the project's own binary64 exp and log (spec/detmath.py,
 * docs/decoding.md "DetMath: exp and log"). Only + - * / in the order written, each one
 * IEEE double operation; constants and tables are the spec's bit patterns. */
#include "spec.h"

#define O_THRESH 0x40862E42FEFA39EFu   /* above: +inf */
#define U_THRESH 0xC0874910D52D3051u   /* below: +0 */
#define INVLN2N 0x40471547652B82FEu    /* RN(32/ln2) */
#define SHIFT 0x4338000000000000u      /* 1.5 * 2^52 */
#define LN2HI 0x3FE62E42FEE00000u
#define LN2LO 0x3DEA39EF35793C76u
#define LN2HIN 0x3F962E42FEE00000u
#define LN2LON 0x3D9A39EF35793C76u
#define TWO54 0x4350000000000000u
#define TWO1023 0x7FE0000000000000u
#define TWOM1022 0x0010000000000000u
#define SPLIT 0x41A0000002000000u      /* 2^27 + 1 */
#define POS_INF 0x7FF0000000000000u
#define NEG_INF 0xFFF0000000000000u
#define QNAN 0x7FF8000000000000u

#define E2 0x3FE0000000000000u
#define E3 0x3FC5555555555555u
#define E4 0x3FA5555555555555u
#define E5 0x3F81111111111111u
#define E6 0x3F56C16C16C16C17u
#define E7 0x3F2A01A01A01A01Au

#define C2 0xBFE0000000000000u
#define C3 0x3FD5555555555555u
#define C4 0xBFD0000000000000u
#define C5 0x3FC999999999999Au
#define C6 0xBFC5555555555555u
#define C7 0x3FC2492492492492u
#define C8 0xBFC0000000000000u
#define C9 0x3FBC71C71C71C71Cu
#define C10 0xBFB999999999999Au
#define C11 0x3FB745D1745D1746u
#define C12 0xBFB5555555555555u

#define D(bits) f64_from(bits)

static const uint64_t EXP_TAB[32][2] = {  /* (H_j, T_j) */
    {0x3FF0000000000000u, 0x0000000000000000u},  /* 0 */
    {0x3FF059B0D3158574u, 0x3C8CD2523567F613u},  /* 1 */
    {0x3FF0B5586CF9890Fu, 0x3C979AA65D837B6Du},  /* 2 */
    {0x3FF11301D0125B51u, 0xBC9556522A2FBD0Eu},  /* 3 */
    {0x3FF172B83C7D517Bu, 0xBC801B15EAA59348u},  /* 4 */
    {0x3FF1D4873168B9AAu, 0x3C9AECF73E3A2F60u},  /* 5 */
    {0x3FF2387A6E756238u, 0x3C968EFDE3A8A894u},  /* 6 */
    {0x3FF29E9DF51FDEE1u, 0x3C82F7E16D09AB31u},  /* 7 */
    {0x3FF306FE0A31B715u, 0x3C834D754DB0ABB6u},  /* 8 */
    {0x3FF371A7373AA9CBu, 0xBC924AEDCC4B5068u},  /* 9 */
    {0x3FF3DEA64C123422u, 0x3C859F48A72A4C6Du},  /* 10 */
    {0x3FF44E086061892Du, 0x3C4363ED60C2AC11u},  /* 11 */
    {0x3FF4BFDAD5362A27u, 0x3C7690CEBB7AAFB0u},  /* 12 */
    {0x3FF5342B569D4F82u, 0xBC78DEC6BD0F385Fu},  /* 13 */
    {0x3FF5AB07DD485429u, 0x3C9063E1E21C5409u},  /* 14 */
    {0x3FF6247EB03A5585u, 0xBC8C33C53BEF4DA8u},  /* 15 */
    {0x3FF6A09E667F3BCDu, 0xBC93B3EFBF5E2228u},  /* 16 */
    {0x3FF71F75E8EC5F74u, 0xBC781F647E5A3ECFu},  /* 17 */
    {0x3FF7A11473EB0187u, 0xBC7B32DCB94DA51Du},  /* 18 */
    {0x3FF82589994CCE13u, 0xBC9369B6F13B3734u},  /* 19 */
    {0x3FF8ACE5422AA0DBu, 0x3C8DB72FC1F0EAB4u},  /* 20 */
    {0x3FF93737B0CDC5E5u, 0xBC5DA9B88B6C1E29u},  /* 21 */
    {0x3FF9C49182A3F090u, 0x3C71AFFC2B91CE27u},  /* 22 */
    {0x3FFA5503B23E255Du, 0xBC91BBD1D3BCBB15u},  /* 23 */
    {0x3FFAE89F995AD3ADu, 0x3C8C1A7792CB3387u},  /* 24 */
    {0x3FFB7F76F2FB5E47u, 0xBC68D6F438AD9334u},  /* 25 */
    {0x3FFC199BDD85529Cu, 0x3C736EAE30AF0CB3u},  /* 26 */
    {0x3FFCB720DCEF9069u, 0x3C676B2C6C921968u},  /* 27 */
    {0x3FFD5818DCFBA487u, 0x3C74A385A63D07A7u},  /* 28 */
    {0x3FFDFC97337B9B5Fu, 0xBC82D52107B43E1Fu},  /* 29 */
    {0x3FFEA4AFA2A490DAu, 0xBC8FF7128FD391F0u},  /* 30 */
    {0x3FFF50765B6E4540u, 0x3C8A64A931D185EEu},  /* 31 */
};
static const uint64_t LOG_TAB[32][3] = {  /* (INVC_j, LOGC_HI_j, LOGC_LO_j) */
    {0x3FF0000000000000u, 0x0000000000000000u, 0x0000000000000000u},  /* 0 */
    {0x3FEE913200000000u, 0x3FA774537632E48Cu, 0x3C4189C5532D6361u},  /* 1 */
    {0x3FEDAE6000000000u, 0x3FB341DB961BD9D1u, 0xBC5B5449CD169766u},  /* 2 */
    {0x3FECD85600000000u, 0x3FBA9271FA4AE0ABu, 0x3C594BE2E01C350Fu},  /* 3 */
    {0x3FEC0E0800000000u, 0x3FC0D779FCD0A299u, 0x3C69877C5F5D38A6u},  /* 4 */
    {0x3FEB4E8200000000u, 0x3FC44D2A0CCB7F02u, 0x3C69F4187EEA93BAu},  /* 5 */
    {0x3FEA98F000000000u, 0x3FC7AB860210E209u, 0x3C4BBF6B2E0C0605u},  /* 6 */
    {0x3FE9EC8E00000000u, 0x3FCAF3CC2E80C837u, 0xBC5388F848751CC9u},  /* 7 */
    {0x3FE948B000000000u, 0x3FCE270C6E2B0BE6u, 0xBC456ECD50915690u},  /* 8 */
    {0x3FE8ACBA00000000u, 0x3FD0A32272739CC5u, 0x3C77C9AEA8934F83u},  /* 9 */
    {0x3FE8181800000000u, 0x3FD229423BCF7986u, 0xBC776F595B40CF5Au},  /* 10 */
    {0x3FE78A4C00000000u, 0x3FD3A64DB56949B2u, 0xBC6C61766E7EB650u},  /* 11 */
    {0x3FE702E000000000u, 0x3FD51AAE872DFA2Du, 0x3C439D256C6A008Eu},  /* 12 */
    {0x3FF6816800000000u, 0xBFD5D5BD9F595F10u, 0x3C7654169E2111F8u},  /* 13 */
    {0x3FF6058200000000u, 0xBFD4718F9271BD89u, 0xBC397A52BCBD6569u},  /* 14 */
    {0x3FF58ED200000000u, 0xBFD314F151D35C42u, 0x3C73D6D5C9E62A60u},  /* 15 */
    {0x3FF51D0800000000u, 0xBFD1BF99A35A6B75u, 0x3C612AE0D979EF79u},  /* 16 */
    {0x3FF4AFD600000000u, 0xBFD07136704D50E0u, 0xBC7CD16457C0DDDEu},  /* 17 */
    {0x3FF446F800000000u, 0xBFCE530C7FE709D2u, 0xBC42128AEC50BAEBu},  /* 18 */
    {0x3FF3E22C00000000u, 0xBFCBD082783BC21Du, 0xBC3CB58B440627F0u},  /* 19 */
    {0x3FF3813800000000u, 0xBFC95A5A5CF7013Fu, 0xBC5142AFB2A614E8u},  /* 20 */
    {0x3FF323E400000000u, 0xBFC6F0174B75542Cu, 0x3C68BAA06DC7498Fu},  /* 21 */
    {0x3FF2C9FC00000000u, 0xBFC4914243339ED1u, 0x3C508DEDA083577Bu},  /* 22 */
    {0x3FF2735000000000u, 0xBFC23D6C2A49A902u, 0x3C670D2C0CE8481Eu},  /* 23 */
    {0x3FF21FB800000000u, 0xBFBFE89839DBBCE6u, 0x3C5AAD5ECCA04E3Bu},  /* 24 */
    {0x3FF1CF0600000000u, 0xBFBB6ABECDAD2B94u, 0x3C409FF8F18641E2u},  /* 25 */
    {0x3FF1811800000000u, 0xBFB700D20AEAC061u, 0x3C272610CBD807B0u},  /* 26 */
    {0x3FF135C800000000u, 0xBFB2AA03A4471725u, 0x3C5D15E8E285094Cu},  /* 27 */
    {0x3FF0ECF600000000u, 0xBFACCB854DDD663Cu, 0x3C4DD953B288548Au},  /* 28 */
    {0x3FF0A68200000000u, 0xBFA466CC542D0A5Au, 0x3C4AC69841116B38u},  /* 29 */
    {0x3FF0624E00000000u, 0xBF98493028C8BB9Fu, 0x3C3D123E5B7D9BFCu},  /* 30 */
    {0x3FF0000000000000u, 0x0000000000000000u, 0x0000000000000000u},  /* 31 */
};

/* 2^e for e in [-1022, 1023], from its exponent bits */
static double pow2(int64_t e)
{
    return f64_from((uint64_t)(e + 1023) << 52);
}

/* m <= -1022: one careful rounding into the subnormal range */
static double exp_subnormal(double H, double tmp, int64_t m)
{
    double scale = f64_from(f64_bits(H) + ((uint64_t)(m + 1022) << 52));
    double st = scale * tmp;
    double y = scale + st;
    if (y < 1.0) {
        double lo = (scale - y) + st;
        double yh = 1.0 + y;
        lo = ((1.0 - yh) + y) + lo;
        y = (yh + lo) - 1.0;
    }
    return y * D(TWOM1022);
}

double spec_exp(double x)
{
    if (x != x)
        return x;
    if (x > D(O_THRESH))
        return D(POS_INF);
    if (x < D(U_THRESH))
        return 0.0;
    double kd = x * D(INVLN2N) + D(SHIFT);
    kd = kd - D(SHIFT);
    int64_t n = (int64_t)kd;
    int64_t j = n & 31;
    int64_t m = (n - j) / 32;
    double hi = x - kd * D(LN2HIN);
    double r = hi - kd * D(LN2LON);
    double r2 = r * r;
    double p = r2 * (D(E2) + r * (D(E3) + r * (D(E4) + r * (D(E5) + r * (D(E6) + r * D(E7))))));
    double H = D(EXP_TAB[j][0]), T = D(EXP_TAB[j][1]);
    double tmp = (T + r) + p;
    if (m <= -1022)
        return exp_subnormal(H, tmp, m);
    double y = H + H * tmp;
    if (m == 1024)
        return (y * D(TWO1023)) * 2.0;
    return y * pow2(m);
}

double spec_log(double x)
{
    uint64_t ix = f64_bits(x);
    if (x != x)
        return x;
    if (x == 0.0)
        return D(NEG_INF);
    if (ix >> 63)
        return D(QNAN);
    if (ix == POS_INF)
        return D(POS_INF);
    int64_t k = 0;
    if (ix < 0x0010000000000000u) {              /* subnormal: scaled by 2^54 first */
        ix = f64_bits(x * D(TWO54));
        k = -54;
    }
    k = k + (int64_t)(ix >> 52) - 1023;
    int64_t j = (int64_t)((ix >> 47) & 31);
    int64_t up = j >= 13;
    double m = f64_from((ix & 0x000FFFFFFFFFFFFFu) | ((uint64_t)(1023 - up) << 52));
    k = k + up;
    double invc = D(LOG_TAB[j][0]);
    double p = m * invc;
    double t = m * D(SPLIT);
    double mh = t - (t - m);
    double ml = m - mh;
    double rl = (mh * invc - p) + ml * invc;
    double rh = p - 1.0;
    double r2 = rh * rh;
    double q = r2 * (D(C2) + rh * (D(C3) + rh * (D(C4) + rh * (D(C5) + rh * (D(C6) + rh * (
        D(C7) + rh * (D(C8) + rh * (D(C9) + rh * (D(C10) + rh * (D(C11) + rh * D(C12)))))))))));
    double dk = (double)k;
    double khi = dk * D(LN2HI);
    double klo = dk * D(LN2LO);
    double lch = D(LOG_TAB[j][1]);
    double s1 = khi + lch;
    double bb = s1 - khi;
    double e1 = (khi - (s1 - bb)) + (lch - bb);
    double s2 = s1 + rh;
    bb = s2 - s1;
    double e2 = (s1 - (s2 - bb)) + (rh - bb);
    double lo = ((((e1 + e2) + klo) + D(LOG_TAB[j][2])) + (rl - rl * rh)) + q;
    return s2 + lo;
}

static int32_t map(double (*f)(double), const double *x, int64_t n, double *y)
{
    if (n < 0 || (n > 0 && (!x || !y)))
        return CRNN_E_ARG;
    for (int64_t i = 0; i < n; i++)
        y[i] = f(x[i]);
    return CRNN_OK;
}

int32_t crnn_detmath_exp(const double *x, int64_t n, double *y) { return map(spec_exp, x, n, y); }

int32_t crnn_detmath_log(const double *x, int64_t n, double *y) { return map(spec_log, x, n, y); }
