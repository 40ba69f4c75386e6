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
