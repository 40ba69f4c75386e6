"""A results document read from a file, checked against reports/results.schema.json before any
report touches it (docs/report-schema.md, "Reading a results file").

The checker reads the schema file itself (the subset of JSON Schema 2020-12 it uses: type,
const, enum, required, properties, additionalProperties, propertyNames, items, prefixItems,
minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength, pattern, anyOf, oneOf,
allOf, $ref), so every field the schema describes is checked the same way, and a
problem is named by its path in the document: `tensors[3].usage`, `meta.threads[0]`.

A reader is more lenient than the schema in two ways: it requires only the keys the reports
need (READER_REQUIRED: `schema_version` and `tensors` at the top, the record keys of
json_report.REQUIRED_RECORD_KEYS, nothing in `meta`), and it ignores keys it does not know
(a later version may add optional fields), and it leaves out the schema's if/then rules,
which tie one field to another as the gate writes them (a failed record's `repro` is not
empty; a bit tier's `resolution` is null) without changing what a report can show. Every field that is present must have the type
and range the schema gives it. On top of the schema: no NaN or Infinity (JSON has neither;
the gate writes null), no number beyond binary64's range, at most MAX_DEPTH levels of
nesting, and a histogram's and heat map's sizes that agree with each other."""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

SCHEMA_FILE = Path(__file__).with_name("results.schema.json")
MAX_DEPTH = 64
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Invalid(ValueError):
    """The document does not follow the schema: `path` names the field, `problem` says how."""

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path or 'the document'} {problem}")


class Constant:
    """NaN, Infinity or -Infinity in the file (Python's json reads them; JSON has none)."""

    def __init__(self, text: str):
        self.text = text


def parse(text: str):
    """json.loads, keeping NaN / Infinity as Constant for check() to name. Raises ValueError
    for text that is not JSON or nests deeper than the parser can follow."""
    try:
        return json.loads(text, parse_constant=Constant)
    except RecursionError:
        raise ValueError("its JSON nests too deeply to read") from None


@lru_cache(maxsize=1)
def schema() -> dict:
    return json.loads(SCHEMA_FILE.read_text())


def _required() -> dict:
    from .json_report import REQUIRED_RECORD_KEYS
    return {"#": ("schema_version", "tensors"), "record": REQUIRED_RECORD_KEYS, "meta": ()}


def check(doc) -> None:
    """Raises Invalid naming the first field of `doc` that the schema does not allow."""
    _depth(doc)
    s = schema()
    _Checker(s.get("$defs", {}), _required()).check(doc, s, "", "#")
    for i, r in enumerate(doc["tensors"]):
        _sizes(r, f"tensors[{i}]")


def join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _depth(doc) -> None:
    stack = [(doc, "", 1)]
    while stack:
        v, path, d = stack.pop()
        if d > MAX_DEPTH:
            raise Invalid(path, f"nests more than {MAX_DEPTH} levels deep (a results file "
                                f"nests fewer than 10)")
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            if isinstance(x, (dict, list)):
                stack.append((x, join(path, k), d + 1))


def _types(v) -> set:
    if v is None:
        return {"null"}
    if isinstance(v, bool):
        return {"boolean"}
    if isinstance(v, int):
        return {"integer", "number"}
    if isinstance(v, float):
        return {"number", "integer"} if v.is_integer() else {"number"}
    if isinstance(v, str):
        return {"string"}
    if isinstance(v, list):
        return {"array"}
    if isinstance(v, dict):
        return {"object"}
    return set()


_NAMES = {"null": "null", "boolean": "true or false", "integer": "an integer",
          "number": "a number", "string": "a string", "array": "a list", "object": "an object"}


def show(v) -> str:
    if isinstance(v, Constant):
        return f"{v.text} (not a JSON number)"
    if isinstance(v, (dict, list)):
        return "an object" if isinstance(v, dict) else "a list"
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _want(types) -> str:
    types = [types] if isinstance(types, str) else list(types)
    if "integer" in types and "number" in types:
        types.remove("integer")
    return " or ".join(_NAMES.get(t, t) for t in types)


class _Checker:
    def __init__(self, defs: dict, required: dict):
        self.defs, self.required = defs, required

    def check(self, v, s: dict, path: str, name: str | None = None) -> None:
        if "$ref" in s:
            ref = s["$ref"].rsplit("/", 1)[-1]
            return self.check(v, self.defs[ref], path, ref)
        if isinstance(v, Constant):
            raise Invalid(path, f"is {v.text}: JSON has no NaN or Infinity (the gate writes "
                                f"null for an unbounded value)")
        if isinstance(v, float) and not math.isfinite(v):
            raise Invalid(path, "is a number beyond binary64's range")
        if "const" in s and (v != s["const"] or _types(v) != _types(s["const"])):
            raise Invalid(path, f"is {show(v)}; want {json.dumps(s['const'])}")
        if "enum" in s and not any(v == e and type(v) is type(e) for e in s["enum"]):
            raise Invalid(path, f"is {show(v)}; want one of "
                                + ", ".join(json.dumps(e) for e in s["enum"]))
        if "type" in s:
            want = s["type"] if isinstance(s["type"], list) else [s["type"]]
            if not _types(v) & set(want):
                raise Invalid(path, f"is {show(v)}; want {_want(want)}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            self._number(v, s, path)
        elif isinstance(v, str):
            if len(v) < s.get("minLength", 0):
                raise Invalid(path, "is empty" if not v else f"is shorter than {s['minLength']}")
            if "pattern" in s and not re.search(s["pattern"], v):
                raise Invalid(path, f"is {show(v)}, which does not match {s['pattern']}")
        elif isinstance(v, list):
            self._array(v, s, path)
        elif isinstance(v, dict):
            self._object(v, s, path, name)
        for sub in s.get("allOf", ()):
            self.check(v, sub, path)
        for key in ("anyOf", "oneOf"):
            if key in s:
                self._any(v, s[key], path)

    def _number(self, v, s, path):
        try:
            x = float(v)
        except OverflowError:
            raise Invalid(path, "is a number beyond binary64's range") from None
        if "minimum" in s and x < s["minimum"]:
            raise Invalid(path, f"is {show(v)}; want at least {s['minimum']}")
        if "maximum" in s and x > s["maximum"]:
            raise Invalid(path, f"is {show(v)}; want at most {s['maximum']}")
        if "exclusiveMinimum" in s and x <= s["exclusiveMinimum"]:
            raise Invalid(path, f"is {show(v)}; want more than {s['exclusiveMinimum']}")

    def _array(self, v, s, path):
        if len(v) < s.get("minItems", 0):
            raise Invalid(path, "is empty" if not v else f"has fewer than {s['minItems']} items")
        if "maxItems" in s and len(v) > s["maxItems"]:
            raise Invalid(path, f"has more than {s['maxItems']} items")
        prefix = s.get("prefixItems", [])
        for i, x in enumerate(v):
            sub = prefix[i] if i < len(prefix) else s.get("items")
            if isinstance(sub, dict):
                self.check(x, sub, join(path, i))

    def _object(self, v, s, path, name):
        required = self.required.get(name, s.get("required", ()))
        missing = [k for k in required if k not in v]
        if missing:
            raise Invalid(path, f"lacks {', '.join(missing)}" if path else
                          f"lacks the key(s) {', '.join(missing)}")
        props = s.get("properties", {})
        extra = s.get("additionalProperties")
        for k, x in v.items():
            if "propertyNames" in s:
                try:
                    self.check(k, s["propertyNames"], join(path, k))
                except Invalid as e:
                    raise Invalid(path, f"has the key {show(k)}, which is not allowed here "
                                        f"({e.problem})") from None
            if k in props:
                self.check(x, props[k], join(path, k))
            elif isinstance(extra, dict):
                self.check(x, extra, join(path, k))

    def _any(self, v, branches, path):
        errors = []
        for b in branches:
            try:
                self.check(v, b, path)
                return
            except Invalid as e:
                errors.append((b, e))
        # the branch of the value's own type says what is wrong inside it
        for b, e in reversed(errors):
            t = self._type_of(b)
            if t is not None and _types(v) & set(t):
                raise e
        kinds = [t for b, _ in errors for t in (self._type_of(b) or [])]
        raise Invalid(path, f"is {show(v)}; want {_want(dict.fromkeys(kinds))}" if kinds
                      else errors[-1][1].problem)

    def _type_of(self, s):
        while "$ref" in s:
            s = self.defs[s["$ref"].rsplit("/", 1)[-1]]
        if "type" in s:
            return s["type"] if isinstance(s["type"], list) else [s["type"]]
        if "enum" in s:
            return sorted({t for e in s["enum"] for t in _types(e) if t != "integer"})
        return None


def _sizes(r: dict, path: str) -> None:
    """What the schema cannot say: a histogram has a count per bin, a heat map a value per
    row and column group, each group's start inside the tensor's shape."""
    h = r.get("hist")
    if isinstance(h, dict) and "counts" in h and "edges" in h \
            and len(h["counts"]) != len(h["edges"]) - 1:
        raise Invalid(f"{path}.hist.counts", f"has {len(h['counts'])} counts for "
                                             f"{len(h['edges'])} edges (want one fewer)")
    m = r.get("heatmap")
    if not isinstance(m, dict):
        return
    rows, cols = m["row_starts"], m["col_starts"]
    if len(m["max"]) != len(rows):
        raise Invalid(f"{path}.heatmap.max", f"has {len(m['max'])} rows for "
                                             f"{len(rows)} row groups")
    for i, row in enumerate(m["max"]):
        if len(row) != len(cols):
            raise Invalid(f"{path}.heatmap.max[{i}]", f"has {len(row)} values for "
                                                      f"{len(cols)} column groups")
    for key, starts, n in (("row_starts", rows, m["rows"]), ("col_starts", cols, m["cols"])):
        if any(b <= a for a, b in zip(starts, starts[1:])) or starts[-1] >= n:
            raise Invalid(f"{path}.heatmap.{key}", f"are not ascending starts inside 0..{n - 1}")
