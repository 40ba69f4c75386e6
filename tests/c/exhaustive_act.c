/* exhaustive_act.c — sigmoid and tanh over all 2^32 float32 inputs (tests/test_activations.py).
 *
 * Linked with the bundled port's activations.c, src/isa/act_<isa>.c, dispatch.c and threads.c,
 * each compiled with the flags ctypes_kernels/build.py gives it. For every input:
 *   - every vector path the CPU has returns the scalar definition's bits;
 *   - NaN in gives NaN out, anything else gives a non-NaN in [0, 1] (sigmoid) or [-1, 1] (tanh);
 *   - the error against the exact function, evaluated in double, is measured in ulps (the
 *     float32 spacing in the binade of the exact value, 2^-149 at least) and absolutely.
 * Prints one JSON object per function. Exit status 1 on any mismatch or range violation.
 * Usage: exhaustive_act [threads] [stride]   (stride > 1 samples every stride-th input) */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../ctypes_kernels/src/activations.h"

uint32_t crnn_isa_available(void);

typedef void (*path_fn)(const float *, float *, int64_t);
typedef float (*one_fn)(float);

typedef struct {
    double max_ulp, max_abs;
    uint32_t x_ulp, x_abs;
    uint64_t mismatches[4], generic_mismatches, generic_checked, range_errors, checked;
    uint32_t first_mismatch;
} stats_t;

typedef struct {
    int fn;               /* 0 sigmoid, 1 tanh */
    uint64_t begin, end;  /* inputs [begin, end) */
    uint64_t stride;
    uint32_t isas;
    stats_t s;
} job_t;

static double exact(int fn, double x)
{
    if (fn == 1) return tanh(x);
    double e = exp(-fabs(x));
    return x >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

static double ulp_of(double r)
{
    r = fabs(r);
    if (r == 0) return 0x1p-149;
    int e = ilogb(r);
    if (e < -126) e = -126;
    return ldexp(1.0, e - 23);
}

#define BLOCK 4096

static void *run(void *arg)
{
    job_t *j = arg;
    path_fn vec[4] = {0};
    if (j->isas & 2) vec[1] = j->fn ? crnn_tanh_sse : crnn_sigmoid_sse;
    if (j->isas & 4) vec[2] = j->fn ? crnn_tanh_avx2 : crnn_sigmoid_avx2;
    if (j->isas & 8) vec[3] = j->fn ? crnn_tanh_avx512 : crnn_sigmoid_avx512;
    float x[BLOCK], y[BLOCK], yv[BLOCK];
    stats_t *s = &j->s;
    memset(s, 0, sizeof *s);
    for (uint64_t b = j->begin; b < j->end; b += (uint64_t)BLOCK * j->stride) {
        int n = 0;
        for (uint64_t u = b; u < j->end && n < BLOCK; u += j->stride, n++) {
            uint32_t bits = (uint32_t)u;
            memcpy(&x[n], &bits, 4);
        }
        crnn_act_scalar_variant(j->fn, 1, x, y, n);
        if ((b / ((uint64_t)BLOCK * j->stride)) % 61 == 0) {
            crnn_act_scalar_variant(j->fn, 0, x, yv, n);
            for (int k = 0; k < n; k++)
                if (memcmp(&y[k], &yv[k], 4) != 0) s->generic_mismatches++;
            s->generic_checked += (uint64_t)n;
        }
        for (int isa = 1; isa < 4; isa++) {
            if (!vec[isa]) continue;
            vec[isa](x, yv, n);
            if (memcmp(y, yv, sizeof(float) * (size_t)n) != 0)
                for (int k = 0; k < n; k++)
                    if (memcmp(&y[k], &yv[k], 4) != 0) {
                        if (!s->mismatches[1] && !s->mismatches[2] && !s->mismatches[3])
                            memcpy(&s->first_mismatch, &x[k], 4);
                        s->mismatches[isa]++;
                    }
        }
        for (int k = 0; k < n; k++) {
            float xi = x[k], yi = y[k];
            uint32_t xb;
            memcpy(&xb, &xi, 4);
            s->checked++;
            if (isnan(xi)) {
                if (!isnan(yi)) s->range_errors++;
                continue;
            }
            double lo = j->fn ? -1.0 : 0.0;
            if (isnan(yi) || yi < lo || yi > 1.0f) {
                s->range_errors++;
                continue;
            }
            double r = exact(j->fn, (double)xi);
            double err = fabs((double)yi - r);
            double u = err / ulp_of(r);
            if (u > s->max_ulp) { s->max_ulp = u; s->x_ulp = xb; }
            if (err > s->max_abs) { s->max_abs = err; s->x_abs = xb; }
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    uint64_t stride = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    if (threads < 1 || threads > 64 || stride < 1) return 2;
    uint32_t isas = crnn_isa_available();
    int failed = 0;
    for (int fn = 0; fn < 2; fn++) {
        job_t jobs[64];
        pthread_t tid[64];
        uint64_t total = 1ull << 32, per = (total / (uint64_t)threads / stride + 1) * stride;
        for (int t = 0; t < threads; t++) {
            jobs[t].fn = fn;
            jobs[t].begin = (uint64_t)t * per < total ? (uint64_t)t * per : total;
            jobs[t].end = (uint64_t)(t + 1) * per < total ? (uint64_t)(t + 1) * per : total;
            jobs[t].stride = stride;
            jobs[t].isas = isas;
            pthread_create(&tid[t], NULL, run, &jobs[t]);
        }
        stats_t all = {0};
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            stats_t *s = &jobs[t].s;
            if (s->max_ulp > all.max_ulp) { all.max_ulp = s->max_ulp; all.x_ulp = s->x_ulp; }
            if (s->max_abs > all.max_abs) { all.max_abs = s->max_abs; all.x_abs = s->x_abs; }
            for (int i = 0; i < 4; i++) {
                if (s->mismatches[i] && !(all.mismatches[1] | all.mismatches[2] | all.mismatches[3]))
                    all.first_mismatch = s->first_mismatch;
                all.mismatches[i] += s->mismatches[i];
            }
            all.range_errors += s->range_errors;
            all.generic_mismatches += s->generic_mismatches;
            all.generic_checked += s->generic_checked;
            all.checked += s->checked;
        }
        float xu, xa;
        memcpy(&xu, &all.x_ulp, 4);
        memcpy(&xa, &all.x_abs, 4);
        one_fn one = fn ? crnn_tanh1 : crnn_sigmoid1;
        printf("{\"function\": \"%s\", \"checked\": %" PRIu64 ", \"isas\": %u, "
               "\"mismatches\": {\"sse\": %" PRIu64 ", \"avx2\": %" PRIu64 ", \"avx512\": %" PRIu64 "}, "
               "\"first_mismatch_bits\": %u, \"generic_checked\": %" PRIu64 ", "
               "\"generic_mismatches\": %" PRIu64 ", \"range_errors\": %" PRIu64 ", "
               "\"max_ulp\": %.6f, \"max_ulp_x\": \"%a\", \"max_ulp_y\": \"%a\", "
               "\"max_abs\": %.6e, \"max_abs_x\": \"%a\", \"max_abs_y\": \"%a\"}\n",
               fn ? "tanh" : "sigmoid", all.checked, isas,
               all.mismatches[1], all.mismatches[2], all.mismatches[3], all.first_mismatch,
               all.generic_checked, all.generic_mismatches, all.range_errors, all.max_ulp, (double)xu, (double)one(xu),
               all.max_abs, (double)xa, (double)one(xa));
        fflush(stdout);
        if (all.mismatches[1] || all.mismatches[2] || all.mismatches[3] || all.range_errors ||
            all.generic_mismatches)
            failed = 1;
    }
    return failed;
}
