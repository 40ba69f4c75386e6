/* scratch.c — per-thread scratch buffers, kept between calls.
 *
 * A layer call needs working memory of a size fixed by its shapes (im2col, dz, packed
 * panels); allocating and releasing megabytes per call costs page faults every time. Each
 * thread keeps one buffer per slot and grows it when a call needs more; the buffers are
 * released when the thread exits. Slots are nested by purpose (core.h), so a layer's buffer
 * and the gemm packing inside it never share one. Only memory is reused: every call writes
 * what it reads, so no value crosses calls. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "core.h"

typedef struct {
    void *p;
    size_t n;
} slot_t;

static _Thread_local slot_t slots[CRNN_SCRATCH_SLOTS];
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void release(void *arg)
{
    slot_t *s = arg;
    for (int i = 0; i < CRNN_SCRATCH_SLOTS; i++) {
        free(s[i].p);
        s[i].p = NULL;
        s[i].n = 0;
    }
}

static void make_key(void) { pthread_key_create(&key, release); }

/* Large buffers (the batch's line gradients and activations, the LSTM's whole-batch
 * arrays) on 2 MiB pages where the kernel offers them on request: the whole 2 MiB extents
 * inside the buffer, so no memory beyond it is touched or counted. Placement only. */
#define HUGE_BYTES ((size_t)2 << 20)
static void huge_pages(void *p, size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (!p || n < 2 * HUGE_BYTES) return;
    const uintptr_t a = ((uintptr_t)p + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_BYTES - 1);
    if (e > a) madvise((void *)a, e - a, MADV_HUGEPAGE);   /* advice: failure changes nothing */
#else
    (void)p;
    (void)n;
#endif
}

void *crnn_scratch(int slot, size_t bytes)
{
    slot_t *s = &slots[slot];
    if (bytes == 0) bytes = 1;
    if (s->n < bytes) {
        pthread_once(&key_once, make_key);
        pthread_setspecific(key, slots);
        free(s->p);
        /* on a cache line: a 512-bit access to a row of a buffer (dcol's lane rows, the
         * lists, the packed panels) then crosses no line boundary that malloc's placement
         * would decide (the conv backward's entry took 17 % longer in processes where it
         * did) */
        if (posix_memalign(&s->p, 64, bytes)) s->p = NULL;
        s->n = s->p ? bytes : 0;
        huge_pages(s->p, s->n);
    }
    return s->p;
}
