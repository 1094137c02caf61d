"""What an exact search (:mod:`torch_amore.strategies.exact`) will cost, estimated before it runs: in grid-cell
updates (about 10^8 per second on one CPU thread), so that a search over ``exact_budget`` is refused up front with the
estimate and how to narrow it, and the beam strategy knows when the grid's optimum is affordable."""

from __future__ import annotations

__all__ = ["check_budget", "estimate_cost", "pair_count"]


def pair_count(n_features: int) -> int:
    """Pairs of distinct features.

    Example:
        >>> pair_count(128)
        8128
    """
    return n_features * (n_features - 1) // 2


def estimate_cost(n_rows: int, n_features: int, n_grids: int, max_length: int) -> int:
    """Grid-cell updates of an exact search at ``max_length <= 2`` (one pass of every row over every pair of
    features, then one row of bounds per pair and interval); at ``max_length = 3`` the same plus every rectangle of
    every pair once (the branch and bound's nodes; their expansion is capped by the budget).

    Example:
        >>> estimate_cost(10_000, 128, 32, 2)
        222902272
    """
    n_int = n_grids * (n_grids + 1) // 2
    pairs = pair_count(n_features)
    if max_length <= 1:
        return n_rows * n_features + n_features * n_int
    cost = pairs * n_rows + pairs * n_int * (n_grids + 1)
    if max_length >= 3:
        cost += pairs * n_int * n_int
    return cost


def check_budget(n_rows: int, n_features: int, n_grids: int, max_length: int, budget: int) -> int:
    """The estimated work (:func:`estimate_cost`); ``ValueError`` naming it and how to narrow the search when it
    exceeds ``budget`` or when ``max_length > 3``.

    Example:
        >>> check_budget(1_000, 10, 10, 2, 10**9)
        72225
    """
    if max_length > 3:
        raise ValueError(f"Expected `max_length` <= 3 for strategy='exact', but got {max_length}.")
    cost = estimate_cost(n_rows, n_features, n_grids, max_length)
    if cost > budget:
        pairs = "" if max_length <= 1 else f"{pair_count(n_features):,} pairs of "  # length 1 searches no pairs
        seconds = cost * 1e-8  # about 10^8 grid-cell updates per second
        took = "under a second" if seconds < 1 else f"about {seconds:,.0f} s"
        raise ValueError(
            f"strategy='exact' would take about {cost:.2e} grid-cell updates ({n_rows:,} samples x {pairs}"
            f"{n_features} features, {n_grids} grids each; {took} on one CPU thread), over `exact_budget`="
            f"{budget:.2e}. Narrow it: fewer features (`features=`, e.g. from select_features), fewer grids "
            "(`n_grids`), or raise `exact_budget`."
        )
    return cost
