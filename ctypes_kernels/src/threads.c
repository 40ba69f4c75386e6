/* threads.c — a fork/join parallel_for over contiguous chunks of independent outputs. */
#include <pthread.h>
#include "core.h"

typedef struct {
    crnn_range_fn fn;
    void *ctx;
    int64_t begin, end;
} chunk_t;

static void *run_chunk(void *arg)
{
    chunk_t *c = arg;
    if (c->begin < c->end) c->fn(c->ctx, c->begin, c->end);
    return NULL;
}

void crnn_parallel_for(int64_t n, crnn_range_fn fn, void *ctx)
{
    int t = crnn_current_threads();
    if (t > n) t = (int)n;
    if (t <= 1) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    chunk_t chunks[256];
    pthread_t tid[256];
    int started[256] = {0};
    int64_t per = (n + t - 1) / t;
    for (int i = 0; i < t; i++) {
        chunks[i].fn = fn;
        chunks[i].ctx = ctx;
        chunks[i].begin = i * per < n ? i * per : n;
        chunks[i].end = (i + 1) * per < n ? (i + 1) * per : n;
    }
    for (int i = 1; i < t; i++)
        started[i] = pthread_create(&tid[i], NULL, run_chunk, &chunks[i]) == 0;
    run_chunk(&chunks[0]);
    for (int i = 1; i < t; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else run_chunk(&chunks[i]);   /* could not start a thread: same work, same bits */
    }
}
