/* vec_avx2.h — the vector vocabulary for the 256-bit path (AVX2 + FMA3). */
#include <immintrin.h>
#define ISA_SUFFIX avx2
#define VW 8
typedef __m256 vec_t;
#define VLOADU(p)      _mm256_loadu_ps(p)
#define VSTOREU(p, v)  _mm256_storeu_ps((p), (v))
#define VZERO()        _mm256_setzero_ps()
#define VSET1(x)       _mm256_set1_ps(x)
#define VADD(a, b)     _mm256_add_ps((a), (b))
#define VSUB(a, b)     _mm256_sub_ps((a), (b))
#define VMUL(a, b)     _mm256_mul_ps((a), (b))
#define VDIV(a, b)     _mm256_div_ps((a), (b))
#define VSQRT(a)       _mm256_sqrt_ps(a)     /* correctly rounded */
#define VFMA(a, b, c)  _mm256_fmadd_ps((a), (b), (c))
/* comparisons (ordered: false when either is NaN), selects, sign flip and exponent bits */
typedef __m256 vmask_t;
#define VCMPLT(a, b)   _mm256_cmp_ps((a), (b), _CMP_LT_OQ)
#define VCMPGE(a, b)   _mm256_cmp_ps((a), (b), _CMP_GE_OQ)
#define VISNAN(a)      _mm256_cmp_ps((a), (a), _CMP_UNORD_Q)
#define VSELECT(m, t, f) _mm256_blendv_ps((f), (t), (m))       /* m ? t : f, per lane */
#define VNEG(a)        _mm256_xor_ps((a), _mm256_set1_ps(-0.0f)) /* flips the sign bit only */
#define VPOW2I(k)      _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), \
                           _mm256_set1_epi32(127)), 23))         /* 2^k, integral k in [-126, 127] */
/* ---- int32 lanes (src/isa/conv_pool_impl.h: the pool's winners) ---- */
typedef __m256i vint_t;
#define VISET1(x)        _mm256_set1_epi32(x)
#define VIADD(a, b)      _mm256_add_epi32((a), (b))
#define VILANES()        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define VISELECT(m, t, f) _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(f), \
                             _mm256_castsi256_ps(t), (m)))
#define VISTOREU(p, v)   _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define VILOADU(p)       _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define VICMPEQ(a, b)    _mm256_castsi256_ps(_mm256_cmpeq_epi32((a), (b)))   /* a vmask_t */
#define VMASK_ALL(m)     (_mm256_movemask_ps(m) == 0xFF)                     /* every lane set */
/* ---- gemm16 vocabulary (src/isa/gemm16_*.h) ---- */
/* nonzero when some lane of v is ±0 */
#define VANY_ZERO(v)     (_mm256_movemask_ps(_mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_EQ_OQ)) != 0)
/* bit e set when lane e of v is not ±0 (a NaN is not ±0) */
#define VNONZERO_BITS(v) ((uint32_t)_mm256_movemask_ps(_mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_NEQ_UQ)))
/* acc | bit in the int32 lanes where v is not ±0 (the kn sparse kernel's lane masks) */
#define VIOR_NZ(acc, v, bit) _mm256_or_si256((acc), _mm256_and_si256(_mm256_castps_si256( \
                             _mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_NEQ_UQ)), _mm256_set1_epi32((int)(bit))))
/* the same in two steps: the lanes not ±0 as a mask (OR-ed over rows), then the bit */
#define VNZ(v)               _mm256_cmp_ps((v), _mm256_setzero_ps(), _CMP_NEQ_UQ)
#define VMASK_OR(a, b)       _mm256_or_ps((a), (b))
#define VIOR_MASK(acc, m, bit) _mm256_or_si256((acc), _mm256_and_si256(_mm256_castps_si256(m), \
                             _mm256_set1_epi32((int)(bit))))
/* nonzero when some lane of v is -0 (the sign bit alone) */
#define VHAS_NEGZERO(v)  (_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32( \
                             _mm256_castps_si256(v), _mm256_set1_epi32(INT32_MIN)))) != 0)
static inline __m256i vlanes_lt(int n)   /* all-ones in lanes i < n */
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define VLOADN(p, n)     _mm256_maskload_ps((p), vlanes_lt(n))
#define VSTOREN(p, v, n) _mm256_maskstore_ps((p), vlanes_lt(n), (v))
#define VFMA_N(a, b, c, n) _mm256_blendv_ps((c), _mm256_fmadd_ps((a), (b), (c)), \
                                            _mm256_castsi256_ps(vlanes_lt(n)))
/* x[r] holds lanes p[i] + p[i+8] (i < 8) of output r, levels s >= 8 done. Returns lane r =
 * the tree of output r (position m holds output 4(m%2) + m/2 so the results come out in
 * order); each level adds lane i and lane i + s of the same output, lane i first. */
static inline __m256 vtree_tile(const __m256 *x)
{
#define TP(m) x[4 * ((m) % 2) + (m) / 2]
    __m256 w[4], y[2];
    for (int m = 0; m < 4; m++) {            /* s = 4: 128-bit halves */
        __m256 a = TP(2 * m), b = TP(2 * m + 1);
        w[m] = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    }
#undef TP
    for (int n = 0; n < 2; n++) {            /* s = 2 */
        __m256d e = _mm256_castps_pd(w[2 * n]), f = _mm256_castps_pd(w[2 * n + 1]);
        y[n] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(e, f)),
                             _mm256_castpd_ps(_mm256_unpackhi_pd(e, f)));
    }
    return _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x88), _mm256_shuffle_ps(y[0], y[1], 0xDD));
}
