/* The conv block's pool on the sse path: the shared loop with this ISA's vectors. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#include "vec_sse.h"
#include "conv_pool_impl.h"
#endif
