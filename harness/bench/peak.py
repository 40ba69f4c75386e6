"""The core's fused multiply-add peak on each ISA path: what the step's GFLOP/s is read against.

A harness-side helper (not part of any port) runs, on each of `threads` threads at once,
twelve independent chains of fused multiply-adds in the path's registers (scalar: one float,
sse: 4, avx2: 8, avx512: 16, neon: 4), enough chains to cover the fma latency on two units;
the best of five runs.
Nothing else is in the loop but its counter, so the rate is the most that path's dots could
reach: 2 flops per lane per fma. A path the compiler cannot target, a CPU without the fma
instructions (the scalar path then does its fmas in software), or a machine without a C
compiler has no peak; the bench then prints the GFLOP/s alone."""
from __future__ import annotations

import ctypes

# ISA numbers as in crnn_port.h (abi.ISA_NAMES). Each loop: n iterations of 12 fmas.
FMA_PEAK_SOURCE = r"""
#include <pthread.h>
#include <time.h>
#define CHAINS(F) F(x0) F(x1) F(x2) F(x3) F(x4) F(x5) F(x6) F(x7) F(x8) F(x9) F(x10) F(x11)
#define KEEP(c) __asm__ volatile("" : c(x0), c(x1), c(x2), c(x3), c(x4), c(x5), c(x6), \
                                 c(x7), c(x8), c(x9), c(x10), c(x11));
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOP(name, attr, T, set1, c)                                                       \
    attr static float name(long n)                                                       \
    {                                                                                    \
        T a = set1(1.0000001f), b = set1(0.9999999f);                                    \
        T x0 = set1(0.0f), x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0, \
          x8 = x0, x9 = x0, x10 = x0, x11 = x0;                                          \
        for (long i = 0; i < n; i++) {                                                   \
            CHAINS(STEP)                                                                 \
            KEEP(c)                                                                      \
        }                                                                                \
        float o[16];                                                                     \
        __builtin_memcpy(o, &x0, sizeof(float));                                         \
        return o[0];                                                                     \
    }
#define STEP(x) x = FMA(a, x, b);
#define FMA _mm_fmadd_ss
LOOP(loop_scalar, __attribute__((target("fma"))), __m128, _mm_set1_ps, "+x")
#undef FMA
#define FMA _mm_fmadd_ps
LOOP(loop_sse, __attribute__((target("sse4.2,fma"))), __m128, _mm_set1_ps, "+x")
#undef FMA
#define FMA _mm256_fmadd_ps
LOOP(loop_avx2, __attribute__((target("avx2,fma"))), __m256, _mm256_set1_ps, "+x")
#undef FMA
#define FMA _mm512_fmadd_ps
LOOP(loop_avx512, __attribute__((target("avx512f"))), __m512, _mm512_set1_ps, "+v")
#undef FMA
static float (*const loops[5])(long) = {loop_scalar, loop_sse, loop_avx2, loop_avx512, 0};
static const int lanes[5] = {1, 4, 8, 16, 0};
/* the scalar path runs on any x86-64, its fma in software where the CPU has no FMA3: no
 * hardware peak to measure there (and the loop would fault) */
static int has_loop(int isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case 0: return __builtin_cpu_supports("fma");
    case 1: return __builtin_cpu_supports("fma") && __builtin_cpu_supports("sse4.2");
    case 2: return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
    case 3: return __builtin_cpu_supports("avx512f");
    default: return 0;
    }
}
#elif defined(__aarch64__)
#include <arm_neon.h>
static float loop_scalar(long n)
{
    float a = 1.0000001f, b = 0.9999999f, x0 = 0, x1 = 0, x2 = 0, x3 = 0, x4 = 0, x5 = 0,
          x6 = 0, x7 = 0, x8 = 0, x9 = 0, x10 = 0, x11 = 0;
#define STEP(x) x = __builtin_fmaf(a, x, b);
    for (long i = 0; i < n; i++) {
        CHAINS(STEP)
        KEEP("+w")
    }
#undef STEP
    return x0;
}
static float loop_neon(long n)
{
    float32x4_t a = vdupq_n_f32(1.0000001f), b = vdupq_n_f32(0.9999999f), x0 = vdupq_n_f32(0),
                x1 = x0, x2 = x0, x3 = x0, x4 = x0, x5 = x0, x6 = x0, x7 = x0, x8 = x0,
                x9 = x0, x10 = x0, x11 = x0;
#define STEP(x) x = vfmaq_f32(b, a, x);
    for (long i = 0; i < n; i++) {
        CHAINS(STEP)
        KEEP("+w")
    }
#undef STEP
    return vgetq_lane_f32(x0, 0);
}
static float (*const loops[5])(long) = {loop_scalar, 0, 0, 0, loop_neon};
static const int lanes[5] = {1, 0, 0, 0, 4};
static int has_loop(int isa) { return isa == 0 || isa == 4; }
#else
static float (*const loops[5])(long) = {0, 0, 0, 0, 0};
static const int lanes[5] = {0, 0, 0, 0, 0};
static int has_loop(int isa) { (void)isa; return 0; }
#endif

typedef struct { float (*fn)(long); long n; volatile float out; } job_t;
static void *run(void *p)
{
    job_t *j = p;
    j->out = j->fn(j->n);
    return 0;
}
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* seconds for n iterations on each of `threads` threads at once; < 0 when it cannot run */
static double timed(int isa, int threads, long n)
{
    pthread_t th[64];
    job_t jobs[64];
    if (threads < 1 || threads > 64) return -1.0;
    const double t0 = now();
    for (int i = 0; i < threads; i++) {
        jobs[i].fn = loops[isa];
        jobs[i].n = n;
        if (i > 0 && pthread_create(&th[i], 0, run, &jobs[i])) return -1.0;
    }
    run(&jobs[0]);
    for (int i = 1; i < threads; i++) pthread_join(th[i], 0);
    return now() - t0;
}
/* GFLOP/s of `threads` threads of the ISA's fma chains, the best of five runs of about
 * `seconds` each (a peak: another process taking a core for a moment lowers one run, nothing
 * raises it); 0 when the path has no loop here or the CPU lacks its instructions */
double crnn_h_fma_peak(int isa, int threads, double seconds)
{
    if (isa < 0 || isa > 4 || !loops[isa] || !has_loop(isa)) return 0.0;
    long n = 1 << 16;
    double t = timed(isa, 1, n);
    while (t >= 0.0 && t < 0.02) {       /* calibrate on one thread */
        n *= 4;
        t = timed(isa, 1, n);
    }
    if (t < 0.0) return 0.0;
    n = (long)((double)n * seconds / t) + 1;
    double best = 0.0;
    for (int run = 0; run < 5; run++) {
        t = timed(isa, threads, n);
        if (t <= 0.0) return 0.0;
        const double rate = 2.0 * 12.0 * lanes[isa] * (double)n * threads / t / 1e9;
        best = rate > best ? rate : best;
    }
    return best;
}
"""


def fma_peak(isas, threads, seconds: float = 0.1, cc=None) -> dict | None:
    """{isa: {threads: GFLOP/s}} of the fma chains for each ISA path named (they must be
    paths this CPU has) and thread count; None without a compiler or where the helper does
    not build; a path with no loop here is left out."""
    from ...ctypes_kernels import abi
    from ...ctypes_kernels.build import BuildError, build_helper
    try:
        lib = ctypes.CDLL(str(build_helper("crnnfmapeak", FMA_PEAK_SOURCE, cc)))
    except (BuildError, OSError):
        return None
    fn = lib.crnn_h_fma_peak
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int, ctypes.c_int, ctypes.c_double]
    out = {}
    for isa in isas:
        rates = {t: fn(abi.ISA_NAMES.index(isa), int(t), seconds) for t in threads}
        if all(r > 0 for r in rates.values()):
            out[isa] = rates
    return out
