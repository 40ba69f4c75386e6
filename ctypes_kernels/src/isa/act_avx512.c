/* sigmoid and tanh on the avx512 path: the shared algorithm with this ISA's vectors. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#include "vec_avx512.h"
#include "act_impl.h"
#endif
