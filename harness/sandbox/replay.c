/* replay.c — the worker's repeat runs of one case, in C (harness/sandbox/replay.py).
 *
 * The worker runs a case on every ISA path x thread count. The first run goes through the
 * layer's Python module, every call checked (harness/sandbox/worker.py, harness/sandbox/guard.py), and is
 * recorded as a tape: each port call with its arguments, each copy the module made between
 * buffers, the guard checks of each call, and the content each buffer had when the run
 * first used it. crnn_h_replay plays that tape once per further run, on the same buffers:
 * the same calls on the same addresses, with the same checks the Python path makes around
 * each call (floating-point environment before and after, guard zones, const arguments
 * against their references, the entry point in progress and the guard-page table in shared
 * memory), then the run's end checks, and compares every buffer the run wrote with the
 * first run's. A run that differs, or printed, or failed any check, stops the replay: the
 * worker redoes it, and the runs after it, in Python, which gives the exact answer and
 * message the gate reports. This file is appended to the harness helper's source
 * (harness/sandbox/fpenv.py), after crnn_port.h, so the casts below are checked against the ABI's
 * prototypes. */
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The entry points a layer run may call (enum E_*, in the order of replay.py's ENTRIES) and
 * RP_CASES, the switch's case for each with its prototype's argument kinds, are generated
 * from the layer table by replay.py (entries_c) and come before this file. */

/* The reasons a replay stops early (replay.py: STOPS). */
enum { STOP_NONE, STOP_SETUP, STOP_FPENV, STOP_RC, STOP_GUARD, STOP_FINISH, STOP_PRINTED,
       STOP_DIFFERS };

#define RP_ARGS 18
#define RP_DBL 8

typedef struct {
    int64_t kind;          /* 0: a port call, 1: a copy between buffers */
    int64_t entry;         /* E_*: the call's entry point */
    void *fn;              /* its address */
    const char *name;      /* its name (for shared.current) */
    const char *table;     /* the guard-page table of the call's buffers */
    int64_t restore[2];    /* [first, count] of rp_tape.restore: buffers first used here */
    int64_t snap[2];       /* [first, count] of rp_tape.snap: const outputs copied before */
    int64_t check[2];      /* [first, count] of rp_tape.check: the records checked after */
    int64_t a[RP_ARGS];    /* integer and pointer arguments, in order; a copy: dst, src, n */
    double d[RP_DBL];      /* double arguments, in order */
} rp_op;

typedef struct {
    rp_op *ops;
    int64_t n_ops;
    const uint64_t *restore;   /* {dst, src, bytes} a record */
    const uint64_t *snap;      /* {dst, src, bytes} a record */
    const uint64_t *check;     /* {zone_lo, lo, hi, zone_hi, ref} a record (crnn_h_guard_check) */
    const uint64_t *finish;    /* the run's end check: every buffer, inputs against originals */
    int64_t n_finish;
    const uint64_t *compare;   /* {lo, first run's copy, bytes}: every buffer the run writes */
    int64_t n_compare;
    void *set_isa, *set_threads;
    const uint8_t *pattern;    /* the canary pattern */
    int64_t out_fd;            /* the worker's stdout/stderr file */
    volatile double *progress; /* shared: [run index, its start, seconds of held run i at 2+i] */
    char *current;             /* shared: the entry point in progress (128 bytes) */
    char *shared_table;        /* shared: the guard-page table of the call in progress */
} rp_tape;

/* sizeof(rp_op) * 1000 + sizeof(rp_tape): replay.py lays them out with NumPy and checks. */
int64_t crnn_h_replay_layout(void) { return (int64_t)sizeof(rp_op) * 1000 + (int64_t)sizeof(rp_tape); }

static int fp_ok(void)
{
#if defined(__x86_64__) || defined(__i386__)
    uint32_t v = crnn_h_fpcsr();
    return !(v & (1u << 15 | 1u << 6 | 3u << 13)) && (v & 0x1F80) == 0x1F80;
#elif defined(__aarch64__)
    return !(crnn_h_fpcsr() & (1u << 24 | 3u << 22 | 0x9F00));
#else
    return 0;
#endif
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define P(i) ((void *)(uintptr_t)op->a[i])
#define I(i) ((int32_t)op->a[i])
#define L(i) (op->a[i])
#define D(i) (op->d[i])
#define CALL(f) ((__typeof__(&f))op->fn)

static int32_t call(const rp_op *op)
{
    switch (op->entry) {
    RP_CASES
    }
    return CRNN_E_ARG;
}

static void copy_records(const uint64_t *rec, int64_t n)
{
    for (int64_t i = 0; i < n; i++, rec += 3)
        memcpy((void *)(uintptr_t)rec[0], (const void *)(uintptr_t)rec[1], rec[2]);
}

/* {dst, src, bytes} records, copied in order (replay.py: the first run's outputs kept, and put
 * back after a replay that stopped). */
void crnn_h_copy_records(const uint64_t *rec, int64_t n) { copy_records(rec, n); }

static void set_current(const rp_tape *t, const char *name)
{
    size_t n = strlen(name);
    if (n > 127) n = 127;
    memcpy(t->current, name, n);
    t->current[n] = 0;
}

/* A traced call with the Python path's checks around it (worker._TracedFn). */
static int32_t traced(const rp_tape *t, const rp_op *op, const char **table)
{
    if (!fp_ok()) return STOP_FPENV;
    uint32_t before = crnn_h_fpcsr();
    if (op->table != *table) {
        size_t n = strlen(op->table);
        memcpy(t->shared_table, op->table, n + 1);
        *table = op->table;
    }
    set_current(t, op->name);
    int32_t rc = call(op);
    t->current[0] = 0;
    if (!fp_ok()) {                 /* left as the Python path finds it: the redo breaks it */
        crnn_h_set_fpcsr(before);   /* again in the same call and reports that call */
        return STOP_FPENV;
    }
    if (crnn_h_guard_check(t->check + 5 * op->check[0], (int32_t)op->check[1], t->pattern) >= 0)
        return STOP_GUARD;
    return rc != 0 ? STOP_RC : STOP_NONE;
}

static int32_t control(void *fn, int32_t v)
{
    if (!fp_ok()) return STOP_FPENV;
    uint32_t before = crnn_h_fpcsr();
    int32_t rc = ((int32_t (*)(int32_t))fn)(v);
    if (!fp_ok()) {
        crnn_h_set_fpcsr(before);
        return STOP_FPENV;
    }
    return rc != 0 ? STOP_SETUP : STOP_NONE;
}

static int32_t one_run(const rp_tape *t, int32_t isa, int32_t threads, int64_t *stop_op)
{
    const char *table = "";
    t->shared_table[0] = 0;
    int32_t why = control(t->set_isa, isa);
    if (!why) why = control(t->set_threads, threads);
    if (why) return why;
    for (int64_t k = 0; k < t->n_ops; k++) {
        const rp_op *op = &t->ops[k];
        *stop_op = k;
        copy_records(t->restore + 3 * op->restore[0], op->restore[1]);
        if (op->kind == 1) {
            memmove(P(0), P(1), (size_t)op->a[2]);
            continue;
        }
        copy_records(t->snap + 3 * op->snap[0], op->snap[1]);
        if ((why = traced(t, op, &table))) return why;
    }
    *stop_op = -1;
    if (crnn_h_guard_check(t->finish, (int32_t)t->n_finish, t->pattern) >= 0) return STOP_FINISH;
    fflush(NULL);
    struct stat st;
    if (fstat((int)t->out_fd, &st) == 0 && st.st_size > 0) return STOP_PRINTED;
    for (int64_t i = 0; i < t->n_compare; i++) {
        const uint64_t *c = t->compare + 3 * i;
        if (memcmp((const void *)(uintptr_t)c[0], (const void *)(uintptr_t)c[1], c[2]) != 0)
            return STOP_DIFFERS;
    }
    return STOP_NONE;
}

/* Runs i = first..first+n-1 of a batch (isa[i], threads[i]). -> the number of runs that
 * passed every check with the first run's bits and printed nothing (their seconds in
 * progress[2 + i]); *stop the reason the next one stopped (STOP_NONE: all passed), *stop_op
 * the op it stopped at (-1: after the last). */
int64_t crnn_h_replay(const rp_tape *t, int64_t first, int64_t n, const int32_t *isa,
                      const int32_t *threads, int32_t *stop, int64_t *stop_op)
{
    *stop = STOP_NONE;
    *stop_op = -1;
    for (int64_t r = 0; r < n; r++) {
        int64_t i = first + r;
        if (ftruncate((int)t->out_fd, 0) != 0) { *stop = STOP_SETUP; return r; }
        double t0 = now();
        t->progress[1] = t0;
        t->progress[0] = (double)i;
        int32_t why = one_run(t, isa[i], threads[i], stop_op);
        if (why) { *stop = why; return r; }
        t->progress[2 + i] = now() - t0;
    }
    return n;
}
