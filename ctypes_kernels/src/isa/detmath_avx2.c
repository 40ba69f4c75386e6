/* DetMath exp and log over arrays on the avx2 path: the shared algorithm, 4 doubles a lane group. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#define ISA_SUFFIX avx2
#define DM_W 4
#include "detmath_impl.h"
#endif
