"""Applies a mutant's source patch to a copy of the bundled sources (docs/mutants.md, "How a
mutant is built").

A patch is a unified diff as `git diff` writes it, one file per mutant
(patches/<name>.diff), naming files `a/ctypes_kernels/<path>` and `b/ctypes_kernels/<path>`.
The applier is strict, as a mutation-testing tool must be: a mutant whose patch applied
"approximately" could be the correct port and survive. Each hunk's old lines (context and
removed lines) must occur in the copy exactly; they are looked for at the line the hunk
states (shifted by what the hunks before it added or removed) and, failing that, anywhere
after the previous hunk, where they must occur once. Not found or found twice is a
MutantPatchError naming the mutant, the file, the hunk and the first line that differs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

PATCHES = Path(__file__).resolve().parent / "patches"
PREFIX = "ctypes_kernels/"      # the part of a patch's paths above the copied tree


class MutantPatchError(ValueError):
    """A mutant's patch is missing, malformed or does not apply to the sources."""


@dataclass
class Hunk:
    old_start: int                  # 1-based, as the @@ line states
    old: list = field(default_factory=list)    # context and removed lines
    new: list = field(default_factory=list)    # context and added lines


@dataclass
class FilePatch:
    old_path: str | None            # None: the patch creates the file
    new_path: str | None            # None: the patch deletes it
    hunks: list = field(default_factory=list)
    no_newline_at_end: bool = False  # the new text ends without a newline

    @property
    def path(self) -> str:
        return self.new_path or self.old_path


def patch_path(name: str) -> Path:
    return PATCHES / f"{name}.diff"


def patch_names() -> list[str]:
    return sorted(p.stem for p in PATCHES.glob("*.diff"))


def read_patch(name: str) -> str:
    p = patch_path(name)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise MutantPatchError(f"mutant {name}: its patch {p} is missing") from None


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip(name: str, path: str, side: str) -> str | None:
    if path == "/dev/null":
        return None
    if not path.startswith(side + "/" + PREFIX):
        raise MutantPatchError(f"mutant {name}: the patch names {path!r}; its paths must be "
                               f"{side}/{PREFIX}<file>")
    return path[len(side) + 1 + len(PREFIX):]


def parse(name: str, text: str) -> list[FilePatch]:
    """The files and hunks of a `git diff`; anything it cannot read is a MutantPatchError."""
    files: list[FilePatch] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("--- "):
            i += 1        # "diff --git", "index", "new file mode" and the like
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise MutantPatchError(f"mutant {name}: line {i + 2} of its patch should be '+++'")
        old = _strip(name, line[4:].split("\t")[0], "a")
        new = _strip(name, lines[i + 1][4:].split("\t")[0], "b")
        fp = FilePatch(old, new)
        files.append(fp)
        i += 2
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise MutantPatchError(f"mutant {name}: bad hunk header {lines[i]!r}")
            n_old = int(m.group(2) if m.group(2) is not None else 1)
            n_new = int(m.group(4) if m.group(4) is not None else 1)
            h = Hunk(int(m.group(1)))
            i += 1
            while i < len(lines) and (len(h.old) < n_old or len(h.new) < n_new):
                tag, body = lines[i][:1], lines[i][1:]
                if tag == " " or lines[i] == "":
                    h.old.append(body)
                    h.new.append(body)
                elif tag == "-":
                    h.old.append(body)
                elif tag == "+":
                    h.new.append(body)
                elif tag != "\\":
                    raise MutantPatchError(f"mutant {name}: hunk {len(fp.hunks) + 1} of "
                                           f"{fp.path}: unexpected line {lines[i]!r}")
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):   # "\ No newline at end of file"
                fp.no_newline_at_end = lines[i - 1].startswith("+") or lines[i - 1].startswith(" ")
                i += 1
            if len(h.old) != n_old or len(h.new) != n_new:
                raise MutantPatchError(f"mutant {name}: hunk {len(fp.hunks) + 1} of {fp.path} "
                                       "is shorter than its header says")
            fp.hunks.append(h)
    if not files:
        raise MutantPatchError(f"mutant {name}: its patch changes no file")
    return files


def _matches(have: list, at: int, want: list) -> bool:
    return 0 <= at and at + len(want) <= len(have) and have[at:at + len(want)] == want


def _first_difference(have: list, at: int, want: list) -> str:
    for k, w in enumerate(want):
        got = have[at + k] if 0 <= at + k < len(have) else None
        if got != w:
            return (f"line {at + k + 1} is {got!r}, the patch expects {w!r}" if got is not None
                    else f"the file ends at line {len(have)}, the patch expects {w!r}")
    return "no difference"


def apply_file(name: str, fp: FilePatch, text: str | None) -> str | None:
    """The new text of one file (None: deleted); `text` None when the file does not exist."""
    if fp.old_path is None:
        if text is not None:
            raise MutantPatchError(f"mutant {name}: the patch creates {fp.path}, which exists")
        have: list = []
    else:
        if text is None:
            raise MutantPatchError(f"mutant {name}: the patch changes {fp.path}, which does "
                                   "not exist")
        have = text.split("\n")
        if have and have[-1] == "":
            have.pop()
    out: list = []
    pos = 0          # lines of `have` consumed
    shift = 0        # lines added minus removed by the hunks before
    for n, h in enumerate(fp.hunks, 1):
        stated = (h.old_start - 1 if h.old else h.old_start) + shift
        if _matches(have, stated, h.old) and stated >= pos:
            at = stated
        else:
            found = [k for k in range(pos, len(have) - len(h.old) + 1) if _matches(have, k, h.old)]
            if len(found) != 1:
                why = (_first_difference(have, max(stated, pos), h.old) if not found else
                       f"its old text occurs {len(found)} times (lines "
                       f"{', '.join(str(k + 1) for k in found[:5])})")
                raise MutantPatchError(f"mutant {name}: hunk {n} of {fp.path} does not apply: "
                                       f"{why}")
            at = found[0]
        out += have[pos:at] + h.new
        pos = at + len(h.old)
        shift += len(h.new) - len(h.old)
    out += have[pos:]
    if fp.new_path is None:
        return None
    return "\n".join(out) + ("" if fp.no_newline_at_end or not out else "\n")


def apply(name: str, root: Path, text: str | None = None) -> list[str]:
    """Applies mutant `name`'s patch (or `text`) to the tree `root` (a copy of
    ctypes_kernels/: root/src/...); returns the files it changed. Every file is checked
    before any is written, so a patch that fails leaves the tree as it was."""
    text = read_patch(name) if text is None else text
    results = {}
    for fp in parse(name, text):
        target = root / fp.path
        if fp.path in results:
            raise MutantPatchError(f"mutant {name}: the patch names {fp.path} twice")
        if ".." in Path(fp.path).parts:
            raise MutantPatchError(f"mutant {name}: the patch names {fp.path}, outside the tree")
        results[fp.path] = apply_file(name, fp, target.read_text() if target.exists() else None)
    for path, new in results.items():
        target = root / path
        if new is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(new)
    return sorted(results)
