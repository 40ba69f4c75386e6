/* crnn_run.c — crnn-run: a case bundle run on a port where the gate cannot load it.
 *
 *   crnn-run PORT BUNDLE RESULTS [--isa LIST] [--threads LIST] [--timeout S] [--settle S]
 *            [--case GLOB] [--resume] [--results-version 1|2]
 *
 * Plain C99 + POSIX + dlopen, no other library: it builds for any machine with a C compiler
 * (crnn-conformance build-runner, also with a cross compiler). It loads PORT, checks its ABI
 * version (first in a child, so a library whose loading crashes, exits or hangs is one line
 * and exit 2), reads BUNDLE/cases.bin (docs/runner.md has the bundle and results formats) and
 * runs every case on every ISA path the port advertises x every thread count, each run in a
 * forked child leading its own process group, so a crash, a hang, an exit or a process the
 * port leaves behind loses that run only. Around every call it keeps the
 * gate's guarantees where the platform allows: canary zones around every buffer, const
 * arguments compared with their content before the call, outputs poisoned before each run,
 * the floating-point environment checked before and after (rounding and trap enables through
 * fenv.h; FTZ/DAZ through MXCSR on x86-64, FZ through FPCR on aarch64), a case's first and
 * last run looked at again after a settle window (a write after return). What it could not
 * keep on this platform goes into the results file's platform record ("not_kept").
 * Each run record is written as the run goes (every call's record as the call returns) and
 * synced when the run ends; the parent finishes the record of a run the child could not
 * (crash, time limit), keeping the calls it completed. With --resume the runs already
 * recorded in RESULTS are kept and the others are run, so the runner can go on after being
 * killed itself.
 *
 * Exit: 0 every run ok (or not implemented), 1 some run failed (rc, crash, hang, check),
 * 2 cannot run (bad option, unreadable or malformed bundle, port not loadable, ABI version);
 * stopped by SIGTERM, SIGINT or SIGHUP it kills the run in progress and dies of that signal.
 */
#define _POSIX_C_SOURCE 200809L
#if defined(__linux__)
#define _GNU_SOURCE 1          /* fegetexcept (glibc) */
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <fnmatch.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>         /* PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER */
#endif
#include "crnn_port.h"

#define RUNNER_VERSION "1"
#define ZONE 256                 /* canary bytes before and after every buffer */
#define GUARD_MIN 16384          /* a buffer this large also lies between two guard regions */
#define GUARD 65536              /* inaccessible bytes each side (address space only) */
#define MAX_SPANS 4096
#define SETTLE 0.1               /* seconds: a case's last run is looked at again this late */

/* The results file's version: 2 (a written record is the span of bytes the call changed) or
 * 1 (whole buffers); --results-version, or the existing file's under --resume. */
static int g_version = 2;
#define MAX_ARGS 24

typedef struct {
    const char *name, *kinds, *written, *names;
} cr_entry;
typedef union {
    int32_t i;
    int64_t l;
    double d;
    void *p;
} cr_arg;
#include "crnn_entries.h"

#define N_ISAS 5
static const char *const ISA_NAMES[N_ISAS] = {"scalar", "sse", "avx2", "avx512", "neon"};
enum { ST_OK, ST_RC, ST_CRASH, ST_TIMEOUT, ST_MISSING, ST_CHECK };
enum { F_CANARY = 1, F_CONST = 2, F_FPENV = 4, F_POISON = 8 };

/* ---- small utilities ---------------------------------------------------------------- */

/* In a child of crnn-run (the port's trial load, a run): its shared flag saying that the
 * runner itself gave up there (its one line is on stderr), not the port. */
static volatile int32_t *g_child_failed;
/* The port while crnn-run loads it into its own process (after a child loaded it). */
static const char *volatile g_loading;

static void cannot_run(const char *fmt, ...)
{
    va_list ap;
    g_loading = NULL;
    va_start(ap, fmt);
    fputs("crnn-run: cannot run: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (g_child_failed) {
        *g_child_failed = 1;
        _exit(2);
    }
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) cannot_run("out of memory (%zu bytes)", n);
    return p;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A growable byte string, little-endian writers. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} bytes_t;

static void put(bytes_t *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) cannot_run("out of memory (%zu bytes)", cap);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(bytes_t *b, uint64_t v, int size)
{
    unsigned char t[8];
    for (int i = 0; i < size; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)size);
}

static void put_str(bytes_t *b, const char *s)
{
    put_le(b, strlen(s), 4);
    put(b, s, strlen(s));
}

static int write_all(int fd, const void *p, size_t n)
{
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* ---- SHA-256 (FIPS 180-4), for the bundle's digest and the port's ------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ROR(v[4], 6) ^ ROR(v[4], 11) ^ ROR(v[4], 25)) +
                      ((v[4] & v[5]) ^ (~v[4] & v[6])) + K256[i] + w[i];
        uint32_t t2 = (ROR(v[0], 2) ^ ROR(v[0], 13) ^ ROR(v[0], 22)) +
                      ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof(uint32_t));
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) h[i] += v[i];
}

static void sha256_hex(const unsigned char *data, size_t n, char out[65])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    size_t full = n / 64 * 64;
    for (size_t i = 0; i < full; i += 64) sha256_block(h, data + i);
    unsigned char tail[128] = {0};
    size_t r = n - full, len = r + 9 <= 64 ? 64 : 128;
    memcpy(tail, data + full, r);
    tail[r] = 0x80;
    for (int i = 0; i < 8; i++) tail[len - 1 - i] = (unsigned char)((uint64_t)n * 8 >> (8 * i));
    for (size_t i = 0; i < len; i += 64) sha256_block(h, tail + i);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", h[i]);
}

static unsigned char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    bytes_t b = {0};
    unsigned char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, got);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        return NULL;
    }
    *n = b.n;
    return b.p ? b.p : xmalloc(1);
}

/* ---- the bundle (cases.bin) --------------------------------------------------------- */

typedef struct {
    int dtype, role;               /* dtype 1 f32, 2 f64, 3 i32, 4 i64; role 0 in, 1 out, 2 inout */
    uint64_t n;                    /* elements */
    const unsigned char *content;  /* role 0 and 2 */
} buffer_t;

typedef struct {
    int type;                      /* 0 i32, 1 i64, 2 f64, 3 pointer, 4 NULL */
    uint64_t v;                    /* i32/i64/f64 bits; pointer: buffer | offset << 32 */
} arg_t;

typedef struct {
    int kind;                      /* 0 call, 1 copy */
    int entry;                     /* the call's index in CR_ENTRIES */
    int n_args;
    arg_t args[MAX_ARGS];
    uint32_t dst, src;             /* a copy */
    uint64_t dst_off, src_off, nbytes;
} op_t;

typedef struct {
    uint32_t index;
    char *name, *layer;
    uint32_t n_buffers, n_ops;
    buffer_t *buffers;
    op_t *ops;
} case_t;

typedef struct {
    const unsigned char *p, *end;
    const char *path;
} reader_t;

static void bad_bundle(const reader_t *r, const char *what)
{
    cannot_run("bundle %s is malformed: %s (at byte %ld)", r->path, what,
               (long)(r->end - r->p));
}

static uint64_t get(reader_t *r, int size)
{
    if (r->end - r->p < size) bad_bundle(r, "it ends early");
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v |= (uint64_t)r->p[i] << (8 * i);
    r->p += size;
    return v;
}

static const unsigned char *take(reader_t *r, uint64_t n)
{
    if ((uint64_t)(r->end - r->p) < n) bad_bundle(r, "it ends early");
    const unsigned char *p = r->p;
    r->p += n;
    return p;
}

static char *get_str(reader_t *r, int len_size)
{
    uint64_t n = get(r, len_size);
    const unsigned char *s = take(r, n);
    char *out = xmalloc(n + 1);
    memcpy(out, s, n);
    out[n] = 0;
    return out;
}

static size_t dtype_size(int dtype) { return dtype == 1 || dtype == 3 ? 4 : 8; }

static int entry_index(const char *name)
{
    for (int e = 0; e < CR_N_ENTRIES; e++)
        if (strcmp(CR_ENTRIES[e].name, name) == 0) return e;
    return -1;
}

static void read_buffer(reader_t *r, buffer_t *b)
{
    b->dtype = (int)get(r, 1);
    b->role = (int)get(r, 1);
    get(r, 2);
    b->n = get(r, 8);
    if (b->dtype < 1 || b->dtype > 4 || b->role > 2) bad_bundle(r, "a buffer's dtype or role");
    if (b->n > ((uint64_t)1 << 40)) bad_bundle(r, "a buffer's size");
    b->content = b->role != 1 ? take(r, b->n * dtype_size(b->dtype)) : NULL;
}

/* One call's arguments against the entry's kinds: the bundle's types must be the ABI's. */
static void read_call(reader_t *r, const case_t *c, op_t *op)
{
    char *name = get_str(r, 2);
    op->entry = entry_index(name);
    if (op->entry < 0) bad_bundle(r, "a call of an entry point the ABI does not have");
    free(name);
    const char *kinds = CR_ENTRIES[op->entry].kinds;
    op->n_args = (int)get(r, 2);
    if (op->n_args != (int)strlen(kinds)) bad_bundle(r, "a call with the wrong number of arguments");
    for (int k = 0; k < op->n_args; k++) {
        arg_t *a = &op->args[k];
        a->type = (int)get(r, 1);
        a->v = get(r, 8);
        char want = kinds[k];
        int ok = (want == 'i' && a->type == 0) || (want == 'l' && a->type == 1) ||
                 (want == 'd' && a->type == 2) || (want == 'p' && (a->type == 3 || a->type == 4));
        if (!ok) bad_bundle(r, "an argument whose type is not the ABI's");
        if (a->type == 3) {
            uint32_t bi = (uint32_t)a->v, off = (uint32_t)(a->v >> 32);
            if (bi >= c->n_buffers || off > c->buffers[bi].n)
                bad_bundle(r, "a pointer outside the case's buffers");
        }
    }
}

static void read_copy(reader_t *r, const case_t *c, op_t *op)
{
    op->dst = (uint32_t)get(r, 4);
    op->dst_off = get(r, 8);
    op->src = (uint32_t)get(r, 4);
    op->src_off = get(r, 8);
    op->nbytes = get(r, 8);
    if (op->dst >= c->n_buffers || op->src >= c->n_buffers) bad_bundle(r, "a copy's buffers");
    uint64_t dn = c->buffers[op->dst].n * dtype_size(c->buffers[op->dst].dtype);
    uint64_t sn = c->buffers[op->src].n * dtype_size(c->buffers[op->src].dtype);
    if (op->dst_off > dn || op->nbytes > dn - op->dst_off || op->src_off > sn ||
        op->nbytes > sn - op->src_off)
        bad_bundle(r, "a copy outside its buffers");
}

static void read_case(reader_t *r, case_t *c)
{
    if (memcmp(take(r, 4), "CASE", 4) != 0) bad_bundle(r, "a case without its CASE magic");
    c->index = (uint32_t)get(r, 4);
    c->name = get_str(r, 4);
    c->layer = get_str(r, 4);
    c->n_buffers = (uint32_t)get(r, 4);
    if (c->n_buffers > 4096) bad_bundle(r, "too many buffers");
    c->buffers = xmalloc(sizeof(buffer_t) * c->n_buffers);
    for (uint32_t i = 0; i < c->n_buffers; i++) read_buffer(r, &c->buffers[i]);
    c->n_ops = (uint32_t)get(r, 4);
    if (c->n_ops > 1000000) bad_bundle(r, "too many ops");
    c->ops = xmalloc(sizeof(op_t) * (c->n_ops ? c->n_ops : 1));
    for (uint32_t k = 0; k < c->n_ops; k++) {
        op_t *op = &c->ops[k];
        op->kind = (int)get(r, 1);
        if (op->kind == 0) read_call(r, c, op);
        else if (op->kind == 1) read_copy(r, c, op);
        else bad_bundle(r, "an op of unknown kind");
    }
}

typedef struct {
    unsigned char *data;
    size_t size;
    char digest[65];
    uint32_t n_cases;
    case_t *cases;
} bundle_t;

static void read_bundle(const char *dir, bundle_t *b)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/cases.bin", dir);
    b->data = read_file(path, &b->size);
    if (!b->data) cannot_run("bundle %s cannot be read: %s", path, strerror(errno));
    sha256_hex(b->data, b->size, b->digest);
    reader_t r = {b->data, b->data + b->size, path};
    if (b->size < 16 || memcmp(take(&r, 8), "CRNNCB01", 8) != 0)
        cannot_run("%s is not a case bundle (no CRNNCB01 magic)", path);
    uint32_t version = (uint32_t)get(&r, 4);
    if (version != 1) cannot_run("%s has bundle version %u; crnn-run reads version 1", path, version);
    b->n_cases = (uint32_t)get(&r, 4);
    if (b->n_cases > b->size) bad_bundle(&r, "its case count");
    b->cases = xmalloc(sizeof(case_t) * (b->n_cases ? b->n_cases : 1));
    for (uint32_t i = 0; i < b->n_cases; i++) read_case(&r, &b->cases[i]);
    if (r.p != r.end) bad_bundle(&r, "bytes after the last case");
}

/* ---- the floating-point environment ------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#define FP_REG "MXCSR"
static uint32_t fp_reg(void)
{
    uint32_t v;
    __asm__ volatile("stmxcsr %0" : "=m"(v));
    return v;
}
static const char *fp_reg_problem(uint32_t v)
{
    if (v & (1u << 15)) return "FTZ";
    if (v & (1u << 6)) return "DAZ";
    if (((v >> 13) & 3) != 0) return "rounding (MXCSR)";
    if ((v & 0x1F80) != 0x1F80) return "exception traps (MXCSR)";
    return NULL;
}
#elif defined(__aarch64__)
#define FP_REG "FPCR"
static uint32_t fp_reg(void)
{
    uint64_t v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return (uint32_t)v;
}
static const char *fp_reg_problem(uint32_t v)
{
    if (v & (1u << 24)) return "FTZ (FPCR.FZ)";
    if (v & (1u << 19)) return "FTZ (FPCR.FZ16)";
    if (v & (1u << 25)) return "default NaN (FPCR.DN)";
    if (((v >> 22) & 3) != 0) return "rounding (FPCR)";
    if (v & 0x9F00) return "exception traps (FPCR)";
    return NULL;
}
#else
#define FP_REG NULL
static uint32_t fp_reg(void) { return 0; }
static const char *fp_reg_problem(uint32_t v) { (void)v; return NULL; }
#endif

typedef struct {
    int round, traps;
    uint32_t reg;
} fpstate_t;

static fpstate_t fp_state(void)
{
    fpstate_t s;
    s.round = fegetround();
#if defined(__GLIBC__)
    s.traps = fegetexcept();
#else
    s.traps = 0;
#endif
    s.reg = fp_reg();
    return s;
}

/* NULL when the environment is the one every call must find and leave: round to nearest, no
 * trap enabled, no flush to zero, no denormals-are-zero. */
static const char *fp_problem(fpstate_t s)
{
    if (s.round != FE_TONEAREST) return "rounding";
    if (s.traps) return "exception traps";
    return fp_reg_problem(s.reg);
}

/* ---- one run: buffers, calls, checks ------------------------------------------------ */

static const unsigned char CANARY[8] = {0xC5, 0x3A, 0x96, 0x69, 0xA5, 0x5A, 0x0F, 0xF0};

typedef struct {
    unsigned char *block;          /* ZONE | data | ZONE */
    unsigned char *data;
    size_t bytes;
} live_t;

/* Shared with the parent: the call in progress and its start (the per-call time limit). */
typedef struct {
    volatile double start;
    volatile int32_t in_call, call_index, entry;
    volatile int32_t status;       /* the child's run's status and message, once recorded */
    char msg[512];
    volatile int64_t good_end;     /* the results file's end after the last whole call record */
    volatile int32_t header_done, calls_done;
    volatile uint64_t fault;       /* the address of the fault that killed the child */
    volatile int32_t faulted, n_spans;
    volatile int32_t recorded;     /* the child wrote its run's record up to END_ (it exits 0) */
    volatile int32_t write_failed; /* the child could not write the results file */
    volatile int32_t runner_failed;/* crnn-run itself gave up in the child (cannot_run) */
    volatile int32_t loaded;       /* the trial load: the port loaded and passed load_port */
    volatile uint32_t isa_mask;    /* ... and its crnn_isa_available() */
    uint64_t span[MAX_SPANS][2];   /* each buffer's [first byte, end) in the child */
} progress_t;

static void fill_poison(unsigned char *p, int dtype, uint64_t n)
{
    static const uint32_t f32 = 0x7FE5A5A5u, i32 = 0x5A5A5A5Au;
    static const uint64_t f64 = 0x7FFDA5A5A5A5A5A5ull;
    for (uint64_t i = 0; i < n; i++) {
        if (dtype == 1) memcpy(p + 4 * i, &f32, 4);
        else if (dtype == 3) memcpy(p + 4 * i, &i32, 4);
        else memcpy(p + 8 * i, &f64, 8);
    }
}

static int has_poison(const unsigned char *p, int dtype, uint64_t n)
{
    unsigned char pat[8];
    fill_poison(pat, dtype, 1);
    size_t s = dtype_size(dtype);
    for (uint64_t i = 0; i < n; i++)
        if (memcmp(p + s * i, pat, s) == 0) return 1;
    return 0;
}

static void fill_zone(unsigned char *z)
{
    for (int i = 0; i < ZONE; i++) z[i] = CANARY[i % 8];
}

static int zone_intact(const unsigned char *z)
{
    for (int i = 0; i < ZONE; i++)
        if (z[i] != CANARY[i % 8]) return 0;
    return 1;
}

/* 2*ZONE + padded bytes; from GUARD_MIN on between two inaccessible GUARD regions, so a
 * wild write beyond the zones faults at once (and is named by buffer: fault_report). */
static unsigned char *allocate(size_t padded)
{
    void *block = NULL;
    if (padded < GUARD_MIN) {
        if (posix_memalign(&block, 64, 2 * ZONE + padded) != 0)
            cannot_run("out of memory (%zu bytes)", padded);
        return block;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (2 * ZONE + padded + page - 1) / page * page;
    unsigned char *m = mmap(NULL, span + 2 * GUARD, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m + GUARD, span, PROT_READ | PROT_WRITE) != 0)
        cannot_run("out of memory (%zu bytes)", span);
    /* the data ends at the end of the accessible span, less its zone: the guard follows */
    return m + GUARD + span - (2 * ZONE + padded);
}

static live_t *make_buffers(const case_t *c, progress_t *progress)
{
    live_t *L = xmalloc(sizeof(live_t) * (c->n_buffers ? c->n_buffers : 1));
    progress->n_spans = 0;
    for (uint32_t i = 0; i < c->n_buffers; i++) {
        const buffer_t *b = &c->buffers[i];
        L[i].bytes = (size_t)(b->n * dtype_size(b->dtype));
        size_t padded = (L[i].bytes + 63) / 64 * 64;
        L[i].block = allocate(padded);
        L[i].data = L[i].block + ZONE;
        /* the canary starts right after the last byte, whatever the rounding to 64 */
        fill_zone(L[i].block);
        memset(L[i].data + L[i].bytes, 0, padded - L[i].bytes);
        fill_zone(L[i].data + L[i].bytes);
        if (b->role == 1) fill_poison(L[i].data, b->dtype, b->n);
        else memcpy(L[i].data, b->content, L[i].bytes);
        if (i < MAX_SPANS) {
            progress->span[i][0] = (uint64_t)(uintptr_t)L[i].data;
            progress->span[i][1] = (uint64_t)(uintptr_t)(L[i].data + L[i].bytes);
            progress->n_spans = (int32_t)i + 1;
        }
    }
    return L;
}

/* The first buffer whose zone before (*side "before") or after its data is broken, or -1. */
static int broken_zone(const case_t *c, const live_t *L, const char **side)
{
    for (uint32_t i = 0; i < c->n_buffers; i++) {
        *side = !zone_intact(L[i].block) ? "before"
                : !zone_intact(L[i].data + L[i].bytes) ? "after" : NULL;
        if (*side) return (int)i;
    }
    return -1;
}

/* The name of buffer i in call op: the argument that points to it, else "buffer i". */
static void buffer_label(const op_t *op, uint32_t i, char *out, size_t n)
{
    snprintf(out, n, "buffer %u", i);
    if (op->kind != 0) return;
    const char *names = CR_ENTRIES[op->entry].names;
    for (int k = 0; k < op->n_args; k++) {
        const char *w = names;
        for (int j = 0; j < k && w; j++) {
            w = strchr(w, ' ');
            if (w) w++;
        }
        if (op->args[k].type == 3 && (uint32_t)op->args[k].v == i && w) {
            size_t len = strcspn(w, " ");
            snprintf(out, n, "%.*s", (int)len, w);
            return;
        }
    }
}

/* In a run's child: the results file cannot be written; the parent says so. */
static void write_failed(progress_t *progress)
{
    progress->write_failed = 1;
    _exit(3);
}

typedef struct {
    const case_t *c;
    live_t *L;
    unsigned char **snap;          /* per buffer: its content before the call (const args) */
    unsigned char **pre;           /* per buffer: its content before the call (written args) */
    progress_t *progress;
    bytes_t rec;                   /* the call record being written */
    double settle;                 /* > 0: the run's end checked again this much later */
    int fd;                        /* the results file (append) */
    uint32_t n_calls;
    int status;
    char msg[512];
} run_t;

static void fail(run_t *r, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    r->status = status;
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
}

static int is_written(const op_t *op, uint32_t i)
{
    const char *w = CR_ENTRIES[op->entry].written;
    for (int k = 0; k < op->n_args; k++)
        if (op->args[k].type == 3 && (uint32_t)op->args[k].v == i && w[k] == '1') return 1;
    return 0;
}

/* The const pointer arguments' buffers copied before the call (none written by this call). */
static void snapshot_consts(run_t *r, const op_t *op)
{
    for (int k = 0; k < op->n_args; k++) {
        uint32_t i = (uint32_t)op->args[k].v;
        if (op->args[k].type != 3 || is_written(op, i)) continue;
        if (!r->snap[i]) r->snap[i] = xmalloc(r->L[i].bytes);
        memcpy(r->snap[i], r->L[i].data, r->L[i].bytes);
    }
}

static int const_modified(run_t *r, const op_t *op)
{
    for (int k = 0; k < op->n_args; k++) {
        uint32_t i = (uint32_t)op->args[k].v;
        if (op->args[k].type != 3 || is_written(op, i)) continue;
        if (memcmp(r->snap[i], r->L[i].data, r->L[i].bytes) != 0) return (int)i;
    }
    return -1;
}

static void decode_args(const run_t *r, const op_t *op, cr_arg *a)
{
    for (int k = 0; k < op->n_args; k++) {
        const arg_t *x = &op->args[k];
        if (x->type == 0) a[k].i = (int32_t)(int64_t)x->v;
        else if (x->type == 1) a[k].l = (int64_t)x->v;
        else if (x->type == 2) memcpy(&a[k].d, &x->v, 8);
        else if (x->type == 4) a[k].p = NULL;
        else {
            uint32_t i = (uint32_t)x->v, off = (uint32_t)(x->v >> 32);
            a[k].p = r->L[i].data + (size_t)off * dtype_size(r->c->buffers[i].dtype);
        }
    }
}

/* The buffers a call may write (its written pointer arguments), each once. -> how many. */
static uint32_t written_buffers(const op_t *op, uint32_t *seen)
{
    uint32_t n = 0;
    for (int k = 0; k < op->n_args; k++) {
        uint32_t i = (uint32_t)op->args[k].v;
        int dup = 0;
        for (uint32_t j = 0; j < n; j++) dup |= seen[j] == i;
        if (op->args[k].type == 3 && CR_ENTRIES[op->entry].written[k] == '1' && !dup) seen[n++] = i;
    }
    return n;
}

/* Version 2: the written buffers' content before the call, to find the span it changed. */
static void keep_written(run_t *r, const op_t *op)
{
    uint32_t seen[MAX_ARGS], n = written_buffers(op, seen);
    for (uint32_t j = 0; g_version == 2 && j < n; j++) {
        uint32_t i = seen[j];
        if (!r->pre[i]) r->pre[i] = xmalloc(r->L[i].bytes);
        memcpy(r->pre[i], r->L[i].data, r->L[i].bytes);
    }
}

/* [*first, *end) of the bytes of buffer i the call changed; 0 when none changed. */
static int changed_span(const run_t *r, uint32_t i, size_t *first, size_t *end)
{
    const unsigned char *a = r->pre[i], *b = r->L[i].data;
    size_t n = r->L[i].bytes, f = 0, e = n;
    while (f < n && a[f] == b[f]) f++;
    if (f == n) return 0;
    while (e > f && a[e - 1] == b[e - 1]) e--;
    *first = f;
    *end = e;
    return 1;
}

/* The call record: rc, flags, then every buffer the call may write (its written pointer
 * arguments, each buffer once) as it is right after the call: version 1 the whole buffer,
 * version 2 the span of bytes the call changed (none: no record for that buffer). */
static void record_call(run_t *r, const op_t *op, int32_t rc, uint32_t flags)
{
    uint32_t seen[MAX_ARGS], n = written_buffers(op, seen), kept = 0, idx[MAX_ARGS];
    size_t first[MAX_ARGS], end[MAX_ARGS];
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = seen[j];
        size_t f = 0, e = r->L[i].bytes;
        if (has_poison(r->L[i].data, r->c->buffers[i].dtype, r->c->buffers[i].n)) flags |= F_POISON;
        if (g_version == 1 || changed_span(r, i, &f, &e)) {
            idx[kept] = i;
            first[kept] = f;
            end[kept++] = e;
        }
    }
    r->rec.n = 0;
    put_le(&r->rec, (uint32_t)rc, 4);
    put_le(&r->rec, flags, 4);
    put_le(&r->rec, kept, 4);
    for (uint32_t j = 0; j < kept; j++) {
        put_le(&r->rec, idx[j], 4);
        if (g_version == 2) put_le(&r->rec, first[j], 8);
        put_le(&r->rec, end[j] - first[j], 8);
        put(&r->rec, r->L[idx[j]].data + first[j], end[j] - first[j]);
    }
    if (write_all(r->fd, r->rec.p, r->rec.n) != 0) write_failed(r->progress);
    r->n_calls++;
    r->progress->good_end += (int64_t)r->rec.n;   /* a crash from here on keeps this call */
    r->progress->calls_done = (int32_t)r->n_calls;
}

/* The call in progress, for the parent's time limit and crash message (call -1: a control
 * call before the case's first op). */
static void begin_call(progress_t *p, int entry, int32_t k)
{
    p->call_index = k;
    p->entry = entry;
    p->start = now();
    p->in_call = 1;
}

/* The call returned: the time outside the port's calls counts from here. */
static void end_call(progress_t *p)
{
    p->start = now();
    p->in_call = 0;
}

/* -> 0 to go on, 1 the run ended at this call (its status set) */
static int one_call(run_t *r, void *fn, uint32_t k)
{
    const op_t *op = &r->c->ops[k];
    const char *name = CR_ENTRIES[op->entry].name;
    cr_arg a[MAX_ARGS];
    decode_args(r, op, a);
    snapshot_consts(r, op);
    keep_written(r, op);
    fpstate_t before = fp_state();
    const char *fp = fp_problem(before);
    if (fp) {
        fail(r, ST_CHECK, "fpenv changed: %s (found before %s, call %u)", fp, name, k);
        return 1;
    }
    begin_call(r->progress, op->entry, (int32_t)k);
    int32_t rc = cr_call(op->entry, fn, a);
    end_call(r->progress);
    fpstate_t after = fp_state();
    uint32_t flags = 0;
    char label[64];
    const char *side = NULL;
    int zone = broken_zone(r->c, r->L, &side), modified = const_modified(r, op);
    if ((fp = fp_problem(after)) != NULL) {
        flags |= F_FPENV;
        fail(r, ST_CHECK, "fpenv changed: %s by %s (call %u)", fp, name, k);
    }
    if (modified >= 0) {
        flags |= F_CONST;
        buffer_label(op, (uint32_t)modified, label, sizeof label);
        fail(r, ST_CHECK, "const input %s modified by %s (call %u)", label, name, k);
    }
    if (zone >= 0) {
        flags |= F_CANARY;
        buffer_label(op, (uint32_t)zone, label, sizeof label);
        fail(r, ST_CHECK, "canary %s %s broken by %s (call %u)", side, label, name, k);
    }
    record_call(r, op, rc, flags);
    if (flags) return 1;
    if (rc != 0) {
        fail(r, ST_RC, "%s returned %d (call %u)", name, rc, k);
        return 1;
    }
    return 0;
}

/* The inputs (role 0) as the bundle gives them: nothing may change them. */
static int input_changed(const case_t *c, const live_t *L)
{
    for (uint32_t i = 0; i < c->n_buffers; i++)
        if (c->buffers[i].role == 0 && memcmp(L[i].data, c->buffers[i].content, L[i].bytes) != 0)
            return (int)i;
    return -1;
}

/* 1 when nothing but this thread can still write the run's buffers: on Linux, the process
 * has no other thread and no child process (a port's thread pool, a detached thread or a
 * clone sharing its memory are either). Elsewhere it cannot tell: 0. */
static int alone(void)
{
#if defined(__linux__)
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return n == 1 && waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD;
#else
    return 0;
#endif
}

/* The last call of the run that wrote buffer i (-> its label), else the run's last call. */
static void last_writer(const case_t *c, uint32_t i, char *label, size_t n, const char **name)
{
    *name = NULL;
    snprintf(label, n, "buffer %u", i);
    for (uint32_t k = c->n_ops; k-- > 0;) {
        const op_t *op = &c->ops[k];
        if (op->kind != 0) continue;
        if (!*name) *name = CR_ENTRIES[op->entry].name;
        if (is_written(op, i)) {
            *name = CR_ENTRIES[op->entry].name;
            buffer_label(op, i, label, n);
            return;
        }
    }
    if (!*name) *name = "its last call";
}

/* The run's end kept, then looked at again r->settle seconds later (as the gate looks at a
 * case's last run): a written buffer, an input or a canary zone changed since is a write
 * after the call returned (a thread of the port still running: a missing join). */
static void settle_check(run_t *r)
{
    const case_t *c = r->c;
    unsigned char **seal = calloc(c->n_buffers ? c->n_buffers : 1, sizeof(unsigned char *));
    if (!seal) cannot_run("out of memory");
    for (uint32_t i = 0; i < c->n_buffers; i++)
        if (c->buffers[i].role != 0) {
            seal[i] = xmalloc(r->L[i].bytes);
            memcpy(seal[i], r->L[i].data, r->L[i].bytes);
        }
    r->progress->start = now();
    double end = now() + r->settle;
    for (double left = r->settle; left > 0; left = end - now()) {
        struct timespec ts;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        nanosleep(&ts, NULL);
    }
    char label[64];
    const char *side = NULL, *name;
    int zone = broken_zone(c, r->L, &side), input = input_changed(c, r->L);
    for (uint32_t i = 0; i < c->n_buffers; i++) {
        size_t at = 0, n = r->L[i].bytes;
        const unsigned char *now_ = r->L[i].data;
        if (!seal[i]) continue;
        while (at < n && seal[i][at] == now_[at]) at++;
        if (at < n) {
            last_writer(c, i, label, sizeof label, &name);
            fail(r, ST_CHECK, "%s changed after %s returned (at byte %zu of %zu, found %g s "
                 "after the run's last call): a write after return (a thread of the port still "
                 "running?)", label, name, at, n, r->settle);
            break;
        }
    }
    if (r->status == ST_OK && input >= 0) {
        fail(r, ST_CHECK, "input buffer %d modified after the run's last call returned (within "
             "%g s): a write after return", input, r->settle);
    }
    if (r->status == ST_OK && zone >= 0) {
        last_writer(c, (uint32_t)zone, label, sizeof label, &name);
        fail(r, ST_CHECK, "canary %s %s broken after %s returned (within %g s): a write after "
             "return", side, label, name, r->settle);
    }
    for (uint32_t i = 0; i < c->n_buffers; i++) free(seal[i]);
    free(seal);
}

typedef struct {
    void *lib;
    void *fn[CR_N_ENTRIES];
    int32_t (*set_isa)(int32_t), (*set_threads)(int32_t);
} port_t;

static void run_ops(run_t *r, const port_t *port, int isa, int threads)
{
    const case_t *c = r->c;
    begin_call(r->progress, entry_index("crnn_set_isa"), -1);
    int32_t rc = port->set_isa(isa);
    end_call(r->progress);
    if (rc == 0) {
        begin_call(r->progress, entry_index("crnn_set_threads"), -1);
        rc = port->set_threads(threads);
        end_call(r->progress);
    }
    if (rc != 0) {
        fail(r, ST_RC, "crnn_set_isa(%d) / crnn_set_threads(%d) returned %d", isa, threads, rc);
        return;
    }
    for (uint32_t k = 0; k < c->n_ops; k++) {
        const op_t *op = &c->ops[k];
        if (op->kind == 1) {
            memmove(r->L[op->dst].data + op->dst_off, r->L[op->src].data + op->src_off,
                    (size_t)op->nbytes);
            continue;
        }
        if (one_call(r, port->fn[op->entry], k)) return;
    }
    int changed = input_changed(c, r->L);
    if (changed >= 0) fail(r, ST_CHECK, "input buffer %d modified during the run", changed);
    else if (r->settle > 0 && !alone()) settle_check(r);
}

static void run_header(bytes_t *b, uint32_t index, int isa, int threads, uint32_t n_calls)
{
    put(b, "RUN_", 4);
    put_le(b, index, 4);
    put_le(b, (uint32_t)isa, 4);
    put_le(b, (uint32_t)threads, 4);
    put_le(b, n_calls, 4);
}

static void run_trailer(bytes_t *b, int status, const char *msg)
{
    put_le(b, (uint32_t)status, 4);
    put_str(b, msg);
    put(b, "END_", 4);
}

static int append_record(int fd, const bytes_t *b)
{
    if (write_all(fd, b->p, b->n) != 0) return -1;
    return fsync(fd) == 0 || errno == EINVAL || errno == EROFS ? 0 : -1;
}

static progress_t *g_progress;

/* A fault's address into shared memory, then the default action (the child dies of it). */
static void on_fault(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    g_progress->fault = (uint64_t)(uintptr_t)info->si_addr;
    g_progress->faulted = 1;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_faults(progress_t *progress)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    g_progress = progress;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}

/* Where a fault address lies: in a buffer's guard region (which buffer, how far), or not. */
static void fault_report(const progress_t *p, const op_t *op, char *out, size_t n)
{
    uint64_t a = p->fault;
    char label[64];
    for (int i = 0; i < p->n_spans; i++) {
        uint64_t lo = p->span[i][0], hi = p->span[i][1];
        buffer_label(op, (uint32_t)i, label, sizeof label);
        if (hi - lo >= GUARD_MIN && a >= hi && a < hi + ZONE + GUARD + 4096) {
            snprintf(out, n, ": a write at byte +%llu past the end of %s (in its guard region)",
                     (unsigned long long)(a - hi), label);
            return;
        }
        if (hi - lo >= GUARD_MIN && a < lo && a + ZONE + GUARD + 4096 >= lo) {
            snprintf(out, n, ": a write at byte -%llu before the start of %s (in its guard "
                     "region)", (unsigned long long)(lo - a), label);
            return;
        }
    }
    snprintf(out, n, " at address 0x%llx", (unsigned long long)a);
}

static int g_patch_fd = -1;        /* the results file without O_APPEND: n_calls patched */

/* The run record's n_calls (at byte 16 of the record at `at`) set to n. */
static int patch_n_calls(off_t at, uint32_t n)
{
    unsigned char t[4];
    for (int i = 0; i < 4; i++) t[i] = (unsigned char)(n >> (8 * i));
    return pwrite(g_patch_fd, t, 4, at + 16) == 4 ? 0 : -1;
}

/* In the child: the run's record written as it goes (the header, each call's record as the
 * call returns, then n_calls patched and the trailer), so the parent can finish the record
 * of a run that dies with the calls it completed. It says in progress->recorded that the
 * record is whole before it exits 0: a port that ends the process itself (exit(0) in a call)
 * exits 0 too, with the record unfinished. Exit 0 written, 3 not. */
static void child_run(const case_t *c, const port_t *port, int isa, int threads, int fd,
                      off_t at, progress_t *progress, double settle)
{
    run_t r = {0};
    catch_faults(progress);
    r.c = c;
    r.fd = fd;
    r.settle = settle;
    r.L = make_buffers(c, progress);
    r.snap = calloc(c->n_buffers ? c->n_buffers : 1, sizeof(unsigned char *));
    r.pre = calloc(c->n_buffers ? c->n_buffers : 1, sizeof(unsigned char *));
    r.progress = progress;
    bytes_t b = {0};
    run_header(&b, c->index, isa, threads, 0);
    if (write_all(fd, b.p, b.n) != 0) write_failed(progress);
    progress->good_end = (int64_t)at + (int64_t)b.n;
    progress->header_done = 1;
    run_ops(&r, port, isa, threads);
    b.n = 0;
    run_trailer(&b, r.status, r.msg);
    progress->status = r.status;
    memcpy(progress->msg, r.msg, sizeof r.msg);
    fflush(NULL);
    if (patch_n_calls(at, r.n_calls) != 0 || append_record(fd, &b) != 0) write_failed(progress);
    progress->recorded = 1;
    _exit(0);
}

/* ---- the parent: one child per run, its time limit, crashes recorded ---------------- */

typedef struct {
    const char *port_path, *bundle_dir, *results, *case_glob;
    int isas[N_ISAS], n_isas;
    int threads[256], n_threads;
    double timeout, settle;
    int resume;
} options_t;

static int status_counts[6];

/* The record of a run the child did not finish: its header and the calls it completed, if it
 * wrote them (progress), then this status and message. */
static int record_parent(int fd, off_t at, const progress_t *progress, const case_t *c,
                         int isa, int threads, int status, const char *msg)
{
    int kept = progress && progress->header_done;
    off_t end = kept ? (off_t)progress->good_end : at;
    if (ftruncate(fd, end) != 0) return -1;      /* a torn call record of the child goes */
    if (lseek(fd, 0, SEEK_END) < 0) return -1;
    if (kept && patch_n_calls(at, (uint32_t)progress->calls_done) != 0) return -1;
    bytes_t b = {0};
    if (!kept) run_header(&b, c->index, isa, threads, 0);
    run_trailer(&b, status, msg);
    int rc = append_record(fd, &b);
    free(b.p);
    return rc;
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "signal";
    }
}

/* ---- the children: process groups, time limits, what they leave behind -------------
 *
 * Every child (the port's trial load, each run) leads a process group of its own, so what
 * the port starts in it (a helper process, a server) is killed with it: once the child has
 * ended (or at its time limit) the parent kills the whole group. The parent waits for the
 * child itself (SIGCHLD through a pipe to poll), never for the end of a pipe a descendant
 * could hold open. On Linux the child also dies with the parent (PR_SET_PDEATHSIG) and the
 * parent is a child subreaper, so a process that left the group (setsid) comes back to it
 * as an orphan when the run's child ends and is killed too. SIGTERM, SIGINT and SIGHUP to
 * crnn-run kill the child's group, drop the unfinished record and end crnn-run by the same
 * signal. */

static int g_wake[2] = {-1, -1};           /* SIGCHLD -> a byte here */
static volatile sig_atomic_t g_stop;       /* the stop signal received */
static volatile sig_atomic_t g_child;      /* the child alive (not yet reaped), or 0 */
static volatile sig_atomic_t g_waiting;    /* in wait_child: it ends crnn-run itself */
static int g_results_fd = -1;              /* the results file and the start of the record */
static off_t g_run_at = -1;                /* of the run in progress (dropped on a stop) */
static int g_subreaper;                    /* orphans of the port come back to crnn-run */
static pid_t g_before[64];                 /* children crnn-run had before it started any */
static int g_n_before;
static const int STOP_SIGNALS[3] = {SIGTERM, SIGINT, SIGHUP};
static struct sigaction g_stop_was[3];     /* their actions when crnn-run started */

static void on_child(int sig)
{
    int e = errno;
    char byte = 0;
    (void)sig;
    if (g_wake[1] >= 0 && write(g_wake[1], &byte, 1) < 0) {}
    errno = e;
}

static void on_stop(int sig)
{
    pid_t child = (pid_t)g_child;
    g_stop = sig;
    if (child > 0) {
        kill(-child, SIGKILL);
        kill(child, SIGKILL);
    }
    if (!g_waiting) {                      /* (wait_child cleans up and ends crnn-run) */
        signal(sig, SIG_DFL);
        raise(sig);                        /* delivered when the handler returns */
    }
}

static void stops(int how, sigset_t *old)
{
    sigset_t s;
    sigemptyset(&s);
    for (int i = 0; i < 3; i++) sigaddset(&s, STOP_SIGNALS[i]);
    sigprocmask(how, &s, old);
}

#if defined(__linux__)
/* crnn-run's children, as the kernel lists them (/proc/self/task/T/children), or by the
 * parent pid of every process when that list is not there. */
static int list_children(pid_t *out, int max)
{
    char path[128];
    int n = 0, listed = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/self/task/%.32s/children", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        listed = 1;
        long v;
        while (n < max && fscanf(f, "%ld", &v) == 1) out[n++] = (pid_t)v;
        fclose(f);
    }
    if (d) closedir(d);
    if (listed || !(d = opendir("/proc"))) return n;
    long me = (long)getpid();
    while (n < max && (e = readdir(d)) != NULL) {
        char *end, buf[512];
        long pid = strtol(e->d_name, &end, 10), ppid;
        if (*end || pid <= 0) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        char *rp = strrchr(buf, ')'), state;
        if (rp && sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 && ppid == me) out[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}
#endif

/* The port's processes that outlived their run's child and came back to crnn-run (the
 * subreaper), killed with their groups and reaped; crnn-run's children from before it
 * started any are left alone. */
static void reap_orphans(void)
{
    int st;
    pid_t w;
#if defined(__linux__)
    for (int round = 0; g_subreaper && round < 64; round++) {
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {}
        if (w < 0) return;                 /* no child at all */
        pid_t kids[256];
        int n = list_children(kids, 256), k = 0;
        for (int i = 0; i < n; i++) {
            int before = 0;
            for (int j = 0; j < g_n_before; j++) before |= g_before[j] == kids[i];
            if (before) continue;
            kill(-kids[i], SIGKILL);       /* its own group, if it made one (setsid) */
            kill(kids[i], SIGKILL);
            kids[k++] = kids[i];
        }
        if (!k) return;
        for (int i = 0; i < k; i++)
            while (waitpid(kids[i], &st, 0) < 0 && errno == EINTR) {}
    }
#endif
    while ((w = waitpid(-1, &st, WNOHANG)) > 0) {}
}

/* The process control set up once: the SIGCHLD pipe, the stop signals' handler, on Linux
 * the subreaper. */
static void control_children(void)
{
    if (pipe(g_wake) != 0) cannot_run("no pipe: %s", strerror(errno));
    for (int i = 0; i < 2; i++) {
        fcntl(g_wake[i], F_SETFL, fcntl(g_wake[i], F_GETFL) | O_NONBLOCK);
        fcntl(g_wake[i], F_SETFD, FD_CLOEXEC);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; i++) {          /* (one ignored from the start stays ignored) */
        sigaction(STOP_SIGNALS[i], NULL, &g_stop_was[i]);
        if (g_stop_was[i].sa_handler != SIG_IGN) sigaction(STOP_SIGNALS[i], &sa, NULL);
    }
#if defined(__linux__) && defined(PR_SET_CHILD_SUBREAPER)
    g_subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
    if (g_subreaper) g_n_before = list_children(g_before, 64);
#endif
}

/* fork: the child in a process group of its own, with the default signal actions and, on
 * Linux, killed when crnn-run dies; -> 0 in the child, its pid in the parent. */
static pid_t spawn(void)
{
    sigset_t old;
    pid_t parent = getpid();
    fflush(NULL);
    stops(SIG_BLOCK, &old);
    pid_t pid = fork();
    if (pid < 0) cannot_run("fork failed: %s", strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGCHLD, SIG_DFL);
        for (int i = 0; i < 3; i++) sigaction(STOP_SIGNALS[i], &g_stop_was[i], NULL);
        close(g_wake[0]);
        close(g_wake[1]);
        g_wake[0] = g_wake[1] = -1;
#if defined(__linux__)
        prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent) _exit(4);     /* crnn-run died before it could be told */
#else
        (void)parent;
#endif
        sigprocmask(SIG_SETMASK, &old, NULL);
        return 0;
    }
    g_child = pid;
    g_waiting = 1;                             /* a stop from here on: wait_child cleans up */
    setpgid(pid, pid);                         /* (as the child does: whichever is first) */
    sigprocmask(SIG_SETMASK, &old, NULL);
    return pid;
}

/* A stop signal arrived while a child ran: its group killed, its orphans too, the record
 * of its run dropped (the file ends with the last whole record: --resume runs it again),
 * then crnn-run ends by the same signal. */
static void stop_now(pid_t pid)
{
    int sig = (int)g_stop, st;
    sigset_t s;
    if (g_child) {                             /* (not yet reaped: the pid is still its) */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        g_child = 0;
    }
    reap_orphans();
    if (g_results_fd >= 0 && g_run_at >= 0 && ftruncate(g_results_fd, g_run_at) != 0) {}
    fprintf(stderr, "crnn-run: stopped by %s (signal %d): the run in progress was killed and "
            "is not recorded\n", signal_name(sig), sig);
    signal(sig, SIG_DFL);
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    _exit(128 + sig);
}

/* Waits for the child; kills it (and its group) when a call runs past `timeout`, or when it
 * spends `outside` seconds outside the port's calls (0: no limit). -> its wait status, or -1
 * when it was killed for time (*call, *in_call: where it was). What is left of its process
 * group is killed while the child, a zombie, still holds its pid. */
static int wait_child(pid_t pid, progress_t *progress, double timeout, double outside,
                      int *call, int *in_call)
{
    int st = 0, killed = 0;
    g_waiting = 1;
    for (;;) {
        if (g_stop) stop_now(pid);
        siginfo_t info;
        memset(&info, 0, sizeof info);
        int w = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && info.si_pid == pid) || (w < 0 && errno != EINTR)) break;
        int ms = 1000, inside = progress->in_call;
        double limit = inside ? timeout : outside;
        if (limit > 0) {
            double left = progress->start + limit - now();
            if (left <= 0) {
                *call = progress->call_index;
                *in_call = inside;
                killed = 1;
                break;
            }
            if (left < 1) ms = (int)(left * 1000) + 1;
        }
        struct pollfd p = {g_wake[0], POLLIN, 0};
        if (poll(&p, 1, ms) > 0) {
            char buf[64];
            while (read(g_wake[0], buf, sizeof buf) > 0) {}
        }
    }
    if (killed) kill(pid, SIGKILL);
    kill(-pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    g_child = 0;
    reap_orphans();
    g_waiting = 0;                 /* a stop signal from here on ends crnn-run at once; */
    if (g_stop) stop_now(pid);     /* one before it, here */
    return killed ? -1 : st;
}

static int run_one(const options_t *o, const case_t *c, const port_t *port, int isa,
                   int threads, int fd, progress_t *progress, double settle)
{
    off_t at = lseek(fd, 0, SEEK_END);
    if (at < 0) cannot_run("results %s: %s", o->results, strerror(errno));
    memset((void *)progress, 0, sizeof *progress);
    progress->entry = -1;
    progress->start = now();
    g_results_fd = fd;
    g_run_at = at;
    pid_t pid = spawn();
    if (pid == 0) {
        g_child_failed = &progress->runner_failed;
        child_run(c, port, isa, threads, fd, at, progress, settle);
    }
    int call = -1, in_call = 0;
    /* outside the port's calls a run does the runner's own work, and waits out the settle
     * window: a generous limit, only so that nothing can hang crnn-run for good */
    double outside = o->timeout > 0 ? (o->timeout < 60 ? 60 : o->timeout) + settle : 0;
    int st = wait_child(pid, progress, o->timeout, outside, &call, &in_call);
    g_run_at = -1;
    char msg[256];
    int status;
    const char *entry = progress->entry >= 0 ? CR_ENTRIES[progress->entry].name : NULL;
    if (st == -1 && in_call) {
        status = ST_TIMEOUT;
        snprintf(msg, sizeof msg, "%s did not return within %g s (call %d)", entry, o->timeout,
                 call);
    } else if (st == -1) {
        status = ST_TIMEOUT;
        if (entry)
            snprintf(msg, sizeof msg, "the run did not end within %g s after %s returned "
                     "(call %d)", outside, entry, call);
        else
            snprintf(msg, sizeof msg, "the run did not reach the port's first call within %g s",
                     outside);
    } else if (WIFSIGNALED(st)) {
        status = ST_CRASH;
        int sig = WTERMSIG(st);
        char where[160] = "";
        if (progress->faulted && progress->in_call && progress->call_index >= 0)
            fault_report(progress, &c->ops[progress->call_index], where, sizeof where);
        if (progress->in_call)
            snprintf(msg, sizeof msg, "%s (signal %d) in %s (call %d)%s", signal_name(sig), sig,
                     entry, progress->call_index, where);
        else
            snprintf(msg, sizeof msg, "%s (signal %d) outside the port's calls", signal_name(sig), sig);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && progress->recorded) {
        return progress->status;       /* the child recorded its run */
    } else {
        status = ST_CRASH;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (progress->write_failed)
            snprintf(msg, sizeof msg, "the run's record could not be written (exit %d)", code);
        else if (progress->runner_failed)
            snprintf(msg, sizeof msg, "crnn-run could not go on in the run's process (exit %d; "
                     "its message is on stderr)", code);
        else if (progress->in_call)
            snprintf(msg, sizeof msg, "the port exited (status %d) in %s (call %d)", code, entry,
                     progress->call_index);
        else if (entry)
            snprintf(msg, sizeof msg, "the port exited (status %d) after %s returned (call %d)",
                     code, entry, progress->call_index);
        else
            snprintf(msg, sizeof msg, "the run's process exited (status %d) before the port's "
                     "first call", code);
    }
    snprintf(progress->msg, sizeof progress->msg, "%s", msg);
    if (record_parent(fd, at, progress, c, isa, threads, status, msg) != 0)
        cannot_run("results %s cannot be written: %s", o->results, strerror(errno));
    return status;
}

/* ---- the results file: header, platform record, resume ------------------------------ */

static void json_str(bytes_t *b, const char *s)
{
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            put(b, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            put(b, esc, 6);
        } else {
            put(b, s, 1);
        }
    }
    put(b, "\"", 1);
}

static const char *arch_name(void)
{
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
    return "aarch64";
#elif defined(__i386__)
    return "i386";
#else
    return "unknown";
#endif
}

static void cpu_name(char *out, size_t n)
{
    struct utsname u;
    snprintf(out, n, "%s", uname(&u) == 0 ? u.machine : "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (colon && (strncmp(line, "model name", 10) == 0 || strncmp(line, "CPU part", 8) == 0)) {
            colon++;
            while (*colon == ' ' || *colon == '\t') colon++;
            colon[strcspn(colon, "\n")] = 0;
            snprintf(out, n, "%s", colon);
            break;
        }
    }
    fclose(f);
}

static double g_settle = SETTLE;   /* --settle */

/* The guarantees of the gate this build of crnn-run cannot keep on this platform. */
static int not_kept(const char **out)
{
    int n = 0;
    if (FP_REG == NULL)
        out[n++] = "flush-to-zero / denormals-are-zero not checked: no control register known "
                   "for this architecture (only fenv.h rounding and traps)";
#if !defined(__GLIBC__)
    out[n++] = "exception trap enables not checked: no fegetexcept in this C library";
#endif
    out[n++] = "what the port prints is not kept apart: it goes to crnn-run's own stdout "
               "and stderr, and is not in the results";
#if !defined(__linux__)
    out[n++] = "a run's process is not killed when crnn-run itself is killed with SIGKILL "
               "(no parent-death signal on this platform)";
    out[n++] = "a process the port starts that leaves its run's process group (setsid) is not "
               "killed after the run (no child subreaper on this platform)";
#endif
    if (!(g_settle > 0))
        out[n++] = "a write after a call returned is not looked for (--settle 0)";
    return n;
}

static void platform_json(bytes_t *b, const char *port_path, const char *port_sha)
{
    struct utsname u;
    char os[256], cpu[256];
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s", u.sysname, u.release);
    else snprintf(os, sizeof os, "unknown");
    cpu_name(cpu, sizeof cpu);
#if defined(__clang__)
    const char *cc = "clang " __clang_version__;
#elif defined(__GNUC__)
    const char *cc = "gcc " __VERSION__;
#else
    const char *cc = "unknown";
#endif
    const char *nk[8];
    int n = not_kept(nk);
    put(b, "{\"arch\": ", 9);
    json_str(b, arch_name());
    put(b, ", \"os\": ", 8);
    json_str(b, os);
    put(b, ", \"cpu\": ", 9);
    json_str(b, cpu);
    put(b, ", \"runner_version\": ", 20);
    json_str(b, RUNNER_VERSION);
    put(b, ", \"compiler\": ", 14);
    json_str(b, cc);
    put(b, ", \"not_kept\": [", 15);
    for (int i = 0; i < n; i++) {
        if (i) put(b, ", ", 2);
        json_str(b, nk[i]);
    }
    put(b, "], \"port\": ", 11);
    json_str(b, port_path);
    put(b, ", \"port_sha256\": ", 17);
    json_str(b, port_sha);
    put(b, "}", 1);
}

/* Done runs of an existing results file (--resume): (case, isa, threads) of each complete
 * record; the file is cut after the last complete one. */
typedef struct {
    uint32_t *key;                 /* case, isa, threads triples */
    size_t n;
} done_t;

static int is_done(const done_t *d, uint32_t c, int isa, int threads)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->key[3 * i] == c && d->key[3 * i + 1] == (uint32_t)isa &&
            d->key[3 * i + 2] == (uint32_t)threads)
            return 1;
    return 0;
}

/* -> the offset after the last complete record, or -1 when the header is not this bundle's. */
static long scan_results(const unsigned char *data, size_t size, const char *digest, done_t *d)
{
    reader_t r = {data, data + size, "results"};
    /* magic[8] u32 version digest[64] u32 platform_len platform */
    if (size < 80 || memcmp(data, "CRNNRS01", 8) != 0 || memcmp(data + 12, digest, 64) != 0)
        return -1;
    if (data[8] != 1 && data[8] != 2) return -1;
    g_version = data[8];                 /* the file goes on in its own version */
    r.p += 76;
    if (r.end - r.p < 4) return -1;
    uint32_t plen = (uint32_t)(r.p[0] | r.p[1] << 8 | r.p[2] << 16 | (uint32_t)r.p[3] << 24);
    if ((size_t)(r.end - r.p) < 4 + (size_t)plen) return -1;
    r.p += 4 + plen;
    long good = (long)(r.p - data);
    size_t cap = 0;
    for (;;) {
        const unsigned char *s = r.p;
        uint64_t v[4];
        if (r.end - s < 20 || memcmp(s, "RUN_", 4) != 0) break;
        for (int i = 0; i < 4; i++)
            v[i] = (uint64_t)s[4 + 4 * i] | (uint64_t)s[5 + 4 * i] << 8 |
                   (uint64_t)s[6 + 4 * i] << 16 | (uint64_t)s[7 + 4 * i] << 24;
        const unsigned char *p = s + 20;
        int ok = 1;
        for (uint64_t k = 0; k < v[3] && ok; k++) {
            if (r.end - p < 12) { ok = 0; break; }
            uint32_t nw = (uint32_t)(p[8] | p[9] << 8 | p[10] << 16 | (uint32_t)p[11] << 24);
            const int head = g_version == 2 ? 20 : 12;   /* index, [offset,] nbytes */
            p += 12;
            for (uint32_t w = 0; w < nw && ok; w++) {
                if (r.end - p < head) { ok = 0; break; }
                uint64_t nb = 0;
                for (int i = 0; i < 8; i++) nb |= (uint64_t)p[head - 8 + i] << (8 * i);
                if ((uint64_t)(r.end - p - head) < nb) { ok = 0; break; }
                p += head + nb;
            }
        }
        if (!ok || r.end - p < 8) break;
        uint32_t ml = (uint32_t)(p[4] | p[5] << 8 | p[6] << 16 | (uint32_t)p[7] << 24);
        if ((size_t)(r.end - p - 8) < (size_t)ml + 4 || memcmp(p + 8 + ml, "END_", 4) != 0) break;
        r.p = p + 8 + ml + 4;
        good = (long)(r.p - data);
        if (d->n == cap) {
            cap = cap ? 2 * cap : 256;
            d->key = realloc(d->key, cap * 3 * sizeof(uint32_t));
            if (!d->key) cannot_run("out of memory");
        }
        d->key[3 * d->n] = (uint32_t)v[0];
        d->key[3 * d->n + 1] = (uint32_t)v[1];
        d->key[3 * d->n + 2] = (uint32_t)v[2];
        d->n++;
    }
    return good;
}

static int open_results(const options_t *o, const bundle_t *bundle, const char *port_sha,
                        done_t *done)
{
    if (o->resume) {
        size_t size;
        unsigned char *old = read_file(o->results, &size);
        if (old) {
            long good = scan_results(old, size, bundle->digest, done);
            free(old);
            if (good < 0)
                cannot_run("--resume: %s is not a results file of this bundle (digest %.12s...)",
                           o->results, bundle->digest);
            int fd = open(o->results, O_WRONLY | O_APPEND);
            if (fd < 0 || ftruncate(fd, good) != 0)
                cannot_run("results %s cannot be written: %s", o->results, strerror(errno));
            return fd;
        }
    }
    int fd = open(o->results, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0) cannot_run("results %s cannot be written: %s", o->results, strerror(errno));
    bytes_t b = {0}, plat = {0};
    put(&b, "CRNNRS01", 8);
    put_le(&b, (uint64_t)g_version, 4);
    put(&b, bundle->digest, 64);
    platform_json(&plat, o->port_path, port_sha);
    put_le(&b, plat.n, 4);
    put(&b, plat.p, plat.n);
    if (append_record(fd, &b) != 0)
        cannot_run("results %s cannot be written: %s", o->results, strerror(errno));
    free(b.p);
    free(plat.p);
    return fd;
}

/* ---- the port ----------------------------------------------------------------------- */

static void load_port(const char *path, port_t *port)
{
    const char *fp = fp_problem(fp_state());
    if (fp) cannot_run("the floating-point environment is not the default before loading the "
                       "port: %s", fp);
    char local[4096];          /* a bare file name is a file here, not a library to search */
    if (!strchr(path, '/') && snprintf(local, sizeof local, "./%s", path) < (int)sizeof local)
        path = local;
    port->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!port->lib) cannot_run("port %s cannot be loaded: %s", path, dlerror());
    if ((fp = fp_problem(fp_state())) != NULL)
        cannot_run("port %s changed the floating-point environment when it was loaded: %s "
                   "(a library built with -ffast-math or -Ofast sets FTZ/DAZ at start-up)",
                   path, fp);
    for (int e = 0; e < CR_N_ENTRIES; e++) port->fn[e] = dlsym(port->lib, CR_ENTRIES[e].name);
    static const char *core[] = {"crnn_abi_version", "crnn_isa_available", "crnn_set_isa",
                                 "crnn_set_threads"};
    for (int i = 0; i < 4; i++)
        if (!port->fn[entry_index(core[i])])
            cannot_run("port %s is missing %s (the ABI's core)", path, core[i]);
    int32_t version = ((int32_t (*)(void))port->fn[entry_index("crnn_abi_version")])();
    if (version != CRNN_ABI_VERSION)
        cannot_run("port %s has ABI version %d; crnn-run speaks version %d (crnn_port.h)", path,
                   version, CRNN_ABI_VERSION);
    port->set_isa = (int32_t (*)(int32_t))port->fn[entry_index("crnn_set_isa")];
    port->set_threads = (int32_t (*)(int32_t))port->fn[entry_index("crnn_set_threads")];
}

static uint32_t isa_mask(const port_t *port)
{
    return ((uint32_t (*)(void))port->fn[entry_index("crnn_isa_available")])();
}

/* The port loaded first in a child, within --timeout: a library whose constructors (or
 * crnn_abi_version, crnn_isa_available) crash, end the process or do not return is exit 2
 * with one line, before crnn-run loads it into its own process. -> crnn_isa_available(). */
static uint32_t trial_load(const options_t *o, progress_t *progress)
{
    memset((void *)progress, 0, sizeof *progress);
    progress->entry = -1;
    progress->start = now();
    progress->in_call = 1;                 /* the whole load has the time limit of a call */
    pid_t pid = spawn();
    if (pid == 0) {
        port_t port;
        g_child_failed = &progress->runner_failed;
        load_port(o->port_path, &port);
        progress->isa_mask = isa_mask(&port);
        progress->loaded = 1;
        _exit(0);
    }
    int call, in_call;
    int st = wait_child(pid, progress, o->timeout, 0, &call, &in_call);
    if (st == -1)
        cannot_run("port %s did not finish loading within %g s (--timeout): a constructor, "
                   "crnn_abi_version or crnn_isa_available that does not return", o->port_path,
                   o->timeout);
    if (progress->runner_failed) exit(2);  /* load_port's one line is out */
    if (WIFSIGNALED(st))
        cannot_run("port %s crashed while it was loaded: %s (signal %d) in a constructor, "
                   "crnn_abi_version or crnn_isa_available", o->port_path,
                   signal_name(WTERMSIG(st)), WTERMSIG(st));
    if (!progress->loaded || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        cannot_run("port %s exited (status %d) while it was loaded: a constructor, "
                   "crnn_abi_version or crnn_isa_available ended the process", o->port_path,
                   WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return progress->isa_mask;
}

/* Loading the port into crnn-run's own process (it loaded in a child already: a port that
 * behaves otherwise the second time): a crash, an exit or a hang there is one line, exit 2. */
static char g_load_msg[4400];
static size_t g_load_msg_n;

static void load_failed(int sig)
{
    (void)sig;
    if (write(2, g_load_msg, g_load_msg_n) < 0) {}
    _exit(2);
}

static void load_exit(void)
{
    if (g_loading) load_failed(0);
}

static uint32_t guarded_load(const options_t *o, port_t *port)
{
    static const int sigs[6] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGALRM};
    struct sigaction sa, old[6];
    int n = snprintf(g_load_msg, sizeof g_load_msg, "crnn-run: cannot run: port %s crashed, "
                     "exited or hung when crnn-run loaded it into its own process (after a "
                     "trial load in a child went well)\n", o->port_path);
    g_load_msg_n = n < 0 ? 0 : (size_t)n < sizeof g_load_msg ? (size_t)n : sizeof g_load_msg - 1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = load_failed;
    sigemptyset(&sa.sa_mask);
    atexit(load_exit);
    for (int i = 0; i < 6; i++) sigaction(sigs[i], &sa, &old[i]);
    g_loading = o->port_path;
    if (o->timeout > 0) alarm(o->timeout < 1e6 ? (unsigned)o->timeout + 1 : 1000000u);
    load_port(o->port_path, port);
    uint32_t mask = isa_mask(port);
    alarm(0);
    g_loading = NULL;
    for (int i = 0; i < 6; i++) sigaction(sigs[i], &old[i], NULL);
    return mask;
}

/* The first ABI symbol case c calls that the port does not export, or NULL. */
static const char *missing_symbol(const case_t *c, const port_t *port)
{
    for (uint32_t k = 0; k < c->n_ops; k++)
        if (c->ops[k].kind == 0 && !port->fn[c->ops[k].entry]) return CR_ENTRIES[c->ops[k].entry].name;
    return NULL;
}

/* ---- options ------------------------------------------------------------------------ */

static void usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "crnn-run: cannot run: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\nusage: crnn-run PORT BUNDLE RESULTS [--isa LIST] [--threads LIST] "
                    "[--timeout S] [--settle S] [--case GLOB] [--resume] [--results-version 1|2]\n");
    exit(2);
}

static void parse_isas(options_t *o, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    o->n_isas = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = -1;
        for (int i = 0; i < N_ISAS; i++)
            if (strcmp(t, ISA_NAMES[i]) == 0) found = i;
        if (found < 0)
            usage_error("--isa: unknown ISA path '%s' (scalar, sse, avx2, avx512, neon)", t);
        for (int i = 0; i < o->n_isas; i++)
            if (o->isas[i] == found) usage_error("--isa: '%s' is given twice (a run is run once)", t);
        o->isas[o->n_isas++] = found;
    }
    free(copy);
    if (!o->n_isas) usage_error("--isa: no ISA path in '%s'", list);
}

static void parse_threads(options_t *o, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    o->n_threads = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > 256) usage_error("--threads: '%s' is not a count in 1..256", t);
        for (int i = 0; i < o->n_threads; i++)
            if (o->threads[i] == (int)v)
                usage_error("--threads: '%s' is given twice (a run is run once)", t);
        o->threads[o->n_threads++] = (int)v;
    }
    free(copy);
    if (!o->n_threads) usage_error("--threads: no thread count in '%s'", list);
}

static void parse_options(int argc, char **argv, options_t *o)
{
    const char *pos[3];
    int n_pos = 0;
    static const int default_threads[4] = {1, 2, 3, 7};
    memcpy(o->threads, default_threads, sizeof default_threads);
    o->n_threads = 4;
    o->n_isas = 0;
    o->timeout = 120.0;
    o->settle = SETTLE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--resume") == 0) o->resume = 1;
        else if (strcmp(a, "--results-version") == 0 && has_value) {
            const char *v = argv[++i];
            if (strcmp(v, "1") != 0 && strcmp(v, "2") != 0)
                usage_error("--results-version: '%s' is not 1 or 2", v);
            g_version = v[0] - '0';
        }
        else if (strcmp(a, "--isa") == 0 && has_value) parse_isas(o, argv[++i]);
        else if (strcmp(a, "--threads") == 0 && has_value) parse_threads(o, argv[++i]);
        else if (strcmp(a, "--case") == 0 && has_value) o->case_glob = argv[++i];
        else if (strcmp(a, "--timeout") == 0 && has_value) {
            char *end;
            const char *v = argv[++i];
            o->timeout = strcmp(v, "inf") == 0 ? 0.0 : strtod(v, &end);
            if (strcmp(v, "inf") != 0 && (*end || !(o->timeout > 0)))
                usage_error("--timeout: '%s' is not a positive number of seconds (or inf)", v);
        } else if (strcmp(a, "--settle") == 0 && has_value) {
            char *end;
            const char *v = argv[++i];
            o->settle = strtod(v, &end);
            if (*end || !(o->settle >= 0 && o->settle <= 60))
                usage_error("--settle: '%s' is not a number of seconds in 0..60", v);
        } else if (a[0] == '-' && a[1] == '-') usage_error("unknown or incomplete option '%s'", a);
        else if (n_pos < 3) pos[n_pos++] = a;
        else usage_error("unexpected argument '%s'", a);
    }
    if (n_pos != 3) usage_error("%s", "PORT, BUNDLE and RESULTS are required");
    o->port_path = pos[0];
    o->bundle_dir = pos[1];
    o->results = pos[2];
}

static int case_selected(const options_t *o, const case_t *c)
{
    if (!o->case_glob) return 1;
    const char *last = strrchr(c->name, '/');
    return fnmatch(o->case_glob, c->name, 0) == 0 ||
           (last && fnmatch(o->case_glob, last + 1, 0) == 0);
}

/* ---- main --------------------------------------------------------------------------- */

static const char *const STATUS_NAMES[6] = {"ok", "error code", "crashed", "timed out",
                                            "not implemented", "check failed"};

static void run_case(const options_t *o, const case_t *c, const port_t *port, const int *isas,
                     int n_isas, int fd, progress_t *progress, const done_t *done)
{
    const char *missing = missing_symbol(c, port);
    /* the case's first run here (grade's base run, which every tier judges) and its last
     * (the most threads): their ends are looked at again after the settle window */
    int first = -1, last = -1;
    for (int j = 0; j < n_isas * o->n_threads; j++)
        if (!is_done(done, c->index, isas[j / o->n_threads], o->threads[j % o->n_threads])) {
            if (first < 0) first = j;
            last = j;
        }
    for (int i = 0; i < n_isas; i++)
        for (int t = 0; t < o->n_threads; t++) {
            int isa = isas[i], threads = o->threads[t];
            if (is_done(done, c->index, isa, threads)) continue;
            off_t at = lseek(fd, 0, SEEK_END);
            int status;
            if (missing) {
                status = ST_MISSING;
                if (record_parent(fd, at, NULL, c, isa, threads, status, missing) != 0)
                    cannot_run("results %s cannot be written: %s", o->results, strerror(errno));
            } else {
                status = run_one(o, c, port, isa, threads, fd, progress,
                                 i * o->n_threads + t == first ||
                                 i * o->n_threads + t == last ? o->settle : 0);
            }
            status_counts[status]++;
            if (status != ST_OK && status != ST_MISSING)
                fprintf(stderr, "crnn-run: %s isa %s threads %d: %s: %s\n", c->name,
                        ISA_NAMES[isa], threads, STATUS_NAMES[status], progress->msg);
        }
}

int main(int argc, char **argv)
{
    options_t o = {0};
    parse_options(argc, argv, &o);
    bundle_t bundle;
    read_bundle(o.bundle_dir, &bundle);
    progress_t *progress = mmap(NULL, sizeof(progress_t), PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (progress == MAP_FAILED) cannot_run("no shared memory: %s", strerror(errno));
    signal(SIGPIPE, SIG_IGN);
    control_children();
    g_settle = o.settle;
    uint32_t mask = trial_load(&o, progress);
    port_t port;
    uint32_t again = guarded_load(&o, &port);
    if (again != mask)
        cannot_run("port %s: crnn_isa_available() returned 0x%x, then 0x%x", o.port_path, mask,
                   again);
    if (!(mask & 1))
        cannot_run("port %s: crnn_isa_available() returned 0x%x, without bit 0 (scalar)",
                   o.port_path, mask);
    int isas[N_ISAS], n_isas = 0;
    if (o.n_isas) {
        for (int i = 0; i < o.n_isas; i++) {
            if (!(mask & (1u << o.isas[i])))
                cannot_run("--isa: the port does not offer %s here (crnn_isa_available 0x%x)",
                           ISA_NAMES[o.isas[i]], mask);
            isas[n_isas++] = o.isas[i];
        }
    } else {
        for (int i = 0; i < N_ISAS; i++)
            if (mask & (1u << i)) isas[n_isas++] = i;
    }
    size_t port_size;
    unsigned char *port_bytes = read_file(o.port_path, &port_size);
    char port_sha[65] = "";
    if (port_bytes) sha256_hex(port_bytes, port_size, port_sha);
    free(port_bytes);
    done_t done = {0};
    int fd = open_results(&o, &bundle, port_sha, &done);
    g_patch_fd = open(o.results, O_WRONLY);
    if (g_patch_fd < 0) cannot_run("results %s cannot be written: %s", o.results, strerror(errno));
    int selected = 0;
    double t0 = now();
    for (uint32_t i = 0; i < bundle.n_cases; i++) {
        if (!case_selected(&o, &bundle.cases[i])) continue;
        selected++;
        run_case(&o, &bundle.cases[i], &port, isas, n_isas, fd, progress, &done);
    }
    close(fd);
    if (!selected) cannot_run("no case selected (--case %s)", o.case_glob ? o.case_glob : "");
    int runs = 0;
    for (int s = 0; s < 6; s++) runs += status_counts[s];
    fprintf(stderr, "crnn-run: %d case(s), %d run(s) in %.2f s: %d ok, %d error code, %d crashed, "
            "%d timed out, %d not implemented, %d check failed; results in %s\n", selected, runs,
            now() - t0, status_counts[0], status_counts[1], status_counts[2], status_counts[3],
            status_counts[4], status_counts[5], o.results);
    return status_counts[1] + status_counts[2] + status_counts[3] + status_counts[5] ? 1 : 0;
}
