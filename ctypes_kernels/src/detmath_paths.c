/* detmath_paths.c — DetMath exp and log over arrays on the current ISA path: the scalar
 * path is the element functions of detmath.c in a loop, the vector paths are
 * src/isa/detmath_impl.h; all give the same bits. (detmath.c itself stays a file that
 * builds alone, as generators/spec/detmath.py's twin.) */
#include "core.h"
#include "detmath.h"

/* the scalar path: the ABI's element loops of detmath.c */
void crnn_detmath_exp_n_scalar(const double *x, int64_t n, double *y) { crnn_detmath_exp(x, n, y); }
void crnn_detmath_log_n_scalar(const double *x, int64_t n, double *y) { crnn_detmath_log(x, n, y); }

typedef void (*dm_fn)(const double *, int64_t, double *);
static const dm_fn exp_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_detmath_exp_n);
static const dm_fn log_paths[CRNN_NISA] = CRNN_ISA_TABLE(crnn_detmath_log_n);

void crnn_detmath_exp_n(const double *x, int64_t n, double *y)
{
    if (n > 0) exp_paths[crnn_current_isa()](x, n, y);
}

void crnn_detmath_log_n(const double *x, int64_t n, double *y)
{
    if (n > 0) log_paths[crnn_current_isa()](x, n, y);
}

/* For the tests: fn 0 = exp, 1 = log, on the current path. */
int32_t crnn_detmath_path_n(int32_t fn, const double *x, int64_t n, double *y)
{
    if (fn < 0 || fn > 1 || n < 0 || (n > 0 && (!x || !y))) return CRNN_E_ARG;
    (fn ? crnn_detmath_log_n : crnn_detmath_exp_n)(x, n, y);
    return CRNN_OK;
}
