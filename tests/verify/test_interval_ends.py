"""Every interval holds its own point estimate: at 0 and n hits the bounds are exactly 0 and 1 (rounding once left
1 - 1e-16 above 138 of 138), for the Wilson helper, the shares of verify and the Clopper-Pearson helper."""

from __future__ import annotations

import math

import pytest

from torch_amore.rules.held_out import clopper_pearson
from torch_amore.verify.verification import ControlShare, Share, clustered_interval, wilson_interval


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_bounds_hold_the_estimate_at_both_ends_for_n_up_to_2000(level: float) -> None:
    for n in range(1, 2001):
        for hits in (0, n):
            p = hits / n
            for low, high in (wilson_interval(hits, n, level), clopper_pearson(hits, n, level)):
                assert low <= p <= high, (n, hits, low, high)
            share = Share.of(hits, n, level)
            assert share.low <= share.value <= share.high, (n, hits, share)
            assert (share.low == 0.0) if hits == 0 else (share.high == 1.0), (n, hits, share)


def test_bounds_hold_the_estimate_between_the_ends() -> None:
    for n in range(1, 301):
        for hits in range(n + 1):
            low, high = wilson_interval(hits, n)
            assert 0.0 <= low <= hits / n <= high <= 1.0, (n, hits, low, high)


def test_clustered_and_control_shares_end_at_exactly_0_and_1() -> None:
    assert Share.of(138, 138, 0.95).high == 1.0  # the reviewer's case: 0.9999999999999999 before
    for n in range(1, 400):
        clusters = [i // 3 for i in range(n)]  # clusters of three outcomes (shared donors)
        assert clustered_interval([1.0] * n, clusters)[2] == 1.0, n
        assert clustered_interval([0.0] * n, clusters)[1] == 0.0, n
        assert Share.clustered([False] * n, clusters, 0.95).low == 0.0, n
        control = ControlShare.of([[True] * n, [True] * n], 0.95, clusters)
        assert (control.value, control.high) == (1.0, 1.0), n
    assert all(math.isnan(v) for v in wilson_interval(0, 0))
