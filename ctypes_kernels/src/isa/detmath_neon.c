/* DetMath exp and log over arrays on the neon path: the shared algorithm, 2 doubles a lane group. */
#if defined(__aarch64__)   /* an aarch64 path: empty elsewhere (core.h) */
#define ISA_SUFFIX neon
#define DM_W 2
#include "detmath_impl.h"
#endif
