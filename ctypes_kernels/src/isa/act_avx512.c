/* sigmoid and tanh on the avx512 path: the shared algorithm with this ISA's vectors. */
#include "vec_avx512.h"
#include "act_impl.h"
