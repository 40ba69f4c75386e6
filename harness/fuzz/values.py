"""Cases decoded from bytes: Hypothesis draws one fixed-size byte string a case, a Reader turns
it into decisions, and the decisions into arrays and shapes.

Hypothesis charges per choice (about 0.05-0.1 ms each, on top of about 1 ms a case), and a
byte string of N bytes costs about as much as one choice plus half a microsecond a byte. So a
case is one `st.binary(min_size=N, max_size=N)` (`cases()`), decoded deterministically by
the layer's decode(Reader): the same bytes always give the same case.

Every decision maps byte 0 to its simplest option (the first family, the smallest size, kind
`zero`, sign `mixed`, scale 2^0, seed 0, no special value, a table's first entry) and larger
bytes to options no simpler; reading past the end of the bytes gives zeros. Hypothesis
shrinks a byte string by making it lexicographically smaller (all of it 0 first, then sorted
runs, then each byte lowered, 0 first), so a shrunk failure keeps only the decisions that
make it fail, each at its simplest failing option.

A decision reads a fixed number of bytes wherever it is taken, whatever it decides: lowering
one byte changes that decision, not how the bytes after it are read. Variable-length parts
(lines, tensors, steps) read their count first and their items in fixed-size slots, so
lowering a count only drops items from the end.

The bytes come close to uniform, so every distribution is explicit here: sizes favour the
small end (`Reader.size`), options have weights (`Choice`), and a quarter of the seeds come
from a set of four, so arrays of a case often repeat each other's values.

An array is a recipe, not element by element:

    kind     zero, one, int, uniform, normal, pow2, tiny, subnormal, huge, wide   (1 byte)
    sign     mixed, positive, negative                                           (1 byte)
    scale    2^e, e in [-8, 8]                                                   (1 byte)
    seed     the random part's seed                                              (2 bytes)
    slots    with specials: each slot (1 or 2 bytes) an inactive mark or a special
             value, then (2 bytes) the element it replaces

so a shrunk failure reads like "x all zero except x[0] = NaN" or "W = 1 everywhere". `tiny`
values (2^-80 * [1, 2)) make products underflow to a zero of the product's sign, `subnormal`
ones live below 2^-126, `huge` ones overflow products where a layer allows it: input NaNs and
NaNs made by an operation are never mixed in one case (generators/edge_values.py), so a
strategy that gives NaN specials keeps every value that could overflow out of that case
(f32_specials(nan=True, big=False), and sums too short to reach infinity).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from hypothesis import strategies as st

F32, F64 = np.float32, np.float64
KINDS = ("zero", "one", "int", "uniform", "normal", "pow2", "tiny", "subnormal", "huge", "wide")
KIND_WEIGHTS = {"zero": 1, "one": 1, "int": 2, "uniform": 3, "normal": 3, "pow2": 2,
                "tiny": 2, "subnormal": 1, "huge": 1, "wide": 1}
SLOTS = 3                 # special-value slots of an array, each active with probability 5/16
INACTIVE = 176            # slot bytes below this are inactive (0 among them)


class Reader:
    """Decisions from a byte string, in order; past its end every byte reads 0."""
    __slots__ = ("data", "at")

    def __init__(self, data: bytes = b""):
        self.data = data
        self.at = 0

    def byte(self) -> int:
        at = self.at
        self.at = at + 1
        return self.data[at] if at < len(self.data) else 0

    def take(self, n: int) -> bytes:
        """The next n bytes (zeros past the end)."""
        at = self.at
        self.at = at + n
        chunk = self.data[at:at + n]
        return chunk + bytes(n - len(chunk))

    def sub(self, n: int) -> "Reader":
        """A Reader of the next n bytes: a fixed-size slot, whatever of it is read."""
        return Reader(self.take(n))

    def u16(self) -> int:
        return self.byte() << 8 | self.byte()

    def u32(self) -> int:
        return self.u16() << 16 | self.u16()

    def below(self, n: int) -> int:
        """Uniform in [0, n), n <= 256 (one byte)."""
        return self.byte() * n >> 8

    def index(self, n: int) -> int:
        """Uniform in [0, n), n <= 65536 (two bytes): any element of an array."""
        return self.u16() * n >> 16

    def flag(self, p: float) -> bool:
        """True with probability p (one byte; 0 is False)."""
        return self.byte() >= 256 - round(256 * p)

    def size(self, lo: int, hi: int, wide: bool = False) -> int:
        """In [lo, hi], the small end favoured: P(size < lo + k) = sqrt(k / (hi - lo + 1)).
        One byte for up to 128 values (each of them reachable), two when `wide`."""
        if not wide and hi - lo >= 128:
            raise ValueError(f"size({lo}, {hi}): more than 128 values need wide=True")
        v, top = (self.u16(), 1 << 32) if wide else (self.byte(), 1 << 16)
        return lo + (hi - lo + 1) * v * v // top

    def unit(self) -> float:
        """Uniform in [0, 1) (four bytes)."""
        return self.u32() / 2.0 ** 32

    def seed(self) -> int:
        """Two bytes: a quarter of the seeds are 0..3 (arrays that repeat each other), the
        rest spread over 16384..65535."""
        hi, lo = self.byte(), self.byte()
        return hi >> 4 if hi < 64 else hi << 8 | lo


class Choice:
    """One decision among `options` (one byte): byte 0 the first option, the others in
    proportion to `weights`; list the options simplest first."""
    __slots__ = ("options", "lut")

    def __init__(self, options, weights=None):
        self.options = tuple(options)
        weights = list(weights) if weights is not None else [1] * len(self.options)
        if len(weights) != len(self.options) or min(weights) <= 0:
            raise ValueError("one positive weight per option")
        counts = [max(1, round(256 * w / sum(weights))) for w in weights]
        counts[counts.index(max(counts))] += 256 - sum(counts)
        self.lut = tuple(o for o, c in zip(self.options, counts) for _ in range(c))

    def read(self, r: Reader):
        return self.lut[r.byte()]

    def byte_of(self, option) -> int:
        """The smallest byte that reads `option`."""
        return self.lut.index(option)


SIGN = Choice(("mixed", "positive", "negative"), (2, 1, 1))
SCALE = Choice((0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, -7, 8, -8),
               (8,) + (1,) * 16)                   # 2^0 in half the arrays


@lru_cache(maxsize=None)
def kind_choice(kinds: tuple) -> Choice:
    return Choice(kinds, [KIND_WEIGHTS[k] for k in kinds])


@lru_cache(maxsize=None)   # one strategy object a layer: Hypothesis validates each new one
def cases(decode, size: int):
    """The strategy of a layer: `size` bytes, decoded by decode(Reader) -> (params, inputs)."""
    return st.binary(min_size=size, max_size=size).map(lambda data: decode(Reader(data)))


_GEN = np.random.Generator(np.random.PCG64(0))
_SPREAD = 0x9E3779B97F4A7C15F39CC0605CEDC835       # odd: distinct seeds, distinct states


def rng(seed: int) -> np.random.Generator:
    """A generator in the state of `seed` (one reused object: setting a state costs a tenth of
    making a generator)."""
    _GEN.bit_generator.state = {"bit_generator": "PCG64", "has_uint32": 0, "uinteger": 0,
                                "state": {"state": seed * _SPREAD % (1 << 128),
                                          "inc": 0xDA3E39CB94B95BDB}}
    return _GEN


def _signed_mantissas(g, n: int) -> np.ndarray:
    """±[1, 2), signs and magnitudes independent (|u| and u's sign are), in one draw."""
    u = g.uniform(-1, 1, n)
    return np.copysign(1.0, u) + u


def _binades(g, n: int, lo: int, hi: int) -> np.ndarray:
    """±[1, 2) * 2^k, k uniform in [lo, hi)."""
    k = np.floor(g.uniform(lo, hi, n)).astype(np.int64)
    return np.ldexp(_signed_mantissas(g, n), k)


def _base(kind: str, n: int, seed: int, huge_exp: int) -> np.ndarray:
    if kind == "zero":
        return np.zeros(n)
    if kind == "one":
        return np.ones(n)
    g = rng(seed)
    if kind == "int":
        return np.floor(g.uniform(-3, 4, n))
    if kind == "uniform":
        return g.uniform(-1, 1, n)
    if kind == "normal":
        return g.standard_normal(n)
    if kind == "pow2":
        return np.ldexp(np.copysign(1.0, g.uniform(-1, 1, n)),
                        np.floor(g.uniform(-3, 4, n)).astype(np.int64))
    if kind == "tiny":
        return _signed_mantissas(g, n) * 2.0 ** -80
    if kind == "subnormal":
        return _binades(g, n, -149, -126)
    if kind == "huge":
        return _binades(g, n, huge_exp - 20, huge_exp)
    return _binades(g, n, -149, huge_exp)          # wide


UNSCALED = ("zero", "tiny", "subnormal")
OVERFLOWING = ("huge", "wide")


def _values(kind, n, seed, huge_exp, e, dtype) -> np.ndarray:
    v = _base(kind, n, seed, huge_exp)
    if e and kind not in UNSCALED:
        v = v * 2.0 ** e
    return v.astype(dtype)


def array(r: Reader, shape, dtype=F32, kinds=KINDS, specials=(), slots=SLOTS, huge_exp=50,
          scales=True) -> np.ndarray:
    """An array of `shape` from its recipe (see the module docstring); `specials` are values
    that may replace up to `slots` elements. Reads 5 bytes, and 3 or 4 a slot when there
    are specials, whatever it decides."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    n = math.prod(shape)
    kind = kind_choice(tuple(kinds)).read(r)
    sign, e, seed = SIGN.read(r), SCALE.read(r), r.seed()
    if kind in OVERFLOWING:
        with np.errstate(over="ignore"):   # "huge" beyond the dtype's range is +-inf
            v = _values(kind, n, seed, huge_exp, e if scales else 0, dtype)
    else:
        v = _values(kind, n, seed, huge_exp, e if scales else 0, dtype)
    if sign == "positive":
        v = np.abs(v)
    elif sign == "negative":
        v = -np.abs(v)
    if specials:
        place(r, v, specials, slots)
    return v.reshape(shape)


def recipe_bytes(specials=(), slots=SLOTS) -> int:
    """The bytes array() reads for a recipe with these specials."""
    if not specials:
        return 5
    return 5 + slots * (3 if len(specials) <= 256 - INACTIVE else 4)


def special(r: Reader, m: int) -> int | None:
    """A slot's value: None (inactive) or an index into a table of m values. One byte for up
    to 80 values, two for more (tables of thousands: every entry reachable)."""
    if m <= 256 - INACTIVE:
        b = r.byte()
        return None if b < INACTIVE else (b - INACTIVE) * m // (256 - INACTIVE)
    v, lo = r.u16(), INACTIVE << 8
    return None if v < lo else (v - lo) * m // ((1 << 16) - lo)


def place(r: Reader, v: np.ndarray, specials, slots: int) -> None:
    """Up to `slots` elements of v (flat) replaced by values of `specials`."""
    for _ in range(slots):
        k, i = special(r, len(specials)), r.index(v.size)
        if k is not None and v.size:
            v[i] = specials[k]


def picks(r: Reader, table, lo: int, hi: int) -> list:
    """lo..hi values from `table` (hi <= 256): how many (favouring few), the first one's
    index (any entry), and a seed for the others. 5 bytes; shrinks to the table's first."""
    k, first, seed = r.size(lo, hi), r.index(len(table)), r.seed()
    if k == 0:
        return []
    rest = np.floor(rng(seed).uniform(0, len(table), k - 1)).astype(np.int64)
    return [table[first]] + [table[int(i)] for i in rest]


def f32_specials(nan=False, inf=False, big=True, extra=()) -> tuple:
    """Special float32 values: signed zeros, ±1, subnormal and normal extremes, values whose
    products underflow; max/4 (products overflow) unless not `big`; NaN (the canonical quiet
    NaN) and infinities on request. Simplest first: a shrunk slot lands on the first that
    still fails."""
    info = np.finfo(F32)
    v = [0.0, -0.0, 1.0, -1.0]
    if nan:
        v += [float(np.array([0x7FC00000], np.uint32).view(F32)[0])]
    v += [float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.tiny),
          float(np.nextafter(F32(info.tiny), F32(0))), 2.0 ** -80, -2.0 ** -80]
    if big:
        v += [float(info.max) / 4]
    if inf:
        v += [float("inf"), float("-inf")]
    return tuple(F32(x) for x in list(v) + list(extra))
