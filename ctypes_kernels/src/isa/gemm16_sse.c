/* gemm16 on the sse path: the shared algorithm with this ISA's vectors. */
#include "vec_sse.h"
#include "gemm16_impl.h"
