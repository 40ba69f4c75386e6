/* vec_sse.h — the vector vocabulary for the 128-bit path (SSE4.2 + FMA3). */
#include <immintrin.h>
#define ISA_SUFFIX sse
#define VW 4
typedef __m128 vec_t;
#define VLOADU(p)      _mm_loadu_ps(p)
#define VSTOREU(p, v)  _mm_storeu_ps((p), (v))
#define VZERO()        _mm_setzero_ps()
#define VSET1(x)       _mm_set1_ps(x)
#define VADD(a, b)     _mm_add_ps((a), (b))
#define VSUB(a, b)     _mm_sub_ps((a), (b))
#define VMUL(a, b)     _mm_mul_ps((a), (b))
#define VDIV(a, b)     _mm_div_ps((a), (b))
#define VSQRT(a)       _mm_sqrt_ps(a)     /* correctly rounded */
#define VFMA(a, b, c)  _mm_fmadd_ps((a), (b), (c))
/* comparisons (ordered: false when either is NaN), selects, sign flip and exponent bits */
typedef __m128 vmask_t;
#define VCMPLT(a, b)   _mm_cmplt_ps((a), (b))
#define VCMPGE(a, b)   _mm_cmpge_ps((a), (b))
#define VISNAN(a)      _mm_cmpunord_ps((a), (a))
#define VSELECT(m, t, f) _mm_blendv_ps((f), (t), (m))          /* m ? t : f, per lane */
#define VNEG(a)        _mm_xor_ps((a), _mm_set1_ps(-0.0f))      /* flips the sign bit only */
#define VPOW2I(k)      _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(_mm_cvtps_epi32(k), \
                           _mm_set1_epi32(127)), 23))            /* 2^k, integral k in [-126, 127] */
/* ---- int32 lanes (src/isa/conv_pool_impl.h: the pool's winners) ---- */
typedef __m128i vint_t;
#define VISET1(x)        _mm_set1_epi32(x)
#define VIADD(a, b)      _mm_add_epi32((a), (b))
#define VILANES()        _mm_setr_epi32(0, 1, 2, 3)
#define VISELECT(m, t, f) _mm_castps_si128(_mm_blendv_ps(_mm_castsi128_ps(f), _mm_castsi128_ps(t), (m)))
#define VISTOREU(p, v)   _mm_storeu_si128((__m128i *)(void *)(p), (v))
#define VILOADU(p)       _mm_loadu_si128((const __m128i *)(const void *)(p))
#define VICMPEQ(a, b)    _mm_castsi128_ps(_mm_cmpeq_epi32((a), (b)))         /* a vmask_t */
#define VMASK_ALL(m)     (_mm_movemask_ps(m) == 0xF)                         /* every lane set */
/* ---- gemm16 vocabulary (src/isa/gemm16_*.h) ---- */
/* nonzero when some lane of v is ±0 */
#define VANY_ZERO(v)     (_mm_movemask_ps(_mm_cmpeq_ps((v), _mm_setzero_ps())) != 0)
/* bit e set when lane e of v is not ±0 (a NaN is not ±0) */
#define VNONZERO_BITS(v) ((uint32_t)_mm_movemask_ps(_mm_cmpneq_ps((v), _mm_setzero_ps())))
/* acc | bit in the int32 lanes where v is not ±0 (the kn sparse kernel's lane masks) */
#define VIOR_NZ(acc, v, bit) _mm_or_si128((acc), _mm_and_si128(_mm_castps_si128( \
                             _mm_cmpneq_ps((v), _mm_setzero_ps())), _mm_set1_epi32((int)(bit))))
/* the same in two steps: the lanes not ±0 as a mask (OR-ed over rows), then the bit */
#define VNZ(v)               _mm_cmpneq_ps((v), _mm_setzero_ps())
#define VMASK_OR(a, b)       _mm_or_ps((a), (b))
#define VIOR_MASK(acc, m, bit) _mm_or_si128((acc), _mm_and_si128(_mm_castps_si128(m), \
                             _mm_set1_epi32((int)(bit))))
/* nonzero when some lane of v is -0 (the sign bit alone) */
#define VHAS_NEGZERO(v)  (_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32( \
                             _mm_castps_si128(v), _mm_set1_epi32(INT32_MIN)))) != 0)
static inline __m128 vlanes_lt(int n)    /* all-ones in lanes i < n */
{
    return _mm_castsi128_ps(_mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3)));
}
static inline __m128 sse_loadn(const float *p, int n)
{
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; i++) b[i] = p[i];
    return _mm_loadu_ps(b);
}
static inline void sse_storen(float *p, __m128 v, int n)
{
    float b[4];
    _mm_storeu_ps(b, v);
    for (int i = 0; i < n; i++) p[i] = b[i];
}
#define VLOADN(p, n)     sse_loadn((p), (n))
#define VSTOREN(p, v, n) sse_storen((p), (v), (n))
#define VFMA_N(a, b, c, n) _mm_blendv_ps((c), _mm_fmadd_ps((a), (b), (c)), vlanes_lt(n))
/* x[r] holds lanes (p[i] + p[i+8]) + (p[i+4] + p[i+12]) (i < 4) of output r, levels s >= 4
 * done. Returns lane r = the tree of output r; each level adds lane i and lane i + s of the
 * same output, lane i first. */
static inline __m128 vtree_tile(const __m128 *x)
{
    __m128 y[2];
    for (int n = 0; n < 2; n++) {            /* s = 2 */
        __m128d e = _mm_castps_pd(x[2 * n]), f = _mm_castps_pd(x[2 * n + 1]);
        y[n] = _mm_add_ps(_mm_castpd_ps(_mm_unpacklo_pd(e, f)), _mm_castpd_ps(_mm_unpackhi_pd(e, f)));
    }
    return _mm_add_ps(_mm_shuffle_ps(y[0], y[1], 0x88), _mm_shuffle_ps(y[0], y[1], 0xDD));
}
