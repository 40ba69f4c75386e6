/* testport.c — a small, plain-C port of the crnn_port.h ABI for the gate's own tests.
 *
 * dot16 and the linear layer are implemented correctly (scalar only, one thread: the gate's
 * identity tier still runs it at every thread count). Every other entry point returns
 * CRNN_E_UNSUPPORTED. Compile-time switches turn it into a broken port:
 *
 *   -DTP_ABI=2            crnn_abi_version() returns 2
 *   -DTP_OMIT             leaves out crnn_dot16, crnn_linear_backward and crnn_get_threads
 *   -DTP_DOT16_ONLY       a partial port: the core and crnn_dot16, no other symbol
 *   -DTP_FTZ_ON_LOAD      sets FTZ and DAZ in MXCSR when the library is loaded
 *   -DTP_FTZ_IN_CALL      linear_forward sets FTZ and DAZ and leaves them set
 * and, only on the linear case with T = 16, I = 37, O = 37 (so the other cases show that the
 * gate goes on), in crnn_linear_backward:
 *   -DTP_SEGV             a store through a null pointer (SIGSEGV)
 *   -DTP_SEGV_THREADS=n   the same, only when run with n threads
 *   -DTP_ABORT            abort() (SIGABRT)
 *   -DTP_HANG             never returns
 *   -DTP_HANG_THREADS=n   the same, only when run with n threads
 *   -DTP_ULP_AT_THREADS=n every crnn_linear_forward run with n threads sets one more bit of
 *                         y[0] (a port whose work split goes wrong at one thread count)
 *   -DTP_SLEEP_MS=ms      sleeps ms milliseconds in every linear_backward on the case above
 *   -DTP_UNWRITTEN        leaves db[O-1] unwritten (the harness's poison stays)
 *   -DTP_NAN              writes NaN to dW[1][2]
 *   -DTP_ERRCODE          returns CRNN_E_NOMEM
 *   -DTP_PERTURB=x        scales dW row 3 by (1 + x) on every case (x = 3e-6f: amber usage)
 *   -DTP_OOB_DB=k         writes db[O - 1 + k] (k >= 1: the k-th float past its end)
 *   -DTP_OOB_DW_FAR       on the case T16_I128_O48 instead: writes 16 KiB past the end of dW
 *                         (a wild write beyond the canary zone)
 *   -DTP_BACKWARD_ERR     returns CRNN_E_UNSUPPORTED from the backward (the forward is fine)
 * and, on that case, in crnn_linear_forward:
 *   -DTP_OOB_Y=k          writes y[T*O - 1 + k] for k > 0 (past its end), y[k] for k < 0
 *   -DTP_MODIFY_W=n       changes its const input W[3][5] when run with n threads (0: always)
 *   -DTP_MODIFY_B         changes its const input b[2]
 * and otherwise:
 *   -DTP_FTZ_IN_BACKWARD  crnn_linear_backward sets FTZ and DAZ and leaves them set (so the
 *                         last call of a run leaves them set)
 *   -DTP_ROUND_IN_BACKWARD  crnn_linear_backward sets rounding toward zero and leaves it set
 *   -DTP_PRINT_BYTES=n    crnn_linear_forward prints n bytes to stdout on the case above
 *   -DTP_PRINT            prints to stdout and stderr when loaded and in every linear call
 *   -DTP_ISA_NONE         crnn_isa_available() returns 0 (no scalar bit)
 *   -DTP_LATE=n           the case above triggers only when run with n threads (a later run
 *                         of the batch: the worker's replay meets the mistake, harness/sandbox/replay.py)
 *   -DTP_FTZ_ON_TRIGGER   crnn_linear_backward sets FTZ and DAZ on the case above only
 * and, for the contract tier (harness/contract.py), on every call:
 *   -DTP_NO_ARGCHECK      every argument check removed (crnn_set_isa and crnn_set_threads
 *                         accept anything, the entry points run on whatever they are given)
 *   -DTP_WRITE_BEFORE_REJECT  crnn_linear_forward writes y[0] before it returns CRNN_E_ARG
 *   -DTP_EMPTY_DOT_NEGZERO    crnn_dot16 gives -0 for n = 0 (a dot of 0 terms is +0)
 *   -DTP_MODIFY_ON_REJECT     crnn_linear_backward changes its const input x[0] when it
 *                             returns CRNN_E_ARG for a negative size
 *   -DTP_HANG_ON_REJECT       crnn_dot16 never returns when n < 0
 *   -DTP_THREADS_IGNORED      crnn_set_threads returns CRNN_OK and keeps 1 thread
 *                             (crnn_get_threads() is 1 whatever was set)
 *   -DTP_NULL_FROM_2          crnn_dot16 refuses a NULL a or b only when n > 1 (one term
 *                             too late: it reads through the NULL at n = 1)
 *   -DTP_EVERY_CASE       every case of linear is "the case above" (e.g. with -DTP_HANG: a
 *                         port that hangs in every case of a layer)
 *   -DTP_LATE_WRITE_MS=ms crnn_linear_forward starts a detached thread that writes y[0] ms
 *                         milliseconds after the call returned, on the case above (a missing
 *                         join); with -DTP_LATE_AT=k it writes y[k] instead (k = -1: the
 *                         canary zone before y), with -DTP_LATE_NULL through a null pointer
 */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "crnn_port.h"

#ifndef TP_ABI
#define TP_ABI CRNN_ABI_VERSION
#endif

#if defined(TP_FTZ_ON_LOAD) || defined(TP_FTZ_IN_CALL) || defined(TP_FTZ_IN_BACKWARD) || \
    defined(TP_ROUND_IN_BACKWARD) || defined(TP_FTZ_ON_TRIGGER)
#include <xmmintrin.h>
static void set_ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }
static void set_round_toward_zero(void) { _mm_setcsr(_mm_getcsr() | 0x6000); }
#endif
#ifdef TP_FTZ_ON_LOAD
__attribute__((constructor)) static void on_load(void) { set_ftz_daz(); }
#endif

#ifdef TP_PRINT
__attribute__((constructor)) static void say_hello(void)
{
    printf("testport: loaded (stdout)\n");
    fprintf(stderr, "testport: loaded (stderr)\n");
}
#define SAY(what, T, I, O) (printf("testport: %s T=%d I=%d O=%d\n", what, T, I, O), \
                            fprintf(stderr, "testport: %s on stderr\n", what))
#else
#define SAY(what, T, I, O) ((void)0)
#endif

static int g_threads = 1;

#ifdef TP_LATE_WRITE_MS
#include <pthread.h>
#ifndef TP_LATE_AT
#define TP_LATE_AT 0
#endif
static void *write_late(void *y)
{
    usleep((TP_LATE_WRITE_MS) * 1000);
#ifdef TP_LATE_NULL
    y = NULL;
#endif
    ((volatile float *)y)[TP_LATE_AT] = 12345.0f;
    return NULL;
}
static void start_late_write(float *y)
{
    pthread_t t;
    if (pthread_create(&t, NULL, write_late, y) == 0) pthread_detach(t);
}
#endif

int32_t crnn_abi_version(void) { return TP_ABI; }
#ifdef TP_ISA_NONE
uint32_t crnn_isa_available(void) { return 0; }
#else
uint32_t crnn_isa_available(void) { return 1u << CRNN_ISA_SCALAR; }
#endif
#ifdef TP_NO_ARGCHECK
#define REJECT_IF(cond) ((void)0)
#else
#define REJECT_IF(cond) do { if (cond) return CRNN_E_ARG; } while (0)
#endif

int32_t crnn_set_isa(int32_t isa)
{
    REJECT_IF(isa < 0 || isa > CRNN_ISA_AVX512);
#ifdef TP_NO_ARGCHECK
    return CRNN_OK;
#endif
    return isa == CRNN_ISA_SCALAR ? CRNN_OK : CRNN_E_ISA;
}
int32_t crnn_get_isa(void) { return CRNN_ISA_SCALAR; }
int32_t crnn_set_threads(int32_t n)
{
    REJECT_IF(n < 1 || n > 256);
#ifndef TP_THREADS_IGNORED
    g_threads = n;
#endif
    return CRNN_OK;
}
#ifndef TP_OMIT
int32_t crnn_get_threads(void) { return g_threads; }
#endif

/* dot16 with strides: term k is a[k*sa] * b[k*sb], into lane k mod 16, then the tree. */
static float dot16s(const float *a, int64_t sa, const float *b, int64_t sb, int64_t n)
{
    float p[16] = {0};
    for (int64_t k = 0; k < n; k++)
        p[k % 16] = fmaf(a[k * sa], b[k * sb], p[k % 16]);
    for (int s = 8; s >= 1; s >>= 1)
        for (int i = 0; i < s; i++)
            p[i] = p[i] + p[i + s];
    return p[0];
}

#ifndef TP_OMIT
int32_t crnn_dot16(const float *a, const float *b, int64_t n, float *out)
{
#ifdef TP_HANG_ON_REJECT
    if (n < 0) for (;;) sleep(1);
#endif
#ifdef TP_NULL_FROM_2
    REJECT_IF(n < 0 || !out || (n > 1 && (!a || !b)));
#else
    REJECT_IF(n < 0 || !out || (n > 0 && (!a || !b)));
#endif
    *out = dot16s(a, 1, b, 1, n);
#ifdef TP_EMPTY_DOT_NEGZERO
    if (n == 0) *out = -0.0f;
#endif
    return CRNN_OK;
}
#endif

#ifndef TP_DOT16_ONLY
int32_t crnn_linear_forward(const float *x, const float *W, const float *b,
                            int32_t T, int32_t I, int32_t O, float *y)
{
#ifdef TP_WRITE_BEFORE_REJECT
    if (y && (T < 0 || I < 0 || O < 0 || !x || !W || !b)) y[0] = 0.0f;
#endif
    REJECT_IF(T < 0 || I < 0 || O < 0 || !x || !W || !b || !y);
    int trigger = T == 16 && I == 37 && O == 37;
#ifdef TP_EVERY_CASE
    trigger = 1;
#endif
#ifdef TP_LATE
    trigger = trigger && g_threads == (TP_LATE);
#endif
    (void)trigger;
    SAY("linear_forward", T, I, O);
#ifdef TP_FTZ_IN_CALL
    set_ftz_daz();
#endif
    for (int64_t t = 0; t < T; t++)
        for (int64_t o = 0; o < O; o++)
            y[t * O + o] = dot16s(x + t * I, 1, W + o * I, 1, I) + b[o];
#ifdef TP_ULP_AT_THREADS
    if (T > 0 && O > 0 && g_threads == (TP_ULP_AT_THREADS)) {
        uint32_t u;
        memcpy(&u, y, 4);
        u ^= 1u;
        memcpy(y, &u, 4);
    }
#endif
#ifdef TP_OOB_Y
    if (trigger) y[(TP_OOB_Y) > 0 ? (int64_t)T * O - 1 + (TP_OOB_Y) : (TP_OOB_Y)] = 1.0f;
#endif
#ifdef TP_MODIFY_W
    if (trigger && ((TP_MODIFY_W) == 0 || g_threads == (TP_MODIFY_W))) ((float *)W)[3 * I + 5] += 1.0f;
#endif
#ifdef TP_MODIFY_B
    if (trigger) ((float *)b)[2] = -b[2];
#endif
#ifdef TP_LATE_WRITE_MS
    if (trigger) start_late_write(y);
#endif
#ifdef TP_PRINT_BYTES
    if (trigger)
        for (int i = 0; i < (TP_PRINT_BYTES); i++) putchar(i % 64 == 63 ? '\n' : 'x');
#endif
    return CRNN_OK;
}

#ifndef TP_OMIT
int32_t crnn_linear_backward(const float *x, const float *W, const float *dY,
                             int32_t T, int32_t I, int32_t O,
                             float *dx, float *dW, float *db)
{
    static const float one = 1.0f;
#ifdef TP_MODIFY_ON_REJECT
    if (x && (T < 0 || I < 0 || O < 0)) ((float *)x)[0] += 1.0f;
#endif
    REJECT_IF(T < 0 || I < 0 || O < 0 || !x || !W || !dY || !dW || !db);
    int trigger = T == 16 && I == 37 && O == 37;
#ifdef TP_EVERY_CASE
    trigger = 1;
#endif
#ifdef TP_LATE
    trigger = trigger && g_threads == (TP_LATE);
#endif
    (void)trigger;
    SAY("linear_backward", T, I, O);
#ifdef TP_BACKWARD_ERR
    if (trigger) return CRNN_E_UNSUPPORTED;
#endif
#ifdef TP_FTZ_IN_BACKWARD
    set_ftz_daz();
#endif
#ifdef TP_FTZ_ON_TRIGGER
    if (trigger) set_ftz_daz();
#endif
#ifdef TP_ROUND_IN_BACKWARD
    set_round_toward_zero();
#endif
#ifdef TP_SEGV
    if (trigger) { volatile uintptr_t addr = 0; *(volatile int *)addr = 1; }
#endif
#ifdef TP_SEGV_THREADS
    if (trigger && g_threads == (TP_SEGV_THREADS)) { volatile uintptr_t addr = 0; *(volatile int *)addr = 1; }
#endif
#ifdef TP_ABORT
    if (trigger) abort();
#endif
#ifdef TP_HANG
    if (trigger) for (;;) sleep(1);
#endif
#ifdef TP_HANG_THREADS
    if (trigger && g_threads == (TP_HANG_THREADS)) for (;;) sleep(1);
#endif
#ifdef TP_SLEEP_MS
    if (trigger) usleep((TP_SLEEP_MS) * 1000);
#endif
#ifdef TP_ERRCODE
    if (trigger) return CRNN_E_NOMEM;
#endif
    for (int64_t o = 0; o < O; o++) {
        for (int64_t i = 0; i < I; i++)
            dW[o * I + i] = dot16s(dY + o, O, x + i, I, T);
#ifdef TP_UNWRITTEN
        if (trigger && o == O - 1) continue;   /* db[O-1] is never written */
#endif
        db[o] = dot16s(dY + o, O, &one, 0, T);
    }
    if (dx)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < I; i++)
                dx[t * I + i] = dot16s(dY + t * O, 1, W + i, I, O);
#ifdef TP_PERTURB
    if (O > 3)
        for (int64_t i = 0; i < I; i++) dW[3 * I + i] *= 1.0f + (TP_PERTURB);
#endif
#ifdef TP_NAN
    if (trigger) dW[1 * I + 2] = NAN;
#endif
#ifdef TP_OOB_DB
    if (trigger) db[O - 1 + (TP_OOB_DB)] = 1.0f;
#endif
#ifdef TP_OOB_DW_FAR
    if (T == 16 && I == 128 && O == 48) dW[(int64_t)O * I + 4096] = 1.0f;
#endif
    return CRNN_OK;
}
#endif

/* Everything else: a valid request this port does not implement. */
#define UNSUPPORTED(name, ...) int32_t name(__VA_ARGS__) { return CRNN_E_UNSUPPORTED; }
UNSUPPORTED(crnn_conv_forward, const float *x, int32_t H, int32_t W, int32_t C, const float *Wt,
            const float *b, int32_t Out, int32_t kh, int32_t kw, int32_t padH, int32_t padW,
            int32_t poolH, int32_t poolW, float *conv, float *pooled, int32_t *winners)
UNSUPPORTED(crnn_conv_backward, const float *x, int32_t H, int32_t W, int32_t C, const float *Wt,
            int32_t Out, int32_t kh, int32_t kw, int32_t padH, int32_t padW, int32_t poolH,
            int32_t poolW, const float *dPooled, const int32_t *winners, float *dW, float *db,
            float *dx)
UNSUPPORTED(crnn_lstm_forward, const float *x, int32_t T, int32_t I, int32_t H, const float *W_ih,
            const float *W_hh, const float *b, float *out, float *gates, float *c, float *tc,
            float *hPrev)
UNSUPPORTED(crnn_lstm_backward, const float *x, int32_t T, int32_t I, int32_t H,
            const float *W_ih, const float *W_hh, const float *gates, const float *c,
            const float *tc, const float *hPrev, const float *dOut, float *dW_ih, float *dW_hh,
            float *db, float *dx)
UNSUPPORTED(crnn_sigmoid, const float *x, int64_t n, float *y)
UNSUPPORTED(crnn_tanh, const float *x, int64_t n, float *y)
UNSUPPORTED(crnn_detmath_exp, const double *x, int64_t n, double *y)
UNSUPPORTED(crnn_detmath_log, const double *x, int64_t n, double *y)
UNSUPPORTED(crnn_ctc, const float *logits, int32_t T, int32_t K, const int32_t *target, int32_t L,
            double scale, double *loss, float *dlogits)
UNSUPPORTED(crnn_model_sizes, const int32_t *cfg, int32_t *nTensors, int64_t *sizes)
UNSUPPORTED(crnn_step_gradients, const int32_t *cfg, const float *params, int32_t B,
            const int32_t *widths, const float *images, const int32_t *targetLens,
            const int32_t *targets, float *grads, double *losses, double *batchLoss)
UNSUPPORTED(crnn_clip_gradients, float *grads, const int64_t *sizes, int32_t nTensors,
            double limit, int32_t enabled, double *norm)
UNSUPPORTED(crnn_adamw, float *p, float *m, float *v, const float *g, int64_t n, double lr,
            double beta1, double beta2, double eps, double wd, int32_t decay, double b1t,
            double b2t)
#endif /* TP_DOT16_ONLY */
