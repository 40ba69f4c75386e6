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
