"""Verification of rule sets by intervention: does the model *use* the units a rule set names?

:meth:`RegionalExplanation.verify` replaces the rule set's units and counts how often the model's decision follows:
**sufficiency** (samples outside the rule set and the target, moved into the rule set's intervals: the share that
enters the target) and **necessity** (samples inside and in the target, moved out: the share that leaves it), each
beside a **control** of as many random other units replaced the same way. The intervals are Wilson intervals at an
effective sample size that accounts for outcomes sharing a donor or a sample (:func:`clustered_interval`). Over
concepts, a sample counts only when its patched activations, encoded again, lie where it was moved
(:attr:`RuleVerification.not_moved` counts the others). The shares describe this model on these samples, not the world
the samples came from. See ``docs/explainer.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torch_amore.rules.metrics import wilson_interval

#: Version of the dict layout of :meth:`Verification.to_dict`.
VERIFICATION_VERSION = 1


def clustered_interval(
    hits: Sequence[float], clusters: Sequence[int], level: float = 0.95
) -> tuple[float, float, float]:
    """(share, low, high) of 0/1 outcomes ``hits`` in independent ``clusters``: the Wilson interval at the effective
    sample size ``p (1 - p) / v`` (``v`` the cluster-robust variance; at most the number of outcomes, the number of
    clusters when ``p`` is 0 or 1).

    Example:
        >>> [round(v, 4) for v in clustered_interval([1, 0, 1, 0], [0, 1, 2, 3])]
        [0.5, 0.15, 0.85]
        >>> [round(v, 4) for v in clustered_interval([1, 1, 0, 0], [0, 0, 1, 1])]  # two clusters of two
        [0.5, 0.0945, 0.9055]
    """
    n = len(hits)
    if n == 0:
        return math.nan, math.nan, math.nan
    p = sum(hits) / n
    totals: dict[int, list[float]] = {}
    for h, c in zip(hits, clusters):
        t = totals.setdefault(c, [0.0, 0.0])
        t[0], t[1] = t[0] + h, t[1] + 1
    g = len(totals)
    var = sum((h - p * m) ** 2 for h, m in totals.values()) / n**2
    if p in (0.0, 1.0):
        n_eff = float(g)
    else:
        n_eff = min(float(n), p * (1 - p) / var) if var > 0 else float(n)
    return (p, *wilson_interval(p * n_eff, n_eff, level))


#: The legend line of :meth:`Verification.format`.
LEGEND = "  sufficiency/necessity: share of decisions moved into/out of the target; verdict: beside random units"

#: The legend line of the ``not moved`` column, shown when a concept basis did not carry out every patch.
NOT_MOVED_LEGEND = "  not moved: sufficiency, necessity samples whose re-encoded concepts undid the patch (not counted)"

#: The share of a rule set's sufficiency or necessity samples left unmoved above which ``verify`` warns.
NOT_MOVED_WARN = 0.05

#: The words of a verdict (:func:`verdict`).
USED, AT_CONTROL, BELOW_CONTROL, NOT_MEASURED, NO_CONTROL = (
    "used",
    "at control level",
    "below control",
    "not measured",
    "no control",
)


def verdict(low: float, high: float, control_low: float, control_high: float) -> str:
    """What a share's interval says beside its control's: ``"used"`` when it lies above the control's (the units move
    the model's decision more than random units do), ``"below control"`` when it lies below, ``"at control level"``
    when they overlap; ``"not measured"`` without samples, ``"no control"`` without control draws.

    Example:
        >>> verdict(0.19, 0.24, 0.00, 0.01), verdict(0.019, 0.073, 0.014, 0.040), verdict(0.0, 0.01, 0.05, 0.09)
        ('used', 'at control level', 'below control')
    """
    if math.isnan(low) or math.isnan(high):
        return NOT_MEASURED
    if math.isnan(control_low) or math.isnan(control_high):
        return NO_CONTROL
    if low > control_high:
        return USED
    if high < control_low:
        return BELOW_CONTROL
    return AT_CONTROL


def _share_verdict(share: Share, control: ControlShare) -> str:
    return verdict(share.low, share.high, control.low, control.high)


@dataclass(frozen=True)
class Share:
    """A share ``hits / n`` with its interval (``value`` is NaN when ``n`` is 0)."""

    hits: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.hits / self.n if self.n else math.nan

    @classmethod
    def of(cls, hits: int, n: int, level: float) -> Share:
        return cls(int(hits), int(n), *wilson_interval(int(hits), int(n), level))

    @classmethod
    def clustered(cls, flipped: Sequence[bool], clusters: Sequence[int], level: float) -> Share:
        """From the outcome of each sample and its cluster (e.g. its donor): :func:`clustered_interval`."""
        _, low, high = clustered_interval([float(f) for f in flipped], clusters, level)
        return cls(int(sum(flipped)), len(flipped), low, high)


@dataclass(frozen=True)
class ControlShare:
    """The control's share over its draws, each on the same ``n`` samples: the per-draw shares, the pooled share
    (``value``) and its interval (:func:`clustered_interval`)."""

    shares: tuple[float, ...]
    n: int
    value: float
    low: float
    high: float

    @classmethod
    def of(cls, flipped: Sequence[Sequence[bool]], level: float, clusters: Sequence[int] | None = None) -> ControlShare:
        """From ``flipped[k][i]``: whether draw k flipped sample i; ``clusters[i]``: the cluster of sample i (default:
        each sample its own; e.g. its donor), the draws of a sample falling in its cluster."""
        n = len(flipped[0]) if flipped else 0
        clusters = list(range(n)) if clusters is None else list(clusters)
        shares = tuple(sum(f) / n if n else math.nan for f in flipped)
        hits = [float(f[i]) for f in flipped for i in range(n)]
        return cls(shares, n, *clustered_interval(hits, clusters * len(flipped), level))


@dataclass(frozen=True)
class RuleVerification:
    """The verification of one rule set.

    Attributes:
        position: the rule set's 1-based position in the explanation (the ``#`` of its tables).
        rule_set: the rule set's conditions as text.
        units: the units (columns of the layer, flattened) it names.
        sufficiency, necessity: the shares (:class:`Share`) for the rule set's units.
        control_sufficiency, control_necessity: the same for the random units (:class:`ControlShare`), on the same
            samples.
        not_moved: the sufficiency and necessity samples left out of every share because the patch did not move them:
            rules over concepts whose patched activations, encoded again, do not lie on the side of the rule set
            they were moved to (a top-k sparse autoencoder may re-select its k); ``(0, 0)`` on units and for exact
            bases.
        details: per-sample facts for audits (not serialized): ``sufficiency_samples``/``necessity_samples`` (row
            indices), ``donors`` (each one's donor row, for ``"resample"``), ``flipped`` and ``moved`` (per sample,
            sufficiency samples first), ``control_units`` and ``control_flipped`` (per draw: each sample's replaced
            units, flips).
    """

    position: int
    rule_set: str
    units: tuple[int, ...]
    sufficiency: Share
    necessity: Share
    control_sufficiency: ControlShare
    control_necessity: ControlShare
    not_moved: tuple[int, int] = (0, 0)
    details: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def sufficiency_verdict(self) -> str:
        """:func:`verdict` of the sufficiency beside its control."""
        return _share_verdict(self.sufficiency, self.control_sufficiency)

    @property
    def necessity_verdict(self) -> str:
        """:func:`verdict` of the necessity beside its control."""
        return _share_verdict(self.necessity, self.control_necessity)

    @property
    def verdict(self) -> str:
        """The rule set's verdict in words: the common verdict of its sufficiency and necessity (:func:`verdict`);
        ``"used (sufficiency)"`` or ``"used (necessity)"`` when only that share lies above its control; otherwise
        each share's (``"sufficiency at control level, necessity below control"``)."""
        s, n = self.sufficiency_verdict, self.necessity_verdict
        if s == n:
            return s
        if USED in (s, n):
            return f"{USED} ({'sufficiency' if s == USED else 'necessity'})"
        return f"sufficiency {s}, necessity {n}"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("details")
        out["verdict"] = self.verdict
        return _nan_to_none(out)  # tuples as lists

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RuleVerification:
        f = lambda v: math.nan if v is None else float(v)  # noqa: E731
        share = lambda d: Share(int(d["hits"]), int(d["n"]), f(d["low"]), f(d["high"]))  # noqa: E731
        control = lambda d: ControlShare(  # noqa: E731
            tuple(f(s) for s in d["shares"]), int(d["n"]), f(d["value"]), f(d["low"]), f(d["high"])
        )
        moved = data.get("not_moved") or (0, 0)  # files written before it: every sample moved
        return cls(
            position=int(data["position"]),
            rule_set=str(data["rule_set"]),
            units=tuple(int(u) for u in data["units"]),
            sufficiency=share(data["sufficiency"]),
            necessity=share(data["necessity"]),
            control_sufficiency=control(data["control_sufficiency"]),
            control_necessity=control(data["control_necessity"]),
            not_moved=(int(moved[0]), int(moved[1])),
        )


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _fmt(value: float, low: float, high: float, precision: int) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:.{precision}f} [{low:.{precision}f}, {high:.{precision}f}]"


@dataclass(frozen=True)
class Verification:
    """What :meth:`RegionalExplanation.verify` found: one :class:`RuleVerification` per verified rule set.

    Attributes:
        rows: the rule sets' verifications, in the order asked for.
        method: the replacement method (``"resample"``, ``"clamp"`` or ``"mean"``).
        n_controls: the number of control draws per rule set.
        level: the confidence level of the intervals.
        seed: the seed of the donors and control draws.
        n_samples: the number of verified samples.
        target_name: what the target is (e.g. ``"predicted 7"``).

    Example:
        >>> control = ControlShare.of([[False] * 20, [True] + [False] * 19], 0.95)  # 2 draws on 20 samples
        >>> row = RuleVerification(1, "z_0 >= 1", (0,), Share.of(19, 20, 0.95), Share.of(20, 20, 0.95), control,
        ...                        ControlShare.of([[False] * 20] * 2, 0.95))
        >>> result = Verification([row], "resample", 2, 0.95, 0, 40, "predicted 1")
        >>> result
        Verification(method='resample', rule_sets=1, n_controls=2, n_samples=40)
        >>> print(result)
        Verification by intervention (method 'resample', 2 control draws, 95% intervals, 40 samples)
           #  sufficiency           necessity             control suff.         control nec.          verdict  rule set
           1  0.950 [0.764, 0.991]  1.000 [0.839, 1.000]  0.025 [0.004, 0.129]  0.000 [0.000, 0.161]  used     z_0 >= 1
          sufficiency/necessity: share of decisions moved into/out of the target; verdict: beside random units
        >>> Verification.from_dict(result.to_dict()) == result
        True
        >>> float(result.to_frame().loc[1, "sufficiency"])
        0.95
    """

    rows: list[RuleVerification]
    method: str
    n_controls: int
    level: float
    seed: int
    n_samples: int
    target_name: str = "target"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(method={self.method!r}, rule_sets={len(self.rows)}, n_controls={self.n_controls}, "
            f"n_samples={self.n_samples})"
        )

    def row(self, position: int) -> RuleVerification | None:
        """The verification of the rule set at 1-based ``position`` (``None`` when it was not verified)."""
        return next((r for r in self.rows if r.position == position), None)

    def format(self, precision: int = 3) -> str:
        """A readable table: each share with its interval, the verdict (:func:`verdict`), the rule set's ``#`` and
        conditions, and a legend line."""
        w = 3 * (precision + 2) + 7
        head = (
            f"Verification by intervention (method {self.method!r}, {self.n_controls} control draws, "
            f"{self.level:.0%} intervals, {self.n_samples} samples)"
        )
        cols = ["sufficiency", "necessity", "control suff.", "control nec."]
        verdicts = [r.verdict for r in self.rows]
        wv = max([len("verdict"), *map(len, verdicts)]) + 2
        unmoved = [_not_moved_cell(r) for r in self.rows] if any(any(r.not_moved) for r in self.rows) else None
        wm = max([len("not moved"), *map(len, unmoved)]) + 2 if unmoved else 0
        moved_head = f"{'not moved':<{wm}}" if unmoved else ""
        lines = [head, f"  {'#':>2}  " + "".join(f"{c:<{w}}" for c in cols) + moved_head + f"{'verdict':<{wv}}rule set"]
        for i, (r, v) in enumerate(zip(self.rows, verdicts)):
            cells = [
                _fmt(s.value, s.low, s.high, precision)
                for s in (r.sufficiency, r.necessity, r.control_sufficiency, r.control_necessity)
            ]
            moved = f"{unmoved[i]:<{wm}}" if unmoved else ""
            lines.append(
                f"  {r.position:>2}  " + "".join(f"{c:<{w}}" for c in cells) + moved + f"{v:<{wv}}" + r.rule_set
            )
        lines.append(LEGEND)
        if unmoved:
            lines.append(NOT_MOVED_LEGEND)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN as ``None``); :meth:`from_dict` reads it back (without the per-sample details)."""
        scalars = ("method", "n_controls", "level", "seed", "n_samples", "target_name")
        return {
            "version": VERIFICATION_VERSION,
            **{name: getattr(self, name) for name in scalars},
            "rows": [r.to_dict() for r in self.rows],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verification:
        """The verification written by :meth:`to_dict`."""
        if not isinstance(data, dict) or data.get("version") != VERIFICATION_VERSION:
            got = data.get("version") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"Expected a verification dict of version {VERIFICATION_VERSION}, but got {got!r}.")
        return cls(
            rows=[RuleVerification.from_dict(r) for r in data["rows"]],
            method=str(data["method"]),
            n_controls=int(data["n_controls"]),
            level=float(data["level"]),
            seed=int(data["seed"]),
            n_samples=int(data["n_samples"]),
            target_name=str(data.get("target_name", "target")),
        )

    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per rule set (index ``#``, the position in the explanation's ``rule_sets``): the
        verdicts (:attr:`RuleVerification.verdict`, and one per share), each share, its interval bounds and its ``n``,
        and the samples left out as not moved (``sufficiency_not_moved``, ``necessity_not_moved``)."""
        import pandas as pd

        records = []
        for r in self.rows:
            rec: dict[str, Any] = {
                "rule_set": r.rule_set,
                "units": r.units,
                "verdict": r.verdict,
                "sufficiency_verdict": r.sufficiency_verdict,
                "necessity_verdict": r.necessity_verdict,
            }
            for name in ("sufficiency", "necessity", "control_sufficiency", "control_necessity"):
                s = getattr(r, name)
                rec.update({name: s.value, f"{name}_low": s.low, f"{name}_high": s.high, f"{name}_n": s.n})
            rec.update({"sufficiency_not_moved": r.not_moved[0], "necessity_not_moved": r.not_moved[1]})
            records.append(rec)
        index = pd.Index([r.position for r in self.rows], name="#")
        return pd.DataFrame(records, index=index)


def _not_moved_cell(row: RuleVerification) -> str:
    """``"38/110, 400/961"``: of the sufficiency and the necessity samples, how many the patch did not move."""
    s, q = row.not_moved
    return f"{s}/{s + row.sufficiency.n}, {q}/{q + row.necessity.n}"


def not_moved_warning(rows: Sequence[RuleVerification], kind: str) -> str:
    """The warning text when a concept basis (of ``kind``) left more than :data:`NOT_MOVED_WARN` of a rule set's
    sufficiency or necessity samples unmoved ('' otherwise).

    Example:
        >>> row = RuleVerification(2, "sae_1 >= 1", (1,), Share.of(5, 10, 0.95), Share.of(3, 10, 0.95),
        ...                        ControlShare.of([], 0.95), ControlShare.of([], 0.95), not_moved=(0, 30))
        >>> not_moved_warning([row], "sae")  # doctest: +ELLIPSIS
        'The concept basis (sae) did not carry out every patch: ... #2: 0 of 10 sufficiency, 30 of 40 necessity ...'
    """
    counts = [
        (r.position, *r.not_moved, r.sufficiency.n + r.not_moved[0], r.necessity.n + r.not_moved[1]) for r in rows
    ]
    shown = [f"#{p}: {s} of {ns} sufficiency, {q} of {nq} necessity samples" for p, s, q, ns, nq in counts
             if s > NOT_MOVED_WARN * ns or q > NOT_MOVED_WARN * nq]  # fmt: skip
    if not shown:
        return ""
    return (
        f"The concept basis ({kind}) did not carry out every patch: encoded again, the patched activations of "
        f"{'; '.join(shown)} do not lie on the side of the rule set they were moved to. The shares and their controls "
        "leave these samples out (`not_moved`); a basis whose encoder re-selects its active concepts (a top-k sparse "
        "autoencoder) can undo a patch."
    )


# ---------------------------------------------- the HTML report's column group (used by :mod:`torch_amore.report.html`)

_HTML_COLUMNS = ("sufficiency", "necessity", "control sufficiency", "control necessity", "verdict")


def verification_header() -> str:
    """The header cells of the report's verification column group."""
    return "".join(
        f'<th class="verified{" verdict" if name == "verdict" else ""}">{name}</th>' for name in _HTML_COLUMNS
    )


def verification_cells(row: RuleVerification | None) -> str:
    """The cells of one rule set (each share with its interval; empty cells when it was not verified).

    Example:
        >>> row = RuleVerification(1, "z_0 >= 1", (0,), Share.of(19, 20, 0.95), Share.of(0, 0, 0.95),
        ...                        ControlShare.of([[False] * 20], 0.95), ControlShare.of([], 0.95))
        >>> cells = verification_cells(row)
        >>> cells.count("<td"), '0.950<br><span class="interval">[0.764, 0.991]' in cells
        (5, True)
    """
    if row is None:
        return '<td class="verified"></td>' * len(_HTML_COLUMNS)
    shares = (row.sufficiency, row.necessity, row.control_sufficiency, row.control_necessity)
    cells = "".join(f'<td class="verified" data-value="{s.value!r}">{_html_share(s)}</td>' for s in shares)
    return cells + f'<td class="verified verdict">{row.verdict}</td>'


def _html_share(share: Share | ControlShare) -> str:
    """The share, and its interval small on a line of its own (the cells stay narrow beside the rule sets)."""
    if math.isnan(share.value):
        return "n/a"
    return f'{share.value:.3f}<br><span class="interval">[{share.low:.3f}, {share.high:.3f}]</span>'


def verification_note(verification: Verification | None) -> str:
    """The report's short explanation of the verification columns ('' without a verification)."""
    if verification is None:
        return ""
    v = verification
    return (
        f'<p class="note">Verification by intervention ({v.method!r}, {v.n_controls} control draws, '
        f"{v.level:.0%} intervals, {v.n_samples} samples). Sufficiency: of the samples outside the rule set that the "
        "model does not assign to the target, the share it assigns to the target once the rule set's units are put "
        "inside its intervals. Necessity: of the samples inside the rule set that the model assigns to the target, "
        "the share that leave it once the units are moved out. The control columns replace as many random units of "
        "the same layer the same way. Verdict: 'used' when a share's interval lies above its control's, 'at control "
        "level' when they overlap (no measurable use: e.g. the units are redundant with others), 'below control' when "
        "it lies below. These numbers test this model on these samples, not the world the samples come from."
        + _not_moved_note(v)
        + "</p>"
    )


def _not_moved_note(verification: Verification) -> str:
    """The note's sentence on the samples a concept basis did not move ('' when it moved them all)."""
    s, q = (sum(r.not_moved[i] for r in verification.rows) for i in (0, 1))
    if not s and not q:
        return ""
    return (
        f" Left out of every share: {s} sufficiency and {q} necessity samples whose concepts, encoded again after "
        "the patch, did not lie where they were moved."
    )


#: The options of :meth:`RegionalExplanation.verify` a caller such as the Lightning callback may pass on.
