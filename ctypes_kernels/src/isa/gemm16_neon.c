/* gemm16 on the neon path (aarch64): the shared algorithm with this ISA's vectors. */
#if defined(__aarch64__)   /* an aarch64 path: empty elsewhere (core.h) */
#include "vec_neon.h"
#include "gemm16_impl.h"
#endif
