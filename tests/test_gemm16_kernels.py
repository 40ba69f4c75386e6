"""The bundled port's gemm16 kernels (internal, not ABI): both layouts, every ISA path and
thread count, give the bits of the spec's dot16 for every output.

nt: C[i][j] = dot16(A[i], B[j]);  kn: C[i][j] = dot16 over k of A(i, k) and B[k][j], A read
with strides (rows or columns). Shapes cover the register tiles' row, column and K tails;
the data reveals any other summation order and holds products that round to -0 (a zero
padded tail or a lane that got an extra +0 term turns them into +0)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from crnn_conformance.ctypes_kernels.abi import ISA_NAMES
from crnn_conformance.generators.spec.dot16 import gemm16

THREADS = (1, 2, 3, 7)
i64 = ctypes.c_int64
P = ctypes.c_void_p


@pytest.fixture(scope="module")
def kern(lib):
    f = lib.crnn_gemm16
    f.restype, f.argtypes = None, [i64, i64, i64, P, i64, P, i64, P, i64]
    g = lib.crnn_gemm16_kn
    g.restype, g.argtypes = None, [i64, i64, i64, P, i64, i64, P, i64, i64, P, i64]
    isa0, th0 = lib.crnn_get_isa(), lib.crnn_get_threads()
    yield lib
    lib.crnn_set_isa(isa0)
    lib.crnn_set_threads(th0)


def on_path(kern, isas, isa, name, argtypes):
    """kernel `name` bound with argtypes, the ISA path selected (skipped if the CPU lacks it)"""
    if isa not in isas:
        pytest.skip(f"{isa} not on this CPU")
    f = getattr(kern, name)
    f.restype, f.argtypes = None, argtypes
    assert kern.crnn_set_isa(ISA_NAMES.index(isa)) == 0
    return f


def data(rng, shape):
    """Magnitudes 2^-30..2^30, signs mixed, some exact cancellations, some tiny values whose
    products underflow to -0 or +0."""
    n = int(np.prod(shape))
    a = (rng.choice([-1, 1], n) * np.exp2(rng.integers(-30, 31, n)) * rng.uniform(1, 2, n))
    tiny = rng.random(n) < 0.15
    a[tiny] = rng.choice([-1, 1], tiny.sum()) * 1e-30
    zero = rng.random(n) < 0.05
    a[zero] = rng.choice([-0.0, 0.0], zero.sum())
    return a.astype(np.float32).reshape(shape)


def bits(a):
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


SHAPES = [(1, 1, 0), (1, 1, 1), (1, 1, 15), (1, 1, 16), (1, 1, 17), (2, 3, 5), (3, 5, 31),
          (4, 4, 16), (4, 16, 33), (5, 17, 48), (7, 33, 64), (9, 37, 100), (1, 256, 64),
          (17, 15, 7), (6, 64, 144), (16, 16, 300), (13, 47, 1),
          # every kn block shape and its row/column tails on 128-, 256- and 512-bit
          # (blocks of up to 6 or 8 registers: 3x2, 2x3, 4x2, 8x1, 1x8 and smaller)
          (8, 32, 40), (11, 80, 20), (12, 96, 33), (10, 48, 64), (3, 130, 17), (25, 136, 19),
          (12, 16, 40), (6, 32, 33), (4, 48, 20), (3, 64, 17), (5, 40, 9), (17, 48, 70),
          (3, 48, 21), (8, 48, 25), (2, 64, 18), (1, 48, 19), (2, 48, 23), (6, 16, 35),
          (1, 8, 21),
          # K = 32 and 64 as constants (A's rows unpacked with a unit step, every path)
          (5, 40, 32), (12, 96, 32), (7, 24, 64)]


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_nt_equals_spec(kern, isas, isa):
    if isa not in isas:
        pytest.skip(f"{isa} not on this CPU")
    rng = np.random.default_rng(11)
    assert kern.crnn_set_isa(ISA_NAMES.index(isa)) == 0
    for M, N, K in SHAPES:
        lda, ldb, ldc = K + 3, K + 1, N + 2
        A, B = data(rng, (M, lda)), data(rng, (N, ldb))
        want = gemm16(A[:, :K], B[:, :K])
        for t in THREADS:
            kern.crnn_set_threads(t)
            C = np.full((M, ldc), np.nan, np.float32)
            kern.crnn_gemm16(M, N, K, A.ctypes.data, lda, B.ctypes.data, ldb, C.ctypes.data, ldc)
            assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, t, M, N, K)
            assert np.isnan(C[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
@pytest.mark.parametrize("a_layout", ["rows", "cols"])
@pytest.mark.parametrize("b_layout", ["rows", "cols"])
def test_kn_equals_spec(kern, isas, isa, a_layout, b_layout):
    if isa not in isas:
        pytest.skip(f"{isa} not on this CPU")
    rng = np.random.default_rng(12)
    assert kern.crnn_set_isa(ISA_NAMES.index(isa)) == 0
    for M, N, K in SHAPES:
        ldb, ldc = N + 5, N + 2
        if b_layout == "rows":                 # B(k, j) = B[k*ldb + j]
            B = data(rng, (max(K, 1), ldb))
            b_k, b_j = ldb, 1
        else:                                  # B(k, j) = B[j*(K+3) + k]
            B = np.ascontiguousarray(data(rng, (N, K + 3)).T)   # view as [K+3][N] for the spec
            Bt = np.ascontiguousarray(B.T)
            b_k, b_j = 1, K + 3
        if a_layout == "rows":                 # A(i, k) = A[i*(K+2) + k]
            Abuf = data(rng, (M, K + 2))
            a_i, a_k, Aik = K + 2, 1, Abuf[:, :K]
        else:                                  # A(i, k) = A[k*(M+3) + i]
            Abuf = data(rng, (max(K, 1), M + 3))
            a_i, a_k, Aik = 1, M + 3, Abuf[:K, :M].T
        want = gemm16(Aik, B[:K, :N].T)
        Bmem = B if b_layout == "rows" else Bt
        for t in THREADS:
            kern.crnn_set_threads(t)
            C = np.full((M, ldc), np.nan, np.float32)
            kern.crnn_gemm16_kn(M, N, K, Abuf.ctypes.data, a_i, a_k, Bmem.ctypes.data, b_k, b_j,
                                C.ctypes.data, ldc)
            assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, t, M, N, K)
            assert np.isnan(C[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_cols_equals_spec(kern, isas, isa):
    """crnn_gemm16_cols: one row of A against the listed rows of B, c[cols[j]] the nt dot
    (the first LSTM layer's dx where the pool passed a value); the entries not listed are
    left as they were. Lists of every length mod the vector width, in order and not, the
    whole and the empty one."""
    f = on_path(kern, isas, isa, "crnn_gemm16_cols", [i64, P, P, i64, P, i64, P])
    rng = np.random.default_rng(17)
    for K in (1, 15, 16, 17, 64, 100, 512):
        N, ldb = 41, K + 3
        a, B = data(rng, (K,)), data(rng, (N, ldb))
        want = gemm16(a[None, :], B[:, :K])[0]
        lists = [np.arange(N), np.array([], int), rng.permutation(N)[:23]]
        lists += [np.sort(rng.choice(N, n, replace=False)) for n in (1, 3, 4, 7, 8, 9, 16, 17, 33)]
        for cols in lists:
            cols = np.ascontiguousarray(cols, np.int32)
            c = np.full(N + 1, np.nan, np.float32)
            f(K, a.ctypes.data, B.ctypes.data, ldb, cols.ctypes.data, len(cols), c.ctypes.data)
            assert np.array_equal(bits(c[cols]), bits(want[cols])), (isa, K, len(cols))
            assert np.isnan(np.delete(c, cols)).all(), "wrote an entry not listed"


def test_negative_zero_lanes(kern, isas):
    """17 products that round to -0: every lane is -0 and the dot is -0, in both layouts."""
    a = np.full(17, -1e-30, np.float32)
    b = np.full(17, 1e-30, np.float32)
    for isa in isas:
        kern.crnn_set_isa(ISA_NAMES.index(isa))
        c = np.zeros(1, np.float32)
        kern.crnn_gemm16(1, 1, 17, a.ctypes.data, 17, b.ctypes.data, 17, c.ctypes.data, 1)
        assert bits(c)[0] == 0x80000000, isa
        kern.crnn_gemm16_kn(1, 1, 17, a.ctypes.data, 17, 1, b.ctypes.data, 1, 1, c.ctypes.data, 1)
        assert bits(c)[0] == 0x80000000, isa


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_short_dots_of_zero_products(kern, isas, isa):
    """K < 16: lanes K..15 get no term and stay +0, and the tree adds them (a kernel may skip
    those adds only if it adds the +0 at the end). Every product here is ±0 (tiny times tiny,
    or a signed zero), so the present lanes' own tree is often -0 while the dot is +0; K = 16
    and 17 have no empty lane and keep a -0. kn with a plain B, the packed one and the taps
    (K <= 16), row and register tails."""
    kn = on_path(kern, isas, isa, "crnn_gemm16_kn", [i64, i64, i64, P, i64, i64, P, i64, i64, P, i64])
    knp = getattr(kern, "crnn_gemm16_kn_packed")
    knp.restype, knp.argtypes = None, [i64, i64, i64, P, i64, i64, P, P, i64]
    knt = getattr(kern, "crnn_gemm16_kn_packed_taps")
    knt.restype, knt.argtypes = None, [i64, i64, i64, P, i64, P, P, P, i64]
    tap = np.arange(16, dtype=np.int64)                 # row i's term k at A[i*K + k]
    rng = np.random.default_rng(19)
    vals = np.array([-1e-30, 1e-30, -0.0, 0.0], np.float32)
    for K in list(range(1, 18)):
        for M, N in [(3, 16), (7, 37)]:
            A = rng.choice(vals, (M, K), p=[0.7, 0.1, 0.1, 0.1]).astype(np.float32)
            B = rng.choice(vals[[1, 0, 3, 2]], (K, N), p=[0.7, 0.1, 0.1, 0.1]).astype(np.float32)
            A[0] = -1e-30                       # a row whose every product rounds to -0
            B[:, 0] = 1e-30
            want, Bp = gemm16(A, B.T), pack_kn(B, K, N)
            assert (bits(want) == 0x80000000).any() == (K >= 16), K   # the data test the sign
            for t in (1, 2):
                kern.crnn_set_threads(t)
                C = np.full((M, N + 1), np.nan, np.float32)
                kn(M, N, K, A.ctypes.data, K, 1, B.ctypes.data, N, 1, C.ctypes.data, N + 1)
                assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, t, M, N, K)
                C[:] = np.nan
                knp(M, N, K, A.ctypes.data, K, 1, Bp.ctypes.data, C.ctypes.data, N + 1)
                assert np.array_equal(bits(C[:, :N]), bits(want)), ("packed", isa, t, M, N, K)
                if K <= 16:
                    C[:] = np.nan
                    knt(M, N, K, A.ctypes.data, K, tap.ctypes.data, Bp.ctypes.data, C.ctypes.data, N + 1)
                    assert np.array_equal(bits(C[:, :N]), bits(want)), ("taps", isa, t, M, N, K)


def pack_kn(B, K, N):
    """B [K][N] in crnn_gemm16_kn_packed's layout: panels of 16 columns, each the rows of
    lane 0, then lane 1, ..., 16 floats a row, zeros past N."""
    panels = (N + 15) // 16
    out = np.zeros(panels * 16 * max(K, 1), np.float32)
    for jp in range(panels):
        rows = [k for l in range(16) for k in range(l, K, 16)]
        blk = np.zeros((len(rows), 16), np.float32)
        cols = min(16, N - 16 * jp)
        if rows:
            blk[:, :cols] = B[rows, 16 * jp:16 * jp + cols]
        out[jp * 16 * K:(jp + 1) * 16 * K] = blk.ravel()
    return out


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_kn_packed_equals_spec(kern, isas, isa):
    f = on_path(kern, isas, isa, "crnn_gemm16_kn_packed", [i64, i64, i64, P, i64, i64, P, P, i64])
    rng = np.random.default_rng(13)
    for M, N, K in SHAPES + [(33, 144, 200), (16, 16, 8192 // 16)]:
        ldc = N + 2
        B = data(rng, (K, N))
        Bp = pack_kn(B, K, N)
        Abuf = data(rng, (max(K, 1), M + 3))           # A(i, k) = A[k*(M+3) + i]
        want = gemm16(Abuf[:K, :M].T, B.T)
        for t in THREADS:
            kern.crnn_set_threads(t)
            C = np.full((M, ldc), np.nan, np.float32)
            f(M, N, K, Abuf.ctypes.data, 1, M + 3, Bp.ctypes.data, C.ctypes.data, ldc)
            assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, t, M, N, K)
            assert np.isnan(C[:, N:]).all(), "wrote outside C"


def test_kn_pack_layout(kern):
    """crnn_kn_pack writes the layout pack_kn describes, for B read down rows (b_k = 1: the
    transposed 4 x 4 moves) or across them, with K tails of 1-3 rows past a multiple of 4,
    a partial last panel, and nothing written past the packed size."""
    f = kern.crnn_kn_pack
    f.restype, f.argtypes = None, [i64, i64, P, i64, i64, P]
    rng = np.random.default_rng(15)
    for K, N in [(1, 1), (3, 16), (4, 16), (9, 16), (16, 32), (17, 20), (35, 48), (64, 256),
                 (144, 32), (255, 33)]:
        Bt = data(rng, (N, K))                          # B(k, j) = Bt[j][k]: b_k = 1, b_j = K
        want = pack_kn(np.ascontiguousarray(Bt.T), K, N)
        for Bsrc, b_k, b_j in [(Bt, 1, K), (np.ascontiguousarray(Bt.T), N, 1)]:
            out = np.full(want.size + 16, np.nan, np.float32)
            f(K, N, Bsrc.ctypes.data, b_k, b_j, out.ctypes.data)
            assert np.array_equal(bits(out[:want.size]), bits(want)), (K, N, b_k)
            assert np.isnan(out[want.size:]).all(), "wrote past the packed panels"


def test_scalar_fmaf_and_fma3_variants_agree(kern):
    """The scalar path's two builds of the definition (the C library's fmaf, and the FMA3
    instruction where the CPU has it) give the spec's bits."""
    f = kern.crnn_gemm16_scalar_variant
    f.restype, f.argtypes = None, [ctypes.c_int, i64, i64, i64, P, i64, P, i64, P, i64]
    rng = np.random.default_rng(14)
    for M, N, K in SHAPES[:10]:
        A, B = data(rng, (M, max(K, 1))), data(rng, (N, max(K, 1)))
        want = gemm16(A[:, :K], B[:, :K])
        for variant in (0, 1):
            C = np.zeros((M, N), np.float32)
            f(variant, M, N, K, A.ctypes.data, A.shape[1], B.ctypes.data, B.shape[1], C.ctypes.data, N)
            assert np.array_equal(bits(C), bits(want)), (variant, M, N, K)


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_sparse_rows_equals_spec(kern, isas, isa):
    """crnn_gemm16_sparse_rows (the conv's dcol: rows of A whose ±0 terms are left out) gives
    the full dot16's bits wherever that is not ±0, a ±0 where it is, with the row's flag
    set; no write outside C. Rows are mostly ±0 (as dC is), some wholly; K has vector and
    64-term tails."""
    f = on_path(kern, isas, isa, "crnn_gemm16_sparse_rows", [i64, i64, i64, P, i64, P, i64, P, i64, P])
    rng = np.random.default_rng(15)
    for M, N, K in [(1, 16, 1), (3, 16, 5), (5, 32, 16), (4, 48, 17), (9, 144, 32),
                    (6, 288, 64), (9, 16, 65), (3, 32, 130), (4, 16, 300)]:
        lda, ldc = K + 3, N + 5
        A = data(rng, (M, lda))
        dead = rng.random(A.shape) < 0.85
        A[dead] = rng.choice([-0.0, 0.0], dead.sum()).astype(np.float32)
        A[0] = rng.choice([-0.0, 0.0], lda).astype(np.float32)     # a row with no term
        B = data(rng, (K, N))
        want = gemm16(A[:, :K], B.T)
        for t in THREADS:
            kern.crnn_set_threads(t)
            C = np.full((M, ldc), np.nan, np.float32)
            flag = np.full(M, 7, np.int32)
            f(M, N, K, A.ctypes.data, lda, B.ctypes.data, N, C.ctypes.data, ldc, flag.ctypes.data)
            got = C[:, :N]
            zero = want == 0
            assert np.array_equal(bits(got)[~zero], bits(want)[~zero]), (isa, t, M, N, K)
            assert (got[zero] == 0).all(), (isa, t, M, N, K)
            assert np.array_equal(flag, zero.any(axis=1).astype(np.int32)), (isa, t, M, N, K, flag)
            assert np.isnan(C[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_sparse_rows_every_tree_shape(kern, isas, isa):
    """crnn_gemm16_sparse_rows over rows whose present lanes take every shape of the tree
    that leaves the empty lanes out: each single lane, each pair of lanes, every lane (with
    1 to 4 terms a lane), and random subsets; the same checks as above."""
    f = on_path(kern, isas, isa, "crnn_gemm16_sparse_rows", [i64, i64, i64, P, i64, P, i64, P, i64, P])
    rng = np.random.default_rng(16)
    K, N = 64, 32
    rows = [[l] for l in range(16)] + [[a, b] for a in range(16) for b in range(a + 1, 16)]
    rows += [list(range(16))] + [sorted(rng.choice(16, rng.integers(3, 16), replace=False))
                                  for _ in range(60)]
    A = np.zeros((len(rows), K), np.float32)
    for r, lanes in enumerate(rows):
        for l in lanes:                        # 1 to 4 of the lane's terms l, l+16, l+32, l+48
            ks = l + 16 * rng.choice(4, rng.integers(1, 5), replace=False)
            A[r, ks] = data(rng, (len(ks),))
    B = data(rng, (K, N))
    want = gemm16(A, B.T)
    M = len(rows)
    C = np.full((M, N), np.nan, np.float32)
    flag = np.full(M, 7, np.int32)
    f(M, N, K, A.ctypes.data, K, B.ctypes.data, N, C.ctypes.data, N, flag.ctypes.data)
    zero = want == 0
    assert np.array_equal(bits(C)[~zero], bits(want)[~zero]), isa
    assert (C[zero] == 0).all(), isa
    assert np.array_equal(flag, zero.any(axis=1).astype(np.int32)), isa


def sparse_data(rng, shape, dead=0.65):
    """data() with most values ±0, in runs along the rows as a ReLU and pool leave them"""
    a = data(rng, shape)
    z = rng.random(shape) < dead
    if len(shape) == 2 and shape[0] > 1:       # adjacent rows share most of their zeros
        z[1:] = np.where(rng.random((shape[0] - 1, shape[1])) < 0.8, z[:-1], z[1:])
    a[z] = rng.choice([-0.0, 0.0], int(z.sum())).astype(np.float32)
    return a


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_kn_packed_sparse_equals_spec(kern, isas, isa):
    """crnn_gemm16_kn_packed_sparse (A's ±0 terms left out where every row of a block has
    them; B finite) gives exactly the full dot16's bits: mostly-zero rows, rows with no
    nonzero term, NaN and inf in A, products that round to -0, K with lane tails and more
    than one 512-term segment of masks, M with block tails; no write outside C."""
    f = on_path(kern, isas, isa, "crnn_gemm16_kn_packed_sparse", [i64, i64, i64, P, i64, i64, P, P, i64])
    rng = np.random.default_rng(16)
    for M, N, K in [(1, 16, 1), (2, 16, 9), (3, 32, 144), (4, 64, 288), (5, 48, 17), (7, 40, 33),
                    (9, 512, 256), (13, 20, 100), (8, 16, 520), (6, 32, 1100), (64, 64, 144)]:
        lda, ldc = K + 3, N + 2
        A = sparse_data(rng, (M, lda))
        A[0] = rng.choice([-0.0, 0.0], lda).astype(np.float32)      # a row with no term
        if M > 4:
            A[4, rng.integers(0, K)] = rng.choice([np.nan, np.inf, -np.inf])
        B = data(rng, (K, N))
        Bp = pack_kn(B, K, N)
        want = gemm16(A[:, :K], B.T)
        for t in THREADS:
            kern.crnn_set_threads(t)
            C = np.full((M, ldc), np.nan, np.float32)
            f(M, N, K, A.ctypes.data, lda, 1, Bp.ctypes.data, C.ctypes.data, ldc)
            assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, t, M, N, K)
            assert np.isnan(C[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_kn_packed_sparse_win_equals_spec(kern, isas, isa):
    """crnn_gemm16_kn_packed_sparse_win (row i's chunk m of 16 terms at A[i*a_i + coff[m]]:
    the windows of a C-channel image, C % 16 == 0, read from a zero-padded copy) gives the
    full dot16 of the gathered rows: mostly-zero images, NaN and inf in them, products that
    round to -0 where only left-out +0 terms follow (the block is computed again), row tails,
    more than one 512-term segment of masks; no write outside C."""
    f = on_path(kern, isas, isa, "crnn_gemm16_kn_packed_sparse_win", [i64, i64, i64, P, i64, P, P, P, i64])
    f.restype = ctypes.c_int
    rng = np.random.default_rng(19)
    for M, N, C, kh, kw, negz in [(128, 32, 16, 3, 3, False), (64, 64, 32, 3, 3, False),
                                   (13, 40, 48, 2, 3, False), (7, 16, 16, 1, 1, False),
                                   (5, 20, 64, 3, 3, False), (9, 32, 16, 3, 1, True)]:
        Wx, K = M + kw - 1, kh * kw * C
        X = sparse_data(rng, (kh, Wx, C))
        if negz:        # chunk 0 (tap ky = 0) of every row: -1e-30 * 1e-30 rounds to -0; the rest +0
            X[:] = 0.0
            X[0] = -1e-30
        else:
            X[rng.integers(0, kh), rng.integers(0, Wx), rng.integers(0, C)] = rng.choice([np.nan, np.inf, -np.inf])
        coff = np.array([((16 * m // C) // kw * Wx + (16 * m // C) % kw) * C + 16 * m % C
                         for m in range(K // 16)], np.int64)
        flat = X.ravel()
        A = np.stack([np.concatenate([flat[i * C + o: i * C + o + 16] for o in coff]) for i in range(M)])
        B = data(rng, (K, N))
        if negz:
            B[:] = 1.0
            B[:16] = 1e-30
        want = gemm16(A, B.T)
        if negz:
            assert (bits(want) == 0).all()   # the full dot: +0; without the redo, -0
        Bp, ldc = pack_kn(B, K, N), N + 3
        for t in THREADS:
            kern.crnn_set_threads(t)
            out = np.full((M, ldc), np.nan, np.float32)
            assert f(M, N, K, X.ctypes.data, C, coff.ctypes.data, Bp.ctypes.data, out.ctypes.data, ldc) == 0
            assert np.array_equal(bits(out[:, :N]), bits(want)), (isa, t, M, N, C)
            assert np.isnan(out[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_kn_packed_taps_equals_spec(kern, isas, isa):
    """crnn_gemm16_kn_packed_taps (K <= 16, A's term k of row i at A[i*a_i + tap[k]]: a
    one-channel image's windows through a padded copy) gives the dot16 of the gathered rows:
    3 x 3 and other windows, K = 1..16, row tails, products that round to -0, NaN and inf in
    A; no write outside C."""
    f = on_path(kern, isas, isa, "crnn_gemm16_kn_packed_taps", [i64, i64, i64, P, i64, P, P, P, i64])
    rng = np.random.default_rng(17)
    for M, N, kh, kw, Wx in [(256, 16, 3, 3, 258), (13, 16, 3, 3, 20), (7, 40, 2, 5, 11),
                             (5, 17, 4, 4, 9), (1, 16, 1, 1, 3), (30, 32, 3, 2, 33),
                             (9, 64, 1, 7, 16)]:
        K = kh * kw
        tap = np.array([(k // kw) * Wx + k % kw for k in range(16)], np.int64)
        X = sparse_data(rng, (kh + 1, Wx)).ravel()
        X[rng.integers(0, X.size)] = rng.choice([np.nan, np.inf, -np.inf])
        A = np.stack([X[i + tap[:K]] for i in range(M)])          # the gathered rows
        B = data(rng, (K, N))
        Bp = pack_kn(B, K, N)
        want = gemm16(A, B.T)
        ldc = N + 3
        C = np.full((M, ldc), np.nan, np.float32)
        f(M, N, K, X.ctypes.data, 1, tap.ctypes.data, Bp.ctypes.data, C.ctypes.data, ldc)
        assert np.array_equal(bits(C[:, :N]), bits(want)), (isa, M, N, K)
        assert np.isnan(C[:, N:]).all(), "wrote outside C"


@pytest.mark.parametrize("isa", ISA_NAMES)
def test_kn_packed_sparse_redoes_negative_zero(kern, isas, isa):
    """Every lane of a row gets a product that rounds to -0, then only left-out +0 terms:
    without them every lane stays -0 and the dot is -0, but the full dot's +0 terms turn each
    lane to +0 and the dot is +0. The kernel must give +0 (it computes such a block again
    with every term)."""
    f = on_path(kern, isas, isa, "crnn_gemm16_kn_packed_sparse", [i64, i64, i64, P, i64, i64, P, P, i64])
    M, N, K = 4, 32, 64
    A = np.zeros((M, K), np.float32)
    A[:, :16] = -1e-30                        # k < 16: -1e-30 * 1e-30 rounds to -0
    B = np.ones((K, N), np.float32)
    B[:16] = 1e-30
    want = gemm16(A, B.T)
    assert (bits(want) == 0).all()            # the full dot: +0 everywhere
    C = np.full((M, N), np.nan, np.float32)
    Bp = pack_kn(B, K, N)
    f(M, N, K, A.ctypes.data, K, 1, Bp.ctypes.data, C.ctypes.data, N)
    assert np.array_equal(bits(C), bits(want)), isa
