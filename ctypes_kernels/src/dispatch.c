/* dispatch.c — ABI version, ISA detection and selection, thread count. */
#include "core.h"

static int g_isa = -1;   /* -1: not chosen yet, use the best available */
static int g_threads = 1;

int32_t crnn_abi_version(void) { return CRNN_ABI_VERSION; }

uint32_t crnn_isa_available(void)
{
    uint32_t m = 1u << CRNN_ISA_SCALAR;
#if CRNN_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("fma")) {
        if (__builtin_cpu_supports("sse4.2")) m |= 1u << CRNN_ISA_SSE;
        if (__builtin_cpu_supports("avx2")) m |= 1u << CRNN_ISA_AVX2;
    }
    if (__builtin_cpu_supports("avx512f")) m |= 1u << CRNN_ISA_AVX512;
#elif defined(__aarch64__)
    m |= 1u << CRNN_ISA_NEON;   /* Advanced SIMD: part of every aarch64 Linux system */
#endif
    return m;
}

static int best_isa(void)
{
    uint32_t m = crnn_isa_available();
    for (int i = CRNN_NISA - 1; i > 0; i--)
        if (m & (1u << i)) return i;
    return CRNN_ISA_SCALAR;
}

int32_t crnn_set_isa(int32_t isa)
{
    if (isa < 0 || isa >= CRNN_NISA) return CRNN_E_ARG;
    if (!(crnn_isa_available() & (1u << isa))) return CRNN_E_ISA;
    g_isa = isa;
    return CRNN_OK;
}

int crnn_current_isa(void)
{
    if (g_isa < 0) g_isa = best_isa();
    return g_isa;
}

int32_t crnn_get_isa(void) { return crnn_current_isa(); }

int crnn_vector_floats(void)
{
    static const int8_t floats[CRNN_NISA] = {1, 4, 8, 16, 4};   /* scalar, sse, avx2, avx512, neon */
    return floats[crnn_current_isa()];
}

int32_t crnn_set_threads(int32_t n)
{
    if (n < 1 || n > 256) return CRNN_E_ARG;
    g_threads = n;
    return CRNN_OK;
}

int32_t crnn_get_threads(void) { return g_threads; }
/* Inside a chunk of a parallel_for the calling thread is the only one a call can use: a
 * layer call there takes its 1-thread path (no product split into chunks run one after
 * another, each packing the same B). */
int crnn_current_threads(void) { return crnn_in_chunk() ? 1 : g_threads; }

int crnn_cpu_has_fma3(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static int known = -1;   /* benign race: every thread computes the same value */
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("fma") ? 1 : 0;
    }
    return known;
#else
    return 0;
#endif
}
