/* sigmoid and tanh on the avx2 path: the shared algorithm with this ISA's vectors. */
#include "vec_avx2.h"
#include "act_impl.h"
