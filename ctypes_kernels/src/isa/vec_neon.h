/* vec_neon.h — the vector vocabulary for the 128-bit path on aarch64 (Advanced SIMD, whose
 * fmla is one rounding like FMA3): the same operations as vec_sse.h, lane for lane. */
#include <arm_neon.h>
#include <stdint.h>
#define ISA_SUFFIX neon
#define VW 4
#define VREG_CONSTRAINT "+w"     /* a SIMD register (gemm16_kn.h keeps B in one) */
typedef float32x4_t vec_t;
#define VLOADU(p)      vld1q_f32(p)
#define VSTOREU(p, v)  vst1q_f32((p), (v))
#define VZERO()        vdupq_n_f32(0.0f)
#define VSET1(x)       vdupq_n_f32(x)
#define VADD(a, b)     vaddq_f32((a), (b))
#define VSUB(a, b)     vsubq_f32((a), (b))
#define VMUL(a, b)     vmulq_f32((a), (b))
#define VDIV(a, b)     vdivq_f32((a), (b))
#define VSQRT(a)       vsqrtq_f32(a)     /* correctly rounded */
#define VFMA(a, b, c)  vfmaq_f32((c), (a), (b))                  /* a*b + c, one rounding */
/* comparisons (ordered: false when either is NaN), selects, sign flip and exponent bits */
typedef uint32x4_t vmask_t;
#define VCMPLT(a, b)   vcltq_f32((a), (b))
#define VCMPGE(a, b)   vcgeq_f32((a), (b))
#define VISNAN(a)      vmvnq_u32(vceqq_f32((a), (a)))
#define VSELECT(m, t, f) vbslq_f32((m), (t), (f))                /* m ? t : f, per lane */
#define VNEG(a)        vnegq_f32(a)                              /* flips the sign bit only */
#define VPOW2I(k)      vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(k), \
                           vdupq_n_s32(127)), 23))               /* 2^k, integral k in [-126, 127] */
/* ---- int32 lanes (src/isa/conv_pool_impl.h: the pool's winners) ---- */
typedef int32x4_t vint_t;
#define VISET1(x)        vdupq_n_s32(x)
#define VIADD(a, b)      vaddq_s32((a), (b))
static inline int32x4_t neon_lanes(void)
{
    static const int32_t l[4] = {0, 1, 2, 3};
    return vld1q_s32(l);
}
#define VILANES()        neon_lanes()
#define VISELECT(m, t, f) vbslq_s32((m), (t), (f))
#define VISTOREU(p, v)   vst1q_s32((int32_t *)(void *)(p), (v))
#define VILOADU(p)       vld1q_s32((const int32_t *)(const void *)(p))
#define VICMPEQ(a, b)    vceqq_s32((a), (b))                                 /* a vmask_t */
#define VMASK_ALL(m)     (vminvq_u32(m) == 0xFFFFFFFFu)                      /* every lane set */
/* ---- gemm16 vocabulary (src/isa/gemm16_*.h) ---- */
/* nonzero when some lane of v is ±0 */
#define VANY_ZERO(v)     (vmaxvq_u32(vceqq_f32((v), vdupq_n_f32(0.0f))) != 0)
/* nonzero when some lane of v is -0 (the sign bit alone) */
#define VHAS_NEGZERO(v)  (vmaxvq_u32(vceqq_u32(vreinterpretq_u32_f32(v), \
                                                vdupq_n_u32(0x80000000u))) != 0)
/* bit e set when lane e of v is not ±0 (a NaN is not ±0) */
static inline uint32_t neon_nonzero_bits(float32x4_t v)
{
    static const uint32_t bit[4] = {1, 2, 4, 8};
    return vaddvq_u32(vandq_u32(vmvnq_u32(vceqq_f32(v, vdupq_n_f32(0.0f))), vld1q_u32(bit)));
}
#define VNONZERO_BITS(v) neon_nonzero_bits(v)
/* acc | bit in the int32 lanes where v is not ±0 (the kn sparse kernel's lane masks) */
#define VIOR_NZ(acc, v, bit) vorrq_s32((acc), vandq_s32(vreinterpretq_s32_u32(vmvnq_u32( \
                             vceqq_f32((v), vdupq_n_f32(0.0f)))), vdupq_n_s32((int32_t)(bit))))
/* the same in two steps: the lanes not ±0 as a mask (OR-ed over rows), then the bit */
#define VNZ(v)               vmvnq_u32(vceqq_f32((v), vdupq_n_f32(0.0f)))
#define VMASK_OR(a, b)       vorrq_u32((a), (b))
#define VIOR_MASK(acc, m, bit) vorrq_s32((acc), vandq_s32(vreinterpretq_s32_u32(m), \
                             vdupq_n_s32((int32_t)(bit))))
static inline uint32x4_t vlanes_lt(int n)    /* all-ones in lanes i < n */
{
    static const int32_t lane[4] = {0, 1, 2, 3};
    return vcltq_s32(vld1q_s32(lane), vdupq_n_s32(n));
}
static inline float32x4_t neon_loadn(const float *p, int n)
{
    float b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; i++) b[i] = p[i];
    return vld1q_f32(b);
}
static inline void neon_storen(float *p, float32x4_t v, int n)
{
    float b[4];
    vst1q_f32(b, v);
    for (int i = 0; i < n; i++) p[i] = b[i];
}
#define VLOADN(p, n)     neon_loadn((p), (n))
#define VSTOREN(p, v, n) neon_storen((p), (v), (n))
#define VFMA_N(a, b, c, n) vbslq_f32(vlanes_lt(n), vfmaq_f32((c), (a), (b)), (c))
/* x[r] holds lanes (p[i] + p[i+8]) + (p[i+4] + p[i+12]) (i < 4) of output r, levels s >= 4
 * done. Returns lane r = the tree of output r; each level adds lane i and lane i + s of the
 * same output, lane i first (vec_sse.h's unpack/shuffle as zip/uzp). */
static inline float32x4_t vtree_tile(const float32x4_t *x)
{
    float32x4_t y[2];
    for (int n = 0; n < 2; n++) {            /* s = 2 */
        float64x2_t e = vreinterpretq_f64_f32(x[2 * n]), f = vreinterpretq_f64_f32(x[2 * n + 1]);
        y[n] = vaddq_f32(vreinterpretq_f32_f64(vzip1q_f64(e, f)),
                         vreinterpretq_f32_f64(vzip2q_f64(e, f)));
    }
    return vaddq_f32(vuzp1q_f32(y[0], y[1]), vuzp2q_f32(y[0], y[1]));
}
