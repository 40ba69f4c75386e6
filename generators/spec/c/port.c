/* port.c: the ABI's identity and execution control, and crnn_model_sizes. The reference
 * has one path (scalar) and runs every call on the calling thread; the thread count is
 * only remembered. */
#include "spec.h"

static int32_t isa = CRNN_ISA_SCALAR;
static int32_t threads = 1;

int32_t crnn_abi_version(void) { return CRNN_ABI_VERSION; }

uint32_t crnn_isa_available(void) { return 1u << CRNN_ISA_SCALAR; }

int32_t crnn_set_isa(int32_t which)
{
    if (which < CRNN_ISA_SCALAR || which > CRNN_ISA_NEON)
        return CRNN_E_ARG;
    if (which != CRNN_ISA_SCALAR)
        return CRNN_E_ISA;
    isa = which;
    return CRNN_OK;
}

int32_t crnn_get_isa(void) { return isa; }

int32_t crnn_set_threads(int32_t n)
{
    if (n < 1 || n > 256)
        return CRNN_E_ARG;
    threads = n;
    return CRNN_OK;
}

int32_t crnn_get_threads(void) { return threads; }

int32_t crnn_model_sizes(const int32_t *cfg, int32_t *nTensors, int64_t *sizes)
{
    SpecModel m;
    if (!nTensors)
        return CRNN_E_ARG;
    int32_t rc = spec_model(cfg, &m);
    if (rc != CRNN_OK)
        return rc;
    *nTensors = m.nTensors;
    if (sizes)
        for (int32_t i = 0; i < m.nTensors; i++)
            sizes[i] = spec_tensor_size(&m, i);
    return CRNN_OK;
}
