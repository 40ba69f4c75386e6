"""The per-element error model (harness/allowance/, docs/tolerances.md): its tail multiplier,
the activations' bounds it assumes, random legal orders of summation through the gate's own
comparison, sharpness (a uniform relative error a little above a check's resolution fails it),
and the cache."""
from __future__ import annotations

import ctypes
import ctypes.util
from types import SimpleNamespace

import numpy as np
import pytest
from crnn_conformance.generators.float64 import conv as conv64
from crnn_conformance.generators.h5io import read_fixture
from crnn_conformance.generators.spec import activations as act
from crnn_conformance.generators.spec import conv as spec_conv
from crnn_conformance.harness import allowance
from crnn_conformance.harness import layers as L
from crnn_conformance.harness.allowance import params
from crnn_conformance.harness.compare import compare
from crnn_conformance.harness.runner import FIXTURES_DIR
from crnn_conformance.harness.case_checks import tier_tolerance

F32 = np.float32


# ---------------------------------------------------------------- the tail multiplier

def test_lambda_is_the_gaussian_tail_and_bounds_sums_of_uniform_errors():
    """lambda = sqrt(2 ln(2/p)); a weighted sum of independent uniform roundings (sub-Gaussian
    with its variance as proxy) exceeds lambda standard deviations with probability below p:
    simulated at p = 1e-3 for 1, 2, 3, 8 and 64 roundings of random weights."""
    p = params.value("p_element")
    assert params.lam() == pytest.approx(np.sqrt(2 * np.log(2 / p)), rel=1e-12)
    lam = np.sqrt(2 * np.log(2 / 1e-3))
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 8, 64):
        c = rng.normal(size=n)
        e = rng.uniform(-1.0, 1.0, size=(200000, n)) @ c
        assert np.mean(np.abs(e) > lam * np.sqrt(np.sum(c * c) / 3)) < 1e-3, n


# ---------------------------------------------------------------- the activations' bounds

def _ulp(y):
    return params.ulp(y)


def _exact_sigmoid(x):
    from crnn_conformance.harness.allowance.lstm import _sigmoid
    return _sigmoid(np.asarray(x, np.float64))


# The activations of Eigen and ONNX Runtime (MLAS): a rational function of the clamped
# argument, Horner's rule in x^2; the logistic is 1/2 + p/q clamped to [0, 1]. (Their float
# coefficients; `fma` evaluates each step as one fused operation, as their FMA3 kernels do.)
LOGISTIC_P = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
              8.51377133304701e-03, 2.48287947061529e-01)
LOGISTIC_Q = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
              1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)
TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
          5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
          4.89352518554385e-03)


def _horner(x2, coefficients, fma):
    """c0 x2^n + ... + cn in binary32, one rounding a step (fma) or two."""
    c = [F32(v) for v in coefficients]
    acc = np.full_like(x2, c[0])
    for v in c[1:]:
        acc = ((acc.astype(np.float64) * x2 + v).astype(F32) if fma else
               ((acc * x2).astype(F32) + v).astype(F32))
    return acc


def _rational(x, limit, P, Q, fma):
    x = np.clip(x, F32(-limit), F32(limit)).astype(F32)
    x2 = (x * x).astype(F32)
    return (((x * _horner(x2, P, fma)).astype(F32)) / _horner(x2, Q, fma)).astype(F32)


def library_sigmoid(x, fma=False):
    y = (_rational(x, 18.0, LOGISTIC_P, LOGISTIC_Q, fma) + F32(0.5)).astype(F32)
    return np.clip(y, F32(0), F32(1))


def library_tanh(x, fma=False):
    return _rational(x, 9.0, TANH_P, TANH_Q, fma)


def _activation_sample():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-20, 20, 200000), rng.uniform(-1, 1, 100000),
                        rng.uniform(-100, 100, 50000), rng.uniform(5.5, 6.5, 50000),
                        np.sign(rng.uniform(-1, 1, 50000)) * 10 ** rng.uniform(-8, 1.5, 50000)])
    return x.astype(F32)


def test_activation_bounds_cover_ours_libm_and_the_libraries():
    """sigmoid_ulps / tanh_ulps (ulps of max(|y|, 1/2)) cover the project's approximations,
    libm-based ones and the rational ones of Eigen and ONNX Runtime (with and without fma) on a
    dense sample of every range, the tanh around x = 6 included, where Eigen's errs most."""
    x = _activation_sample()
    xd = x.astype(np.float64)
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    sig_true, tanh_true = _exact_sigmoid(xd), np.tanh(xd)
    sub = x[::7]
    expf = np.array([libm.expf(float(-v)) for v in sub], F32)
    candidates = {
        "sigmoid": (sig_true, [act.sigmoid(x), library_sigmoid(x), library_sigmoid(x, True)],
                    [(sub, (F32(1) / (F32(1) + expf)).astype(np.float64))]),
        "tanh": (tanh_true, [act.tanh(x), np.tanh(x), library_tanh(x), library_tanh(x, True)],
                 []),
    }
    worst = {}
    for which, (true, full, sampled) in candidates.items():
        bound = params.act_bound(true, which)
        for y in full:
            usage = np.abs(y.astype(np.float64) - true) / bound
            assert (usage <= 1).all(), (which, float(usage.max()))
            worst.setdefault(which, []).append(float(usage.max()))
        for xs, y in sampled:
            t = true[::7]
            assert (np.abs(y - t) <= params.act_bound(t, which)).all(), which
    # the libraries' rational functions use most of it (the bounds are not loose for them)
    assert max(worst["tanh"][2:]) > 0.6 and max(worst["sigmoid"][1:]) > 0.3, worst


def test_the_library_logistic_is_accurate_absolutely_not_relatively():
    """Why the bound is in ulps of max(|y|, 1/2): left of x = -16 the exact sigmoid is below
    1e-7 and 1/2 + p/q keeps only its ulps of 1/2, millions of ulps of the value."""
    x = np.linspace(-17.5, -16.5, 1001).astype(F32)
    true = _exact_sigmoid(x.astype(np.float64))
    err = np.abs(library_sigmoid(x).astype(np.float64) - true)
    assert (err / _ulp(true)).max() > 1e6
    assert (err <= params.act_bound(true, "sigmoid")).all()


# ---------------------------------------------------------------- random legal orders

SORTS = {"value": lambda t: t, "-value": lambda t: -t, "abs": np.abs,
         "sign": lambda t: (t < 0).astype(np.float64)}   # positive terms first, then negative


class RandomOrders:
    """A port in NumPy whose every sum runs in a random legal order: per call a random lane
    count (1..64), tree (halving, chain, random pairs), fma or separate products, forward or
    reversed terms, or binary64 accumulation rounded once. `sort` (a key of SORTS): every sum's
    terms first put in an order chosen by their values (ascending by value, by -value, by
    magnitude, or grouped by sign), then summed in the order the call's config gives."""

    def __init__(self, seed, sort=None, **fixed):
        self.rng = np.random.default_rng(seed)
        self.sort, self.fixed = sort, fixed

    def config(self):
        r = self.rng
        c = {"f64": r.random() < 0.15, "lanes": int(r.integers(1, 65)),
             "tree": str(r.choice(["halving", "chain", "random"])), "fma": bool(r.random() < 0.7),
             "reverse": bool(r.random() < 0.3), "seed": int(r.integers(1 << 30))}
        return {**c, **self.fixed}

    def sum_terms(self, a, b, extra=None):
        """sum_k a[..., k] * b[..., k] (+ extra, one more term) in binary32 in a random order."""
        c = self.config()
        a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
        if extra is not None:
            e = np.asarray(extra, F32)[..., None]
            a = np.concatenate([a, np.broadcast_to(e, a.shape[:-1] + (1,))], -1)
            b = np.concatenate([b, np.ones(b.shape[:-1] + (1,), F32)], -1)
        if c["reverse"]:
            a, b = a[..., ::-1], b[..., ::-1]
        prod = a.astype(np.float64) * b.astype(np.float64)          # exact
        if self.sort:
            prod = np.take_along_axis(prod, np.argsort(SORTS[self.sort](prod), -1, kind="stable"), -1)
        if c["f64"]:
            return prod.sum(-1).astype(F32)
        L, n = c["lanes"], a.shape[-1]
        R = -(-n // L) if n else 0
        pad = np.zeros(prod.shape[:-1] + (R * L - n,))
        terms = np.concatenate([prod, pad], -1).reshape(prod.shape[:-1] + (R, L))
        lanes = np.zeros(prod.shape[:-1] + (L,), F32)
        for r in range(R):
            t = terms[..., r, :]
            if c["fma"]:
                lanes = (lanes.astype(np.float64) + t).astype(F32)   # one rounding (twice: legal)
            else:
                lanes = (lanes + t.astype(F32)).astype(F32)
        return self._tree(lanes, c)

    def _tree(self, lanes, c):
        parts = [lanes[..., j] for j in range(lanes.shape[-1])]
        rng = np.random.default_rng(c["seed"])
        while len(parts) > 1:
            if c["tree"] == "chain":
                parts = [(parts[0] + parts[1]).astype(F32)] + parts[2:]
            elif c["tree"] == "halving":
                h = (len(parts) + 1) // 2
                parts = [(parts[i] + parts[i + h]).astype(F32) if i + h < len(parts) else parts[i]
                         for i in range(h)]
            else:
                i, j = sorted(rng.choice(len(parts), 2, replace=False))
                parts[i] = (parts[i] + parts[j]).astype(F32)
                del parts[j]
        return parts[0]

    def matmul(self, A, B, extra=None):
        """A [M][K] @ B [K][N] (+ extra [N]) with one random order for the call."""
        A, B = np.asarray(A, F32), np.asarray(B, F32)
        return self.sum_terms(A[:, None, :], B.T[None, :, :],
                              None if extra is None else np.broadcast_to(extra, (A.shape[0], B.shape[1])))


def linear_port(o: RandomOrders, x, W, b, dY):
    return {"y": o.matmul(x, W.T, b), "dx": o.matmul(dY, W), "dW": o.matmul(dY.T, x),
            "db": o.matmul(dY.T, np.ones((dY.shape[0], 1), F32))[:, 0]}


def conv_port(o: RandomOrders, case):
    p = case.params
    geo = [int(p[k]) for k in ("kh", "kw", "padH", "padW", "poolH", "poolW")]
    x = np.asarray(case.inputs["x"], F32)
    x = x[:, :, None] if x.ndim == 2 else x
    W, b, dPooled = (np.asarray(case.inputs[k], F32) for k in ("W", "b", "dPooled"))
    H, Wd, C = x.shape
    Out, KP = W.shape
    col = spec_conv.im2col(x, *geo[:4], KP)
    Hc, Wc = spec_conv.conv_size(H, Wd, *geo[:4])
    conv = o.matmul(col, W.T, b)
    pooled, winners = spec_conv.relu_maxpool(conv, Hc, Wc, geo[4], geo[5])
    dC = spec_conv.pool_backward(dPooled, winners, Hc * Wc, Out)
    out = {"conv": conv, "pooled": pooled, "winners": winners, "dW": o.matmul(dC.T, col),
           "db": o.matmul(dC.T, np.ones((Hc * Wc, 1), F32))[:, 0]}
    if p.get("dx", True):
        dcol = o.matmul(dC, W).reshape(Hc, Wc, KP)
        taps = [(ky, kx) for ky in range(geo[0]) for kx in range(geo[1])]
        o.rng.shuffle(taps)                                 # the taps added in any order
        dxp = np.zeros((H + 2 * geo[2], Wd + 2 * geo[3], C), F32)
        for ky, kx in taps:
            k = (ky * geo[1] + kx) * C
            dxp[ky:ky + Hc, kx:kx + Wc] = (dxp[ky:ky + Hc, kx:kx + Wc] + dcol[:, :, k:k + C]).astype(F32)
        out["dx"] = dxp[geo[2]:geo[2] + H, geo[3]:geo[3] + Wd]
    return out


def lstm_port(o: RandomOrders, inp, fma_cell=False, sigmoid=None):
    """The LSTM layer of docs/numerics.md and docs/backward.md in binary32 with every dot in a
    random order (z as one sum of x*W_ih, h*W_hh and b), optionally an fma in the cell and
    another accurate sigmoid."""
    sig = sigmoid or act.sigmoid
    x, W_ih, W_hh, b, dOut = (np.asarray(inp[k], F32) for k in ("x", "W_ih", "W_hh", "b", "dOut"))
    T = x.shape[0]
    H = W_hh.shape[2]
    G = 4 * H
    out = np.zeros((T, 2 * H), F32)
    st = {k: np.zeros((2, T, n), F32) for k, n in (("gates", G), ("c", H), ("tc", H), ("hPrev", H))}
    one = F32(1)
    for d in (0, 1):
        h, c = np.zeros(H, F32), np.zeros(H, F32)
        Wcat = np.concatenate([W_ih[d], W_hh[d]], 1)
        for t in (range(T) if d == 0 else range(T - 1, -1, -1)):
            st["hPrev"][d, t] = h
            z = o.matmul(np.concatenate([x[t], h])[None, :], Wcat.T, b[d])[0]
            i, f, g, oo = sig(z[:H]), sig(z[H:2 * H]), act.tanh(z[2 * H:3 * H]), sig(z[3 * H:])
            if fma_cell:
                c = (f.astype(np.float64) * c + (i * g).astype(F32)).astype(F32)
            else:
                c = (f * c).astype(F32) + (i * g).astype(F32)
            tc = act.tanh(c)
            h = (oo * tc).astype(F32)
            st["gates"][d, t] = np.concatenate([i, f, g, oo])
            st["c"][d, t], st["tc"][d, t] = c, tc
            out[t, d * H:(d + 1) * H] = h
    dz = np.zeros((2, T, G), F32)
    for d in (0, 1):
        dhRec, dcNext = np.zeros(H, F32), np.zeros(H, F32)
        for t in (range(T - 1, -1, -1) if d == 0 else range(T)):
            prev = t - 1 if d == 0 else t + 1
            cP = st["c"][d, prev] if 0 <= prev < T else np.zeros(H, F32)
            i, f, g, oo = np.split(st["gates"][d, t], 4)
            tc = st["tc"][d, t]
            dh = dOut[t, d * H:(d + 1) * H] + dhRec
            dtc, do = dh * oo, dh * tc
            dc = dcNext + dtc * (one - tc * tc)
            di, dg, df = dc * g, dc * i, dc * cP
            dcNext = dc * f
            dz[d, t] = np.concatenate([di * (i * (one - i)), df * (f * (one - f)),
                                       dg * (one - g * g), do * (oo * (one - oo))])
            dhRec = o.matmul(dz[d, t][None, :], W_hh[d])[0]
    res = {"out": out, **st}
    res["dW_ih"] = np.stack([o.matmul(dz[d].T, x) for d in (0, 1)])
    res["dW_hh"] = np.stack([o.matmul(dz[d].T, st["hPrev"][d]) for d in (0, 1)])
    res["db"] = np.stack([o.matmul(dz[d].T, np.ones((T, 1), F32))[:, 0] for d in (0, 1)])
    res["dx"] = o.matmul(np.concatenate([dz[0], dz[1]], 1), W_ih.reshape(2 * G, -1))
    return res


def _usages(layer, case, ours) -> dict:
    """The gate's comparison (compare with the gate's allowance) of every tolerance tier."""
    out = {}
    for tier in ("float64", "pytorch"):
        for tensor, ref in case.expected.get(tier, {}).items():
            if tensor not in ours or np.asarray(ref).dtype.kind != "f":
                continue
            tol = tier_tolerance(layer, case, tier, tensor)
            floor = float(case.floor.get(tensor, 0.0)) if tier == "pytorch" else 0.0
            c = compare(np.asarray(ours[tensor], F32), ref, tier, tol.atol, tol.rtol, floor)
            out[(tier, tensor)] = c.usage
    return out


def _cases(fixture, names):
    return [c for c in read_fixture(FIXTURES_DIR / f"{fixture}.h5").cases if c.name in names]


CONV = [("conv", ["b1_W100", "b2_ties_W65", "b3_W64", "small_k2x3_6x10_O20"]),
        ("pytorch_conv", ["b2_line3_W257", "b3_line0_W78"])]


@pytest.mark.parametrize("seed", range(3))
def test_random_orders_pass_linear_and_conv(seed):
    o = RandomOrders(seed)
    worst = 0.0
    for case in read_fixture(FIXTURES_DIR / "linear.h5").cases[::3] + \
            read_fixture(FIXTURES_DIR / "pytorch_linear.h5").cases:
        ours = linear_port(o, *(case.inputs[k] for k in ("x", "W", "b", "dY")))
        u = _usages("linear", case, ours)
        assert max(u.values()) <= 1.0, (case.name, u)
        worst = max(worst, *u.values())
    for fixture, names in CONV:
        for case in _cases(fixture, names):
            ours = conv_port(o, case)
            u = _usages("conv", case, ours)
            assert max(u.values()) <= 1.0, (case.name, u)
            worst = max(worst, *u.values())
    print("worst usage", worst)


SEQUENTIAL = {"f64": False, "lanes": 1, "reverse": False, "fma": False}


@pytest.mark.parametrize("sort", list(SORTS))
def test_orders_chosen_by_the_values_pass_conv_and_linear(sort):
    """Orders that depend on the terms' values, each sum sequential: ascending by value (a
    reproducible order whatever the blocking), by -value, by magnitude, and positive terms
    before negative ones. Their partial sums climb towards the positive or the negative
    mass before cancelling: a model of the natural order's profile put them out of their
    allowance (usage up to 3.5 on conv dW); the bound of every order keeps them inside."""
    o = RandomOrders(0, sort, **SEQUENTIAL)
    for fixture, names in CONV:
        for case in _cases(fixture, names):
            u = _usages("conv", case, conv_port(o, case))
            assert max(u.values()) <= 1.0, (sort, case.name, u)
    for case in read_fixture(FIXTURES_DIR / "linear.h5").cases[::3]:
        u = _usages("linear", case, linear_port(o, *(case.inputs[k] for k in ("x", "W", "b", "dY"))))
        assert max(u.values()) <= 1.0, (sort, case.name, u)


@pytest.mark.parametrize("seed,fma_cell,libm_sigmoid", [(0, False, False), (1, True, True)])
def test_random_orders_pass_lstm(seed, fma_cell, libm_sigmoid):
    """Random orders in every dot of the recurrence, forward and backward, on a float64-tier
    and a pytorch-tier case; with an fma in the cell and a 1/(1 + exp(-x)) sigmoid too."""
    sig = (lambda z: (F32(1) / (F32(1) + np.exp(-z.astype(F32)))).astype(F32)) if libm_sigmoid else None
    o = RandomOrders(seed)
    for fixture, name in (("lstm", "layer2_T16"), ("pytorch_lstm", "layer1_line0_T19")):
        case = _cases(fixture, [name])[0]
        ours = lstm_port(o, case.inputs, fma_cell, sig)
        u = _usages("lstm", case, ours)
        assert max(u.values()) <= 1.0, (case.name, u)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 13))
def test_random_orders_pass_more_cases(seed):
    o = RandomOrders(seed)
    for case in read_fixture(FIXTURES_DIR / "conv.h5").cases + \
            read_fixture(FIXTURES_DIR / "pytorch_conv.h5").cases:
        u = _usages("conv", case, conv_port(o, case))
        assert max(u.values()) <= 1.0, (case.name, u)
    for fixture in ("lstm", "pytorch_lstm"):
        for case in read_fixture(FIXTURES_DIR / f"{fixture}.h5").cases[seed % 4::4]:
            u = _usages("lstm", case, lstm_port(o, case.inputs, bool(seed % 2)))
            assert max(u.values()) <= 1.0, (case.name, u)


# ---------------------------------------------------------------- sharpness

SHARP = [("conv", "conv", "b2_W50"), ("conv", "pytorch_conv", "b3_line3_W257"),
         ("linear", "linear", "T25_I128_O48"), ("lstm", "lstm", "layer1_T25"),
         ("lstm", "pytorch_lstm", "layer2_line0_T19"), ("adamw", "adamw", "fc.W"),
         ("ctc", "ctc", "random_T64_L10"), ("step", "step", "crnn_v0_b4")]


@pytest.mark.parametrize("layer,fixture,name", SHARP, ids=[f"{f}/{n}" for _, f, n in SHARP])
def test_a_uniform_error_above_the_resolution_fails(lib, layer, fixture, name):
    """The bundled port's output scaled by (1 + eps) or (1 - eps): with eps twice the check's
    resolution one of the two fails the tier, with eps half of it both pass; and the
    resolution meets the targets (float64 <= 1e-4, pytorch <= 1e-3)."""
    case = _cases(fixture, [name])[0]
    ours = L.module(layer).run(lib, case)
    tier = "float64" if "float64" in case.expected else "pytorch"
    checked = 0
    for tensor, ref in case.expected[tier].items():
        if np.asarray(ref).dtype.kind != "f" or tensor not in ours:
            continue
        tol = tier_tolerance(layer, case, tier, tensor, np.shape(ref))
        floor = float(case.floor.get(tensor, 0.0)) if tier == "pytorch" else 0.0
        base = compare(ours[tensor], ref, tier, tol.atol, tol.rtol, floor)
        assert base.passed
        res = base.resolution   # harness/compare.resolution, the records' own
        if res is None or res <= 0:
            continue
        assert res <= (1e-4 if tier == "float64" else 1e-3), (tensor, res)
        def scaled(e, a=ours[tensor]):
            return (np.asarray(a, np.float64) * (1 + e)).astype(a.dtype)
        big = [compare(scaled(s * 2 * res), ref, tier, tol.atol, tol.rtol, floor).passed for s in (1, -1)]
        assert not all(big), (tensor, res)
        if res > 1e-6:             # above a few float32 ulps, so that scaling moves the value
            small = [compare(scaled(s * res / 2), ref, tier, tol.atol, tol.rtol, floor).passed
                     for s in (1, -1)]
            assert all(small), (tensor, res)
        checked += 1
    assert checked


# ---------------------------------------------------------------- the cache and the model's use

def test_cache_key_follows_inputs_and_params():
    case = read_fixture(FIXTURES_DIR / "linear.h5").cases[0]
    k = allowance.case_key("linear", case)
    other = SimpleNamespace(name=case.name, params=dict(case.params), inputs=dict(case.inputs))
    assert allowance.case_key("linear", other) == k
    other.inputs["x"] = np.array(case.inputs["x"], copy=True)
    other.inputs["x"].flat[0] = np.nextafter(other.inputs["x"].flat[0], F32(9))
    assert allowance.case_key("linear", other) != k
    other.inputs = dict(case.inputs)
    other.params = {**case.params, "note": "another"}
    assert allowance.case_key("linear", other) != k


def test_cached_allowances_equal_a_fresh_computation(tmp_path, monkeypatch):
    monkeypatch.setenv("CRNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(allowance, "_PRUNED", False)
    stale = tmp_path / "allowance" / "0123456789abcdef0123"   # another model version's entries
    stale.mkdir(parents=True)
    (stale / "x.npz").write_bytes(b"")
    allowance._MEMORY.clear()
    case = read_fixture(FIXTURES_DIR / "lstm.h5").cases[3]
    a = allowance.allowances("lstm", case)
    assert [p.parent.name for p in tmp_path.glob("allowance/*/*.npz")] == [allowance.model_version()]
    allowance._MEMORY.clear()
    b = allowance.allowances("lstm", case)                       # from the disk cache
    c = allowance.compute("lstm", case)
    for k in c:
        assert np.array_equal(a[k], c[k]) and np.array_equal(b[k], c[k])
    allowance._MEMORY.clear()


def test_near_tie_window_covers_either_decision():
    """A window whose two best cells are within rounding: the pooled value and the gradient
    of both cells' weights allow either winner (harness/allowance/conv.py)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, (4, 4, 1)).astype(F32)
    W = np.zeros((1, 16), F32)
    W[0, 4] = 1.0                                                 # conv = x (the centre tap)
    x[0, 0], x[1, 0], x[1, 1] = 0.75, 0.25, 0.25
    x[0, 1] = np.nextafter(x[0, 0], F32(2))                       # window (0, 0): a near-tie
    b = np.zeros(1, F32)
    case = SimpleNamespace(name="t", params={"kh": 3, "kw": 3, "padH": 1, "padW": 1, "poolH": 2,
                                             "poolW": 2, "dx": True},
                           inputs={"x": x, "W": W, "b": b, "dPooled": np.ones((2, 2, 1), F32)})
    a = allowance.compute("conv", case)
    _, _, win = conv64.forward(x, W, b, 3, 3, 1, 1, 2, 2)
    assert win[0, 0, 0] == 1                                      # cell (0, 1) wins in float64
    col = conv64.im2col(x.astype(np.float64), 3, 3, 1, 1, 16)
    # the port may pick cell (0, 0) instead: dW changes by dPooled * (col[0] - col[1])
    assert (a["dW"][0] >= np.abs(col[0] - col[1]) - 1e-12).all()
    assert a["pooled"][0, 0, 0] >= float(x[0, 1, 0]) - float(x[0, 0, 0])


# ---------------------------------------------------------------- the sum model's margin

def _order_stats(t, L, tree, fused, rng):
    """(V, W) of one order of the sums over t's last axis: sum of squared and of absolute
    values of every rounded node (products when not fused; an addition of a zero is exact)."""
    n = t.shape[-1]
    R = -(-n // L)
    tp = np.concatenate([t, np.zeros(t.shape[:-1] + (R * L - n,))], -1).reshape(t.shape[:-1] + (R, L))
    c = np.cumsum(tp, -2)
    nz = tp != 0
    node = nz & (np.cumsum(nz, -2) > 1)
    V = np.sum(np.where(node, c * c, 0.0), (-2, -1))
    W = np.sum(np.where(node, np.abs(c), 0.0), (-2, -1))
    if not fused:
        V, W = V + np.sum(tp * tp, (-2, -1)), W + np.sum(np.abs(tp), (-2, -1))
    parts = [c[..., -1, j] for j in range(L)]
    while len(parts) > 1:
        if tree == "chain":
            i, j = 0, 1
        else:
            i, j = sorted(rng.choice(len(parts), 2, replace=False))
        a, b = parts[i], parts[j]
        q = a + b
        both = (a != 0) & (b != 0)
        V, W = V + np.where(both, q * q, 0.0), W + np.where(both, np.abs(q), 0.0)
        parts[i] = q
        del parts[j]
    return V, W


def _margin(t, allow, rng):
    """Expected number of elements out of their allowance, summed over 32 orders (the
    Gaussian tail at each order's exact rounding variance), and the smallest margin in sigmas.
    The orders: 22 over the terms as given (sequential, or 2 to 64 lanes with chained and
    random trees; fused products or not), 2 sequential ones over the terms reversed, and 8
    sequential ones over the terms in an order chosen by their values (SORTS)."""
    total, zmin = 0.0, np.inf
    orders = [(1, "chain", True), (1, "chain", False)] + [
        (n, tree, fused) for n in (2, 3, 4, 5, 7, 8, 13, 16, 32, 64)
        for tree, fused in (("random", True), ("chain", False))]
    arranged = [(t, orders), (t[..., ::-1], orders[:2])] + [
        (np.take_along_axis(t, np.argsort(key(t), -1, kind="stable"), -1), orders[:2])
        for key in SORTS.values()]
    for terms, chosen in arranged:
        for n, tree, fused in chosen:
            V, W = _order_stats(terms, n, tree, fused, rng)
            sig = 2.0 ** -24 * np.sqrt(V / 3)
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.where((sig > 0) & (allow < 2.0 ** -23 * W), allow / sig, np.inf)
            total += float(np.sum(2 * np.exp(-np.minimum(z, 40.0) ** 2 / 2)))
            zmin = min(zmin, float(z.min()))
    return total, zmin


@pytest.mark.slow
def test_sum_model_margin_over_orders():
    """On the conv fixtures' forward sums (random weights and the trained model): every one of
    32 legal orders (_margin), those chosen by the terms' values included, keeps each element
    at least lambda of its own standard deviations inside the allowance (the model bounds the
    rounding variance of every order), so the expected number of elements out of it stays far
    below one."""
    rng = np.random.default_rng(5)
    total = 0.0
    for fixture, names in CONV + [("conv", ["b3_ties_W33", "b2_W32"]),
                                  ("pytorch_conv", ["b3_line3_W257", "b1_line0_W78"])]:
        for case in _cases(fixture, names):
            p = case.params
            geo = [int(p[k]) for k in ("kh", "kw", "padH", "padW", "poolH", "poolW")]
            x = np.asarray(case.inputs["x"], np.float64)
            x = x[:, :, None] if x.ndim == 2 else x
            W = case.inputs["W"].astype(np.float64)
            b = case.inputs["b"].astype(np.float64)
            col = conv64.im2col(x, *geo[:4], W.shape[1])
            sel = rng.choice(col.shape[0], min(col.shape[0], 200), replace=False)
            t = np.concatenate([col[sel][:, None, :] * W[None], np.broadcast_to(b, (len(sel), W.shape[0]))[..., None]], -1)
            a = allowance.compute("conv", case)["conv"][sel]
            e, z = _margin(t, a, rng)
            total += e
            assert z >= params.lam() * (1 - 1e-9), (case.name, "conv", z)
    print("expected elements out of allowance, all orders:", total)
    assert total < 1e-6
