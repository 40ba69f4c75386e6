"""The linear layer's error model: y = x W^T + b as one sum per output (the bias its last
term), dx over the outputs, dW over time, db (docs/tolerances.md)."""
from __future__ import annotations

from .errors import Err
from .sums import add_term, products, rounded, terms


def forward(x: Err, W: Err, b: Err) -> Err:
    return rounded(add_term(products(x, W.T, mixing=True), b))


def backward(x: Err, W: Err, dY: Err):
    """-> (dx, dW, db)."""
    dx, dW, db = backward_parts(x, W, dY)
    return dx, rounded(dW), rounded(db, products_rounded=False)


def backward_parts(x: Err, W: Err, dY: Err):
    """-> (dx as Err, dW and db as the statistics of their sums over time)."""
    return rounded(products(dY, W, mixing=True)), products(dY.T, x), terms(dY, 0)


def case_errors(case) -> dict:
    x, W, b, dY = (Err.exact(case.inputs[k]) for k in ("x", "W", "b", "dY"))
    dx, dW, db = backward(x, W, dY)
    return {"y": forward(x, W, b), "dx": dx, "dW": dW, "db": db}
