"""DetMath: the project's own double-precision exp and log, NumPy emulation.

Bit for bit the same as ``ctypes_kernels/src/detmath.c``: every float64 NumPy operation
below is one IEEE 754 double operation rounded to nearest even, performed in the same
order (parentheses included) as the C code. No ``np.exp``/``np.log``, no fma, no libm.
Branches of the C code are evaluated for every element and selected with ``np.where``;
elements that take a special-case exit are computed on a harmless stand-in value and
then overwritten, so they cannot disturb the others.

docs/decoding.md, section "DetMath: exp and log", describes the algorithm, the tables
(and the rule that generates them), every constant and the measured accuracy.

``exp(x)`` and ``log(x)`` accept a scalar or an array-like; they return a float64 ndarray
of the input's shape, or a NumPy float64 scalar for a scalar input.
"""

from __future__ import annotations

import numpy as np

__all__ = ["exp", "log", "EXP_N", "LOG_N"]

EXP_N = 32
LOG_N = 32


def _f(bits: int) -> np.float64:
    return np.array([bits], dtype=np.uint64).view(np.float64)[0]


# ---- constants (bit patterns; identical to detmath.c) ---------------------------------
POS_INF = _f(0x7FF0000000000000)
NEG_INF = _f(0xFFF0000000000000)
QNAN = _f(0x7FF8000000000000)  # returned by log(x < 0)
O_THRESH = _f(0x40862E42FEFA39EF)  # 709.782712893383973096: above -> +inf
U_THRESH = _f(0xC0874910D52D3051)  # -745.133219101941108420: below -> +0
INVLN2N = _f(0x40471547652B82FE)  # RN(32/ln2)
SHIFT = _f(0x4338000000000000)  # 1.5 * 2^52
LN2HI = _f(0x3FE62E42FEE00000)  # ln2 to 32 significant bits
LN2LO = _f(0x3DEA39EF35793C76)  # RN(ln2 - LN2HI)
LN2HIN = _f(0x3F962E42FEE00000)  # LN2HI / 32
LN2LON = _f(0x3D9A39EF35793C76)  # LN2LO / 32
TWO54 = _f(0x4350000000000000)
TWO1023 = _f(0x7FE0000000000000)
TWOM1022 = _f(0x0010000000000000)
SPLIT = _f(0x41A0000002000000)  # 2^27 + 1

# exp: 1/k!, k = 2..7
E2 = _f(0x3FE0000000000000)
E3 = _f(0x3FC5555555555555)
E4 = _f(0x3FA5555555555555)
E5 = _f(0x3F81111111111111)
E6 = _f(0x3F56C16C16C16C17)
E7 = _f(0x3F2A01A01A01A01A)

# log: (-1)^(k+1)/k, k = 2..12
C2 = _f(0xBFE0000000000000)
C3 = _f(0x3FD5555555555555)
C4 = _f(0xBFD0000000000000)
C5 = _f(0x3FC999999999999A)
C6 = _f(0xBFC5555555555555)
C7 = _f(0x3FC2492492492492)
C8 = _f(0xBFC0000000000000)
C9 = _f(0x3FBC71C71C71C71C)
C10 = _f(0xBFB999999999999A)
C11 = _f(0x3FB745D1745D1746)
C12 = _f(0xBFB5555555555555)

# Tables, generated with mpmath (rule in docs/decoding.md; tests/test_detmath.py
# regenerates them and compares):
#   exp: H_j = RN(2^(j/32)), T_j = RN((2^(j/32) - H_j) / H_j)
#   log: INVC_j = 1 for j = 0 and j = 31, else d_j / (1 + (j + 1/2)/32) rounded to 20
#        significant bits, d_j = 1 for j < 13 and 2 otherwise;
#        LOGC_HI_j + LOGC_LO_j = -log(INVC_j) as a double-double.
_EXP_TAB_BITS = (  # (H_j, T_j)
    (0x3FF0000000000000, 0x0000000000000000),  # 0
    (0x3FF059B0D3158574, 0x3C8CD2523567F613),  # 1
    (0x3FF0B5586CF9890F, 0x3C979AA65D837B6D),  # 2
    (0x3FF11301D0125B51, 0xBC9556522A2FBD0E),  # 3
    (0x3FF172B83C7D517B, 0xBC801B15EAA59348),  # 4
    (0x3FF1D4873168B9AA, 0x3C9AECF73E3A2F60),  # 5
    (0x3FF2387A6E756238, 0x3C968EFDE3A8A894),  # 6
    (0x3FF29E9DF51FDEE1, 0x3C82F7E16D09AB31),  # 7
    (0x3FF306FE0A31B715, 0x3C834D754DB0ABB6),  # 8
    (0x3FF371A7373AA9CB, 0xBC924AEDCC4B5068),  # 9
    (0x3FF3DEA64C123422, 0x3C859F48A72A4C6D),  # 10
    (0x3FF44E086061892D, 0x3C4363ED60C2AC11),  # 11
    (0x3FF4BFDAD5362A27, 0x3C7690CEBB7AAFB0),  # 12
    (0x3FF5342B569D4F82, 0xBC78DEC6BD0F385F),  # 13
    (0x3FF5AB07DD485429, 0x3C9063E1E21C5409),  # 14
    (0x3FF6247EB03A5585, 0xBC8C33C53BEF4DA8),  # 15
    (0x3FF6A09E667F3BCD, 0xBC93B3EFBF5E2228),  # 16
    (0x3FF71F75E8EC5F74, 0xBC781F647E5A3ECF),  # 17
    (0x3FF7A11473EB0187, 0xBC7B32DCB94DA51D),  # 18
    (0x3FF82589994CCE13, 0xBC9369B6F13B3734),  # 19
    (0x3FF8ACE5422AA0DB, 0x3C8DB72FC1F0EAB4),  # 20
    (0x3FF93737B0CDC5E5, 0xBC5DA9B88B6C1E29),  # 21
    (0x3FF9C49182A3F090, 0x3C71AFFC2B91CE27),  # 22
    (0x3FFA5503B23E255D, 0xBC91BBD1D3BCBB15),  # 23
    (0x3FFAE89F995AD3AD, 0x3C8C1A7792CB3387),  # 24
    (0x3FFB7F76F2FB5E47, 0xBC68D6F438AD9334),  # 25
    (0x3FFC199BDD85529C, 0x3C736EAE30AF0CB3),  # 26
    (0x3FFCB720DCEF9069, 0x3C676B2C6C921968),  # 27
    (0x3FFD5818DCFBA487, 0x3C74A385A63D07A7),  # 28
    (0x3FFDFC97337B9B5F, 0xBC82D52107B43E1F),  # 29
    (0x3FFEA4AFA2A490DA, 0xBC8FF7128FD391F0),  # 30
    (0x3FFF50765B6E4540, 0x3C8A64A931D185EE),  # 31
)
_LOG_TAB_BITS = (  # (INVC_j, LOGC_HI_j, LOGC_LO_j)
    (0x3FF0000000000000, 0x0000000000000000, 0x0000000000000000),  # 0
    (0x3FEE913200000000, 0x3FA774537632E48C, 0x3C4189C5532D6361),  # 1
    (0x3FEDAE6000000000, 0x3FB341DB961BD9D1, 0xBC5B5449CD169766),  # 2
    (0x3FECD85600000000, 0x3FBA9271FA4AE0AB, 0x3C594BE2E01C350F),  # 3
    (0x3FEC0E0800000000, 0x3FC0D779FCD0A299, 0x3C69877C5F5D38A6),  # 4
    (0x3FEB4E8200000000, 0x3FC44D2A0CCB7F02, 0x3C69F4187EEA93BA),  # 5
    (0x3FEA98F000000000, 0x3FC7AB860210E209, 0x3C4BBF6B2E0C0605),  # 6
    (0x3FE9EC8E00000000, 0x3FCAF3CC2E80C837, 0xBC5388F848751CC9),  # 7
    (0x3FE948B000000000, 0x3FCE270C6E2B0BE6, 0xBC456ECD50915690),  # 8
    (0x3FE8ACBA00000000, 0x3FD0A32272739CC5, 0x3C77C9AEA8934F83),  # 9
    (0x3FE8181800000000, 0x3FD229423BCF7986, 0xBC776F595B40CF5A),  # 10
    (0x3FE78A4C00000000, 0x3FD3A64DB56949B2, 0xBC6C61766E7EB650),  # 11
    (0x3FE702E000000000, 0x3FD51AAE872DFA2D, 0x3C439D256C6A008E),  # 12
    (0x3FF6816800000000, 0xBFD5D5BD9F595F10, 0x3C7654169E2111F8),  # 13
    (0x3FF6058200000000, 0xBFD4718F9271BD89, 0xBC397A52BCBD6569),  # 14
    (0x3FF58ED200000000, 0xBFD314F151D35C42, 0x3C73D6D5C9E62A60),  # 15
    (0x3FF51D0800000000, 0xBFD1BF99A35A6B75, 0x3C612AE0D979EF79),  # 16
    (0x3FF4AFD600000000, 0xBFD07136704D50E0, 0xBC7CD16457C0DDDE),  # 17
    (0x3FF446F800000000, 0xBFCE530C7FE709D2, 0xBC42128AEC50BAEB),  # 18
    (0x3FF3E22C00000000, 0xBFCBD082783BC21D, 0xBC3CB58B440627F0),  # 19
    (0x3FF3813800000000, 0xBFC95A5A5CF7013F, 0xBC5142AFB2A614E8),  # 20
    (0x3FF323E400000000, 0xBFC6F0174B75542C, 0x3C68BAA06DC7498F),  # 21
    (0x3FF2C9FC00000000, 0xBFC4914243339ED1, 0x3C508DEDA083577B),  # 22
    (0x3FF2735000000000, 0xBFC23D6C2A49A902, 0x3C670D2C0CE8481E),  # 23
    (0x3FF21FB800000000, 0xBFBFE89839DBBCE6, 0x3C5AAD5ECCA04E3B),  # 24
    (0x3FF1CF0600000000, 0xBFBB6ABECDAD2B94, 0x3C409FF8F18641E2),  # 25
    (0x3FF1811800000000, 0xBFB700D20AEAC061, 0x3C272610CBD807B0),  # 26
    (0x3FF135C800000000, 0xBFB2AA03A4471725, 0x3C5D15E8E285094C),  # 27
    (0x3FF0ECF600000000, 0xBFACCB854DDD663C, 0x3C4DD953B288548A),  # 28
    (0x3FF0A68200000000, 0xBFA466CC542D0A5A, 0x3C4AC69841116B38),  # 29
    (0x3FF0624E00000000, 0xBF98493028C8BB9F, 0x3C3D123E5B7D9BFC),  # 30
    (0x3FF0000000000000, 0x0000000000000000, 0x0000000000000000),  # 31
)

_EXP_TAB = np.array(_EXP_TAB_BITS, dtype=np.uint64).view(np.float64)  # [32][2]
_LOG_TAB = np.array(_LOG_TAB_BITS, dtype=np.uint64).view(np.float64)  # [32][3]
EXP_H, EXP_T = _EXP_TAB[:, 0].copy(), _EXP_TAB[:, 1].copy()
LOG_INVC, LOG_LOGC_HI, LOG_LOGC_LO = (_LOG_TAB[:, i].copy() for i in range(3))

_ONE = np.float64(1.0)
_TWO = np.float64(2.0)
_ZERO = np.float64(0.0)
_U52 = np.uint64(52)


def _prepare(x):
    a = np.asarray(x, dtype=np.float64)
    return np.ascontiguousarray(a).reshape(-1), a.shape, a.ndim == 0


def _finish(y, shape, scalar):
    if scalar:
        return np.float64(y[0])
    return y.reshape(shape)


def _from_bits(u):
    return np.asarray(u, dtype=np.uint64).view(np.float64)


def _exp_subnormal(H, tmp, m):
    """exp's result for m <= -1022: a careful single rounding into the subnormal range."""
    ms = np.clip(m, -1100, -1022)
    scale = _from_bits(H.view(np.uint64) + ((ms + 1022).astype(np.uint64) << _U52))
    st = scale * tmp
    ys = scale + st
    lo = (scale - ys) + st
    yh = _ONE + ys
    lo = ((_ONE - yh) + ys) + lo
    ys = np.where(ys < _ONE, (yh + lo) - _ONE, ys)
    return ys * TWOM1022


def exp(x):
    """DetMath exp: the same bits as ``crnn_detmath_exp1`` in C."""
    a, shape, scalar = _prepare(x)
    with np.errstate(all="ignore"):
        is_nan = a != a
        over = a > O_THRESH
        under = a < U_THRESH
        special = is_nan | over | under
        xs = np.where(special, _ZERO, a)

        kd = xs * INVLN2N + SHIFT
        kd = kd - SHIFT
        n = kd.astype(np.int64)
        j = n & (EXP_N - 1)
        m = (n - j) // EXP_N

        hi = xs - kd * LN2HIN
        r = hi - kd * LN2LON

        r2 = r * r
        p = r2 * (E2 + r * (E3 + r * (E4 + r * (E5 + r * (E6 + r * E7)))))
        H = EXP_H[j]
        T = EXP_T[j]
        tmp = (T + r) + p

        # m > -1022: y * 2^m (m == 1024: (y * 2^1023) * 2)
        y = H + H * tmp
        mn = np.clip(m, -1021, 1023)
        res = y * _from_bits((mn + 1023).astype(np.uint64) << _U52)
        # the rare cases below are computed only when some element needs them (a select
        # of an element no case claims keeps the value above)
        top = m == 1024
        if np.count_nonzero(top):
            res = np.where(top, (y * TWO1023) * _TWO, res)
        sub = m <= -1022
        if np.count_nonzero(sub):
            res = np.where(sub, _exp_subnormal(H, tmp, m), res)
        if np.count_nonzero(special):
            res = np.where(under, _ZERO, res)
            res = np.where(over, POS_INF, res)
            res = np.where(is_nan, a, res)
    return _finish(res, shape, scalar)


def log(x):
    """DetMath log: the same bits as ``crnn_detmath_log1`` in C."""
    a, shape, scalar = _prepare(x)
    with np.errstate(all="ignore"):
        ia = a.view(np.uint64)
        is_nan = a != a
        is_zero = a == _ZERO
        neg = (ia >> np.uint64(63)) != 0
        pinf = ia == np.uint64(0x7FF0000000000000)
        special = is_nan | is_zero | neg | pinf
        xs = np.where(special, _ONE, a)
        ix = xs.view(np.uint64)

        sub = ix < np.uint64(0x0010000000000000)
        if np.count_nonzero(sub):        # subnormal inputs (rare): scaled by 2^54 first
            ix = np.where(sub, (xs * TWO54).view(np.uint64), ix)
            k = np.where(sub, np.int64(-54), np.int64(0))
            k = k + ((ix >> _U52).astype(np.int64) - 1023)
        else:
            k = (ix >> _U52).astype(np.int64) - 1023
        j = ((ix >> np.uint64(47)) & np.uint64(LOG_N - 1)).astype(np.int64)
        up = (j >= 13).astype(np.int64)
        m = _from_bits(
            (ix & np.uint64(0x000FFFFFFFFFFFFF)) | ((1023 - up).astype(np.uint64) << _U52)
        )
        k = k + up

        invc = LOG_INVC[j]
        p = m * invc
        t = m * SPLIT
        mh = t - (t - m)
        ml = m - mh
        rl = (mh * invc - p) + ml * invc
        rh = p - _ONE

        r2 = rh * rh
        q = r2 * (C2 + rh * (C3 + rh * (C4 + rh * (C5 + rh * (C6 + rh * (C7 + rh * (
            C8 + rh * (C9 + rh * (C10 + rh * (C11 + rh * C12))))))))))

        dk = k.astype(np.float64)
        khi = dk * LN2HI
        klo = dk * LN2LO
        lch = LOG_LOGC_HI[j]
        s1 = khi + lch
        bb = s1 - khi
        e1 = (khi - (s1 - bb)) + (lch - bb)
        s2 = s1 + rh
        bb = s2 - s1
        e2 = (s1 - (s2 - bb)) + (rh - bb)
        lo = ((((e1 + e2) + klo) + LOG_LOGC_LO[j]) + (rl - rl * rh)) + q
        res = s2 + lo

        if np.count_nonzero(special):
            res = np.where(pinf, POS_INF, res)
            res = np.where(neg, QNAN, res)
            res = np.where(is_zero, NEG_INF, res)
            res = np.where(is_nan, a, res)
    return _finish(res, shape, scalar)
