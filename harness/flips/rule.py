"""The flip rule: the single permitted pool flip of the whole-model pytorch tier
(docs/backward.md, "Against PyTorch"), as pure functions of arrays (no port, no cache: the
port's side is port.py, the tiers' comparisons compare.py).

The port's pool decisions are compared window by window with PyTorch's (the pytorch_step
fixture keeps PyTorch's max_pool2d indices as our flat index p*Out + o, and its pooled values).
A window whose winners differ is classified:

  dead  PyTorch's pooled value is 0 (nothing positive: its index points at some cell holding
        0) and the port says -1 (none). The same decision: not a difference.
  twin  both winners are cells, and their input windows (the kh x kw x C patches the conv
        reads, zero padding included, in the port's block input) are identical bit for bit:
        a tie between twin cells. Both cells are the same function of every weight of the
        block, so the choice changes no parameter gradient of the block: not a flip.
  near  the port's winner is a decision the error model allows in that window: a near-tie
        of harness/allowance/conv.py (`near_ties`: a candidate, the +0 start included, within
        the two conv values' allowances of the float64 winner), whose either outcome every
        gradient's allowance already includes. Not a flip (the float64 tier's rule, the same
        arrays; a case without them has no near windows).
  flip  anything else. Its two candidates are the port's winner and PyTorch's (a cell, or
        'none' with value 0 when either side found nothing positive); their values are the
        port's conv values of those cells, and the margin is |value_port - value_pytorch|.

Rounding bound of a flip in block n: bound = allowance(a) + allowance(b), the pytorch-tier
allowances of the two candidates' conv values, 2*Atol + 2*Floor_n each (Atol: the error
model's per-element bound of that conv value in the whole-model run, harness/allowance/step.py;
Floor_n: max |fp32 - float64| of block n's conv values in the whole-model run,
params.conv_floor). A conforming port's conv values lie within that
allowance of PyTorch's; the port ranks a above b and PyTorch b above a, so
v_a - v_b <= (v_a - pt_a) + (pt_b - v_b) <= allowance(a) + allowance(b): a flip with a margin
above the bound cannot come from rounding.

Verdict: no flip passes; exactly one flip with margin <= bound is "1 flip used": the
out-of-allowance elements of that block's weights and bias, confined to the flip's output
channel (row o of conv<n>.W, element o of conv<n>.b), are excused and the records say so.
Two or more flips, or one whose margin exceeds the bound, fail the `winners` record, and
nothing is excused. Near windows are not flips and use nothing: every gradient's allowance
already includes both of their decisions.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
from ...generators import model
from ..allowance.conv import legal

DEAD, TWIN, NEAR, FLIP = "dead", "twin", "near-tie", "flip"


@dataclass
class WindowDiff:
    """One pool window whose winners differ between the port and PyTorch."""
    kind: str                 # twin | near-tie | flip (a block's dead windows: DeadWindows)
    line: int
    block: int                # 0-based block index (conv<block>.W)
    window: list              # [oy, ox, o]
    channel: int
    ours: int                 # the port's winner (flat p*Out + o) or -1
    pytorch: int              # PyTorch's winner, -1 when its pooled value is 0
    ours_value: float         # the port's conv value of its winner (0 for none)
    pytorch_cell_value: float  # the port's conv value of PyTorch's winner (0 for none)
    pytorch_value: float      # PyTorch's pooled value (its winner's value in PyTorch)
    margin: float
    bound: float

    count = 1                 # windows this entry stands for (a class attribute, not a field)

    def describe(self, with_bound: bool = True) -> str:
        """The window, both candidates and the margin in words, and the rounding bound unless
        `with_bound` is False (a per-layer fixture permits no flip: it has no bound to give)."""
        cell = lambda w: "none" if w < 0 else f"cell {w}"
        text = (f"line {self.line}, block {self.block + 1} (conv{self.block}), channel "
                f"{self.channel}, window [oy, ox] = {self.window[:2]}: port {cell(self.ours)} = "
                f"{self.ours_value!r}, PyTorch {cell(self.pytorch)} = {self.pytorch_value!r} "
                f"(port's value there {self.pytorch_cell_value!r}), margin {self.margin:.3g}")
        return text + (f", rounding bound {self.bound:.3g}" if with_bound else "")


@dataclass
class DeadWindows:
    """The dead windows of one block, counted together: they are the same decision, never
    reported one by one (the trained model's step case has about 75 000 of them)."""
    line: int
    block: int
    count: int
    kind: str = DEAD


@dataclass
class Verdict:
    """The rule's verdict on one case: every differing window, from which it follows whether
    the case passes and which flip, if any, it uses (the one flip excuses gradient elements,
    so every tensor of the case is judged against this one verdict)."""
    diffs: list = field(default_factory=list)   # every differing window: twins and flips one
                                                # by one, each block's dead ones as DeadWindows
    foreign: list = field(default_factory=list)  # windows whose winner is no cell of theirs

    @property
    def flips(self) -> list:
        return [d for d in self.diffs if d.kind == FLIP]

    @property
    def counts(self) -> dict:
        out = dict.fromkeys((DEAD, TWIN, NEAR, FLIP), 0)
        for d in self.diffs:
            out[d.kind] += d.count
        return out

    @property
    def passed(self) -> bool:
        f = self.flips
        return not self.foreign and (len(f) == 0 or (len(f) == 1 and f[0].margin <= f[0].bound))

    @property
    def used(self) -> WindowDiff | None:
        """The one permitted flip, when the verdict uses it."""
        f = self.flips
        return (f[0] if not self.foreign and len(f) == 1 and f[0].margin <= f[0].bound
                else None)

    def note(self) -> str:
        """The verdict in words, for the records it decides: the flips (the used one, or why
        the case fails) and the windows that differ without being flips."""
        c = self.counts
        head = (f"{c[FLIP]} flip(s); {c[TWIN]} twin tie(s) and {c[DEAD]} dead window(s) "
                "differ in index only" + (f", {c[NEAR]} near-tie(s) decided within rounding"
                                          if c[NEAR] else "") + " (not flips)")
        f = self.flips
        if self.foreign:
            return f"FAIL: {foreign_note(self.foreign)}; " + head
        if not f:
            return "no flip; " + head
        if self.used is not None:
            return f"1 flip used: {f[0].describe()}; " + head
        why = ("more than one flip" if len(f) > 1 else
               "the flip's margin is beyond rounding (margin > bound)")
        shown = "; ".join(d.describe() for d in f[:5]) + (f"; +{len(f) - 5} more" if len(f) > 5 else "")
        return f"FAIL: {why}: {shown}; " + head

    def to_meta(self, layer: str, case: str) -> list[dict]:
        """The flips as results.json's meta["flips"] lists them (blocks counted from 1)."""
        out, used = [], self.used   # once: self.used scans every diff (a broken port has 10^4+)
        for d in self.flips:
            m = {"layer": layer, "case": case, **asdict(d)}
            m.pop("kind")
            m["block"] = d.block + 1
            m["used"] = d is used
            out.append(m)
        return out


# ------------------------------------------------------------------ the port's indices


def foreign_windows(winners, Hc: int, Wc: int, poolH: int, poolW: int) -> np.ndarray:
    """Flat indices of the windows of `winners` [Hp][Wp][Out] whose winner is neither -1 nor
    a cell p*Out + o of that window (p = y*Wc + x inside it) and channel o: an index the pool
    rule cannot have chosen, so there is no decision to judge (and no cell to read)."""
    w = np.asarray(winners, np.int64)
    Hp, Wp, Out = w.shape
    oy, ox, o = np.meshgrid(np.arange(Hp), np.arange(Wp), np.arange(Out), indexing="ij")
    p, ch = np.divmod(w, Out)
    y, x = np.divmod(p, Wc)
    inside = ((w >= 0) & (w < Hc * Wc * Out) & (ch == o) & (y // poolH == oy)
              & (x // poolW == ox))
    return np.flatnonzero(~(inside | (w == -1)))


def foreign_described(winners, ref, windows, label: str = "", at: int = 0) -> list[tuple]:
    """(flat index + at, the port's winner, the reference's, 'window [oy, ox, o]: winner N')
    for each flat window of `windows`."""
    w, r = np.asarray(winners), np.asarray(ref)
    return [(int(k) + at, int(w.flat[k]), int(r.flat[k]),
             f"{label}window {[int(i) for i in np.unravel_index(int(k), w.shape)]}: winner "
             f"{int(w.flat[k])}") for k in windows]


def foreign_note(described: list[tuple]) -> str:
    shown = "; ".join(d[3] for d in described[:5]) + (f"; +{len(described) - 5} more"
                                                     if len(described) > 5 else "")
    return (f"{len(described)} window(s) whose winner is neither -1 nor a cell of the window "
            f"in its channel (p*Out + o): {shown}")


# ------------------------------------------------------------------ classification


def patches(x, kh, kw, padH, padW) -> np.ndarray:
    """The port's input windows: patch[y][x] = the kh x kw x C block of x (zero padded) that
    conv position (y, x) reads, as raw bytes per position ([Hc][Wc] of kh*kw*C floats)."""
    x = np.asarray(x, np.float32)
    H, W, C = x.shape
    xp = np.zeros((H + 2 * padH, W + 2 * padW, C), np.float32)
    xp[padH:padH + H, padW:padW + W] = x
    Hc, Wc = model.conv_size(H, W, kh, kw, padH, padW)
    out = np.empty((Hc, Wc, kh, kw, C), np.float32)
    for ky in range(kh):
        for kx in range(kw):
            out[:, :, ky, kx] = xp[ky:ky + Hc, kx:kx + Wc]
    return out.reshape(Hc, Wc, -1)


def classify_block(ours_w, pt_w, pt_pooled, conv, x, geo: dict, line: int, block: int,
                   bound_fn, legal_fn=None) -> list[WindowDiff]:
    """The differing windows of one block of one line.

    ours_w, pt_w: int [Hp][Wp][Out] winners (port; PyTorch's index as p*Out + o);
    pt_pooled: PyTorch's pooled values [Hp][Wp][Out]; conv: the port's conv values [P][Out];
    x: the port's block input [H][W][C]; bound_fn(a, b) -> the rounding bound of the two
    candidate cells (flat conv indices, -1 for 'none'); legal_fn(windows, winners) -> bool
    array: whether the error model allows the port's winner in each flat window (near)."""
    ours_w, pt_w = np.asarray(ours_w), np.asarray(pt_w)
    pt_pooled = np.asarray(pt_pooled)
    conv = np.asarray(conv, np.float32)
    pt_dead = pt_pooled == 0
    pt_eff = np.where(pt_dead, -1, pt_w)
    differ = ours_w != pt_eff
    dead = (ours_w != pt_w) & pt_dead & (ours_w == -1)
    n_dead = int(np.count_nonzero(dead))   # same decision, different index: counted, not flips
    out = [DeadWindows(line, block, n_dead)] if n_dead else []
    if not differ.any():
        return out
    twins = _Twins(x, geo, conv.shape[1])
    for idx in zip(*np.nonzero(differ)):
        a, b = int(ours_w[idx]), int(pt_eff[idx])
        kind = _kind(a, b, twins, legal_fn, idx, ours_w.shape)
        out.append(_window_diff(kind, line, block, idx, a, b, conv, float(pt_pooled[idx]),
                                bound_fn))
    return out


class _Twins:
    """twins(a, b): whether conv cells a and b (flat p*Out + o) read the same input window bit
    for bit, so either is the same function of every weight. The block's patches are made on
    the first question only: most blocks have no two live cells to tell apart."""

    def __init__(self, x, geo: dict, out: int):
        self.x, self.geo, self.out, self.pat = x, geo, out, None

    def __call__(self, a: int, b: int) -> bool:
        if self.pat is None:
            g = self.geo
            self.pat = patches(self.x, g["kh"], g["kw"], g["padH"], g["padW"])
        Wc = self.pat.shape[1]
        pa, pb = a // self.out, b // self.out
        return np.array_equal(self.pat[pa // Wc, pa % Wc].view(np.uint32),
                              self.pat[pb // Wc, pb % Wc].view(np.uint32))


def _kind(a: int, b: int, twins: _Twins, legal_fn, idx, shape) -> str:
    """A differing window's class (dead ones are counted apart): twin when both winners are
    cells reading the same input, near when the error model allows the port's winner there,
    else flip."""
    if a >= 0 and b >= 0 and twins(a, b):
        return TWIN
    if legal_fn is not None and legal_fn([np.ravel_multi_index(idx, shape)], [a])[0]:
        return NEAR
    return FLIP


def _window_diff(kind: str, line: int, block: int, idx, a: int, b: int, conv, pt_value: float,
                 bound_fn) -> WindowDiff:
    """The entry of one differing window: both candidates' conv values in the port (0 for
    'none'), their margin (none between twins) and the rounding bound of the pair."""
    val = lambda w: 0.0 if w < 0 else float(conv.flat[w])
    va, vb = val(a), val(b)
    margin = 0.0 if kind == TWIN else abs(va - vb)
    return WindowDiff(kind, line, block, [int(i) for i in idx], int(idx[2]), a, b, va, vb,
                      pt_value, margin, float(bound_fn(a, b)))


def conv_bound_fn(conv_floor: float, atol):
    """bound(a, b) = allowance(a) + allowance(b): each candidate's pytorch-tier conv allowance
    2*Atol + 2*Floor, Atol the model's bound of that cell's conv value (`atol`, flat over the
    block's [P][Out]; a 'none' candidate is the exact +0)."""
    atol = np.asarray(atol, np.float64).ravel()

    def bound(a, b):
        cell = lambda w: 0.0 if w < 0 else 2 * float(atol[w]) + 2 * conv_floor
        return cell(a) + cell(b)
    return bound


def legal_fn(arrays, n_cells: int, window_at: int = 0, cell_at: int = 0):
    """classify_block's legal_fn from the error model's legal decisions (allowance/conv.py,
    Decisions.arrays) of a case, for the block whose windows and cells start at these offsets
    of the arrays' flat indexing; None when the arrays have none."""
    if not arrays or "winners.cells" not in arrays:
        return None

    def fn(windows, winners):
        w = np.asarray(winners, np.int64)
        return legal(arrays, np.asarray(windows, np.int64) + window_at,
                     np.where(w >= 0, w + cell_at, -1), n_cells)
    return fn


# ------------------------------------------------------------------ the whole-model step


def layout(config: dict, widths) -> list[list[dict]]:
    """Per line, per block: the geometry and the offsets of that block's winners / pooled
    ([Hp][Wp][Out]) and conv values ([P][Out]) in the concatenations (line by line, block by
    block) that the pytorch_step fixture and the step module's run() use."""
    out, wo, co = [], 0, 0
    for w in widths:
        per = []
        for g in model.block_geometry(config, int(w)):
            nw, nc = g["Hp"] * g["Wp"] * g["out"], g["Hc"] * g["Wc"] * g["out"]
            per.append({**g, "w_at": wo, "w_n": nw, "c_at": co, "c_n": nc})
            wo += nw
            co += nc
        out.append(per)
    return out


def line_images(case) -> list[np.ndarray]:
    """The case's lines [H][w][C], cut from its concatenated `images` by `widths`: the first
    block's input of each line."""
    config = case.params["config"]
    H, C = config["input_height"], config["input_channels"]
    images, at = [], 0
    for w in (int(w) for w in case.inputs["widths"]):
        images.append(np.asarray(case.inputs["images"][at:at + H * w * C], np.float32).reshape(H, w, C))
        at += H * w * C
    return images


def analyse_step(case, ours: dict, ref: dict, conv_atol=None, arrays=None) -> Verdict:
    """Every differing window of every block of every line of a pytorch_step case;
    conv_atol: the model's Atol of every conv value (layout()'s concatenation); arrays: the
    case's model arrays, whose legal pool decisions (allowance/step.py, decision_arrays) make
    a window near rather than a flip."""
    lay = layout(case.params["config"], [int(w) for w in case.inputs["widths"]])
    ow, pw = np.asarray(ours["winners"]), np.asarray(ref["winners"])
    pp = np.asarray(case.inputs["pt_pooled"])
    conv = np.asarray(ours["conv_out"], np.float32)
    conv_atol = np.zeros(conv.size) if conv_atol is None else np.asarray(conv_atol).ravel()
    floors = case.params["conv_floor"]
    v = Verdict()
    for line, (per, x) in enumerate(zip(lay, line_images(case))):
        for n, g in enumerate(per):
            shp = (g["Hp"], g["Wp"], g["out"])
            sl = slice(g["w_at"], g["w_at"] + g["w_n"])
            cells = slice(g["c_at"], g["c_at"] + g["c_n"])
            cv = conv[cells].reshape(-1, g["out"])
            wn = ow[sl].reshape(shp)
            bad = foreign_windows(wn, g["Hc"], g["Wc"], g["poolH"], g["poolW"])
            if bad.size:    # judged no further: the reference's winner stands in
                v.foreign += foreign_described(wn, pw[sl], bad, f"line {line}, block {n + 1}, ",
                                               g["w_at"])
                wn = wn.copy()
                wn.flat[bad] = pw[sl].reshape(shp).flat[bad]
            v.diffs += classify_block(wn, pw[sl].reshape(shp), pp[sl].reshape(shp), cv, x, g,
                                      line, n, conv_bound_fn(float(floors[n]), conv_atol[cells]),
                                      legal_fn(arrays, conv.size, g["w_at"], g["c_at"]))
            # the port's pooled output is the next block's input
            x = np.where(wn >= 0, cv.ravel()[np.maximum(wn, 0)], np.float32(0)).astype(np.float32)
    return v


def excused_mask(tensor: str, shape, used: WindowDiff | None) -> np.ndarray | None:
    """The elements a used flip excuses in `tensor`: row `channel` of conv<block>.W, element
    `channel` of conv<block>.b; None when the flip excuses nothing there."""
    if used is None or tensor not in (f"conv{used.block}.W", f"conv{used.block}.b"):
        return None
    m = np.zeros(shape, bool)
    m[used.channel] = True
    return m
