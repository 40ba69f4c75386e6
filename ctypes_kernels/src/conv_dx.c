/* conv_dx.c — the conv block's dx from dcol (docs/backward.md, "Convolution block"): each
 * input cell gathers the dcol taps that read it, split across threads by input rows. */
#include "conv.h"

/* dx[iy][ix][c] = +0 + dcol[p][(ky*kw+kx)*C + c] + ... over ky, then kx, ascending, for the
 * taps whose p = (iy+padH-ky, ix+padW-kx) lies inside the conv output. */
void crnn_conv_gather_rows(void *ctx, int64_t iy0, int64_t iy1)
{
    const gather_job *j = ctx;
    const geom_t *g = j->g;
    int64_t C = g->C;
    for (int64_t iy = iy0; iy < iy1; iy++)
        for (int64_t ix = 0; ix < g->W; ix++) {
            float *d = j->dx + (iy * g->W + ix) * C;
            for (int64_t c = 0; c < C; c++) d[c] = 0.0f;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t py = iy + g->padH - ky;
                if (py < 0 || py >= g->Hc) continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t px = ix + g->padW - kx;
                    if (px < 0 || px >= g->Wc) continue;
                    const float *s = j->dcol + (py * g->Wc + px) * g->KP + (ky * g->kw + kx) * C;
                    crnn_conv_add_floats(d, s, C);
                }
            }
        }
}
