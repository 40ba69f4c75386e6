"""Peak heap bytes of one training step, counted by a preloaded malloc wrapper."""
from __future__ import annotations

import json
import os
import subprocess
import sys

# A malloc counter preloaded into a fresh process (glibc): every allocation and release of
# the process goes through it, so the heap bytes in use (malloc_usable_size of each live
# block) and their peak are known exactly. Thread stacks (mmap) are not heap and not counted.
HEAP_COUNTER_SOURCE = r"""
#include <stddef.h>
#include <malloc.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
static long long cur, peak;
static void add(long long n)
{
    long long c = __atomic_add_fetch(&cur, n, __ATOMIC_RELAXED);
    long long p = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (c > p && !__atomic_compare_exchange_n(&peak, &p, c, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
}
void *malloc(size_t n) { void *p = __libc_malloc(n); if (p) add((long long)malloc_usable_size(p)); return p; }
void *calloc(size_t a, size_t b) { void *p = __libc_calloc(a, b); if (p) add((long long)malloc_usable_size(p)); return p; }
void free(void *p) { if (p) add(-(long long)malloc_usable_size(p)); __libc_free(p); }
void *realloc(void *q, size_t n)
{
    long long old = q ? (long long)malloc_usable_size(q) : 0;
    void *p = __libc_realloc(q, n);
    if (p) add((long long)malloc_usable_size(p) - old);
    else if (q && n == 0) add(-old);
    return p;
}
void *memalign(size_t a, size_t n) { void *p = __libc_memalign(a, n); if (p) add((long long)malloc_usable_size(p)); return p; }
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }
void *valloc(size_t n) { return memalign(4096, n); }
int posix_memalign(void **r, size_t a, size_t n)
{
    void *p = __libc_memalign(a, n);
    if (!p) return 12;
    add((long long)malloc_usable_size(p));
    *r = p;
    return 0;
}
long long crnn_h_heap_current(void) { return __atomic_load_n(&cur, __ATOMIC_RELAXED); }
long long crnn_h_heap_peak(void) { return __atomic_load_n(&peak, __ATOMIC_RELAXED); }
void crnn_h_heap_reset_peak(void) { __atomic_store_n(&peak, crnn_h_heap_current(), __ATOMIC_RELAXED); }
"""

_MEM_CHILD = r"""
import ctypes, json, sys
from crnn_conformance import fixtures
from crnn_conformance.ctypes_kernels import abi
from crnn_conformance.harness import bench
counter, path, isa, threads, width, batch = sys.argv[1:7]
h = ctypes.CDLL(counter)
for f in ("crnn_h_heap_current", "crnn_h_heap_peak"):
    getattr(h, f).restype = ctypes.c_longlong
lib = abi.load(path, layers=("step", "clip", "adamw"))
abi.check(lib.crnn_set_isa(abi.ISA_NAMES.index(isa)), "crnn_set_isa")
abi.check(lib.crnn_set_threads(int(threads)), "crnn_set_threads")
step = bench.OursStep(lib, bench.make_inputs(int(width), int(batch)))
base = h.crnn_h_heap_current()
h.crnn_h_heap_reset_peak()
step()
print(json.dumps({"peak": h.crnn_h_heap_peak() - base, "kept": h.crnn_h_heap_current() - base}))
"""


def step_memory(path, isa: str, width: int, batch: int, threads: int = 1) -> dict | None:
    """Heap bytes of one training step (the first, so every scratch buffer is allocated in
    it): a fresh process with a preloaded malloc counter loads the port and allocates every
    caller-owned buffer (weights, gradients, images, optimizer state); then the peak of heap
    bytes in use during the step above that baseline ("peak") and what the step keeps for
    the next one ("kept": the per-thread scratch buffers). None where it cannot be measured."""
    from ...ctypes_kernels.build import BuildError, build_helper
    try:
        counter = build_helper("crnnheapcount", HEAP_COUNTER_SOURCE)
    except BuildError:
        return None
    env = dict(os.environ, LD_PRELOAD=str(counter))
    r = subprocess.run([sys.executable, "-c", _MEM_CHILD, str(counter), str(path), isa,
                        str(threads), str(width), str(batch)],
                       capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0 or not r.stdout.strip():
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])
