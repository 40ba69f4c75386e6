/* sigmoid and tanh on the sse path: the shared algorithm with this ISA's vectors. */
#include "vec_sse.h"
#include "act_impl.h"
