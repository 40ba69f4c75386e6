"""The mutant catalogue: realistic porting mistakes, each the bundled kernels with one source
patch applied (or built with other flags), gated like any port (docs/mutants.md).

    clean, kills = run_catalogue()            # every mutant, plus the clean port
    print(render(clean, kills))

catalogue.py names the mutants and how each is gated, patches.py applies a mutant's patch to a
copy of the sources, run.py builds and gates, killtable.py renders the outcome.
"""
from __future__ import annotations

from .catalogue import (BASE_TIERS, BY_NAME, CATALOGUE, ISA_ONLY, KINDS, MARGIN, MARGIN_REASONS,
                        MATH, THREAD_COUNTS, TOLERANT_FIRST, VECTOR, Mutant, plan, plan_text)
from .killtable import Kill, passed, render, to_json
from .run import (check_is_mutant, margin_exceptions, mutant_marker, preflight, run_catalogue,
                  run_clean, run_mutant)

__all__ = ["BASE_TIERS", "BY_NAME", "CATALOGUE", "ISA_ONLY", "KINDS", "MARGIN", "MARGIN_REASONS",
           "MATH", "THREAD_COUNTS", "TOLERANT_FIRST", "VECTOR", "Mutant", "plan", "plan_text",
           "Kill", "passed", "render", "to_json", "check_is_mutant", "margin_exceptions",
           "mutant_marker", "preflight", "run_catalogue", "run_clean", "run_mutant"]
