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
