/* gemm16_common.h — what every vector gemm16 family shares: included by each family header
 * (gemm16_nt.h, gemm16_kn.h, gemm16_kn_packed.h, gemm16_listed.h, gemm16_sparse_rows.h),
 * which a thin per-ISA file includes after its vec_*.h.
 *
 * Every family computes each output as dot16 (docs/numerics.md): 16 partials from +0, term k
 * into lane k mod 16 in ascending k, then the tree p[i] + p[i+s] for s = 8, 4, 2, 1. Only
 * where the partials live differs; no output ever shares a partial with another, and a lane
 * that receives no term keeps its +0 (no zero padding). */
#ifndef CRNN_GEMM16_COMMON_H
#define CRNN_GEMM16_COMMON_H
#include <string.h>
#include "../core.h"

#define NV (16 / VW)             /* registers of one output's 16 partials (nt) */
#ifndef VREG_CONSTRAINT
#define VREG_CONSTRAINT "+x"     /* an SSE/AVX register */
#endif
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#endif
