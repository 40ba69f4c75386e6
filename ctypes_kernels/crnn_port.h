/* crnn_port.h — the port ABI that crnn-conformance gates.
 *
 * Any shared library exporting these symbols with C linkage can be gated with
 * `crnn-conformance gate --port libport.so`. docs/port-abi.md is the prose version.
 *
 * Rules shared by every entry point:
 *  - Buffers are owned by the caller, dense, row-major, float32 unless stated.
 *    Shapes are passed explicitly; a function never allocates what it returns.
 *  - Every function returns CRNN_OK (0) or a negative error code; none aborts.
 *    An invalid call (a negative size, NULL for a buffer that holds elements, a value out
 *    of range) returns its code before writing anything; empty extents are valid where the
 *    result is defined (docs/port-abi.md, "The error contract").
 *  - Outputs must be fully written: the harness fills them with a poison value first.
 *  - The ISA and thread count selected with crnn_set_isa / crnn_set_threads apply
 *    to every later call on the calling process. Results must not depend on them.
 */
#ifndef CRNN_PORT_H
#define CRNN_PORT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CRNN_ABI_VERSION 1

/* error codes */
#define CRNN_OK               0
#define CRNN_E_ARG          (-1)  /* bad shape, null pointer, out-of-range value */
#define CRNN_E_ISA          (-2)  /* ISA not available on this CPU or not built  */
#define CRNN_E_NOMEM        (-3)  /* scratch allocation failed                   */
#define CRNN_E_UNSUPPORTED  (-4)  /* valid request the port does not implement   */

/* ISA paths */
#define CRNN_ISA_SCALAR 0
#define CRNN_ISA_SSE    1   /* 128-bit vectors (with FMA3) */
#define CRNN_ISA_AVX2   2   /* 256-bit vectors (with FMA3) */
#define CRNN_ISA_AVX512 3   /* 512-bit vectors (AVX-512F)  */
#define CRNN_ISA_NEON   4   /* 128-bit vectors on aarch64 (Advanced SIMD) */

/* ---- identity and execution control ------------------------------------ */
int32_t  crnn_abi_version(void);            /* must return CRNN_ABI_VERSION */
uint32_t crnn_isa_available(void);          /* bit (1 << isa) set per usable path */
int32_t  crnn_set_isa(int32_t isa);         /* CRNN_E_ISA when not available */
int32_t  crnn_get_isa(void);
int32_t  crnn_set_threads(int32_t n);       /* 1..256, else CRNN_E_ARG */
int32_t  crnn_get_threads(void);

/* ---- dot16: the 16-lane dot product (docs/numerics.md) ------------------ */
int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out);

/* ---- linear: y[t][o] = dot16(x[t], W[o], I) + b[o] ---------------------- */
/* x[T][I], W[O][I], b[O] -> y[T][O] */
int32_t crnn_linear_forward(const float *x, const float *W, const float *b,
                            int32_t T, int32_t I, int32_t O, float *y);
/* dY[T][O] -> dx[T][I] (may be NULL: not computed), dW[O][I], db[O] */
int32_t crnn_linear_backward(const float *x, const float *W, const float *dY,
                             int32_t T, int32_t I, int32_t O,
                             float *dx, float *dW, float *db);

/* ---- conv block: 3x3-style conv (stride 1) + fused ReLU + max pool ------ */
/* x[H][W][C] channels-last; Wt[Out][KPadded], KPadded = roundup16(kh*kw*C); b[Out].
 * Hc = H + 2*padH - kh + 1, Wc = W + 2*padW - kw + 1, P = Hc*Wc,
 * Hp = Hc / poolH, Wp = Wc / poolW (trailing partial windows dropped).
 * conv[P][Out] (pre-activation), pooled[Hp][Wp][Out],
 * winners[Hp][Wp][Out] = p*Out + o of the window's winner, or -1 (none). */
int32_t crnn_conv_forward(const float *x, int32_t H, int32_t W, int32_t C,
                          const float *Wt, const float *b, int32_t Out,
                          int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                          int32_t poolH, int32_t poolW,
                          float *conv, float *pooled, int32_t *winners);
/* dPooled[Hp][Wp][Out], winners as returned by the forward ->
 * dW[Out][KPadded], db[Out], dx[H][W][C] (may be NULL: not computed). */
int32_t crnn_conv_backward(const float *x, int32_t H, int32_t W, int32_t C,
                           const float *Wt, int32_t Out,
                           int32_t kh, int32_t kw, int32_t padH, int32_t padW,
                           int32_t poolH, int32_t poolW,
                           const float *dPooled, const int32_t *winners,
                           float *dW, float *db, float *dx);

/* ---- bidirectional LSTM layer (gates i, f, g, o; one bias b per direction) */
/* x[T][I]; W_ih[2][4H][I], W_hh[2][4H][H], b[2][4H] (direction 0 = forward).
 * out[T][2H] with out[t][d*H + j].
 * Saved states, indexed by time t for both directions:
 *   gates[2][T][4H] activated (i, f, g, o), c[2][T][H], tc[2][T][H] = tanh(c),
 *   hPrev[2][T][H] = h the step started from (zeros for the first step visited). */
int32_t crnn_lstm_forward(const float *x, int32_t T, int32_t I, int32_t H,
                          const float *W_ih, const float *W_hh, const float *b,
                          float *out, float *gates, float *c, float *tc, float *hPrev);
/* dOut[T][2H] -> dW_ih[2][4H][I], dW_hh[2][4H][H], db[2][4H], dx[T][I] (may be NULL). */
int32_t crnn_lstm_backward(const float *x, int32_t T, int32_t I, int32_t H,
                           const float *W_ih, const float *W_hh,
                           const float *gates, const float *c, const float *tc,
                           const float *hPrev, const float *dOut,
                           float *dW_ih, float *dW_hh, float *db, float *dx);

/* ---- activations (float32 approximations, docs/numerics.md) ------------- */
int32_t crnn_sigmoid(const float *x, int64_t n, float *y);
int32_t crnn_tanh(const float *x, int64_t n, float *y);

/* ---- DetMath (double exp and log, docs/decoding.md) --------------------- */
int32_t crnn_detmath_exp(const double *x, int64_t n, double *y);
int32_t crnn_detmath_log(const double *x, int64_t n, double *y);

/* ---- CTC loss for one line (double, scalar) ----------------------------- */
/* logits[T][K] float32, target[L] in 1..K-1 (blank = 0), scale (1/B).
 * loss = -logP (+inf when no alignment, then dlogits = 0).
 * dlogits[T][K] = float32(scale * (exp(lp) - exp(acc - lp - logP))). */
int32_t crnn_ctc(const float *logits, int32_t T, int32_t K,
                 const int32_t *target, int32_t L, double scale,
                 double *loss, float *dlogits);

/* ---- whole model ----------------------------------------------------------
 * cfg (int32): [H_in, C_in, nBlocks, {Out, kh, kw, padH, padW, poolH, poolW} x nBlocks,
 *               nLstm, hidden, classes]
 * params / grads: all tensors concatenated in parameter order (docs/backward.md):
 *   per conv block: Wt[Out][KPadded], b[Out];
 *   per LSTM layer: forward W_ih[4H][I], W_hh[4H][H], b[4H], then reverse the same;
 *   classifier W[classes][2H], b[classes].
 * crnn_model_sizes writes the element count of each tensor (nTensors of them). */
int32_t crnn_model_sizes(const int32_t *cfg, int32_t *nTensors, int64_t *sizes /* may be NULL */);

/* Batch gradient: lines b = 0..B-1 of widths[b], images concatenated ([H_in][width][C_in] each),
 * targets concatenated (lengths targetLens[b]). Per line forward + CTC (scale 1/B) + backward,
 * then grads = g_0 + g_1 + ... in line order. losses[B] per line (+inf: no alignment);
 * batchLoss = (sum of finite losses, in line order, in double) / B. */
int32_t crnn_step_gradients(const int32_t *cfg, const float *params, int32_t B,
                            const int32_t *widths, const float *images,
                            const int32_t *targetLens, const int32_t *targets,
                            float *grads, double *losses, double *batchLoss);

/* Global norm over tensors in parameter order (double); when enabled and norm > limit,
 * every element is multiplied by float(limit / (norm + 1e-6)). */
int32_t crnn_clip_gradients(float *grads, const int64_t *sizes, int32_t nTensors,
                            double limit, int32_t enabled, double *norm);

/* One AdamW step on one tensor. b1t, b2t are the running double products beta^t
 * (the caller keeps them); decay = 1 applies weight decay to this tensor. */
int32_t crnn_adamw(float *p, float *m, float *v, const float *g, int64_t n,
                   double lr, double beta1, double beta2, double eps, double wd,
                   int32_t decay, double b1t, double b2t);

#ifdef __cplusplus
}
#endif
#endif /* CRNN_PORT_H */
