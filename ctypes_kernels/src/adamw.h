/* adamw.h — one AdamW step over a range of elements on each ISA path (adamw.c holds the
 * scalar one and the entry point, src/isa/adamw_<isa>.c the vector ones). Per element, in
 * this order, each operation one float32 rounding (no fma; sqrt and division correctly
 * rounded), so every vector width gives the scalar loop's bits:
 *   p = p*dec (decay only); m = m + omb1*(g - m); v = (v*b2) + (omb2*(g*g));
 *   p = p - stepSize*(m / ((sqrt(v)/sqrtC2) + eps)). */
#ifndef CRNN_ADAMW_H
#define CRNN_ADAMW_H
#include <stdint.h>

typedef struct {
    float *p, *m, *v;
    const float *g;
    int64_t n;
    int32_t decay;
    float omb1, b2, omb2, epsf, dec, stepSize, sqrtC2;
} adamw_job;

typedef void (*crnn_adamw_range_fn)(const adamw_job *j, int64_t i0, int64_t i1);
void crnn_adamw_range_scalar(const adamw_job *j, int64_t i0, int64_t i1);
void crnn_adamw_range_sse(const adamw_job *j, int64_t i0, int64_t i1);
void crnn_adamw_range_avx2(const adamw_job *j, int64_t i0, int64_t i1);
void crnn_adamw_range_avx512(const adamw_job *j, int64_t i0, int64_t i1);
void crnn_adamw_range_neon(const adamw_job *j, int64_t i0, int64_t i1);
#endif
