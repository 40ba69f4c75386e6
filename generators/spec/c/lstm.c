/* lstm.c: one bidirectional LSTM layer, forward and backward (spec/lstm.py;
 * docs/numerics.md and docs/backward.md "LSTM layer"). Gate rows [i|f|g|o], direction 0
 * forward; the saved states are indexed by time t for both directions. The directions are
 * independent, so each runs on its own. */
#include <stdlib.h>

#include "spec.h"

/* the k-th step direction d visits */
static int64_t visit(int d, int64_t k, int64_t T)
{
    return d == 0 ? k : T - 1 - k;
}

/* One step of direction d at time t from h, c (the state of the step visited before):
 * z = (dot16(x[t], W_ih[g], I) + dot16(h, W_hh[g], H)) + b[g]; i, f, o = sigmoid(z),
 * g = tanh(z); c = (f*c) + (i*g); tc = tanh(c); h = o*tc. */
static void forward_step(const float *xt, int64_t I, int64_t H, const float *Wih,
                         const float *Whh, const float *b, float *h, float *c, float *act,
                         float *tc)
{
    for (int64_t k = 0; k < 4 * H; k++) {
        float xw = spec_dot16(xt, 1, Wih + k * I, 1, I), hw = spec_dot16(h, 1, Whh + k * H, 1, H);
        float z = (xw + hw) + b[k];
        act[k] = k >= 2 * H && k < 3 * H ? spec_tanh(z) : spec_sigmoid(z);
    }
    for (int64_t j = 0; j < H; j++) {
        float i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
        c[j] = (f * c[j]) + (i * g);
        tc[j] = spec_tanh(c[j]);
        h[j] = o * tc[j];
    }
}

int32_t crnn_lstm_forward(const float *x, int32_t T, int32_t I, int32_t H,
                          const float *W_ih, const float *W_hh, const float *b,
                          float *out, float *gates, float *c, float *tc, float *hPrev)
{
    if (!x || !W_ih || !W_hh || !b || !out || !gates || !c || !tc || !hPrev ||
        T < 0 || I < 0 || H < 1)
        return CRNN_E_ARG;
    int64_t G = 4 * (int64_t)H;
    float *h = malloc(sizeof(float) * 2 * (size_t)H);
    if (!h)
        return CRNN_E_NOMEM;
    float *cs = h + H;
    for (int d = 0; d < 2; d++) {
        for (int64_t j = 0; j < H; j++)
            h[j] = cs[j] = 0.0f;
        for (int64_t k = 0; k < T; k++) {
            int64_t t = visit(d, k, T), st = (d * (int64_t)T + t) * H;
            for (int64_t j = 0; j < H; j++)
                hPrev[st + j] = h[j];
            forward_step(x + t * I, I, H, W_ih + d * G * I, W_hh + d * G * H, b + d * G, h, cs,
                         gates + (d * (int64_t)T + t) * G, tc + st);
            for (int64_t j = 0; j < H; j++) {
                c[st + j] = cs[j];
                out[t * 2 * H + d * H + j] = h[j];
            }
        }
    }
    free(h);
    return CRNN_OK;
}

/* The element-wise backward of one step, each operation one rounding, no fma:
 * dz[t][d*4H + gate*H + j] from dOut, dhRec, dcNext (updated) and the saved states. */
static void backward_step(int64_t H, const float *act, const float *tc, const float *cPrev,
                          const float *dOut, const float *dhRec, float *dcNext, float *dz)
{
    for (int64_t j = 0; j < H; j++) {
        float i = act[j], f = act[H + j], g = act[2 * H + j], o = act[3 * H + j];
        float dh = dOut[j] + dhRec[j];
        float dtc = dh * o;
        float d_o = dh * tc[j];
        float dc = dcNext[j] + dtc * (1.0f - tc[j] * tc[j]);
        float di = dc * g;
        float dg = dc * i;
        float df = dc * (cPrev ? cPrev[j] : 0.0f);
        dcNext[j] = dc * f;
        dz[j] = di * (i * (1.0f - i));
        dz[H + j] = df * (f * (1.0f - f));
        dz[2 * H + j] = dg * (1.0f - g * g);
        dz[3 * H + j] = d_o * (o * (1.0f - o));
    }
}

/* Per direction, the steps in the reverse of the forward's order from dhRec = dcNext = +0;
 * dhRec[j] = dot16 over the 4H gates of (dz[t][d*4H + k], W_hh[d][k][j]) after each step. */
static void recurrence(int d, int64_t T, int64_t H, const float *Whh, const float *gates,
                       const float *c, const float *tc, const float *dOut, float *dz,
                       float *dhRec, float *dcNext)
{
    int64_t G = 4 * H;
    for (int64_t j = 0; j < H; j++)
        dhRec[j] = dcNext[j] = 0.0f;
    for (int64_t k = T - 1; k >= 0; k--) {
        int64_t t = visit(d, k, T), st = (d * T + t) * H;
        const float *cPrev = k == 0 ? NULL : c + (d * T + visit(d, k - 1, T)) * H;
        float *dzt = dz + t * 2 * G + d * G;
        backward_step(H, gates + (d * T + t) * G, tc + st, cPrev, dOut + t * 2 * H + d * H,
                      dhRec, dcNext, dzt);
        for (int64_t j = 0; j < H; j++)
            dhRec[j] = spec_dot16(dzt, 1, Whh + j, H, G);
    }
}

/* dW_ih[d][k][i] = dot16 over t of (dz[t][d*4H + k], x[t][i]); dW_hh with hPrev[d][t][j];
 * db with ones; dx[t][i] = dot16 over the 8H gates of (dz[t][.], W_ih[.][i]) */
int32_t crnn_lstm_backward(const float *x, int32_t T, int32_t I, int32_t H,
                           const float *W_ih, const float *W_hh,
                           const float *gates, const float *c, const float *tc,
                           const float *hPrev, const float *dOut,
                           float *dW_ih, float *dW_hh, float *db, float *dx)
{
    if (!x || !W_ih || !W_hh || !gates || !c || !tc || !hPrev || !dOut || !dW_ih || !dW_hh ||
        !db || T < 0 || I < 0 || H < 1)
        return CRNN_E_ARG;
    int64_t G = 4 * (int64_t)H, G2 = 2 * G;
    float *dz = malloc(sizeof(float) * (size_t)(T * G2 + 2 * H));
    if (!dz)
        return CRNN_E_NOMEM;
    float *dhRec = dz + T * G2, *dcNext = dhRec + H;
    for (int d = 0; d < 2; d++)
        recurrence(d, T, H, W_hh + d * G * H, gates, c, tc, dOut, dz, dhRec, dcNext);
    for (int64_t r = 0; r < G2; r++) {     /* r = d*4H + k */
        int64_t d = r / G;
        for (int64_t i = 0; i < I; i++)
            dW_ih[r * I + i] = spec_dot16(dz + r, G2, x + i, I, T);
        for (int64_t j = 0; j < H; j++)
            dW_hh[r * H + j] = spec_dot16(dz + r, G2, hPrev + d * T * H + j, H, T);
        db[r] = spec_dot16(dz + r, G2, &spec_one, 0, T);
    }
    if (dx)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < I; i++)
                dx[t * I + i] = spec_dot16(dz + t * G2, 1, W_ih + i, I, G2);
    free(dz);
    return CRNN_OK;
}
