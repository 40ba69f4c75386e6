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
