"""A results document read from a file, checked against reports/results.schema.json before any
report touches it (docs/report-schema.md, "Reading a results file").

The checker reads the schema file itself (the subset of JSON Schema 2020-12 it uses: type,
const, enum, required, properties, additionalProperties, propertyNames, items, prefixItems,
minItems, maxItems, minimum, maximum, exclusiveMinimum, minLength, pattern, anyOf, oneOf,
allOf, $ref), so every field the schema describes is checked the same way, and a
problem is named by its path in the document: `tensors[3].usage`, `meta.threads[0]`.

A reader is more lenient than the schema in three ways: it requires only the keys the
reports need (`schema_version` and `tensors` at the top, json_report.REQUIRED_RECORD_KEYS in
a record, nothing in `meta`: _required()); it ignores keys it does not know (a later version
may add optional fields); and it leaves out the schema's if/then rules, which tie one field
to another as the gate writes them (a failed record's `repro` is not empty, a bit tier's
`resolution` is null) without changing what a report can show. Every field that is present
must have the type and range the schema gives it. On top of the schema: no NaN or Infinity
(JSON has neither; the gate writes null), no number beyond binary64's range, at most
MAX_DEPTH levels of nesting, and a histogram's and heat map's sizes that agree."""
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
    """The document does not follow the schema: `path` names the field, `problem` says how.
    `where` is a path string or the checker's (parent, key) chain, spelled out only here."""

    def __init__(self, where, problem: str):
        path = where if isinstance(where, str) else _spell(where)
        self.path, self.problem = path, problem
        super().__init__(f"{path or 'the document'} {problem}")


class Constant(float):
    """NaN, Infinity or -Infinity in the file (Python's json reads them; JSON has none). A
    float, so that where the schema says nothing (an unknown key of `meta`) the reports treat
    it as any non-finite number: null."""

    def __new__(cls, text: str):
        self = super().__new__(cls, text)
        self.text = text
        return self


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
    _Checker(s.get("$defs", {}), _required()).check(doc, s, None, "#")
    for i, r in enumerate(doc["tensors"]):
        _sizes(r, f"tensors[{i}]")


def join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _spell(chain) -> str:
    """The path string of a (parent, key) chain: ((None, "tensors"), 3) -> tensors[3]."""
    keys = []
    while chain is not None:
        chain, key = chain
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = join(path, key)
    return path


def _depth(doc) -> None:
    stack = [(doc, None, 1)]
    while stack:
        v, path, d = stack.pop()
        if d > MAX_DEPTH:
            raise Invalid(path, f"nests more than {MAX_DEPTH} levels deep (a results file "
                                f"nests fewer than 10)")
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            if isinstance(x, (dict, list)):
                stack.append((x, (path, k), d + 1))


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


_PY = {"null": (type(None),), "boolean": (bool,), "integer": (int,), "number": (int, float),
       "string": (str,)}


def _scalar(types: tuple, low):
    def fits(v) -> bool:
        t = type(v)
        return (t in types and (t is not float or v - v == 0.0)
                and (t is not int or -1e308 < v < 1e308)
                and (low is None or v is None or v >= low))
    return fits


def _leaf(s: dict, defs: dict):
    """A quick test that accepts the common values of a scalar schema (a heat map's cells, a
    record's numbers, a tier's name) without the full check, or False. Whatever it does not
    accept goes through the full check, which says what is wrong."""
    keys = set(s) - {"description"}
    if keys == {"$ref"}:
        return _leaf(defs[s["$ref"].rsplit("/", 1)[-1]], defs)
    if keys == {"enum"} and all(isinstance(e, str) for e in s["enum"]):
        names = frozenset(s["enum"])
        return lambda v: type(v) is str and v in names
    if keys == {"anyOf"}:
        first = _leaf(s["anyOf"][0], defs)
        return first if first else False          # the first branch alone: enough to accept
    if "type" not in keys or not keys <= {"type", "minimum"}:
        return False
    want = s["type"] if isinstance(s["type"], list) else [s["type"]]
    if not set(want) <= set(_PY):
        return False
    return _scalar(tuple({t for w in want for t in _PY[w]}), s.get("minimum"))


class _Checker:
    def __init__(self, defs: dict, required: dict):
        self.defs, self.required = defs, required
        self.leaves: dict = {}

    def leaf(self, s: dict):
        leaf = self.leaves.get(id(s))
        if leaf is None:
            leaf = self.leaves[id(s)] = _leaf(s, self.defs)
        return leaf

    def check(self, v, s: dict, path, name: str | None = None) -> None:
        leaf = self.leaf(s)
        if leaf and leaf(v):
            return                  # anything else: the full check below says what is wrong
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
        items = s.get("items")
        leaf = self.leaf(items) if isinstance(items, dict) else False
        for i, x in enumerate(v):
            sub = prefix[i] if i < len(prefix) else items
            if isinstance(sub, dict) and not (sub is items and leaf and leaf(x)):
                self.check(x, sub, (path, i))

    def _object(self, v, s, path, name):
        required = self.required.get(name, s.get("required", ()))
        missing = [k for k in required if k not in v]
        if missing:
            raise Invalid(path, f"lacks {', '.join(missing)}" if path is not None else
                          f"lacks the key(s) {', '.join(missing)}")
        props = s.get("properties", {})
        extra = s.get("additionalProperties")
        for k, x in v.items():
            if "propertyNames" in s:
                try:
                    self.check(k, s["propertyNames"], (path, k))
                except Invalid as e:
                    want = e.problem.split("; ", 1)[-1]
                    raise Invalid(path, f"has the key {show(k)}; {want} for a key here") \
                        from None
            if k in props:
                sub = props[k]
                leaf = self.leaf(sub)
                if not (leaf and leaf(x)):
                    self.check(x, sub, (path, k))
            elif isinstance(extra, dict):
                self.check(x, extra, (path, k))

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
