/* gemm16_kn_packed.h — crnn_gemm16_kn_packed: kn with a B its caller already wrote in the
 * kernels' packed layout (core.h), through the blocks of gemm16_kn.h (included before). */

/* kn with B already packed (core.h, crnn_gemm16_kn_packed): panels of 16 columns, each the
 * rows of lane 0, then lane 1, ..., 16 floats a row, zeros past N. */
void CAT(crnn_gemm16_kn_packed, ISA_SUFFIX)(int64_t M, int64_t N, int64_t K,
                                            const float *A, int64_t a_i, int64_t a_k,
                                            const float *Bp, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0) return;
    const int64_t npanel = (N + 15) / 16;
    const int nrmax = kn_nr_max(M);
    int64_t offA[16], offB[16];
    const float *ap = a_k != 1 && N > VW ? kn_pack_a(M, K, A, a_i, a_k, offA) : NULL;
    lane_starts(K, 16, offB);
#if VW == 16
    /* one register per panel: a block of nr registers spans nr panels (16*K apart) */
    for (int64_t jp = 0; jp < npanel; ) {
        int nr = npanel - jp < nrmax ? (int)(npanel - jp) : nrmax;
        int last = jp + nr == npanel ? (int)(N - (npanel - 1) * 16) : VW;
        kn_operand Bo;
        Bo.p = Bp + jp * 16 * K;
        for (int l = 0; l < 16; l++) Bo.off[l] = offB[l];
        Bo.step = 16;
        Bo.rs = 0;
        Bo.vs = 16 * K;
        kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, 0, C + jp * 16, ldc);
        jp += nr;
    }
#else
    for (int64_t jp = 0; jp < npanel; jp++) {
        const int64_t cols = N - jp * 16 < 16 ? N - jp * 16 : 16;
        const int nv = (int)((cols + VW - 1) / VW);
        for (int v0 = 0; v0 < nv; ) {
            int nr = nv - v0 < nrmax ? nv - v0 : nrmax;
            int last = v0 + nr == nv ? (int)(cols - (nv - 1) * VW) : VW;
            kn_operand Bo;
            Bo.p = Bp + jp * 16 * K + v0 * VW;
            for (int l = 0; l < 16; l++) Bo.off[l] = offB[l];
            Bo.step = 16;
            Bo.rs = 0;
            Bo.vs = VW;
            kn_rows(M, K, A, a_i, a_k, ap, offA, &Bo, nr, last, 0, C + jp * 16 + v0 * VW, ldc);
            v0 += nr;
        }
    }
#endif
}
