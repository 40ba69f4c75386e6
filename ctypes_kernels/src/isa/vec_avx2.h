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
