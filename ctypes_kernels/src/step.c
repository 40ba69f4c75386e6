/* step.c — the whole model: parameter sizes and the batch gradient
 * (docs/backward.md, "Batch gradient, clipping").
 *
 * Per line, through the same entry points the per-layer fixtures gate: conv blocks
 * (crnn_conv_forward, winners kept; its conv values, which nothing reads back, only per band)
 * -> the sequence x[t = w][h*C + c] -> bidirectional LSTM layers (crnn_lstm_forward) ->
 * classifier (crnn_linear_forward) -> crnn_ctc with scale 1/B -> the backward pass
 * (linear, LSTM, conv; the first block's dx is not computed) into the line's own gradient
 * buffer. A line with no alignment (loss +inf) keeps an all-+0 gradient.
 * The batch runs stage by stage: the per-line stages across threads, and each LSTM layer
 * with the lines of one length together (crnn_lstm_forward_lines / _backward_lines, the
 * code of crnn_lstm_forward/backward for several lines: one read of the recurrent weights
 * per step for all of them). Afterwards g = g_0, g = g + g_b in line order, element-wise,
 * so no bit depends on the thread count, the grouping or the ISA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_BLOCKS 16
#define MAX_LSTM 16

typedef struct {
    int32_t H, C, nBlocks, nLstm, hidden, classes;
    int32_t out[MAX_BLOCKS], kh[MAX_BLOCKS], kw[MAX_BLOCKS], padH[MAX_BLOCKS], padW[MAX_BLOCKS],
        poolH[MAX_BLOCKS], poolW[MAX_BLOCKS];
    /* derived (width independent) */
    int32_t inC[MAX_BLOCKS], inH[MAX_BLOCKS], KP[MAX_BLOCKS];
    int32_t seqFeatures, lastHp, lastC;
    int32_t nTensors;
    int64_t sizes[4 * MAX_BLOCKS + 6 * MAX_LSTM + 2];
    int64_t offs[4 * MAX_BLOCKS + 6 * MAX_LSTM + 2];
    int64_t nParams;
} model_t;

/* Parses and checks the cfg vector (crnn_port.h); 0 on a config the ABI rejects. */
static int parse_cfg(const int32_t *cfg, model_t *m)
{
    if (!cfg) return 0;
    memset(m, 0, sizeof *m);
    m->H = cfg[0];
    m->C = cfg[1];
    m->nBlocks = cfg[2];
    if (m->H < 1 || m->C < 1 || m->nBlocks < 1 || m->nBlocks > MAX_BLOCKS) return 0;
    const int32_t *b = cfg + 3;
    int64_t H = m->H, C = m->C;
    for (int n = 0; n < m->nBlocks; n++, b += 7) {
        m->out[n] = b[0]; m->kh[n] = b[1]; m->kw[n] = b[2]; m->padH[n] = b[3];
        m->padW[n] = b[4]; m->poolH[n] = b[5]; m->poolW[n] = b[6];
        if (b[0] < 1 || b[1] < 1 || b[2] < 1 || b[3] < 0 || b[4] < 0 || b[5] < 1 || b[6] < 1)
            return 0;
        if (b[0] > 65536 || b[1] > 64 || b[2] > 64 || b[3] > 64 || b[4] > 64 || b[5] > 64 || b[6] > 64)
            return 0;
        m->inH[n] = (int32_t)H;
        m->inC[n] = (int32_t)C;
        int64_t K = (int64_t)b[1] * b[2] * C;
        if (K > (1 << 24)) return 0;
        m->KP[n] = (int32_t)((K + 15) / 16 * 16);
        int64_t Hc = H + 2 * (int64_t)b[3] - b[1] + 1;
        if (Hc < 1) return 0;
        H = Hc / b[5];
        if (H < 1) return 0;
        C = b[0];
    }
    m->nLstm = b[0];
    m->hidden = b[1];
    m->classes = b[2];
    if (m->nLstm < 1 || m->nLstm > MAX_LSTM || m->hidden < 1 || m->hidden > 65536 ||
        m->classes < 2 || m->classes > 65536)
        return 0;
    if (H * C > (1 << 24)) return 0;
    m->lastHp = (int32_t)H;
    m->lastC = (int32_t)C;
    m->seqFeatures = (int32_t)(H * C);
    int t = 0;
    for (int n = 0; n < m->nBlocks; n++) {
        m->sizes[t++] = (int64_t)m->out[n] * m->KP[n];
        m->sizes[t++] = m->out[n];
    }
    int64_t G = 4 * (int64_t)m->hidden, I = m->seqFeatures;
    for (int l = 0; l < m->nLstm; l++) {
        for (int d = 0; d < 2; d++) {
            m->sizes[t++] = G * I;
            m->sizes[t++] = G * m->hidden;
            m->sizes[t++] = G;
        }
        I = 2 * (int64_t)m->hidden;
    }
    m->sizes[t++] = (int64_t)m->classes * 2 * m->hidden;
    m->sizes[t++] = m->classes;
    m->nTensors = t;
    int64_t at = 0;
    for (int i = 0; i < t; i++) {
        m->offs[i] = at;
        at += m->sizes[i];
    }
    m->nParams = at;
    return 1;
}

int32_t crnn_model_sizes(const int32_t *cfg, int32_t *nTensors, int64_t *sizes)
{
    model_t m;
    if (!nTensors || !parse_cfg(cfg, &m)) return CRNN_E_ARG;
    *nTensors = m.nTensors;
    if (sizes)
        for (int i = 0; i < m.nTensors; i++) sizes[i] = m.sizes[i];
    return CRNN_OK;
}

/* Tensor indices in parameter order. */
static int t_conv_W(int n) { return 2 * n; }
static int t_conv_b(int n) { return 2 * n + 1; }
static int t_lstm(const model_t *m, int l, int d, int which) /* which: 0 W_ih, 1 W_hh, 2 b */
{
    return 2 * m->nBlocks + 6 * l + 3 * d + which;
}
static int t_fc(const model_t *m, int which) { return 2 * m->nBlocks + 6 * m->nLstm + which; }

/* Per-width geometry of one line. */
typedef struct {
    int32_t W[MAX_BLOCKS];       /* input width of block n */
    int64_t P[MAX_BLOCKS], Hp[MAX_BLOCKS], Wp[MAX_BLOCKS];
    int32_t T;
} line_geom_t;

static int line_geom(const model_t *m, int32_t width, line_geom_t *g)
{
    int64_t W = width;
    for (int n = 0; n < m->nBlocks; n++) {
        if (W < 1 || W > (1 << 24)) return 0;
        g->W[n] = (int32_t)W;
        int64_t Hc = (int64_t)m->inH[n] + 2 * m->padH[n] - m->kh[n] + 1;
        int64_t Wc = W + 2 * (int64_t)m->padW[n] - m->kw[n] + 1;
        if (Wc < 1) return 0;
        g->P[n] = Hc * Wc;
        if (g->P[n] * m->out[n] > INT32_MAX) return 0;   /* winners are int32 p*Out + o */
        g->Hp[n] = Hc / m->poolH[n];
        g->Wp[n] = Wc / m->poolW[n];
        W = g->Wp[n];
    }
    if (W < 1) return 0;
    g->T = (int32_t)W;
    return 1;
}

/* Where one line keeps everything (floats; winners as int32 in float-sized slots). */
typedef struct {
    line_geom_t g;
    int64_t need;
    int64_t o_pool[MAX_BLOCKS], o_win[MAX_BLOCKS], o_dx[MAX_BLOCKS];
    int64_t o_seq, o_out[MAX_LSTM], o_gates[MAX_LSTM], o_c[MAX_LSTM], o_tc[MAX_LSTM],
        o_hp[MAX_LSTM];
    int64_t o_logits, o_dlogits, o_dA, o_dB;
} line_layout_t;

static int layout_line(const model_t *m, int32_t width, line_layout_t *L)
{
    if (!line_geom(m, width, &L->g)) return 0;
    const line_geom_t *g = &L->g;
    const int64_t T = g->T, H = m->hidden, K = m->classes, G4 = 4 * H;
    int64_t need = 0;
    for (int n = 0; n < m->nBlocks; n++) {
        int64_t np = g->Hp[n] * g->Wp[n] * m->out[n];
        L->o_pool[n] = need; need += np;
        L->o_win[n] = need; need += np;
        L->o_dx[n] = need; need += (int64_t)m->inH[n] * g->W[n] * m->inC[n];   /* dx of block n */
    }
    L->o_seq = need; need += T * m->seqFeatures;
    for (int l = 0; l < m->nLstm; l++) {
        L->o_out[l] = need; need += T * 2 * H;
        L->o_gates[l] = need; need += 2 * T * G4;
        L->o_c[l] = need; need += 2 * T * H;
        L->o_tc[l] = need; need += 2 * T * H;
        L->o_hp[l] = need; need += 2 * T * H;
    }
    L->o_logits = need; need += T * K;
    L->o_dlogits = need; need += T * K;
    int64_t maxI = m->seqFeatures > 2 * H ? m->seqFeatures : 2 * H;
    L->o_dA = need; need += T * maxI;                 /* dseq ping-pong */
    L->o_dB = need; need += T * maxI;
    L->need = (need + 15) / 16 * 16;                  /* each line's block 64-byte aligned */
    return 1;
}

/* The LSTM weights stacked as crnn_lstm_* take them ([2][...] per kind): segment i of the
 * stack (n[i] floats, in order from dst) is a copy of src[i]; segment i is layer i / 6's
 * W_ih, W_hh or b ((i % 6) / 2) of direction i % 2. The copy of a W_ih also finds whether
 * it is finite (the LSTM forward's sparse products need to know). */
typedef struct {
    float *dst;
    const float *src[6 * MAX_LSTM];
    int64_t n[6 * MAX_LSTM], total;
    int nseg;
    int32_t nonfinite[MAX_LSTM];   /* set by any block of the layer's W_ih with a NaN or inf */
} stack_job;

#define STACK_BLOCK 16384
static void stack_blocks(void *ctx, int64_t b0, int64_t b1)
{
    stack_job *j = ctx;
    const int64_t lo = b0 * STACK_BLOCK, hi = b1 * STACK_BLOCK < j->total ? b1 * STACK_BLOCK : j->total;
    for (int64_t i = 0, at = 0; i < j->nseg && at < hi; at += j->n[i], i++) {
        const int64_t a = lo > at ? lo : at, e = hi < at + j->n[i] ? hi : at + j->n[i];
        if (a >= e) continue;
        const int64_t kind = (i % 6) / 2;                 /* 0 W_ih, 1 W_hh, 2 b */
        if (kind != 0) memcpy(j->dst + a, j->src[i] + (a - at), sizeof(float) * (size_t)(e - a));
        else if (!crnn_copy_finite(j->dst + a, j->src[i] + (a - at), e - a))
            __atomic_store_n(&j->nonfinite[i / 6], 1, __ATOMIC_RELAXED);
    }
}

/* Shared inputs of a batch, each line's layout, scratch and results. */
typedef struct {
    const model_t *m;
    const float *params;
    const float *lstmW[MAX_LSTM][3];   /* stacked [2][...] copies: W_ih, W_hh, b */
    stack_job stack;                   /* their copying */
    int32_t B;
    const int32_t *widths, *targetLens, *targets;
    const int64_t *imgOff, *tgtOff;
    const float *images;
    const line_layout_t *lay;          /* [B] */
    float *const *s;                   /* [B] each line's scratch */
    float *lineGrads;                  /* [B][nParams] */
    float *grads;                      /* the batch sum, when B > 1 */
    int64_t summedFrom;                /* grads[summedFrom..nParams) summed during the step */
    double *losses;
    int32_t *rc;                       /* [B] */
    int32_t *live;                     /* [B] 1 while the line still has work (loss finite) */
    int32_t next;                      /* the next line to start in a stage (atomic) */
} batch_t;

typedef void (*stage_fn)(const batch_t *bt, int32_t b);

/* g = g_0, then g = g + g_b in line order, for blocks of elements from lo (elements
 * independent) */
typedef struct {
    float *grads;
    const float *lineGrads;
    int64_t n, lo, hi;    /* n: a line's gradient; the blocks cover [lo, hi) */
    int32_t B;
} sum_job;
#define SUM_BLOCK 16384
static void sum_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const sum_job *j = ctx;
    const int64_t i1 = j->lo + b1 * SUM_BLOCK < j->hi ? j->lo + b1 * SUM_BLOCK : j->hi;
    const float *g0 = j->lineGrads;
    const int32_t B = j->B;
    const int64_t n = j->n;
    int64_t i = j->lo + b0 * SUM_BLOCK;
#if defined(__SSE2__)
    for (; i + 4 <= i1; i += 4) {        /* four elements at a time, each its own sum */
        __m128 g = _mm_loadu_ps(g0 + i);
        for (int32_t b = 1; b < B; b++) g = _mm_add_ps(g, _mm_loadu_ps(g0 + (int64_t)b * n + i));
        _mm_storeu_ps(j->grads + i, g);
    }
#endif
    for (; i < i1; i++) {
        float g = g0[i];
        for (int32_t b = 1; b < B; b++) g = g + g0[(int64_t)b * n + i];
        j->grads[i] = g;
    }
}

/* A stage on every live line: each worker takes the next line until none is left (lines of
 * different widths balance across threads; which thread runs a line changes no bit); then
 * the blocks of `tail` (work that waits for none of the stage's lines), so a worker whose
 * lines are done does them while the others finish theirs. */
typedef struct {
    crnn_range_fn fn;     /* fn(ctx, i, i + 1) for each item i < n */
    void *ctx;
    int64_t n;
} stage_tail;

typedef struct {
    batch_t *bt;
    stage_fn fn;
    const stage_tail *tail;   /* NULL or work after the lines */
    const int32_t *order;     /* NULL, or the lines in the order they are handed out */
} stage_job;

static void stage_worker(void *ctx, int64_t begin, int64_t end)
{
    stage_job *j = ctx;
    (void)begin; (void)end;
    const int64_t ntail = j->tail ? j->tail->n : 0;
    for (;;) {
        int32_t b = __atomic_fetch_add(&j->bt->next, 1, __ATOMIC_RELAXED);
        if (b >= j->bt->B + ntail) return;
        if (b >= j->bt->B) {
            j->tail->fn(j->tail->ctx, b - j->bt->B, b - j->bt->B + 1);
            continue;
        }
        const int32_t line = j->order ? j->order[b] : b;
        if (j->bt->live[line]) j->fn(j->bt, line);
    }
}

static void run_stage(batch_t *bt, stage_fn fn, const stage_tail *tail, const int32_t *order)
{
    stage_job j = {bt, fn, tail, order};
    bt->next = 0;
    int32_t workers = crnn_current_threads() < bt->B ? crnn_current_threads() : bt->B;
    int64_t work = 0;   /* a lower bound: every parameter takes part once per step of a line */
    for (int32_t b = 0; b < bt->B; b++)
        work += bt->m->nParams * (bt->lay[b].g.T > 1 ? bt->lay[b].g.T : 1);
    crnn_parallel_for_work(workers, work, stage_worker, &j);
}

/* The lines by their head's work, largest first (ties in line order): the CTC lattice of a
 * line has 2L + 1 entries a step, so lines of one width differ by their targets; handed out
 * largest first, the last line a worker takes is a short one. */
static int64_t head_work(const batch_t *bt, int32_t b)
{
    return bt->lay[b].g.T * (2 * (int64_t)bt->targetLens[b] + 1 + bt->m->classes);
}

static void head_order(const batch_t *bt, int32_t *order)
{
    for (int32_t b = 0; b < bt->B; b++) {     /* insertion: ties keep line order */
        int32_t i = b;
        for (; i > 0 && head_work(bt, order[i - 1]) < head_work(bt, b); i--) order[i] = order[i - 1];
        order[i] = b;
    }
}

static void line_failed(const batch_t *bt, int32_t b, int32_t rc)
{
    bt->rc[b] = rc;
    bt->live[b] = 0;
}

/* conv blocks (winners kept), then map[h][w][c] -> seq[t = w][h*C + c] */
static void stage_conv_forward(const batch_t *bt, int32_t b)
{
    const model_t *m = bt->m;
    const float *prm = bt->params;
    const line_layout_t *L = &bt->lay[b];
    float *s = bt->s[b];
    const float *x = bt->images + bt->imgOff[b];
    for (int n = 0; n < m->nBlocks; n++) {
        int32_t rc = crnn_conv_forward_pooled(x, m->inH[n], L->g.W[n], m->inC[n],
                                              prm + m->offs[t_conv_W(n)], prm + m->offs[t_conv_b(n)],
                                              m->out[n], m->kh[n], m->kw[n], m->padH[n], m->padW[n],
                                              m->poolH[n], m->poolW[n], s + L->o_pool[n],
                                              (int32_t *)(s + L->o_win[n]));
        if (rc != CRNN_OK) { line_failed(bt, b, rc); return; }
        x = s + L->o_pool[n];
    }
    const int64_t Hp = m->lastHp, C = m->lastC, T = L->g.T;
    float *seq = s + L->o_seq;
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hp; h++)
            memcpy(seq + t * Hp * C + h * C, x + (h * T + t) * C, sizeof(float) * (size_t)C);
}

/* classifier, CTC (scale 1/B), and the classifier's backward into dA */
static void stage_head(const batch_t *bt, int32_t b)
{
    const model_t *m = bt->m;
    const float *prm = bt->params;
    const line_layout_t *L = &bt->lay[b];
    float *s = bt->s[b], *grads = bt->lineGrads + (int64_t)b * m->nParams;
    const int64_t T = L->g.T, H = m->hidden, K = m->classes;
    const float *in = s + L->o_out[m->nLstm - 1];
    int32_t rc = crnn_linear_forward(in, prm + m->offs[t_fc(m, 0)], prm + m->offs[t_fc(m, 1)],
                                     (int32_t)T, (int32_t)(2 * H), (int32_t)K, s + L->o_logits);
    if (rc != CRNN_OK) { line_failed(bt, b, rc); return; }
    double loss;
    const int32_t *tgt = bt->targets ? bt->targets + bt->tgtOff[b] : NULL;
    rc = crnn_ctc(s + L->o_logits, (int32_t)T, (int32_t)K, bt->targetLens[b] ? tgt : NULL,
                  bt->targetLens[b], 1.0 / (double)bt->B, &loss, s + L->o_dlogits);
    if (rc != CRNN_OK) { line_failed(bt, b, rc); return; }
    bt->losses[b] = loss;
    if (isinf(loss)) {            /* no alignment: all-+0 gradient, nothing more to do */
        memset(grads, 0, sizeof(float) * (size_t)m->nParams);
        bt->live[b] = 0;
        return;
    }                             /* else the backward writes every gradient element */
    rc = crnn_linear_backward(in, prm + m->offs[t_fc(m, 0)], s + L->o_dlogits, (int32_t)T,
                              (int32_t)(2 * H), (int32_t)K, s + L->o_dA,
                              grads + m->offs[t_fc(m, 0)], grads + m->offs[t_fc(m, 1)]);
    if (rc != CRNN_OK) line_failed(bt, b, rc);
}

/* the LSTM layers' backward leaves dseq in dA (even number of layers) or dB */
static float *final_dseq(const batch_t *bt, int32_t b)
{
    const line_layout_t *L = &bt->lay[b];
    return bt->s[b] + (bt->m->nLstm % 2 == 0 ? L->o_dA : L->o_dB);
}

/* dseq[t][h*C + c] -> dPooled[h][w = t][c] of the last block (the other ping-pong buffer),
 * then the conv blocks' backward (the first block's dx is not computed) */
static void stage_conv_backward(const batch_t *bt, int32_t b)
{
    const model_t *m = bt->m;
    const float *prm = bt->params;
    const line_layout_t *L = &bt->lay[b];
    float *s = bt->s[b], *grads = bt->lineGrads + (int64_t)b * m->nParams;
    const int64_t Hp = m->lastHp, C = m->lastC, T = L->g.T;
    const float *dseq = final_dseq(bt, b);
    float *dmap = s + (m->nLstm % 2 == 0 ? L->o_dB : L->o_dA);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hp; h++)
            memcpy(dmap + (h * T + t) * C, dseq + t * Hp * C + h * C, sizeof(float) * (size_t)C);
    const float *dPooled = dmap;
    for (int n = m->nBlocks - 1; n >= 0; n--) {
        const float *xin = n == 0 ? bt->images + bt->imgOff[b] : s + L->o_pool[n - 1];
        int32_t rc = crnn_conv_backward(xin, m->inH[n], L->g.W[n], m->inC[n],
                                        prm + m->offs[t_conv_W(n)], m->out[n], m->kh[n], m->kw[n],
                                        m->padH[n], m->padW[n], m->poolH[n], m->poolW[n], dPooled,
                                        (int32_t *)(s + L->o_win[n]), grads + m->offs[t_conv_W(n)],
                                        grads + m->offs[t_conv_b(n)], n > 0 ? s + L->o_dx[n] : NULL);
        if (rc != CRNN_OK) { line_failed(bt, b, rc); return; }
        dPooled = s + L->o_dx[n];
    }
}

/* Live lines of the same length T, in line order, starting from line `first`. */
static int group_of(const batch_t *bt, int32_t first, const int32_t *done, int32_t *lines)
{
    int n = 0;
    for (int32_t b = first; b < bt->B; b++)
        if (bt->live[b] && !done[b] && bt->lay[b].g.T == bt->lay[first].g.T) lines[n++] = b;
    return n;
}

/* An LSTM layer forward (dir = 0) or backward (dir = 1) over every live line: lines of one
 * length go through the layer together (crnn_lstm_*_lines: one read of W_hh per step for
 * all of them); groups one after another. */
static void lstm_layer(batch_t *bt, int l, int backward, int32_t *lines, int32_t *done,
                       const float **cx, float **p0, float **p1, float **p2, float **p3,
                       float **p4, const float **q0, const float **q1, const float **q2,
                       const float **q3, const float **q4)
{
    const model_t *m = bt->m;
    const int64_t H = m->hidden;
    const int32_t I = l == 0 ? m->seqFeatures : (int32_t)(2 * H);
    const int r = m->nLstm - 1 - l;                   /* backward: the r-th layer visited */
    memset(done, 0, sizeof(int32_t) * (size_t)bt->B);
    for (int32_t first = 0; first < bt->B; first++) {
        if (!bt->live[first] || done[first]) continue;
        int n = group_of(bt, first, done, lines);
        const int32_t T = bt->lay[first].g.T;
        for (int i = 0; i < n; i++) {
            const line_layout_t *L = &bt->lay[lines[i]];
            float *s = bt->s[lines[i]];
            done[lines[i]] = 1;
            cx[i] = l == 0 ? s + L->o_seq : s + L->o_out[l - 1];
            if (!backward) {
                p0[i] = s + L->o_out[l]; p1[i] = s + L->o_gates[l]; p2[i] = s + L->o_c[l];
                p3[i] = s + L->o_tc[l]; p4[i] = s + L->o_hp[l];
            } else {
                q0[i] = s + L->o_gates[l]; q1[i] = s + L->o_c[l]; q2[i] = s + L->o_tc[l];
                q3[i] = s + L->o_hp[l];
                q4[i] = s + (r % 2 == 0 ? L->o_dA : L->o_dB);          /* dOut */
                float *grads = bt->lineGrads + (int64_t)lines[i] * m->nParams;
                for (int d = 0; d < 2; d++) {   /* straight into the line's gradient */
                    p0[2 * i + d] = grads + m->offs[t_lstm(m, l, d, 0)];
                    p1[2 * i + d] = grads + m->offs[t_lstm(m, l, d, 1)];
                    p2[2 * i + d] = grads + m->offs[t_lstm(m, l, d, 2)];
                }
                p3[i] = s + (r % 2 == 0 ? L->o_dB : L->o_dA);          /* dx */
            }
        }
        int32_t rc = !backward
            ? crnn_lstm_forward_lines(n, cx, T, I, (int32_t)H, bt->lstmW[l][0], bt->lstmW[l][1],
                                      bt->lstmW[l][2], p0, p1, p2, p3, p4,
                                      !bt->stack.nonfinite[l])
            : crnn_lstm_backward_lines(n, cx, T, I, (int32_t)H, bt->lstmW[l][0], bt->lstmW[l][1],
                                       q0, q1, q2, q3, q4, p0, p1, p2, p3,
                                       l == 0 && m->nBlocks > 0);
        if (rc != CRNN_OK)
            for (int i = 0; i < n; i++) line_failed(bt, lines[i], rc);
    }
}

/* The whole batch: conv forward per line (lines across threads), the LSTM layers with the
 * lines of one length together (directions across threads), the head per line, the LSTM
 * backward likewise, the conv backward per line. Each line's tensors are those of the
 * per-line ABI sequence, the same calls on the same data, but for the first LSTM layer's
 * dx: only where the last pool passed a value, the entries its backward reads. */
static void run_batch(batch_t *bt)
{
    const model_t *m = bt->m;
    int32_t B = bt->B;
    /* per-group pointer tables: [15][B] pointers (the weight gradients' tables two per
     * line: [2 * line + d]) and three [B] int arrays, on the heap */
    void **tab = malloc(sizeof(void *) * 15 * (size_t)B);
    int32_t *ints = malloc(sizeof(int32_t) * 3 * (size_t)B);
    if (!tab || !ints) {
        for (int32_t b = 0; b < B; b++) if (bt->live[b]) line_failed(bt, b, CRNN_E_NOMEM);
        free(tab); free(ints);
        return;
    }
    int32_t *lines = ints, *done = ints + B, *order = ints + 2 * B;
#define TAB(i) ((void *)(tab + (size_t)(i) * B))
    /* the stacked LSTM weights are copied while the conv blocks run (the LSTM reads them) */
    const stage_tail stack = {stack_blocks, &bt->stack, (bt->stack.total + STACK_BLOCK - 1) / STACK_BLOCK};
    run_stage(bt, stage_conv_forward, &stack, NULL);
    for (int l = 0; l < m->nLstm; l++)
        lstm_layer(bt, l, 0, lines, done, TAB(0), TAB(1), TAB(3), TAB(5), TAB(7), TAB(8),
                   TAB(9), TAB(10), TAB(11), TAB(12), TAB(13));
    head_order(bt, order);
    run_stage(bt, stage_head, NULL, order);
    for (int l = m->nLstm - 1; l >= 0; l--)
        lstm_layer(bt, l, 1, lines, done, TAB(0), TAB(1), TAB(3), TAB(5), TAB(7), TAB(8),
                   TAB(9), TAB(10), TAB(11), TAB(12), TAB(13));
    /* the LSTM and classifier gradients of every line are final: their batch sum fills the
     * conv backward's tail (when no line has failed; the conv blocks' part follows it) */
    int ok = bt->B > 1;
    for (int32_t b = 0; b < B; b++) ok &= bt->rc[b] == CRNN_OK;
    const int64_t from = m->offs[t_lstm(m, 0, 0, 0)];
    sum_job sj = {bt->grads, bt->lineGrads, m->nParams, from, m->nParams, B};
    const stage_tail sum = {sum_blocks, &sj, (m->nParams - from + SUM_BLOCK - 1) / SUM_BLOCK};
    run_stage(bt, stage_conv_backward, ok ? &sum : NULL, NULL);
    if (ok) bt->summedFrom = from;
#undef TAB
    free(tab); free(ints);
}

int32_t crnn_step_gradients(const int32_t *cfg, const float *params, int32_t B,
                            const int32_t *widths, const float *images,
                            const int32_t *targetLens, const int32_t *targets,
                            float *grads, double *losses, double *batchLoss)
{
    model_t m;
    if (!parse_cfg(cfg, &m) || !params || B < 1 || !widths || !images || !targetLens ||
        !grads || !losses || !batchLoss)
        return CRNN_E_ARG;
    int64_t *imgOff = malloc(sizeof(int64_t) * 2 * (size_t)B);
    int32_t *rcs = malloc(sizeof(int32_t) * (size_t)B);
    if (!imgOff || !rcs) { free(imgOff); free(rcs); return CRNN_E_NOMEM; }
    int64_t *tgtOff = imgOff + B;
    int64_t ia = 0, ta = 0;
    int32_t rc = CRNN_OK;
    for (int32_t b = 0; b < B; b++) {
        line_geom_t g;
        if (targetLens[b] < 0 || !line_geom(&m, widths[b], &g)) { rc = CRNN_E_ARG; break; }
        imgOff[b] = ia;
        tgtOff[b] = ta;
        ia += (int64_t)m.H * widths[b] * m.C;
        ta += targetLens[b];
    }
    if (rc == CRNN_OK && ta > 0 && !targets) rc = CRNN_E_ARG;
    for (int64_t i = 0; rc == CRNN_OK && i < ta; i++)
        if (targets[i] < 1 || targets[i] >= m.classes) rc = CRNN_E_ARG;
    if (rc != CRNN_OK) { free(imgOff); free(rcs); return rc; }

    /* Stacked LSTM weights [2][4H][I], [2][4H][H], [2][4H] as crnn_lstm_* take them. */
    int64_t stackN = 0;
    for (int l = 0; l < m.nLstm; l++)
        for (int w = 0; w < 3; w++) stackN += 2 * m.sizes[t_lstm(&m, l, 0, w)];
    line_layout_t *lay = malloc(sizeof(line_layout_t) * (size_t)B);
    float **sc = malloc(sizeof(float *) * (size_t)B);
    int32_t *live = malloc(sizeof(int32_t) * (size_t)B);
    int64_t linesN = 0;
    if (lay && sc && live)
        for (int32_t b = 0; b < B; b++) {
            layout_line(&m, widths[b], &lay[b]);       /* checked above */
            linesN += lay[b].need;
        }
    /* one scratch buffer (kept by this thread for the next batch): the stack, the line
     * gradients, then every line's activations */
    int64_t lg = B > 1 ? B * m.nParams : 0;
    float *stack = lay && sc && live && (uint64_t)(stackN + lg + linesN + 16) < SIZE_MAX / sizeof(float)
        ? crnn_scratch(CRNN_SCRATCH_BATCH, sizeof(float) * (size_t)(stackN + lg + linesN + 16)) : NULL;
    if (!stack) {
        free(imgOff); free(rcs); free(lay); free(sc); free(live);
        return CRNN_E_NOMEM;
    }
    float *lineGrads = B > 1 ? stack + stackN : grads;
    float *at = stack + stackN + lg;
    at += (16 - ((uintptr_t)at / sizeof(float)) % 16) % 16;
    for (int32_t b = 0; b < B; b++) {
        sc[b] = at;
        at += lay[b].need;
        rcs[b] = CRNN_OK;
        live[b] = 1;
    }
    batch_t bt = {.m = &m, .params = params, .B = B, .widths = widths, .targetLens = targetLens,
                  .targets = targets, .imgOff = imgOff, .tgtOff = tgtOff, .images = images,
                  .lay = lay, .s = sc, .lineGrads = lineGrads, .grads = grads,
                  .summedFrom = m.nParams, .losses = losses, .rc = rcs, .live = live};
    bt.stack.dst = stack;
    for (int l = 0, i = 0; l < m.nLstm; l++)
        for (int w = 0; w < 3; w++) {
            bt.lstmW[l][w] = stack + bt.stack.total;
            for (int d = 0; d < 2; d++, i++) {
                bt.stack.src[i] = params + m.offs[t_lstm(&m, l, d, w)];
                bt.stack.n[i] = m.sizes[t_lstm(&m, l, d, w)];
                bt.stack.total += bt.stack.n[i];
            }
        }
    bt.stack.nseg = 6 * m.nLstm;

    run_batch(&bt);

    for (int32_t b = 0; b < B && rc == CRNN_OK; b++) rc = rcs[b];
    if (rc == CRNN_OK) {
        /* g = g_0, then g = g + g_b in line order */
        if (B > 1) {   /* what the conv backward's tail did not sum, element blocks across threads */
            const int64_t hi = bt.summedFrom;
            sum_job sj = {grads, lineGrads, m.nParams, 0, hi, B};
            crnn_parallel_for_work((hi + SUM_BLOCK - 1) / SUM_BLOCK, hi * B, sum_blocks, &sj);
        }
        double total = 0.0;
        for (int32_t b = 0; b < B; b++)
            if (!isinf(losses[b])) total = total + losses[b];
        *batchLoss = total / (double)B;
    }
    free(imgOff); free(rcs); free(lay); free(sc); free(live);
    return rc;
}
