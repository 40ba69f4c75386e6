/* step.c: the whole model's batch gradient (spec/step.py, docs/backward.md "Batch
 * gradient, clipping"): per line the conv blocks, the sequence map, the BiLSTM layers, the
 * classifier and CTC with scale 1/B, then the backward pass through the same layer entry
 * points; the batch sum g = g_0, g = g + g_b in line order. Also the cfg vector's model. */
#include <math.h>
#include <stdlib.h>

#include "spec.h"

/* ---- the model of a cfg vector ------------------------------------------------------- */

static int bad_block(const SpecBlock *b)
{
    return b->Out < 1 || b->kh < 1 || b->kw < 1 || b->padH < 0 || b->padW < 0 ||
           b->poolH < 1 || b->poolW < 1;
}

/* the blocks' H, C (which do not depend on the width); 0 when a block has no pooled row */
static int heights(SpecModel *m)
{
    int64_t H = m->Hin, C = m->Cin;
    for (int32_t n = 0; n < m->nb; n++) {
        SpecBlock *b = &m->blk[n];
        int64_t Hc = H + 2 * (int64_t)b->padH - b->kh + 1;
        if (Hc < 1 || Hc / b->poolH < 1)
            return 0;
        b->H = (int32_t)H;
        b->C = (int32_t)C;
        b->Hc = (int32_t)Hc;
        b->Hp = (int32_t)(Hc / b->poolH);
        b->KP = (int32_t)((b->kh * (int64_t)b->kw * C + 15) / 16 * 16);
        H = b->Hp;
        C = b->Out;
    }
    return 1;
}

int32_t spec_model(const int32_t *cfg, SpecModel *m)
{
    if (!cfg || cfg[0] < 1 || cfg[1] < 1 || cfg[2] < 1 || cfg[2] > SPEC_MAX_BLOCKS)
        return CRNN_E_ARG;
    m->Hin = cfg[0];
    m->Cin = cfg[1];
    m->nb = cfg[2];
    for (int32_t n = 0; n < m->nb; n++) {
        const int32_t *v = cfg + 3 + 7 * n;
        m->blk[n] = (SpecBlock){.Out = v[0], .kh = v[1], .kw = v[2], .padH = v[3], .padW = v[4],
                                .poolH = v[5], .poolW = v[6]};
        if (bad_block(&m->blk[n]))
            return CRNN_E_ARG;
    }
    const int32_t *tail = cfg + 3 + 7 * m->nb;
    m->nl = tail[0];
    m->hidden = tail[1];
    m->classes = tail[2];
    if (m->nl < 1 || m->nl > SPEC_MAX_LSTM || m->hidden < 1 || m->classes < 2 || !heights(m))
        return CRNN_E_ARG;
    m->nTensors = 2 * m->nb + 6 * m->nl + 2;
    m->nParams = 0;
    for (int32_t i = 0; i < m->nTensors; i++)
        m->nParams += spec_tensor_size(m, i);
    return CRNN_OK;
}

int32_t spec_lstm_input(const SpecModel *m, int32_t layer)
{
    const SpecBlock *last = &m->blk[m->nb - 1];
    return layer == 0 ? last->Hp * last->Out : 2 * m->hidden;
}

/* parameter order: per block Wt[Out][KPadded], b[Out]; per LSTM layer and direction
 * W_ih[4H][I], W_hh[4H][H], b[4H]; the classifier W[classes][2H], b[classes] */
int64_t spec_tensor_size(const SpecModel *m, int32_t i)
{
    int64_t H = m->hidden;
    if (i < 2 * m->nb) {
        const SpecBlock *b = &m->blk[i / 2];
        return i % 2 ? b->Out : (int64_t)b->Out * b->KP;
    }
    i -= 2 * m->nb;
    if (i < 6 * m->nl) {
        int64_t in = spec_lstm_input(m, i / 6), q = i % 3;
        return q == 0 ? 4 * H * in : q == 1 ? 4 * H * H : 4 * H;
    }
    return i == 6 * m->nl ? m->classes * 2 * H : m->classes;
}

/* the blocks' W, Wc, Wp for a line of `width`; CRNN_E_ARG when a block has no pooled column */
int32_t spec_geometry(SpecModel *m, int32_t width)
{
    int64_t W = width;
    for (int32_t n = 0; n < m->nb; n++) {
        SpecBlock *b = &m->blk[n];
        int64_t Wc = W + 2 * (int64_t)b->padW - b->kw + 1;
        if (W < 1 || Wc < 1 || Wc / b->poolW < 1)
            return CRNN_E_ARG;
        b->W = (int32_t)W;
        b->Wc = (int32_t)Wc;
        b->Wp = (int32_t)(Wc / b->poolW);
        W = b->Wp;
    }
    return CRNN_OK;
}

/* ---- scratch: one allocation per call, laid out for the widest line ------------------ */

typedef struct {
    char *base;
    size_t used;
} Arena;

static void *take(Arena *a, int64_t n, size_t size)
{
    size_t at = (a->used + 63) & ~(size_t)63;
    a->used = at + (size_t)n * size;
    return a->base ? a->base + at : NULL;
}

typedef struct {
    const float *param[2 * SPEC_MAX_BLOCKS + 6 * SPEC_MAX_LSTM + 2];
    float *Wih[SPEC_MAX_LSTM], *Whh[SPEC_MAX_LSTM], *b[SPEC_MAX_LSTM];   /* [2][4H][.] */
    float *pooled[SPEC_MAX_BLOCKS], *conv, *seq;
    int32_t *winners[SPEC_MAX_BLOCKS];
    float *out[SPEC_MAX_LSTM], *gates[SPEC_MAX_LSTM], *c[SPEC_MAX_LSTM], *tc[SPEC_MAX_LSTM];
    float *hPrev[SPEC_MAX_LSTM];
    float *logits, *dlogits, *d[2], *dWih, *dWhh, *db, *gl;
} Bufs;

static void plan(Arena *a, const SpecModel *m, Bufs *s)
{
    int64_t H = m->hidden, T = m->blk[m->nb - 1].Wp, conv = 0, dmax = T * 2 * H, in = 0;
    for (int32_t n = 0; n < m->nb; n++) {
        const SpecBlock *b = &m->blk[n];
        int64_t pooled = (int64_t)b->Hp * b->Wp * b->Out;
        s->pooled[n] = take(a, pooled, sizeof(float));
        s->winners[n] = take(a, pooled, sizeof(int32_t));
        conv = conv > (int64_t)b->Hc * b->Wc * b->Out ? conv : (int64_t)b->Hc * b->Wc * b->Out;
        dmax = dmax > pooled ? dmax : pooled;
    }
    s->conv = take(a, conv, sizeof(float));
    s->seq = take(a, T * spec_lstm_input(m, 0), sizeof(float));
    for (int32_t l = 0; l < m->nl; l++) {
        int64_t I = spec_lstm_input(m, l);
        in = in > I ? in : I;
        s->Wih[l] = take(a, 8 * H * I, sizeof(float));
        s->Whh[l] = take(a, 8 * H * H, sizeof(float));
        s->b[l] = take(a, 8 * H, sizeof(float));
        s->out[l] = take(a, T * 2 * H, sizeof(float));
        s->gates[l] = take(a, 8 * T * H, sizeof(float));
        s->c[l] = take(a, 2 * T * H, sizeof(float));
        s->tc[l] = take(a, 2 * T * H, sizeof(float));
        s->hPrev[l] = take(a, 2 * T * H, sizeof(float));
    }
    s->logits = take(a, T * m->classes, sizeof(float));
    s->dlogits = take(a, T * m->classes, sizeof(float));
    s->d[0] = take(a, dmax, sizeof(float));
    s->d[1] = take(a, dmax, sizeof(float));
    s->dWih = take(a, 8 * H * in, sizeof(float));
    s->dWhh = take(a, 8 * H * H, sizeof(float));
    s->db = take(a, 8 * H, sizeof(float));
    s->gl = take(a, m->nParams, sizeof(float));
}

static int32_t lstm_index(const SpecModel *m, int32_t l, int d, int q)
{
    return 2 * m->nb + 6 * l + 3 * d + q;
}

/* the LSTM weights as crnn_lstm_forward takes them: both directions stacked (copies) */
static void pack_lstm(const SpecModel *m, Bufs *s)
{
    int64_t H = m->hidden;
    for (int32_t l = 0; l < m->nl; l++) {
        int64_t n[3] = {4 * H * spec_lstm_input(m, l), 4 * H * H, 4 * H};
        float *dst[3] = {s->Wih[l], s->Whh[l], s->b[l]};
        for (int d = 0; d < 2; d++)
            for (int q = 0; q < 3; q++)
                memcpy(dst[q] + d * n[q], s->param[lstm_index(m, l, d, q)],
                       sizeof(float) * (size_t)n[q]);
    }
}

/* ---- one line ------------------------------------------------------------------------ */

#define TRY(call) do { int32_t rc_ = (call); if (rc_ != CRNN_OK) return rc_; } while (0)

static float *grad(const Bufs *s, int32_t i)
{
    return s->gl + (s->param[i] - s->param[0]);
}

static int32_t line_forward(const SpecModel *m, Bufs *s, const float *image, int64_t T)
{
    const float *x = image;
    for (int32_t n = 0; n < m->nb; n++) {
        const SpecBlock *b = &m->blk[n];
        TRY(crnn_conv_forward(x, b->H, b->W, b->C, s->param[2 * n], s->param[2 * n + 1], b->Out,
                              b->kh, b->kw, b->padH, b->padW, b->poolH, b->poolW, s->conv,
                              s->pooled[n], s->winners[n]));
        x = s->pooled[n];
    }
    const SpecBlock *last = &m->blk[m->nb - 1];
    for (int64_t h = 0; h < last->Hp; h++)          /* map[h][w][c] -> x[t = w][h*C + c] */
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < last->Out; c++)
                s->seq[(t * last->Hp + h) * last->Out + c] = x[(h * T + t) * last->Out + c];
    const float *in = s->seq;
    for (int32_t l = 0; l < m->nl; l++) {
        TRY(crnn_lstm_forward(in, (int32_t)T, spec_lstm_input(m, l), m->hidden, s->Wih[l],
                              s->Whh[l], s->b[l], s->out[l], s->gates[l], s->c[l], s->tc[l],
                              s->hPrev[l]));
        in = s->out[l];
    }
    int32_t fc = 2 * m->nb + 6 * m->nl;
    return crnn_linear_forward(in, s->param[fc], s->param[fc + 1], (int32_t)T, 2 * m->hidden,
                               m->classes, s->logits);
}

static void scatter_lstm(const SpecModel *m, const Bufs *s, int32_t l)
{
    int64_t H = m->hidden;
    int64_t n[3] = {4 * H * spec_lstm_input(m, l), 4 * H * H, 4 * H};
    const float *src[3] = {s->dWih, s->dWhh, s->db};
    for (int d = 0; d < 2; d++)
        for (int q = 0; q < 3; q++)
            memcpy(grad(s, lstm_index(m, l, d, q)), src[q] + d * n[q],
                   sizeof(float) * (size_t)n[q]);
}

static int32_t line_backward(const SpecModel *m, Bufs *s, const float *image, int64_t T)
{
    int32_t fc = 2 * m->nb + 6 * m->nl, H = m->hidden;
    int cur = 0;
    const float *top = s->out[m->nl - 1];
    TRY(crnn_linear_backward(top, s->param[fc], s->dlogits, (int32_t)T, 2 * H, m->classes,
                             s->d[cur], grad(s, fc), grad(s, fc + 1)));
    for (int32_t l = m->nl - 1; l >= 0; l--) {
        const float *in = l ? s->out[l - 1] : s->seq;
        TRY(crnn_lstm_backward(in, (int32_t)T, spec_lstm_input(m, l), H, s->Wih[l], s->Whh[l],
                               s->gates[l], s->c[l], s->tc[l], s->hPrev[l], s->d[cur], s->dWih,
                               s->dWhh, s->db, s->d[!cur]));
        scatter_lstm(m, s, l);
        cur = !cur;
    }
    const SpecBlock *last = &m->blk[m->nb - 1];
    const float *dseq = s->d[cur];
    float *dmap = s->d[!cur];
    for (int64_t h = 0; h < last->Hp; h++)          /* dx[t][h*C + c] -> dmap[h][w = t][c] */
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < last->Out; c++)
                dmap[(h * T + t) * last->Out + c] = dseq[(t * last->Hp + h) * last->Out + c];
    cur = !cur;
    for (int32_t n = m->nb - 1; n >= 0; n--) {
        const SpecBlock *b = &m->blk[n];
        TRY(crnn_conv_backward(n ? s->pooled[n - 1] : image, b->H, b->W, b->C, s->param[2 * n],
                               b->Out, b->kh, b->kw, b->padH, b->padW, b->poolH, b->poolW,
                               s->d[cur], s->winners[n], grad(s, 2 * n),
                               grad(s, 2 * n + 1), n ? s->d[!cur] : NULL));
        cur = !cur;
    }
    return CRNN_OK;
}

/* one line's loss and gradient (all +0 when the loss is +inf: no backward pass) */
static int32_t line(SpecModel *m, Bufs *s, const float *image, int32_t width,
                    const int32_t *target, int32_t L, double scale, double *loss)
{
    TRY(spec_geometry(m, width));
    int64_t T = m->blk[m->nb - 1].Wp;
    TRY(line_forward(m, s, image, T));
    TRY(crnn_ctc(s->logits, (int32_t)T, m->classes, target, L, scale, loss, s->dlogits));
    if (isfinite(*loss))
        return line_backward(m, s, image, T);
    for (int64_t i = 0; i < m->nParams; i++)
        s->gl[i] = 0.0f;
    return CRNN_OK;
}

/* ---- the batch ------------------------------------------------------------------------ */

/* every line's width fits the model and its labels lie in 1..classes-1; the widest width */
static int32_t check_batch(SpecModel *m, int32_t B, const int32_t *widths,
                           const int32_t *targetLens, const int32_t *targets, int32_t *widest)
{
    int64_t at = 0;
    *widest = 0;
    for (int32_t b = 0; b < B; b++) {
        if (targetLens[b] < 0 || spec_geometry(m, widths[b]) != CRNN_OK)
            return CRNN_E_ARG;
        if (targetLens[b] > 0 && !targets)
            return CRNN_E_ARG;
        for (int32_t i = 0; i < targetLens[b]; i++, at++)
            if (targets[at] < 1 || targets[at] >= m->classes)
                return CRNN_E_ARG;
        *widest = widths[b] > *widest ? widths[b] : *widest;
    }
    return spec_geometry(m, *widest);
}

static int32_t batch(SpecModel *m, Bufs *s, int32_t B, const int32_t *widths,
                     const float *images, const int32_t *targetLens, const int32_t *targets,
                     float *grads, double *losses)
{
    const float *image = images;
    const int32_t *target = targets;
    for (int32_t b = 0; b < B; b++) {
        TRY(line(m, s, image, widths[b], target, targetLens[b], 1.0 / B, &losses[b]));
        for (int64_t i = 0; i < m->nParams; i++)       /* g = g_0; g = g + g_b: no +0 start */
            grads[i] = b == 0 ? s->gl[i] : grads[i] + s->gl[i];
        image += (int64_t)m->Hin * widths[b] * m->Cin;
        target += targetLens[b];
    }
    return CRNN_OK;
}

int32_t crnn_step_gradients(const int32_t *cfg, const float *params, int32_t B,
                            const int32_t *widths, const float *images,
                            const int32_t *targetLens, const int32_t *targets,
                            float *grads, double *losses, double *batchLoss)
{
    SpecModel m;
    Bufs s;
    int32_t widest, rc;
    if (!params || B < 1 || !widths || !images || !targetLens || !grads || !losses || !batchLoss)
        return CRNN_E_ARG;
    TRY(spec_model(cfg, &m));
    TRY(check_batch(&m, B, widths, targetLens, targets, &widest));
    Arena a = {NULL, 0};
    plan(&a, &m, &s);
    a.base = malloc(a.used);
    if (!a.base)
        return CRNN_E_NOMEM;
    a.used = 0;
    plan(&a, &m, &s);
    int64_t at = 0;
    for (int32_t i = 0; i < m.nTensors; i++) {
        s.param[i] = params + at;
        at += spec_tensor_size(&m, i);
    }
    pack_lstm(&m, &s);
    rc = batch(&m, &s, B, widths, images, targetLens, targets, grads, losses);
    free(a.base);
    if (rc != CRNN_OK)
        return rc;
    double total = 0.0;                      /* the finite losses in line order, then / B */
    for (int32_t b = 0; b < B; b++)
        if (isfinite(losses[b]))
            total = total + losses[b];
    *batchLoss = total / B;
    return CRNN_OK;
}
