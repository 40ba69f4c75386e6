"""A scanner for the activations' constant witnesses (generators/cases/activations.py,
CONSTANT_WITNESSES): for a constant of sigmoid's and tanh's definitions set to another value,
the float32 inputs on which either function then gives other bits.

It is built from the shipped definitions (the text of ctypes_kernels/src/activations.c from
pow2i to tanh_def, and the constants of activations.h), compiled twice into one program: once
reading the constants as shipped, once with the one changed. The inputs are visited in the
order i * 2654435761 mod 2^32, i = 0, 1, ...: every input once, spread over every binade from
the start, so a variant with witnesses shows some at once and one without any scans all 2^32
(about 2 minutes on 2 cores).

    python tests/act_witness_scan.py E6 0x1.6a23d2p-10 [NAME VALUE]...  [--want 4] [--stride S]
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "ctypes_kernels" / "src"

TEMPLATE = r"""
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define ACT_INLINE static inline __attribute__((always_inline))
typedef struct { @FIELDS@ } consts_t;
static const consts_t SHIPPED = { @VALUES@ };
static const char *NAMES[] = { @NAMES@ };
static consts_t KR_, KV_;
static const consts_t *const KR = &KR_, *const KV = &KV_;
@ACCESSORS@
#define K KR
#define pow2i pow2i_shipped
#define exp_neg exp_neg_shipped
#define sigmoid_def sigmoid_shipped
#define tanh_def tanh_shipped
@DEFS@
#undef K
#undef pow2i
#undef exp_neg
#undef sigmoid_def
#undef tanh_def
#define K KV
#define pow2i pow2i_changed
#define exp_neg exp_neg_changed
#define sigmoid_def sigmoid_changed
#define tanh_def tanh_changed
@DEFS@

static uint64_t want, stride;
static volatile uint64_t found;
static uint32_t wit[256];
static int which[256];            /* 1: sigmoid differs, 2: tanh, 3: both */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void *scan(void *arg)
{
    const uint64_t *r = arg;
    for (uint64_t i = r[0]; i < r[1] && found < want; i += stride) {
        const uint32_t u = (uint32_t)(i * 2654435761u);
        float x;
        memcpy(&x, &u, 4);
        const int d = (bits_of(sigmoid_shipped(x)) != bits_of(sigmoid_changed(x))) |
                      (bits_of(tanh_shipped(x)) != bits_of(tanh_changed(x))) << 1;
        if (d) {
            pthread_mutex_lock(&mu);
            if (found < want) { wit[found] = u; which[found] = d; found++; }
            pthread_mutex_unlock(&mu);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    want = strtoull(argv[1], NULL, 10);
    stride = strtoull(argv[2], NULL, 10);
    if (want > 256) want = 256;
    for (int a = 3; a + 1 < argc; a += 2) {
        int idx = -1;
        for (int i = 0; i < (int)(sizeof NAMES / sizeof *NAMES); i++)
            if (!strcmp(NAMES[i], argv[a])) idx = i;
        if (idx < 0) { fprintf(stderr, "no constant %s\n", argv[a]); return 2; }
        KR_ = SHIPPED;
        KV_ = SHIPPED;
        ((float *)&KV_)[idx] = strtof(argv[a + 1], NULL);
        found = 0;
        uint64_t half[2][2] = {{0, 1ull << 31}, {1ull << 31, 1ull << 32}};
        pthread_t th[2];
        for (int t = 0; t < 2; t++) pthread_create(&th[t], NULL, scan, half[t]);
        for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
        printf("{\"name\": \"%s\", \"value\": \"%a\", \"witnesses\": [", argv[a],
               ((float *)&KV_)[idx]);
        for (uint64_t w = 0; w < found; w++) printf("%s[%u, %d]", w ? ", " : "", wit[w], which[w]);
        printf("]}\n");
        fflush(stdout);
    }
    return 0;
}
"""


def constants() -> dict:
    """name -> the C literal of every ACT_ constant in activations.h."""
    text = (SRC / "activations.h").read_text()
    return dict(re.findall(r"#define ACT_(\w+)\s+(\(?-?0x[0-9a-fA-F.p+-]+f\)?|[0-9.]+f)", text))


def source() -> str:
    text = (SRC / "activations.c").read_text()
    defs = text[text.index("ACT_INLINE float pow2i"):text.index("float crnn_sigmoid1")]
    names = list(constants())
    return (TEMPLATE.replace("@FIELDS@", " ".join(f"float {n};" for n in names))
            .replace("@VALUES@", ", ".join(constants().values()))
            .replace("@NAMES@", ", ".join(f'"{n}"' for n in names))
            .replace("@ACCESSORS@", "\n".join(f"#define ACT_{n} (K->{n})" for n in names))
            .replace("@DEFS@", defs))


def build(cc: str, out: Path) -> Path:
    c = out / "act_witness_scan.c"
    c.write_text(source())
    exe = out / "act_witness_scan"
    # the flags of the bundled scalar path with FMA3 (activations.c's sigmoid_fma3): fmaf is
    # one instruction, one rounding, as everywhere else
    subprocess.run([cc, "-O2", "-ffp-contract=off", "-fno-fast-math", "-mfma", "-pthread",
                    "-o", str(exe), str(c), "-lm"], check=True)
    return exe


def scan(variants, want: int = 4, stride: int = 1, cc: str = "cc") -> list[dict]:
    """variants: [(name, value as a float or C literal)] -> one dict per variant: name, value,
    witnesses [[bits, which]] (at most `want`; none when every input visited agrees)."""
    with tempfile.TemporaryDirectory() as d:
        exe = build(cc, Path(d))
        args = [str(want), str(stride)]
        for name, value in variants:
            args += [name, value if isinstance(value, str) else float(value).hex()]
        out = subprocess.run([str(exe), *args], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


if __name__ == "__main__":
    argv = sys.argv[1:]
    opts = {"want": 4, "stride": 1}
    for key in list(opts):
        if f"--{key}" in argv:
            i = argv.index(f"--{key}")
            opts[key] = int(argv[i + 1])
            del argv[i:i + 2]
    for r in scan(list(zip(argv[::2], argv[1::2])), **opts):
        print(json.dumps(r))
