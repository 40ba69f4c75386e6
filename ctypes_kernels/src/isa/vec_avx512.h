/* vec_avx512.h — the vector vocabulary for the 512-bit path (AVX-512F). */
#include <immintrin.h>
#define ISA_SUFFIX avx512
#define VW 16
typedef __m512 vec_t;
#define VLOADU(p)      _mm512_loadu_ps(p)
#define VSTOREU(p, v)  _mm512_storeu_ps((p), (v))
#define VZERO()        _mm512_setzero_ps()
#define VSET1(x)       _mm512_set1_ps(x)
#define VADD(a, b)     _mm512_add_ps((a), (b))
#define VSUB(a, b)     _mm512_sub_ps((a), (b))
#define VMUL(a, b)     _mm512_mul_ps((a), (b))
#define VDIV(a, b)     _mm512_div_ps((a), (b))
#define VSQRT(a)       _mm512_sqrt_ps(a)     /* correctly rounded */
#define VFMA(a, b, c)  _mm512_fmadd_ps((a), (b), (c))
/* comparisons (ordered: false when either is NaN), selects, sign flip and exponent bits */
typedef __mmask16 vmask_t;
#define VCMPLT(a, b)   _mm512_cmp_ps_mask((a), (b), _CMP_LT_OQ)
#define VCMPGE(a, b)   _mm512_cmp_ps_mask((a), (b), _CMP_GE_OQ)
#define VISNAN(a)      _mm512_cmp_ps_mask((a), (a), _CMP_UNORD_Q)
#define VSELECT(m, t, f) _mm512_mask_blend_ps((m), (f), (t))   /* m ? t : f, per lane */
#define VNEG(a)        _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), \
                           _mm512_set1_epi32((int)0x80000000)))  /* flips the sign bit only */
#define VPOW2I(k)      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), \
                           _mm512_set1_epi32(127)), 23))         /* 2^k, integral k in [-126, 127] */
/* ---- int32 lanes (src/isa/conv_pool_impl.h: the pool's winners) ---- */
typedef __m512i vint_t;
#define VISET1(x)        _mm512_set1_epi32(x)
#define VIADD(a, b)      _mm512_add_epi32((a), (b))
#define VILANES()        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define VISELECT(m, t, f) _mm512_mask_blend_epi32((m), (f), (t))
#define VISTOREU(p, v)   _mm512_storeu_si512((void *)(p), (v))
#define VILOADU(p)       _mm512_loadu_si512((const void *)(p))
#define VICMPEQ(a, b)    _mm512_cmpeq_epi32_mask((a), (b))                   /* a vmask_t */
#define VMASK_ALL(m)     ((m) == (__mmask16)0xFFFF)                          /* every lane set */
/* ---- gemm16 vocabulary (src/isa/gemm16_*.h) ---- */
/* nonzero when some lane of v is ±0 */
#define VANY_ZERO(v)     (_mm512_cmp_ps_mask((v), _mm512_setzero_ps(), _CMP_EQ_OQ) != 0)
/* bit e set when lane e of v is not ±0 (a NaN is not ±0) */
#define VNONZERO_BITS(v) ((uint32_t)_mm512_cmp_ps_mask((v), _mm512_setzero_ps(), _CMP_NEQ_UQ))
/* acc | bit in the int32 lanes where v is not ±0 (the kn sparse kernel's lane masks) */
#define VIOR_NZ(acc, v, bit) _mm512_mask_or_epi32((acc), _mm512_cmp_ps_mask((v), _mm512_setzero_ps(), \
                             _CMP_NEQ_UQ), (acc), _mm512_set1_epi32((int)(bit)))
/* the same in two steps: the lanes not ±0 as a mask (OR-ed over rows), then the bit */
#define VNZ(v)               _mm512_cmp_ps_mask((v), _mm512_setzero_ps(), _CMP_NEQ_UQ)
#define VMASK_OR(a, b)       ((__mmask16)((a) | (b)))
#define VIOR_MASK(acc, m, bit) _mm512_mask_or_epi32((acc), (m), (acc), _mm512_set1_epi32((int)(bit)))
/* nonzero when some lane of v is -0 (the sign bit alone) */
#define VHAS_NEGZERO(v)  (_mm512_cmpeq_epi32_mask(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)) != 0)
/* the first n lanes (0 <= n <= VW) of p, zeros elsewhere; store the first n lanes */
#define VLOADN(p, n)     _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define VSTOREN(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (v))
/* fma(a, b, c) in the first n lanes, c unchanged in the others */
#define VFMA_N(a, b, c, n) _mm512_mask3_fmadd_ps((a), (b), (c), (__mmask16)((1u << (n)) - 1u))
/* x[r] holds the 16 partials of output r (lane i = p[i]). Returns lane r = the tree of
 * output r: each level adds lane i and lane i + s of the same output, lane i first, with the
 * outputs moved between registers by shuffles (position m holds output 4(m%4) + m/4 so that
 * the results come out in order). */
static inline __m512 vtree_tile(const __m512 *x)
{
#define TP(m) x[4 * ((m) % 4) + (m) / 4]
    __m512 w[8], y[4], z[2];
    for (int m = 0; m < 8; m++) {            /* s = 8: 128-bit chunks 0,1 + chunks 2,3 */
        __m512 a = TP(2 * m), b = TP(2 * m + 1);
        w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    }
#undef TP
    for (int n = 0; n < 4; n++) {            /* s = 4: chunk 0 + chunk 1 of each output */
        __m512 c = w[2 * n], d = w[2 * n + 1];
        y[n] = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x88), _mm512_shuffle_f32x4(c, d, 0xDD));
    }
    for (int n = 0; n < 2; n++) {            /* s = 2: elements 0,1 + elements 2,3 */
        __m512d e = _mm512_castps_pd(y[2 * n]), f = _mm512_castps_pd(y[2 * n + 1]);
        z[n] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(e, f)),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(e, f)));
    }
    /* s = 1: element 0 + element 1 */
    return _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88), _mm512_shuffle_ps(z[0], z[1], 0xDD));
}
