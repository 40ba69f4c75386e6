/* threads.c — parallel_for over contiguous chunks of independent outputs, on a persistent pool.
 *
 * Workers are started once (when a call first needs them) and then wait for work: a call
 * costs a wake-up, not a pthread_create. What a call computes is unchanged: [0, n) is split
 * into min(threads, n) contiguous chunks, chunk 0 on the calling thread, chunk c on worker c;
 * every output is still computed whole by one thread, so no bit depends on the split. Inside
 * a chunk (a layer call inside one line of the batch gradient) a call sees one thread
 * (crnn_current_threads) and runs as it does at one thread, fn(ctx, 0, n) here. A
 * parallel_for issued while another thread holds the pool runs its chunks one after
 * another on the calling thread: the same chunks, the same bits.
 *
 * Workers run each chunk with the caller's floating-point control word (MXCSR on x86:
 * rounding mode, FTZ/DAZ), as a thread created by the caller would have inherited it.
 * A worker polls briefly for its next chunk before it sleeps (not when there are more
 * threads than processors). After fork() the child starts with no workers. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include "core.h"
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HAVE_MXCSR 1
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define MAX_THREADS 256
#define SPIN_POLLS 4000      /* polls before sleeping (about 0.1 ms) */

typedef struct {
    crnn_range_fn fn;
    void *ctx;
    int64_t n, per;
    unsigned int fpcsr;
} job_t;

typedef struct {
    atomic_uint posted;          /* bumped when this worker has a chunk to run */
    atomic_int sleeping;
    int chunk;
    char pad[64];
} slot_t;

static pthread_mutex_t use_lock = PTHREAD_MUTEX_INITIALIZER;   /* one job at a time */
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake_cond = PTHREAD_COND_INITIALIZER;
static job_t job;
static slot_t slots[MAX_THREADS];
static atomic_int pending;           /* chunks handed to workers and not finished yet */
static int nworkers;                 /* started workers: slots 1 .. nworkers */
static atomic_int spin_polls = SPIN_POLLS;
static long ncpus;
static _Thread_local int in_chunk;   /* this thread is running a chunk */

int crnn_in_chunk(void) { return in_chunk; }

static void run_chunk(const job_t *j, int c)
{
    int64_t b = c * j->per < j->n ? c * j->per : j->n;
    int64_t e = (c + 1) * j->per < j->n ? (c + 1) * j->per : j->n;
    if (b < e) j->fn(j->ctx, b, e);
}

static void *worker_main(void *arg)
{
    slot_t *s = arg;
    unsigned int seen = 0;
    in_chunk = 1;
    for (;;) {
        int polls = 0;
        while (atomic_load(&s->posted) == seen) {
            if (++polls < spin_polls) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&wake_lock);
            atomic_store(&s->sleeping, 1);
            while (atomic_load(&s->posted) == seen) pthread_cond_wait(&wake_cond, &wake_lock);
            atomic_store(&s->sleeping, 0);
            pthread_mutex_unlock(&wake_lock);
        }
        seen = atomic_load(&s->posted);
#ifdef HAVE_MXCSR
        unsigned int saved = _mm_getcsr();
        _mm_setcsr(job.fpcsr);
        run_chunk(&job, s->chunk);
        _mm_setcsr(saved);
#else
        run_chunk(&job, s->chunk);
#endif
        atomic_fetch_sub(&pending, 1);
    }
    return NULL;
}

static void after_fork_child(void)
{
    pthread_mutex_init(&use_lock, NULL);
    pthread_mutex_init(&wake_lock, NULL);
    pthread_cond_init(&wake_cond, NULL);
    for (int i = 0; i < MAX_THREADS; i++) {
        atomic_store(&slots[i].posted, 0);
        atomic_store(&slots[i].sleeping, 0);
    }
    nworkers = 0;
    atomic_store(&pending, 0);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void pool_init(void)
{
    ncpus = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* Starts workers up to `want`; returns how many exist (fewer if the system refuses). */
static int ensure_workers(int want)
{
    pthread_once(&init_once, pool_init);
    while (nworkers < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        slot_t *s = &slots[nworkers + 1];
        atomic_store(&s->posted, 0);
        int rc = pthread_create(&t, &attr, worker_main, s);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        nworkers++;
    }
    return nworkers;
}

static void run_serially(int64_t n, int t, crnn_range_fn fn, void *ctx)
{
    job_t j = {fn, ctx, n, (n + t - 1) / t, 0};
    for (int c = 0; c < t; c++) run_chunk(&j, c);
}

void crnn_parallel_for_work(int64_t n, int64_t work, crnn_range_fn fn, void *ctx)
{
    if (work < CRNN_SMALL_WORK) {
        if (n > 0) fn(ctx, 0, n);
    } else {
        crnn_parallel_for(n, fn, ctx);
    }
}

void crnn_parallel_for(int64_t n, crnn_range_fn fn, void *ctx)
{
    int t = crnn_current_threads();
    if (t > n) t = (int)n;
    if (t <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    if (t > MAX_THREADS) t = MAX_THREADS;
    if (pthread_mutex_trylock(&use_lock) != 0) {   /* (inside a chunk t is 1: returned above) */
        run_serially(n, t, fn, ctx);
        return;
    }
    if (ensure_workers(t - 1) < t - 1) {   /* could not start threads: same chunks, here */
        pthread_mutex_unlock(&use_lock);
        run_serially(n, t, fn, ctx);
        return;
    }
    atomic_store(&spin_polls, ncpus > 0 && t > ncpus ? 0 : SPIN_POLLS);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.per = (n + t - 1) / t;
#ifdef HAVE_MXCSR
    job.fpcsr = _mm_getcsr();
#endif
    atomic_store(&pending, t - 1);
    for (int c = 1; c < t; c++) {
        slots[c].chunk = c;
        atomic_fetch_add(&slots[c].posted, 1);
    }
    /* The flags are read under wake_lock, which a worker holds from setting its flag until
     * its wait: either it takes the lock after us and sees its chunk posted, or we see its
     * flag and wake it. (Read outside the lock, it relied on a store-load fence between a
     * flag and `posted` on both sides, which an emulator's translation may not give: a run
     * under qemu-user hung once at 2 threads.) */
    pthread_mutex_lock(&wake_lock);
    int wake = 0;
    for (int c = 1; c < t; c++) wake |= atomic_load(&slots[c].sleeping);
    if (wake) pthread_cond_broadcast(&wake_cond);
    pthread_mutex_unlock(&wake_lock);
    in_chunk = 1;
    run_chunk(&job, 0);
    in_chunk = 0;
    int polls = 0;
    while (atomic_load(&pending) > 0) {
        if (++polls < spin_polls) CPU_RELAX();
        else sched_yield();
    }
    pthread_mutex_unlock(&use_lock);
}
