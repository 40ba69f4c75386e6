/* The conv block's pool on the neon path (aarch64): the shared loop with this ISA's vectors. */
#if defined(__aarch64__)   /* an aarch64 path: empty elsewhere (core.h) */
#include "vec_neon.h"
#include "conv_pool_impl.h"
#endif
