/* crnn_entries.h: generated from ctypes_kernels/abi.py (SIGNATURES, ARGS) by
 * crnn_conformance.ctypes_kernels.crossbuild.entries_header(); do not edit. */
#define CR_N_ENTRIES 22
static const cr_entry CR_ENTRIES[CR_N_ENTRIES] = {
    {"crnn_abi_version", "", "", ""},
    {"crnn_isa_available", "", "", ""},
    {"crnn_set_isa", "i", "0", "isa"},
    {"crnn_get_isa", "", "", ""},
    {"crnn_set_threads", "i", "0", "n"},
    {"crnn_get_threads", "", "", ""},
    {"crnn_dot16", "pplp", "0001", "a b n out"},
    {"crnn_linear_forward", "pppiiip", "0000001", "x W b T I O y"},
    {"crnn_linear_backward", "pppiiippp", "000000111", "x W dY T I O dx dW db"},
    {"crnn_conv_forward", "piiippiiiiiiippp", "0000000000000111", "x H W C Wt b Out kh kw padH padW poolH poolW conv pooled winners"},
    {"crnn_conv_backward", "piiipiiiiiiippppp", "00000000000000111", "x H W C Wt Out kh kw padH padW poolH poolW dPooled winners dW db dx"},
    {"crnn_lstm_forward", "piiipppppppp", "000000011111", "x T I H W_ih W_hh b out gates c tc hPrev"},
    {"crnn_lstm_backward", "piiippppppppppp", "000000000001111", "x T I H W_ih W_hh gates c tc hPrev dOut dW_ih dW_hh db dx"},
    {"crnn_sigmoid", "plp", "001", "x n y"},
    {"crnn_tanh", "plp", "001", "x n y"},
    {"crnn_detmath_exp", "plp", "001", "x n y"},
    {"crnn_detmath_log", "plp", "001", "x n y"},
    {"crnn_ctc", "piipidpp", "00000011", "logits T K target L scale loss dlogits"},
    {"crnn_model_sizes", "ppp", "011", "cfg nTensors sizes"},
    {"crnn_step_gradients", "ppippppppp", "0000000111", "cfg params B widths images targetLens targets grads losses batchLoss"},
    {"crnn_clip_gradients", "ppidip", "100001", "grads sizes nTensors limit enabled norm"},
    {"crnn_adamw", "ppppldddddidd", "1110000000000", "p m v g n lr beta1 beta2 eps wd decay b1t b2t"},
};

static int32_t cr_call(int entry, void *fn, const cr_arg *a)
{
    (void)a;
    switch (entry) {
    case 0: return (int32_t)((int32_t (*)(void))fn)();
    case 1: return (int32_t)((uint32_t (*)(void))fn)();
    case 2: return (int32_t)((int32_t (*)(int32_t))fn)(a[0].i);
    case 3: return (int32_t)((int32_t (*)(void))fn)();
    case 4: return (int32_t)((int32_t (*)(int32_t))fn)(a[0].i);
    case 5: return (int32_t)((int32_t (*)(void))fn)();
    case 6: return (int32_t)((int32_t (*)(void *, void *, int64_t, void *))fn)(a[0].p, a[1].p, a[2].l, a[3].p);
    case 7: return (int32_t)((int32_t (*)(void *, void *, void *, int32_t, int32_t, int32_t, void *))fn)(a[0].p, a[1].p, a[2].p, a[3].i, a[4].i, a[5].i, a[6].p);
    case 8: return (int32_t)((int32_t (*)(void *, void *, void *, int32_t, int32_t, int32_t, void *, void *, void *))fn)(a[0].p, a[1].p, a[2].p, a[3].i, a[4].i, a[5].i, a[6].p, a[7].p, a[8].p);
    case 9: return (int32_t)((int32_t (*)(void *, int32_t, int32_t, int32_t, void *, void *, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, void *, void *, void *))fn)(a[0].p, a[1].i, a[2].i, a[3].i, a[4].p, a[5].p, a[6].i, a[7].i, a[8].i, a[9].i, a[10].i, a[11].i, a[12].i, a[13].p, a[14].p, a[15].p);
    case 10: return (int32_t)((int32_t (*)(void *, int32_t, int32_t, int32_t, void *, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, void *, void *, void *, void *, void *))fn)(a[0].p, a[1].i, a[2].i, a[3].i, a[4].p, a[5].i, a[6].i, a[7].i, a[8].i, a[9].i, a[10].i, a[11].i, a[12].p, a[13].p, a[14].p, a[15].p, a[16].p);
    case 11: return (int32_t)((int32_t (*)(void *, int32_t, int32_t, int32_t, void *, void *, void *, void *, void *, void *, void *, void *))fn)(a[0].p, a[1].i, a[2].i, a[3].i, a[4].p, a[5].p, a[6].p, a[7].p, a[8].p, a[9].p, a[10].p, a[11].p);
    case 12: return (int32_t)((int32_t (*)(void *, int32_t, int32_t, int32_t, void *, void *, void *, void *, void *, void *, void *, void *, void *, void *, void *))fn)(a[0].p, a[1].i, a[2].i, a[3].i, a[4].p, a[5].p, a[6].p, a[7].p, a[8].p, a[9].p, a[10].p, a[11].p, a[12].p, a[13].p, a[14].p);
    case 13: return (int32_t)((int32_t (*)(void *, int64_t, void *))fn)(a[0].p, a[1].l, a[2].p);
    case 14: return (int32_t)((int32_t (*)(void *, int64_t, void *))fn)(a[0].p, a[1].l, a[2].p);
    case 15: return (int32_t)((int32_t (*)(void *, int64_t, void *))fn)(a[0].p, a[1].l, a[2].p);
    case 16: return (int32_t)((int32_t (*)(void *, int64_t, void *))fn)(a[0].p, a[1].l, a[2].p);
    case 17: return (int32_t)((int32_t (*)(void *, int32_t, int32_t, void *, int32_t, double, void *, void *))fn)(a[0].p, a[1].i, a[2].i, a[3].p, a[4].i, a[5].d, a[6].p, a[7].p);
    case 18: return (int32_t)((int32_t (*)(void *, void *, void *))fn)(a[0].p, a[1].p, a[2].p);
    case 19: return (int32_t)((int32_t (*)(void *, void *, int32_t, void *, void *, void *, void *, void *, void *, void *))fn)(a[0].p, a[1].p, a[2].i, a[3].p, a[4].p, a[5].p, a[6].p, a[7].p, a[8].p, a[9].p);
    case 20: return (int32_t)((int32_t (*)(void *, void *, int32_t, double, int32_t, void *))fn)(a[0].p, a[1].p, a[2].i, a[3].d, a[4].i, a[5].p);
    case 21: return (int32_t)((int32_t (*)(void *, void *, void *, void *, int64_t, double, double, double, double, double, int32_t, double, double))fn)(a[0].p, a[1].p, a[2].p, a[3].p, a[4].l, a[5].d, a[6].d, a[7].d, a[8].d, a[9].d, a[10].i, a[11].d, a[12].d);
    }
    return CRNN_E_ARG;
}
