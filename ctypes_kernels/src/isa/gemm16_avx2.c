/* gemm16 on the avx2 path: the shared algorithm with this ISA's vectors. */
#include "vec_avx2.h"
#include "gemm16_impl.h"
