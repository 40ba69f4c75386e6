/* clip.c — global gradient norm and clipping (docs/backward.md, "Batch gradient, clipping").
 *
 * norm = sqrt(sum over tensors in order of (double)dot16(g, g)), the sum in double from +0;
 * when enabled and norm > limit, every element is multiplied by (float)(limit / (norm + 1e-6)).
 * Threads: each tensor's dot whole on one thread (the tensors in contiguous runs of about
 * equal size, a run a thread), the sum in order afterwards on this one; the scaling in blocks
 * of elements. No bit depends on either. */
#include <math.h>
#include "core.h"

typedef struct {
    float *grads;
    const int64_t *sizes;
    int32_t nTensors;
    int64_t total;
    float *dots;          /* [nTensors] */
    float f;              /* the scaling */
    int64_t runs;         /* the threads: run c is chunk c */
} clip_job;

/* tensors whose first element lies in run c of [0, total) split into `runs` equal parts */
static void dots_range(void *ctx, int64_t c0, int64_t c1)
{
    const clip_job *j = ctx;
    crnn_gemm16_fn dot = crnn_gemm16_kernel();
    const int64_t lo = j->total * c0 / j->runs, hi = j->total * c1 / j->runs;
    const float *g = j->grads;
    for (int32_t i = 0; i < j->nTensors; g += j->sizes[i], i++) {
        const int64_t start = g - j->grads;
        if (start < lo || start >= hi || j->sizes[i] == 0) continue;
        dot(1, 1, j->sizes[i], g, j->sizes[i], g, j->sizes[i], &j->dots[i], 1);
    }
}

#define CLIP_BLOCK 16384
static void scale_blocks(void *ctx, int64_t b0, int64_t b1)
{
    const clip_job *j = ctx;
    float *g = j->grads;
    const int64_t i1 = b1 * CLIP_BLOCK < j->total ? b1 * CLIP_BLOCK : j->total;
    for (int64_t k = b0 * CLIP_BLOCK; k < i1; k++) g[k] = g[k] * j->f;
}

int32_t crnn_clip_gradients(float *grads, const int64_t *sizes, int32_t nTensors,
                            double limit, int32_t enabled, double *norm)
{
    if (nTensors < 0 || !norm || (nTensors > 0 && !sizes) || (enabled != 0 && enabled != 1))
        return CRNN_E_ARG;
    if (enabled && !(limit >= 0.0)) return CRNN_E_ARG;
    int64_t total = 0;
    for (int32_t i = 0; i < nTensors; i++) {
        if (sizes[i] < 0) return CRNN_E_ARG;
        total += sizes[i];
    }
    if (total > 0 && !grads) return CRNN_E_ARG;

    /* the dots kept until they are summed in order (without memory for them, one tensor at
     * a time on this thread: the same dots, the same sum) */
    float few[64];
    float *dots = nTensors <= 64 ? few : crnn_scratch(CRNN_SCRATCH_LINE, sizeof(float) * (size_t)nTensors);
    clip_job j = {grads, sizes, nTensors, total, dots, 0.0f, crnn_current_threads()};
    double sumsq = 0.0;
    if (dots) {
        for (int32_t i = 0; i < nTensors; i++) dots[i] = 0.0f;
        crnn_parallel_for_work(j.runs, total, dots_range, &j);
        for (int32_t i = 0; i < nTensors; i++) sumsq = sumsq + (double)dots[i];
    } else {
        const float *g = grads;
        for (int32_t i = 0; i < nTensors; g += sizes[i], i++) {
            float d = 0.0f;
            if (sizes[i] > 0) crnn_gemm16(1, 1, sizes[i], g, sizes[i], g, sizes[i], &d, 1);
            sumsq = sumsq + (double)d;
        }
    }
    double n = sqrt(sumsq);
    *norm = n;
    if (enabled && n > limit) {
        j.f = (float)(limit / (n + 1e-6));
        crnn_parallel_for_work((total + CLIP_BLOCK - 1) / CLIP_BLOCK, total, scale_blocks, &j);
    }
    return CRNN_OK;
}
