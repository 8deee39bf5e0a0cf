"""Median regression (least absolute deviations) solved exactly, the same to the bit on
every CPU.

:func:`median_regression` finds the coefficients ``b`` that minimise
``sum(weights·|y - x·b|)``. HiGHS' dual simplex solves the linear program's dual,
maximise ``y·d`` subject to ``xᵀd = 0`` and ``|d| ≤ weights``; an optimal vertex of the
primal passes exactly through as many rows as it has coefficients, and ``b`` is solved
from those rows in rational arithmetic. Residuals are taken column by column (IEEE
operations, no BLAS kernel chosen by CPU, no threads), so nothing that varies between
machines reaches the result.

Given coefficients the answer is expected close to (``near``: those of the whole sample,
for a bootstrap resample), the program is solved on the rows nearest them, the others
folded into one row per side of the fit; rows found on the wrong side join the program
and it is solved again (Portnoy and Koenker's preprocessing, 1997). The answer is the
optimum of the whole program.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

import numpy as np

from megaactors.errors import ParameterError

__all__ = ["median_regression"]

_SURE = 1e-12
"""A residual this small relative to its terms has no certain sign in floats."""


def median_regression(
    x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None, near: list[float] | None = None
) -> list[float]:
    """The least-absolute-deviations coefficients of ``y`` on the columns of ``x`` (each
    row counted ``weights`` times, or once), solved first near ``near`` if given."""
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    found = None if near is None else _near(x, y, w, near)
    return _program(x, y, w, len(y)) if found is None else found


def _near(x: np.ndarray, y: np.ndarray, w: np.ndarray, near: list[float]) -> list[float] | None:
    """The optimum found from the rows nearest ``near``, the others folded by side; or
    None if it cannot be certified optimal for all rows."""
    residual, keep = _residuals(x, y, near)
    order = np.argsort(np.abs(residual), kind="stable")
    keep[order[: _subset(len(y), x.shape[1])]] = True
    while not keep.all():
        sides = [side for side in (~keep & (residual > 0), ~keep & (residual < 0)) if side.any()]
        folded_x = [(x[side] * w[side, None]).sum(axis=0) for side in sides]  # integer sums: exact
        folded_y = [math.fsum(w[side] * y[side]) for side in sides]
        b = _program(
            np.vstack([x[keep], *folded_x]),
            np.r_[y[keep], folded_y],
            np.r_[w[keep], [1.0] * len(sides)],
            int(keep.sum()),
        )
        now, unsure = _residuals(x, y, b)
        wrong = ~keep & (unsure | (np.sign(now) != np.sign(residual)))
        if not wrong.any():
            return b if _optimal(x, w, now, unsure) else None
        keep |= wrong
        if wrong.sum() > len(y) // 100:  # the guess was far: twice as many rows near it
            keep[order[: 2 * int(keep.sum())]] = True
    return None


def _optimal(x: np.ndarray, w: np.ndarray, residual: np.ndarray, zero: np.ndarray) -> bool:
    """Whether the vertex through the ``zero`` rows (as many as columns) with these
    residuals elsewhere minimises the weighted absolute deviations: some ``d`` with
    ``|d| ≤ w`` on those rows balances ``sum(w·sign(residual)·x)`` over the others."""
    if int(zero.sum()) != x.shape[1]:
        return False
    pull = w[~zero] * np.sign(residual[~zero])
    balance = [-math.fsum(pull * x[~zero, j]) for j in range(x.shape[1])]
    basis = x[zero]
    if _independent_rows(basis, x.shape[1]) is None:
        return False
    d = _solve_exactly(list(basis.T), balance)
    return all(abs(v) <= weight for v, weight in zip(d, w[zero], strict=True))


def _subset(rows: int, columns: int) -> int:
    """How many rows near the guess the first program takes."""
    return max(20 * columns, round(rows ** (2 / 3)))


def _residuals(x: np.ndarray, y: np.ndarray, b: Iterable[float]) -> tuple[np.ndarray, np.ndarray]:
    """``y - x·b`` column by column, and where its sign is not certain."""
    terms = [float(c) * x[:, j] for j, c in enumerate(b)]
    fitted = terms[0]
    for term in terms[1:]:
        fitted = fitted + term
    size = np.abs(y) + sum(np.abs(t) for t in terms)
    residual = y - fitted
    return residual, np.abs(residual) <= _SURE * size


def _program(x: np.ndarray, y: np.ndarray, w: np.ndarray, real: int) -> list[float]:
    """The optimal vertex of the program over all rows of ``x``, through rows among the
    first ``real`` (the others are folded sums)."""
    from scipy.optimize import linprog  # a third of a second to import: only when fitting

    scale = np.maximum(np.abs(x).max(axis=0), 1.0)  # columns of similar size for the solver
    solved = linprog(
        -y,
        A_eq=(x / scale).T,
        b_eq=np.zeros(x.shape[1]),
        bounds=np.column_stack([-w, w]),
        method="highs-ds",
        options={"presolve": False},
    )
    if solved.status != 0:
        raise ParameterError(f"the median regression failed: {solved.message}")
    residual, _ = _residuals(x[:real], y[:real], -solved.eqlin.marginals / scale)
    nearest = np.argsort(np.abs(residual), kind="stable")  # the interpolated rows first
    rows = _independent_rows((x[i] for i in nearest), x.shape[1])
    if rows is None:
        raise ParameterError("the token counts are collinear: the latency's dependence on each cannot be told apart")
    return [float(b) for b in _solve_exactly([x[nearest[i]] for i in rows], [y[nearest[i]] for i in rows])]


def _independent_rows(rows: Iterable[np.ndarray], wanted: int) -> list[int] | None:
    """The positions of the first ``wanted`` linearly independent ``rows`` (exactly), or
    None if there are fewer."""
    echelon: list[tuple[int, list[Fraction]]] = []
    chosen = []
    for position, row in enumerate(rows):
        reduced = [Fraction(float(v)) for v in row]
        for column, other in echelon:
            if reduced[column]:
                factor = reduced[column] / other[column]
                reduced = [a - factor * b for a, b in zip(reduced, other, strict=True)]
        lead = next((j for j, v in enumerate(reduced) if v), None)
        if lead is not None:
            echelon.append((lead, reduced))
            chosen.append(position)
            if len(chosen) == wanted:
                return chosen
    return None


def _solve_exactly(a: list[np.ndarray], b: list[float]) -> list[Fraction]:
    """The solution of the square, non-singular system ``a·x = b`` in rationals."""
    m = [[Fraction(float(v)) for v in row] + [Fraction(float(r))] for row, r in zip(a, b, strict=True)]
    n = len(m)
    for col in range(n):
        pivot = next(r for r in range(col, n) if m[r][col])
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col and m[r][col]:
                factor = m[r][col] / m[col][col]
                m[r] = [u - factor * v for u, v in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]
