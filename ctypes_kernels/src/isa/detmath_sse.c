/* DetMath exp and log over arrays on the sse path: the shared algorithm, 2 doubles a lane group. */
#if defined(__x86_64__) || defined(__i386__)   /* an x86 path: empty elsewhere (core.h) */
#define ISA_SUFFIX sse
#define DM_W 2
#include "detmath_impl.h"
#endif
