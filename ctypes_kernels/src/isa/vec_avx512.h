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
