/* step.c — the whole model: parameter sizes and the batch gradient
 * (docs/backward.md, "Batch gradient, clipping").
 *
 * Per line, through the same ABI entry points the per-layer fixtures gate: conv blocks
 * (crnn_conv_forward, winners kept) -> the sequence x[t = w][h*C + c] -> bidirectional LSTM
 * layers (crnn_lstm_forward) -> classifier (crnn_linear_forward) -> crnn_ctc with scale 1/B ->
 * the backward pass (linear, LSTM, conv; the first block's dx is not computed) into the
 * line's own gradient buffer. A line with no alignment (loss +inf) keeps an all-+0 gradient.
 * Lines are independent and may run on different threads; afterwards g = g_0, g = g + g_b in
 * line order, element-wise, so no bit depends on the thread count or the ISA. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"

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

/* Shared, read-only inputs of a batch and one output slot per line. */
typedef struct {
    const model_t *m;
    const float *params;
    const float *lstmW[MAX_LSTM][3];   /* stacked [2][...] copies: W_ih, W_hh, b */
    int32_t B;
    const int32_t *widths, *targetLens, *targets;
    const int64_t *imgOff, *tgtOff;
    const float *images;
    float *lineGrads;                  /* [B][nParams] */
    double *losses;
    int32_t *rc;                       /* [B] */
    int32_t next;                      /* the next line to start (atomic) */
} batch_t;

/* Everything one line needs, in one allocation. */
static int32_t run_line(const batch_t *bt, int32_t b)
{
    const model_t *m = bt->m;
    const float *prm = bt->params;
    float *grads = bt->lineGrads + (int64_t)b * m->nParams;
    line_geom_t g;
    if (!line_geom(m, bt->widths[b], &g)) return CRNN_E_ARG;
    const int64_t T = g.T, H = m->hidden, K = m->classes, G4 = 4 * H;

    /* scratch layout (floats; winners stored as int32 in float-sized slots) */
    int64_t need = 0;
    int64_t o_conv[MAX_BLOCKS], o_pool[MAX_BLOCKS], o_win[MAX_BLOCKS], o_dx[MAX_BLOCKS];
    int64_t maxP = 0;
    for (int n = 0; n < m->nBlocks; n++) if (g.P[n] * m->out[n] > maxP) maxP = g.P[n] * m->out[n];
    int64_t o_convbuf = need; need += maxP;           /* conv pre-activations, reused */
    for (int n = 0; n < m->nBlocks; n++) {
        int64_t np = g.Hp[n] * g.Wp[n] * m->out[n];
        o_pool[n] = need; need += np;
        o_win[n] = need; need += np;
        o_dx[n] = need; need += (int64_t)m->inH[n] * g.W[n] * m->inC[n];   /* dx of block n */
        o_conv[n] = o_convbuf;
    }
    int64_t o_seq = need; need += T * m->seqFeatures;
    int64_t o_out[MAX_LSTM], o_gates[MAX_LSTM], o_c[MAX_LSTM], o_tc[MAX_LSTM], o_hp[MAX_LSTM];
    for (int l = 0; l < m->nLstm; l++) {
        o_out[l] = need; need += T * 2 * H;
        o_gates[l] = need; need += 2 * T * G4;
        o_c[l] = need; need += 2 * T * H;
        o_tc[l] = need; need += 2 * T * H;
        o_hp[l] = need; need += 2 * T * H;
    }
    int64_t o_logits = need; need += T * K;
    int64_t o_dlogits = need; need += T * K;
    int64_t maxI = m->seqFeatures > 2 * H ? m->seqFeatures : 2 * H;
    int64_t o_dA = need; need += T * maxI;             /* dseq ping-pong */
    int64_t o_dB = need; need += T * maxI;
    int64_t maxWih = 0;
    for (int l = 0; l < m->nLstm; l++) {
        int64_t I = l == 0 ? m->seqFeatures : 2 * H;
        if (2 * G4 * I > maxWih) maxWih = 2 * G4 * I;
    }
    int64_t o_gWih = need; need += maxWih;             /* stacked LSTM gradients */
    int64_t o_gWhh = need; need += 2 * G4 * H;
    int64_t o_gb = need; need += 2 * G4;
    if ((uint64_t)need > SIZE_MAX / sizeof(float)) return CRNN_E_NOMEM;
    float *s = crnn_scratch(CRNN_SCRATCH_LINE, sizeof(float) * (size_t)(need + 1));
    if (!s) return CRNN_E_NOMEM;
    int32_t rc = CRNN_OK;
#define TRY(call) do { rc = (call); if (rc != CRNN_OK) goto done; } while (0)

    /* ---- forward ---- */
    const float *x = bt->images + bt->imgOff[b];
    for (int n = 0; n < m->nBlocks; n++) {
        TRY(crnn_conv_forward(x, m->inH[n], g.W[n], m->inC[n],
                              prm + m->offs[t_conv_W(n)], prm + m->offs[t_conv_b(n)], m->out[n],
                              m->kh[n], m->kw[n], m->padH[n], m->padW[n], m->poolH[n], m->poolW[n],
                              s + o_conv[n], s + o_pool[n], (int32_t *)(s + o_win[n])));
        x = s + o_pool[n];
    }
    {   /* map[h][w][c] -> seq[t = w][h*C + c] */
        const int64_t Hp = m->lastHp, C = m->lastC;
        float *seq = s + o_seq;
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hp; h++)
                memcpy(seq + t * Hp * C + h * C, x + (h * T + t) * C, sizeof(float) * (size_t)C);
    }
    const float *in = s + o_seq;
    for (int l = 0; l < m->nLstm; l++) {
        int32_t I = l == 0 ? m->seqFeatures : (int32_t)(2 * H);
        TRY(crnn_lstm_forward(in, (int32_t)T, I, (int32_t)H, bt->lstmW[l][0], bt->lstmW[l][1],
                              bt->lstmW[l][2], s + o_out[l], s + o_gates[l], s + o_c[l],
                              s + o_tc[l], s + o_hp[l]));
        in = s + o_out[l];
    }
    TRY(crnn_linear_forward(in, prm + m->offs[t_fc(m, 0)], prm + m->offs[t_fc(m, 1)],
                            (int32_t)T, (int32_t)(2 * H), (int32_t)K, s + o_logits));

    /* ---- loss ---- */
    double loss;
    const int32_t *tgt = bt->targets ? bt->targets + bt->tgtOff[b] : NULL;
    TRY(crnn_ctc(s + o_logits, (int32_t)T, (int32_t)K, bt->targetLens[b] ? tgt : NULL,
                 bt->targetLens[b], 1.0 / (double)bt->B, &loss, s + o_dlogits));
    bt->losses[b] = loss;
    if (isinf(loss)) {            /* no alignment: all-+0 gradient */
        memset(grads, 0, sizeof(float) * (size_t)m->nParams);
        goto done;
    }                             /* else the backward writes every gradient element */

    /* ---- backward ---- */
    float *dseq = s + o_dA, *dnext = s + o_dB;
    TRY(crnn_linear_backward(in, prm + m->offs[t_fc(m, 0)], s + o_dlogits, (int32_t)T,
                             (int32_t)(2 * H), (int32_t)K, dseq,
                             grads + m->offs[t_fc(m, 0)], grads + m->offs[t_fc(m, 1)]));
    for (int l = m->nLstm - 1; l >= 0; l--) {
        int32_t I = l == 0 ? m->seqFeatures : (int32_t)(2 * H);
        const float *lin = l == 0 ? s + o_seq : s + o_out[l - 1];
        TRY(crnn_lstm_backward(lin, (int32_t)T, I, (int32_t)H, bt->lstmW[l][0], bt->lstmW[l][1],
                               s + o_gates[l], s + o_c[l], s + o_tc[l], s + o_hp[l], dseq,
                               s + o_gWih, s + o_gWhh, s + o_gb, dnext));
        for (int d = 0; d < 2; d++) {
            memcpy(grads + m->offs[t_lstm(m, l, d, 0)], s + o_gWih + d * G4 * I,
                   sizeof(float) * (size_t)(G4 * I));
            memcpy(grads + m->offs[t_lstm(m, l, d, 1)], s + o_gWhh + d * G4 * H,
                   sizeof(float) * (size_t)(G4 * H));
            memcpy(grads + m->offs[t_lstm(m, l, d, 2)], s + o_gb + d * G4,
                   sizeof(float) * (size_t)G4);
        }
        float *tmp = dseq; dseq = dnext; dnext = tmp;
    }
    {   /* dseq[t][h*C + c] -> dPooled[h][w = t][c] of the last block (its dx slot is free) */
        const int64_t Hp = m->lastHp, C = m->lastC;
        float *dmap = dnext;
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hp; h++)
                memcpy(dmap + (h * T + t) * C, dseq + t * Hp * C + h * C, sizeof(float) * (size_t)C);
        dseq = dmap;
    }
    const float *dPooled = dseq;
    for (int n = m->nBlocks - 1; n >= 0; n--) {
        const float *xin = n == 0 ? bt->images + bt->imgOff[b] : s + o_pool[n - 1];
        TRY(crnn_conv_backward(xin, m->inH[n], g.W[n], m->inC[n], prm + m->offs[t_conv_W(n)],
                               m->out[n], m->kh[n], m->kw[n], m->padH[n], m->padW[n],
                               m->poolH[n], m->poolW[n], dPooled, (int32_t *)(s + o_win[n]),
                               grads + m->offs[t_conv_W(n)], grads + m->offs[t_conv_b(n)],
                               n > 0 ? s + o_dx[n] : NULL));
        dPooled = s + o_dx[n];
    }
#undef TRY
done:
    return rc;
}

/* Each worker takes the next unstarted line until none is left: lines of different widths
 * balance across threads, and which thread runs a line changes no bit of its result. */
static void lines_worker(void *ctx, int64_t begin, int64_t end)
{
    batch_t *bt = ctx;
    (void)begin; (void)end;
    for (;;) {
        int32_t b = __atomic_fetch_add(&bt->next, 1, __ATOMIC_RELAXED);
        if (b >= bt->B) return;
        bt->rc[b] = run_line(bt, b);
    }
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
    /* one scratch buffer (kept by this thread for the next batch): the stack, then the
     * line gradients */
    float *stack = crnn_scratch(CRNN_SCRATCH_BATCH,
                                sizeof(float) * (size_t)(stackN + (B > 1 ? B * m.nParams : 0)));
    if (!stack) {
        free(imgOff); free(rcs);
        return CRNN_E_NOMEM;
    }
    float *lineGrads = B > 1 ? stack + stackN : grads;
    batch_t bt = {.m = &m, .params = params, .B = B, .widths = widths, .targetLens = targetLens,
                  .targets = targets, .imgOff = imgOff, .tgtOff = tgtOff, .images = images,
                  .lineGrads = lineGrads, .losses = losses, .rc = rcs};
    float *at = stack;
    for (int l = 0; l < m.nLstm; l++)
        for (int w = 0; w < 3; w++) {
            int64_t n = m.sizes[t_lstm(&m, l, 0, w)];
            memcpy(at, params + m.offs[t_lstm(&m, l, 0, w)], sizeof(float) * (size_t)n);
            memcpy(at + n, params + m.offs[t_lstm(&m, l, 1, w)], sizeof(float) * (size_t)n);
            bt.lstmW[l][w] = at;
            at += 2 * n;
        }

    /* Lines run on min(threads, B) workers; the per-layer calls inside a line may split
     * their own outputs across threads too. Either way each line's buffer gets the same bits. */
    int32_t workers = crnn_current_threads() < B ? crnn_current_threads() : B;
    crnn_parallel_for(workers, lines_worker, &bt);

    for (int32_t b = 0; b < B && rc == CRNN_OK; b++) rc = rcs[b];
    if (rc == CRNN_OK) {
        /* g = g_0, then g = g + g_b in line order */
        if (B > 1) {
#if defined(CRNN_MUTANT_BATCH_SUM_REVERSE)   /* mutant (docs/mutants.md): lines B-1 .. 0 */
            memcpy(grads, lineGrads + (int64_t)(B - 1) * m.nParams, sizeof(float) * (size_t)m.nParams);
            for (int32_t b = B - 2; b >= 0; b--) {
                const float *gb = lineGrads + (int64_t)b * m.nParams;
                for (int64_t i = 0; i < m.nParams; i++) grads[i] = grads[i] + gb[i];
            }
#else
            memcpy(grads, lineGrads, sizeof(float) * (size_t)m.nParams);
            for (int32_t b = 1; b < B; b++) {
                const float *gb = lineGrads + (int64_t)b * m.nParams;
                for (int64_t i = 0; i < m.nParams; i++) grads[i] = grads[i] + gb[i];
            }
#endif
        }
        double total = 0.0;
        for (int32_t b = 0; b < B; b++)
            if (!isinf(losses[b])) total = total + losses[b];
#if defined(CRNN_MUTANT_BATCH_LOSS_FINITE_ONLY)   /* mutant: lines without alignment leave B */
        int32_t finite = 0;
        for (int32_t b = 0; b < B; b++) finite += !isinf(losses[b]);
        *batchLoss = total / (double)(finite > 0 ? finite : 1);
#else
        *batchLoss = total / (double)B;
#endif
    }
    free(imgOff); free(rcs);
    return rc;
}
