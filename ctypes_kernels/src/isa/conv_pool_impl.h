/* conv_pool_impl.h — the conv block's bias, fused ReLU/max pool and the pool's backward
 * scatter (conv_pool.c) with the vector macros of one ISA, included by each thin
 * src/isa/conv_pool_<isa>.c after its vec_*.h. The pool: VW channels in registers through
 * each window, the running maximum from +0 replaced only where strictly greater (an ordered
 * compare: false for NaN and for -0 after +0), the winner p*Out + o or -1 beside it. The
 * same compares and selects as the scalar path's, a lane per channel; when Out is not a
 * multiple of VW the scalar path runs instead. */
#include "../conv.h"

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* conv[p][o] = conv[p][o] + b[o] for positions p0..p1, VW channels an add */
void CAT(crnn_conv_bias_rows, ISA_SUFFIX)(void *ctx, int64_t p0, int64_t p1)
{
    const fwd_job *j = ctx;
    const int64_t Out = j->g->Out;
    if (Out % VW) {
        crnn_conv_bias_rows_scalar(ctx, p0, p1);
        return;
    }
    for (int64_t p = p0; p < p1; p++) {
        float *c = j->conv + (p - j->p0) * Out;
        for (int64_t o = 0; o < Out; o += VW) VSTOREU(c + o, VADD(VLOADU(c + o), VLOADU(j->b + o)));
    }
}

/* One window's VW channels from o: rows then columns of ph x pw cells from p0 */
static inline __attribute__((always_inline)) void
pool_window(const fwd_job *j, int64_t Out, int64_t Wc, int64_t ph, int64_t pw, int64_t p0,
            int64_t o, int64_t at)
{
    vec_t mo = VZERO();
    vint_t wo = VISET1(-1);
    for (int64_t dy = 0; dy < ph; dy++)
        for (int64_t dx = 0; dx < pw; dx++) {
            const int64_t p = p0 + dy * Wc + dx;
            const vec_t v = VLOADU(j->conv + (p - j->p0) * Out + o);
            const vmask_t better = VCMPLT(mo, v);   /* v > mo */
            mo = VSELECT(better, v, mo);
            wo = VISELECT(better, VIADD(VISET1((int32_t)(p * Out + o)), VILANES()), wo);
        }
    VSTOREU(j->pooled + at + o, mo);
    VISTOREU(j->winners + at + o, wo);
}

/* Rows of windows oy0..oy1 of ph x pw cells; crnn-v0's shapes (2 x 2, 2 x 1) are passed as
 * constants, so their loops are unrolled (conv0's forward 6 % faster on 256-bit) */
static inline __attribute__((always_inline)) void
pool_rows(const fwd_job *j, int64_t oy0, int64_t oy1, int64_t ph, int64_t pw)
{
    const geom_t *g = j->g;
    const int64_t Out = g->Out, Wc = g->Wc;
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++) {
            const int64_t at = (oy * g->Wp + ox) * Out;
            const int64_t p0 = oy * ph * Wc + ox * pw;
            for (int64_t o = 0; o < Out; o += VW) pool_window(j, Out, Wc, ph, pw, p0, o, at);
        }
}

void CAT(crnn_conv_pool_rows, ISA_SUFFIX)(void *ctx, int64_t oy0, int64_t oy1)
{
    const fwd_job *j = ctx;
    const geom_t *g = j->g;
    if (g->Out % VW) crnn_conv_pool_rows_scalar(ctx, oy0, oy1);
    else if (g->poolH == 2 && g->poolW == 2) pool_rows(j, oy0, oy1, 2, 2);
    else if (g->poolH == 2 && g->poolW == 1) pool_rows(j, oy0, oy1, 2, 1);
    else pool_rows(j, oy0, oy1, g->poolH, g->poolW);
}

/* The scatter for Out % VW == 0, in one pass and without branches: every cell of every
 * window gets dPooled where the winner names it and +0 elsewhere (VW channels at a time),
 * the dropped rows and columns +0; a winner that names no cell of its window and is not -1
 * makes the whole result invalid (dC is scratch; the caller stops). */
int CAT(crnn_conv_scatter_winners, ISA_SUFFIX)(const geom_t *g, const float *dPooled,
                                               const int32_t *winners, float *dC)
{
    const int64_t Out = g->Out, Wc = g->Wc;
    if (Out % VW) return crnn_conv_scatter_winners_scalar(g, dPooled, winners, dC);
    int bad = 0;
    for (int64_t oy = 0; oy < g->Hp; oy++)
        for (int64_t ox = 0; ox < g->Wp; ox++) {
            const int64_t at = (oy * g->Wp + ox) * Out;
            const int64_t p0 = oy * g->poolH * Wc + ox * g->poolW;
            for (int64_t o = 0; o < Out; o += VW) {
                const vint_t w = VILOADU(winners + at + o);
                const vec_t d = VLOADU(dPooled + at + o);
                vmask_t hit = VICMPEQ(w, VISET1(-1));
                for (int64_t dy = 0; dy < g->poolH; dy++)
                    for (int64_t dx = 0; dx < g->poolW; dx++) {
                        const int64_t p = p0 + dy * Wc + dx;
                        const vmask_t eq = VICMPEQ(w, VIADD(VISET1((int32_t)(p * Out + o)), VILANES()));
                        hit = VMASK_OR(hit, eq);
                        VSTOREU(dC + p * Out + o, VSELECT(eq, d, VZERO()));
                    }
                bad |= !VMASK_ALL(hit);
            }
        }
    crnn_conv_zero_dropped(g, dC);
    return !bad;
}
