/* gemm16 on the avx512 path: the shared algorithms with this ISA's vectors. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#include "vec_avx512.h"
#include "gemm16_nt.h"
#include "gemm16_kn.h"
#include "gemm16_kn_packed.h"
#include "gemm16_kn_sparse.h"
#include "gemm16_listed.h"
#include "gemm16_sparse_rows.h"
#endif
