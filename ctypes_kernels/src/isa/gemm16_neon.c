/* gemm16 on the neon path (aarch64): the shared algorithms with this ISA's vectors. */
#if defined(__aarch64__)   /* an aarch64 path: empty elsewhere (core.h) */
#include "vec_neon.h"
#include "gemm16_nt.h"
#include "gemm16_kn.h"
#include "gemm16_kn_packed.h"
#include "gemm16_kn_sparse.h"
#include "gemm16_listed.h"
#include "gemm16_sparse_rows.h"
#endif
