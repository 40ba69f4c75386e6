/* fpenv.c — the worker's C helper (harness/sandbox/fpenv.py): the fault address of a
   SIGSEGV / SIGBUS, the guard checks around a port call in one call, and the
   floating-point control register. Compiled with replay.c appended (fpenv.helper_source). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__) && defined(__x86_64__)
#include <ucontext.h>
#endif
/* SIGSEGV / SIGBUS: record the fault address (and on x86-64 Linux whether it was a write) in
   the slot shared with the gate, then let the default action end the process: SA_RESETHAND
   restored it, so returning repeats the faulting access; a signal sent by kill/raise is
   raised again. */
static volatile uint64_t *g_fault;
static void on_fault(int sig, siginfo_t *si, void *ctx)
{
    uint64_t flags = 1;
#if defined(__linux__) && defined(__x86_64__)
    if (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) flags |= 2;
#else
    (void)ctx;
#endif
    if (g_fault) { g_fault[0] = (uint64_t)(uintptr_t)si->si_addr; g_fault[1] = flags; }
    if (si->si_code <= 0) raise(sig);
}
int32_t crnn_h_catch_faults(uint64_t *slot)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    g_fault = slot;
    return sigaction(SIGSEGV, &sa, 0) == 0 && sigaction(SIGBUS, &sa, 0) == 0 ? 0 : -1;
}
/* The guard checks around a port call (harness/sandbox/guard.py) in one call: rec holds five
   addresses a buffer, {zone_lo, lo, hi, zone_hi, ref}. Both canary zones must hold
   `pattern`, and when ref is not 0 the data [lo, hi) must equal the bytes at ref (a const
   argument). -> the index of the first buffer that fails, or -1. */
int32_t crnn_h_guard_check(const uint64_t *rec, int32_t n, const uint8_t *pattern)
{
    for (int32_t i = 0; i < n; i++) {
        const uint64_t *r = rec + 5 * (int64_t)i;
        if (memcmp((const void *)(uintptr_t)r[0], pattern, r[1] - r[0]) != 0
            || memcmp((const void *)(uintptr_t)r[2], pattern, r[3] - r[2]) != 0
            || (r[4] && memcmp((const void *)(uintptr_t)r[1], (const void *)(uintptr_t)r[4],
                               r[2] - r[1]) != 0))
            return i;
    }
    return -1;
}
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
int32_t crnn_h_arch(void) { return 1; }
uint32_t crnn_h_fpcsr(void) { return _mm_getcsr(); }
void crnn_h_set_fpcsr(uint32_t v) { _mm_setcsr(v); }
#elif defined(__aarch64__)
int32_t crnn_h_arch(void) { return 2; }
uint32_t crnn_h_fpcsr(void) { uint64_t v; __asm__ volatile("mrs %0, fpcr" : "=r"(v)); return (uint32_t)v; }
void crnn_h_set_fpcsr(uint32_t v) { uint64_t x = v; __asm__ volatile("msr fpcr, %0" : : "r"(x)); }
#else
int32_t crnn_h_arch(void) { return 0; }
uint32_t crnn_h_fpcsr(void) { return 0; }
void crnn_h_set_fpcsr(uint32_t v) { (void)v; }
#endif
