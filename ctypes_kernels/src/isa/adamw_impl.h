/* adamw_impl.h — the AdamW element step (adamw.h) with the vector macros of one ISA, included
 * by each thin src/isa/adamw_<isa>.c after its vec_*.h: VW elements at a time, the scalar
 * loop's operations in its order, the tail by that loop. */
#include "../adamw.h"

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

void CAT(crnn_adamw_range, ISA_SUFFIX)(const adamw_job *j, int64_t i0, int64_t i1)
{
    float *p = j->p, *m = j->m, *v = j->v;
    const float *g = j->g;
    const vec_t omb1 = VSET1(j->omb1), b2 = VSET1(j->b2), omb2 = VSET1(j->omb2);
    const vec_t eps = VSET1(j->epsf), dec = VSET1(j->dec), step = VSET1(j->stepSize);
    const vec_t sqrtC2 = VSET1(j->sqrtC2);
    int64_t i = i0;
    for (; i + VW <= i1; i += VW) {
        vec_t pi = VLOADU(p + i), mi = VLOADU(m + i), vi = VLOADU(v + i), gi = VLOADU(g + i);
        if (j->decay) pi = VMUL(pi, dec);
        mi = VADD(mi, VMUL(omb1, VSUB(gi, mi)));
        vi = VADD(VMUL(vi, b2), VMUL(omb2, VMUL(gi, gi)));
        pi = VSUB(pi, VMUL(step, VDIV(mi, VADD(VDIV(VSQRT(vi), sqrtC2), eps))));
        VSTOREU(p + i, pi);
        VSTOREU(m + i, mi);
        VSTOREU(v + i, vi);
    }
    if (i < i1) crnn_adamw_range_scalar(j, i, i1);
}
