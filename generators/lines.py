"""Synthetic text lines for crnn-v0, made with NumPy alone (no font files, no network).

Glyphs are stroke skeletons (polylines; arcs are sampled into polylines) in a unit box:
x in [0, 1] across the glyph's advance, y downward with 0 = ascender top, 0.4 = x-height,
1.0 = baseline, 1.3 = descender bottom. A line is rasterised with anti-aliasing by the
distance from each pixel centre to the nearest stroke segment:
coverage = clip(half_width + 0.5 - distance, 0, 1).

Ink is light on a dark background: pixel = bg + (ink - bg) * coverage + noise, clipped to
[0, 1], float32, shape [32][W] (crnn-v0 has one input channel, so [H][W] is the
channels-last image [H][W][C] with C = 1 dropped).

Everything is deterministic from the numpy Generator (or `make_batch`'s seed argument). The
only transcendental functions (sin/cos for arcs) run once at import and their results are
snapped to a 1/1024 grid, so libm differences between machines cannot reach the pixels;
the rasteriser itself uses only + - * / sqrt, min, max, which are correctly rounded.
"""
from __future__ import annotations

import math

import numpy as np

from .model import default_config

ALPHABET = default_config()["alphabet"]
HEIGHT = default_config()["input_height"]
MIN_LEN, MAX_LEN = 3, 10

# --------------------------------------------------------------------------- glyphs


def _arc(cx, cy, rx, ry, a0, a1, n=None):
    """Points of an elliptical arc from angle a0 to a1 (degrees, 0 = right, 90 = up)."""
    if n is None:
        n = max(4, int(abs(a1 - a0) / 15) + 1)
    pts = []
    for i in range(n + 1):
        a = math.radians(a0 + (a1 - a0) * i / n)
        pts.append((cx + rx * math.cos(a), cy - ry * math.sin(a)))
    return pts


def _ell(cx, cy, rx, ry):
    return _arc(cx, cy, rx, ry, 0, 360, 24)


# name -> (advance factor, list of strokes); a stroke is a list of (x, y) points.
_GLYPHS_SRC = {
    "0": (1.0, [_ell(0.5, 0.52, 0.42, 0.47)]),
    "1": (0.7, [[(0.15, 0.25), (0.6, 0.05), (0.6, 1.0)]]),
    "2": (1.0, [_arc(0.5, 0.3, 0.4, 0.25, 160, -30) + [(0.08, 1.0), (0.95, 1.0)]]),
    "3": (1.0, [_arc(0.5, 0.28, 0.38, 0.23, 150, -90),
                _arc(0.5, 0.75, 0.44, 0.25, 90, -150)]),
    "4": (1.0, [[(0.72, 1.0), (0.72, 0.05), (0.05, 0.7), (0.95, 0.7)]]),
    "5": (1.0, [[(0.88, 0.05), (0.2, 0.05), (0.14, 0.47)]
                + _arc(0.5, 0.7, 0.42, 0.3, 140, -150)]),
    "6": (1.0, [_arc(0.55, 0.52, 0.42, 0.47, 60, 190), _ell(0.5, 0.72, 0.41, 0.28)]),
    "7": (1.0, [[(0.05, 0.05), (0.95, 0.05), (0.38, 1.0)]]),
    "8": (1.0, [_ell(0.5, 0.27, 0.34, 0.22), _ell(0.5, 0.74, 0.43, 0.26)]),
    "9": (1.0, [_ell(0.5, 0.3, 0.4, 0.26), [(0.9, 0.3), (0.86, 0.7), (0.45, 1.0)]]),
    "a": (1.0, [_ell(0.45, 0.72, 0.37, 0.28), [(0.85, 0.42), (0.85, 1.0)]]),
    "b": (1.0, [[(0.12, 0.0), (0.12, 1.0)], _ell(0.52, 0.72, 0.4, 0.28)]),
    "c": (0.9, [_arc(0.55, 0.7, 0.45, 0.3, 45, 315)]),
    "d": (1.0, [_ell(0.48, 0.72, 0.4, 0.28), [(0.88, 0.0), (0.88, 1.0)]]),
    "e": (1.0, [[(0.1, 0.7), (0.94, 0.7)] + _arc(0.52, 0.7, 0.42, 0.3, 0, 315)]),
    "f": (0.75, [_arc(0.8, 0.22, 0.35, 0.2, 30, 180) + [(0.45, 1.0)],
                 [(0.1, 0.42), (0.85, 0.42)]]),
    "g": (1.0, [_ell(0.48, 0.66, 0.38, 0.25), [(0.86, 0.42), (0.86, 1.1)]
                + _arc(0.5, 1.1, 0.36, 0.18, 0, -160)]),
    "h": (1.0, [[(0.12, 0.0), (0.12, 1.0)],
                _arc(0.5, 0.65, 0.38, 0.23, 180, 0) + [(0.88, 1.0)]]),
    "i": (0.45, [[(0.5, 0.42), (0.5, 1.0)], [(0.5, 0.16), (0.5, 0.2)]]),
    "j": (0.55, [[(0.65, 0.42), (0.65, 1.1)] + _arc(0.35, 1.1, 0.3, 0.18, 0, -160),
                 [(0.65, 0.16), (0.65, 0.2)]]),
    "k": (0.9, [[(0.12, 0.0), (0.12, 1.0)], [(0.85, 0.4), (0.12, 0.75)],
                [(0.36, 0.64), (0.9, 1.0)]]),
    "l": (0.45, [[(0.5, 0.0), (0.5, 1.0)]]),
    "m": (1.5, [[(0.08, 0.4), (0.08, 1.0)],
                _arc(0.29, 0.62, 0.21, 0.2, 180, 0) + [(0.5, 1.0)],
                _arc(0.71, 0.62, 0.21, 0.2, 180, 0) + [(0.92, 1.0)]]),
    "n": (1.0, [[(0.12, 0.4), (0.12, 1.0)],
                _arc(0.5, 0.65, 0.38, 0.23, 180, 0) + [(0.88, 1.0)]]),
    "o": (1.0, [_ell(0.5, 0.7, 0.42, 0.3)]),
    "p": (1.0, [[(0.12, 0.4), (0.12, 1.3)], _ell(0.52, 0.7, 0.4, 0.28)]),
    "q": (1.0, [[(0.88, 0.4), (0.88, 1.3)], _ell(0.48, 0.7, 0.4, 0.28)]),
    "r": (0.8, [[(0.15, 0.4), (0.15, 1.0)], _arc(0.58, 0.66, 0.43, 0.24, 180, 40)]),
    "s": (0.9, [_arc(0.5, 0.55, 0.38, 0.15, 20, 270) + _arc(0.5, 0.85, 0.4, 0.15, 90, -160)]),
    "t": (0.75, [[(0.4, 0.1), (0.4, 0.88), (0.5, 0.98), (0.85, 0.95)],
                 [(0.08, 0.42), (0.85, 0.42)]]),
    "u": (1.0, [[(0.12, 0.4), (0.12, 0.75)] + _arc(0.5, 0.75, 0.38, 0.25, 180, 360),
                [(0.88, 0.4), (0.88, 1.0)]]),
    "v": (1.0, [[(0.05, 0.4), (0.5, 1.0), (0.95, 0.4)]]),
    "w": (1.5, [[(0.03, 0.4), (0.25, 1.0), (0.5, 0.55), (0.75, 1.0), (0.97, 0.4)]]),
    "x": (1.0, [[(0.1, 0.4), (0.9, 1.0)], [(0.9, 0.4), (0.1, 1.0)]]),
    "y": (1.0, [[(0.08, 0.4), (0.5, 0.95)], [(0.92, 0.4), (0.3, 1.3)]]),
    "z": (1.0, [[(0.1, 0.4), (0.9, 0.4), (0.1, 1.0), (0.9, 1.0)]]),
}


def _segments(strokes) -> np.ndarray:
    """Strokes -> float64 [S][4] segments (x0, y0, x1, y1), snapped to a 1/1024 grid."""
    segs = []
    for st in strokes:
        for (x0, y0), (x1, y1) in zip(st[:-1], st[1:]):
            segs.append((x0, y0, x1, y1))
    return np.round(np.asarray(segs, np.float64) * 1024.0) / 1024.0


GLYPHS: dict[str, tuple[float, np.ndarray]] = {
    ch: (adv, _segments(strokes)) for ch, (adv, strokes) in _GLYPHS_SRC.items()}
assert sorted(GLYPHS) == sorted(ALPHABET)

# --------------------------------------------------------------------------- helpers


def encode(text: str) -> np.ndarray:
    """Class ids 1..len(alphabet) (blank is 0)."""
    return np.asarray([1 + ALPHABET.index(ch) for ch in text], np.int32)


def decode(ids) -> str:
    return "".join(ALPHABET[int(i) - 1] for i in ids)


def min_width(length: int) -> int:
    """Narrowest width whose T = floor(W/4) steps give CTC an alignment for any text."""
    return 4 * (2 * length + 1)


def random_text(rng: np.random.Generator, min_len: int = MIN_LEN,
                max_len: int = MAX_LEN) -> str:
    n = int(rng.integers(min_len, max_len + 1))
    return "".join(ALPHABET[int(i)] for i in rng.integers(0, len(ALPHABET), n))


def _raster(segs: np.ndarray, hw: np.ndarray, H: int, W: int, col0: int = 0) -> np.ndarray:
    """Coverage in [0, 1] of the [H][W] pixels starting at column col0 by segments `segs`
    [S][4] (x0, y0, x1, y1 in px) of half-widths hw [S]."""
    py = np.arange(H, dtype=np.float64)[:, None, None] + 0.5
    px = np.arange(col0, col0 + W, dtype=np.float64)[None, :, None] + 0.5
    x0, y0, x1, y1 = (segs[:, i][None, None, :] for i in range(4))
    dx, dy = x1 - x0, y1 - y0
    ll = dx * dx + dy * dy
    safe = np.where(ll > 0, ll, 1.0)
    t = np.clip(((px - x0) * dx + (py - y0) * dy) / safe, 0.0, 1.0)
    t = np.where(ll > 0, t, 0.0)
    ex, ey = px - (x0 + t * dx), py - (y0 + t * dy)
    d = np.sqrt(ex * ex + ey * ey)
    cov = np.clip(hw[None, None, :] + 0.5 - d, 0.0, 1.0)
    return cov.max(axis=2) if cov.shape[2] else np.zeros((H, W))


# --------------------------------------------------------------------------- lines


def make_line(rng: np.random.Generator, text: str | None = None,
              width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One synthetic line: (image float32 [32][W] in [0, 1], target int32 class ids 1..36).

    text: random 3-10 characters when None. width: the natural width (about 8 px per
    character plus margins, never below min_width(len(text))) when None; a given width
    wider than the text pads with background, a narrower one compresses the text
    horizontally (the caller then owns whether CTC still has an alignment).
    """
    if text is None:
        text = random_text(rng)
    if any(ch not in GLYPHS for ch in text):
        raise ValueError(f"text {text!r} has characters outside {ALPHABET!r}")
    n = len(text)
    H = HEIGHT
    # per-line style
    sy = rng.uniform(17.0, 21.0)            # px per vertical unit (ascender..baseline)
    gw = rng.uniform(5.5, 7.5)              # px of a 1.0-advance glyph
    gap = rng.uniform(1.0, 2.6)             # px between glyphs
    slant = rng.uniform(-0.15, 0.2)         # x shift per px above the baseline
    stroke = rng.uniform(0.55, 1.1)         # half stroke width in px
    baseline = rng.uniform(21.5, 27.0)      # y of the baseline in px
    # per-glyph jitter
    dxj = rng.uniform(-0.5, 0.5, n)
    dyj = rng.uniform(-1.0, 1.0, n)
    scj = rng.uniform(0.92, 1.08, n)
    hwj = rng.uniform(-0.12, 0.12, n)
    margin_l, margin_r = rng.uniform(2.0, 6.0, 2)

    # layout in px, x from 0
    segs, hws, x = [], [], 0.0
    for i, ch in enumerate(text):
        adv, g = GLYPHS[ch]
        w = gw * adv * scj[i]
        s = sy * scj[i]
        gx0 = g[:, [0, 2]] * w + x + dxj[i]
        gy = (g[:, [1, 3]] - 1.0) * s          # relative to the baseline (<= 0 is above)
        gx = gx0 - slant * gy                  # slant: shift upper parts to the right
        seg = np.stack([gx[:, 0], gy[:, 0] + dyj[i], gx[:, 1], gy[:, 1] + dyj[i]], axis=1)
        segs.append(seg)
        hws.append(np.full(len(seg), max(0.35, stroke + hwj[i])))
        x += w + gap
    x -= gap
    counts = [len(sg) for sg in segs]
    segs = np.concatenate(segs) if segs else np.zeros((0, 4))
    hws = np.concatenate(hws) if hws else np.zeros(0)
    if n:
        xmin = min(segs[:, 0].min(), segs[:, 2].min()) - stroke
        xmax = max(segs[:, 0].max(), segs[:, 2].max()) + stroke
    else:                                      # empty text: background only
        xmin = xmax = 0.0
    ink_w = xmax - xmin
    natural = int(math.ceil(ink_w + margin_l + margin_r))
    if width is None:
        width = max(natural, min_width(n))
    width = int(width)
    if width < 1:
        raise ValueError("width must be positive")
    avail = width - margin_l - margin_r
    if avail < ink_w:                          # compress to fit
        avail = max(avail, 0.5 * width)
        left = (width - avail) / 2.0
        k = avail / ink_w if ink_w > 0 else 1.0
    else:                                      # pad: random horizontal placement
        left = margin_l + rng.uniform(0.0, avail - ink_w)
        k = 1.0
    segs[:, [0, 2]] = (segs[:, [0, 2]] - xmin) * k + left
    segs[:, [1, 3]] += baseline

    cov = np.zeros((H, width))
    at = 0
    for cnt in counts:                         # each glyph only over its own columns
        sg, hw = segs[at:at + cnt], hws[at:at + cnt]
        at += cnt
        lo = max(0, int(math.floor(min(sg[:, 0].min(), sg[:, 2].min()) - hw[0] - 1.0)))
        hi = min(width, int(math.ceil(max(sg[:, 0].max(), sg[:, 2].max()) + hw[0] + 1.0)))
        if hi > lo:
            cov[:, lo:hi] = np.maximum(cov[:, lo:hi], _raster(sg, hw, H, hi - lo, lo))
    bg = rng.uniform(0.0, 0.3)
    ink = rng.uniform(0.7, 1.0)
    grad = rng.uniform(-0.08, 0.08)            # slow horizontal background gradient
    sigma = rng.uniform(0.01, 0.06)
    ramp = np.linspace(0.0, 1.0, width)[None, :] * grad
    img = (bg + ramp) + (ink - bg) * cov + rng.normal(0.0, sigma, (H, width))
    img = np.clip(img, 0.0, 1.0).astype(np.float32)
    return img, encode(text)


def make_batch(seed: int, n: int, width: int | None = None,
               texts: list[str] | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """n lines, line i drawn from its own stream SeedSequence(seed, spawn_key=(i,)), so a
    line does not depend on n. Returns (images, targets) as lists (widths vary unless
    `width` is given, in which case np.stack(images) works)."""
    images, targets = [], []
    for i in range(n):
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(i,)))
        img, tgt = make_line(rng, None if texts is None else texts[i], width)
        images.append(img)
        targets.append(tgt)
    return images, targets


def to_png(path: str, images: list[np.ndarray], scale: int = 3) -> None:
    """Debug helper: stack lines vertically into an 8-bit grayscale PNG (zlib only)."""
    import struct
    import zlib
    W = max(im.shape[1] for im in images)
    rows = [np.pad(im, ((0, 2), (0, W - im.shape[1])), constant_values=0.5) for im in images]
    a = (np.concatenate(rows) * 255 + 0.5).astype(np.uint8)
    a = np.repeat(np.repeat(a, scale, 0), scale, 1)
    raw = b"".join(b"\x00" + r.tobytes() for r in a)

    def chunk(tag, data):
        c = struct.pack(">I", len(data)) + tag + data
        return c + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", a.shape[1], a.shape[0], 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
        f.write(chunk(b"IEND", b""))
