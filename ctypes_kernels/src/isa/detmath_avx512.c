/* DetMath exp and log over arrays on the avx512 path: the shared algorithm, 8 doubles a lane group. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#define ISA_SUFFIX avx512
#define DM_W 8
#include "detmath_impl.h"
#endif
