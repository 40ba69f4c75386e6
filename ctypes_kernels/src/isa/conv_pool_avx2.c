/* The conv block's pool on the avx2 path: the shared loop with this ISA's vectors. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#include "vec_avx2.h"
#include "conv_pool_impl.h"
#endif
