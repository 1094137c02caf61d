"""The engine of :meth:`RegionalExplanation.verify`: checks, one clean pass, then per rule set one patched pass per
draw (its own units, then each control draw). Sufficiency and necessity act on disjoint samples, so one patched pass
moves the first into the rule set and the second out of it; rules over concepts are patched in concept space, and a
sample counts only when its patched activations, encoded again, lie on the side of the rule set it was moved to.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from torch_amore._utils.progress import progress_bar
from torch_amore.concepts.basis import ConceptBasis, EncoderDecoder
from torch_amore.data.arguments import check_int
from torch_amore.model.batches import check_row_order
from torch_amore.model.forward import ModelArgs, as_inputs, resolve_layer
from torch_amore.model.input_shape import check_width
from torch_amore.model.source import run_model
from torch_amore.model.subgroups import check_target, subgroup_mask
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.interventions import (
    clamp_by_rank,
    clamp_unit,
    patched_outputs,
    random_units,
    rank_bounds,
    subset_args,
)
from torch_amore.verify.options import VALUE_CHECKS
from torch_amore.verify.verification import ControlShare, RuleVerification, Share, Verification, not_moved_warning

#: A concept encoded again within this fraction of the largest concept magnitude (over the verified samples) of its
#: replacement value counts as it: the rounding of an exact basis (PCA in float32) must not move a sample across a bound
#: (a bound of a concept near 0, such as a component without variance, lies within that rounding).
MOVED_TOLERANCE = 1e-4


@dataclass
class _Setup:
    """Everything checked before the first forward pass."""

    model: nn.Module
    layer: nn.Module | None
    layer_input: bool
    n_units: int
    target: Any
    threshold: float | None
    outputs: str
    chosen: list[tuple[int, RuleSet]]
    method: str
    n_controls: int
    level: float
    seed: int
    batch_size: int
    input_key: Any
    model_args: ModelArgs
    progress: bool
    basis: ConceptBasis | None = None
    no_room: tuple[int, ...] = ()  # positions of the rule sets without enough other units for a control draw


@dataclass(frozen=True)
class VerifyArgs:
    """The arguments of one :meth:`torch_amore.RegionalExplanation.verify` call, as given (checked by :func:`verify`;
    see that method for their meaning)."""

    rule_sets: int | RuleSet | Sequence[RuleSet]
    method: str
    n_controls: int
    level: float
    seed: int
    target: Any
    model: nn.Module | None
    batch_size: int | None
    progress: bool
    input_key: Any
    additional_forward_args: Any
    forward_kwargs: dict[str, Any] | None


def verify(explanation: Any, inputs: Any, args: VerifyArgs) -> Verification:
    """The engine of :meth:`torch_amore.RegionalExplanation.verify`: ``args`` checked, then the passes over
    ``inputs``."""
    inputs, _ = as_inputs(inputs)
    setup = _setup(explanation, inputs, args)
    X, T = _clean_pass(setup, inputs)
    passes = sum(1 + (0 if pos in setup.no_room else setup.n_controls) for pos, _ in setup.chosen)
    bar = progress_bar(setup.progress, total=passes, desc="verify", unit="pass")
    try:
        rows = [_verify_one(setup, inputs, X, T, pos, rs, bar) for pos, rs in setup.chosen]
    finally:
        bar.close()
    if setup.basis is not None:
        message = not_moved_warning(rows, setup.basis.kind)
        if message:
            warnings.warn(message, UserWarning, stacklevel=3)
    return Verification(
        rows, setup.method, setup.n_controls, setup.level, setup.seed, int(X.shape[0]), explanation.target_name
    )


# --------------------------------------------------------------------------------------------------------------- checks


def _setup(explanation: Any, inputs: Any, given: VerifyArgs) -> _Setup:
    model, layer, layer_input = _model_and_layer(explanation, given.model)
    n_units = len(explanation.feature_names)  # the concepts' K with a basis
    basis = _basis(explanation)
    target = _target(explanation, given.target)
    n_controls = VALUE_CHECKS["n_controls"](given.n_controls)
    level = VALUE_CHECKS["level"](given.level)
    seed = VALUE_CHECKS["seed"](given.seed)
    VALUE_CHECKS["progress"](given.progress)
    chosen = _chosen(explanation, given.rule_sets)
    check_row_order(inputs, "the dataset's, from which `verify` reads each rule set's samples again by position")
    shape = explanation.params.get("input_shape")
    check_width(inputs, "inputs", n_features=n_units if layer is None else None, input_shape=shape)
    batch_size = given.batch_size if given.batch_size is not None else explanation.data_options.get("batch_size", 256)
    setup = _Setup(
        model=model,
        layer=layer,
        layer_input=layer_input,
        n_units=n_units,
        target=target,
        threshold=explanation.threshold if isinstance(target, (int, np.integer)) else None,
        outputs=explanation.params.get("outputs", "auto"),
        chosen=chosen,
        method=VALUE_CHECKS["method"](given.method),
        n_controls=n_controls,
        level=level,
        seed=seed,
        batch_size=VALUE_CHECKS["batch_size"](batch_size),
        input_key=given.input_key if given.input_key is not None else explanation.data_options.get("input_key"),
        model_args=_model_args(explanation, given.additional_forward_args, given.forward_kwargs),
        progress=bool(given.progress),
        basis=basis,
    )
    if n_controls:  # once every argument is checked: the warning names what will run
        setup.no_room = _without_room(chosen, n_units, "concepts" if basis is not None else "units")
    return setup


def _without_room(chosen: list[tuple[int, RuleSet]], n_units: int, what: str) -> tuple[int, ...]:
    """The positions of the rule sets naming more than half of the ``n_units`` units (concepts): too few others for a
    control draw of as many; one UserWarning names them (they are verified without control)."""
    crowded = [(pos, len(rs.rules)) for pos, rs in chosen if n_units - len(rs.rules) < len(rs.rules)]
    if crowded:
        many = len(crowded) > 1
        names = ", ".join(f"#{pos} ({k} {what})" for pos, k in crowded)
        warnings.warn(
            f"Too few other {what} for a control draw of as many {what} as rule set{'s' if many else ''} {names} "
            f"name{'' if many else 's'} (the explanation has {n_units}): verified without control (verdict 'no "
            "control'); n_controls=0 skips every rule set's controls.",
            UserWarning,
            stacklevel=5,
        )
    return tuple(pos for pos, _ in crowded)


def _basis(explanation: Any) -> ConceptBasis | None:
    """The explanation's concept basis (``None``: rules on units); a ValueError when its rules are on concepts whose
    basis was not saved (e.g. an encoder read from JSON) or when it cannot set concepts (no ``decode``)."""
    basis = getattr(explanation, "concepts", None)
    if basis is None and explanation.params.get("concepts") is not None:
        raise ValueError(
            "Expected the explanation's concept basis to verify rules on concepts, but it has none (a basis that was "
            "not saved with the JSON); set `explanation.concepts` to the basis first."
        )
    if basis is None:
        return None
    inherited = type(basis).decode is ConceptBasis.decode and type(basis).intervene is ConceptBasis.intervene
    if inherited or (isinstance(basis, EncoderDecoder) and basis.decoder is None):
        raise ValueError(
            "Expected a `decode` callable for interventions in concept space, but the basis has none: `verify` sets "
            'the concepts through it (pass concepts={"encode": f, "decode": g}).'
        )
    return basis


def _model_and_layer(explanation: Any, model: nn.Module | None) -> tuple[nn.Module, nn.Module | None, bool]:
    """The model and the explained layer: the explainer's, or ``model`` with the layer named in the parameters."""
    params = explanation.params
    if params.get("source") == "features":
        raise ValueError(
            "Expected rules on a layer or on the model inputs to verify by intervention, but these rules are on a "
            "separate `features` matrix, which the model does not read."
        )
    explainer = explanation.explainer
    if model is None:
        if explainer is None:
            raise ValueError(
                "Expected `model` (the explained model) to verify rules of an explanation without an explainer "
                "(e.g. read from JSON or written by the Lightning callback)."
            )
        if explainer.layer_name != params.get("layer", explainer.layer_name):
            raise ValueError(
                f"Expected the explainer's layer ({explainer.layer_name!r}) to be the explained layer "
                f"({params.get('layer')!r})."
            )
        return explainer.model, explainer.layer, bool(explainer.layer_input)
    if not isinstance(model, nn.Module):
        raise TypeError(f"Expected `model` to be a torch.nn.Module, but got {type(model).__name__}.")
    layer, _ = resolve_layer(model, params.get("layer"))
    return model, layer, bool(params.get("layer_input", False))


def _target(explanation: Any, target: Any) -> Any:
    """The target definition on the outputs: the given one, that of ``explain``, or a class / range in params."""
    if target is None:
        target = explanation.data_options.get("target")
    if target is None:
        stored = explanation.params.get("target")
        if isinstance(stored, int) and not isinstance(stored, bool):
            target = stored
        elif isinstance(stored, list) and len(stored) == 2:
            target = tuple(stored)
    if target is None or isinstance(target, (torch.Tensor, np.ndarray, list)):
        raise ValueError(
            "Expected a `target` defined on the model outputs (a class index, a callable or a (low, high) range) to "
            "verify: a fixed mask cannot follow the patched outputs; pass `target=`."
        )
    check_target(target, None)
    return target


def _chosen(explanation: Any, rule_sets: Any) -> list[tuple[int, RuleSet]]:
    """(1-based position, rule set) of the rule sets to verify: the first k shown, or the given ones."""
    every = explanation.rule_sets
    if isinstance(rule_sets, (int, np.integer)) and not isinstance(rule_sets, bool):
        k = check_int(rule_sets, "rule_sets", 1)
        chosen = explanation.shown()[:k] or list(enumerate(every, 1))[:k]
    elif isinstance(rule_sets, (bool, str)) or not isinstance(rule_sets, (RuleSet, Iterable)):
        raise TypeError(
            f"Expected `rule_sets` to be a count (an integer >= 1), a RuleSet or RuleSets of the explanation, but got "
            f"{rule_sets!r}."
        )
    else:
        given = [rule_sets] if isinstance(rule_sets, RuleSet) else list(rule_sets)
        chosen = [(_position(every, rs), rs) for rs in given]
    if not chosen:
        if not isinstance(rule_sets, (int, np.integer)):
            raise ValueError("Expected rule sets to verify, but `rule_sets` is empty.")
        raise ValueError("Expected rule sets to verify, but the explanation has none.")
    return chosen


def _position(every: list[RuleSet], rs: Any) -> int:
    if not isinstance(rs, RuleSet):
        raise TypeError(f"Expected `rule_sets` to hold RuleSets of the explanation, but got {type(rs).__name__}.")
    found = [i for i, o in enumerate(every, 1) if o is rs] or [i for i, o in enumerate(every, 1) if o == rs]
    if not found:
        raise ValueError(f"Expected rule sets of this explanation, but {rs.format()!r} is not one of its rule sets.")
    return found[0]


def _model_args(explanation: Any, args: Any, kwargs: dict | None) -> ModelArgs:
    if args is not None or kwargs is not None:
        return ModelArgs.make(args, kwargs)
    return explanation.data_options.get("model_args") or ModelArgs()


# --------------------------------------------------------------------------------------------------------------- passes


def _clean_pass(setup: _Setup, inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The unit matrix (N, D) on the CPU and the target mask (N,) of the unpatched model."""
    on_inputs = setup.layer is None
    with torch.inference_mode():
        fwd = run_model(
            setup.model,
            inputs,
            layer=setup.layer,
            layer_name="layer",
            layer_input=setup.layer_input,
            batch_size=setup.batch_size,
            progress=setup.progress,
            input_key=setup.input_key,
            collect_inputs=on_inputs,
            require_inputs=on_inputs,
            model_args=setup.model_args,
        )
    X = fwd.flat_inputs if on_inputs else fwd.activations
    if setup.basis is not None:  # rules on concepts: the (N, K) concept activations
        X = setup.basis.encode(X.reshape(X.shape[0], -1))
    X = X.cpu()
    if X.shape[1] != setup.n_units:
        raise ValueError(
            f"Expected the verified samples to have {setup.n_units} units (as the explained ones), but they have "
            f"{X.shape[1]}: the model or the inputs differ from those explained."
        )
    return X, _target_mask(setup, fwd.outputs)


def _target_mask(setup: _Setup, outputs: torch.Tensor) -> torch.Tensor:
    return subgroup_mask(outputs, setup.target, setup.threshold, None, setup.outputs)[0].cpu()


def _verify_one(
    setup: _Setup, inputs: Any, X: torch.Tensor, T: torch.Tensor, position: int, rs: RuleSet, bar: Any
) -> RuleVerification:
    """One rule set: its patched pass and ``n_controls`` control passes over the samples it concerns."""
    gen = torch.Generator().manual_seed(setup.seed * 1_000_003 + position)
    units = [r.feature for r in rs.rules]
    inside = rs.mask(X).cpu()
    pool_in, pool_out = torch.nonzero(inside).flatten(), torch.nonzero(~inside).flatten()
    S = torch.nonzero(~inside & ~T).flatten() if len(pool_in) else torch.zeros(0, dtype=torch.long)
    Q = torch.nonzero(inside & T).flatten() if len(pool_out) else torch.zeros(0, dtype=torch.long)
    donors = (
        pool_in[torch.randint(len(pool_in), (len(S),), generator=gen)] if len(S) else S,
        pool_out[torch.randint(len(pool_out), (len(Q),), generator=gen)] if len(Q) else Q,
    )
    plan = _Plan(setup, inputs, X, S, Q, donors, pool_in, pool_out, list(rs.rules))
    flipped, moved = plan.run(torch.tensor(units))
    bar.update(1)
    others = torch.tensor([u for u in range(setup.n_units) if u not in set(units)], dtype=torch.long)
    n_draws = 0 if position in setup.no_room else setup.n_controls
    draws = [random_units(others, len(S) + len(Q), len(units), gen) for _ in range(n_draws)]
    control_flipped = []
    for draw in draws:
        control_flipped.append(plan.run(draw)[0])
        bar.update(1)
    n_s, level = len(S), setup.level
    # outcomes that share a donor are correlated: clusters for the intervals (each sample its own without donors)
    cl = torch.cat(donors) if setup.method == "resample" else torch.cat([S, Q])
    # the shares, the rule set's and its control's, count the samples its own patch moved (all but for inexact bases)
    suff, nec = torch.arange(len(moved)) < n_s, torch.arange(len(moved)) >= n_s
    suff, nec = suff & moved, nec & moved
    return RuleVerification(
        position=position,
        rule_set=" AND ".join(r.format() for r in rs.rules),
        units=tuple(units),
        sufficiency=Share.clustered(flipped[suff].tolist(), cl[suff].tolist(), level),
        necessity=Share.clustered(flipped[nec].tolist(), cl[nec].tolist(), level),
        control_sufficiency=ControlShare.of([f[suff].tolist() for f in control_flipped], level, cl[suff].tolist()),
        control_necessity=ControlShare.of([f[nec].tolist() for f in control_flipped], level, cl[nec].tolist()),
        not_moved=(int((~moved[:n_s]).sum()), int((~moved[n_s:]).sum())),
        details={
            "sufficiency_samples": S,
            "necessity_samples": Q,
            "donors": torch.cat(donors) if setup.method == "resample" else None,
            "flipped": flipped,
            "moved": moved,
            "control_units": draws,
            "control_flipped": control_flipped,
        },
    )


@dataclass
class _Plan:
    """The samples of one rule set (sufficiency ``S``, necessity ``Q``), its donors, and how to patch them."""

    setup: _Setup
    inputs: Any
    X: torch.Tensor
    S: torch.Tensor
    Q: torch.Tensor
    donors: tuple[torch.Tensor, torch.Tensor]
    pool_in: torch.Tensor
    pool_out: torch.Tensor
    rules: list

    def run(self, units: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Whether each sample (``S`` then ``Q``) flipped (into the target, out of it) with ``units`` replaced: the
        rule set's own (U,), or a control draw (M, U) of one row per sample; and whether the rule set's own patch moved
        it (:meth:`moved`; all for a control draw)."""
        rows = torch.cat([self.S, self.Q])
        if not len(rows):
            return torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.bool)
        s = self.setup
        own = units.ndim == 1
        values = self.values(units) if own else self.control_values(units)
        out, encoded = patched_outputs(
            s.model,
            self.inputs,
            rows,
            units,
            values,
            layer=s.layer,
            layer_input=s.layer_input,
            batch_size=s.batch_size,
            input_key=s.input_key,
            model_args=subset_args(s.model_args, rows, self.X.shape[0]),
            basis=s.basis,
            encode_again=own and s.basis is not None,
        )
        in_target = _target_mask(s, out)
        flipped = torch.cat([in_target[: len(self.S)], ~in_target[len(self.S) :]])
        moved = self.moved(units, values, encoded) if encoded is not None else torch.ones_like(flipped)
        return flipped, moved

    def moved(self, units: torch.Tensor, values: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        """Whether each sample's rule-set concepts, encoded again from its patched activations (``encoded``, (M, U)),
        lie on the side of the rule set that the replacement ``values`` (M, U) lie on (inside for sufficiency, outside
        for necessity except where ``"mean"`` or ``"clamp"`` could not move them out); a value within
        :data:`MOVED_TOLERANCE` of the largest concept magnitude of its replacement counts as the replacement."""
        dtype = self.X.dtype
        want, got = values.to(dtype), encoded.to(dtype)
        scale = self.X.abs().amax().clamp_min(torch.finfo(dtype).tiny)
        got = torch.where((got - want).abs() <= MOVED_TOLERANCE * scale, want, got)
        return self._inside(units, got) == self._inside(units, want)

    def _inside(self, units: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Whether rows whose rule-set concepts are ``values`` (M, U) satisfy the rule set."""
        full = torch.zeros(values.shape[0], self.X.shape[1], dtype=values.dtype)
        full[:, units] = values
        return torch.stack([rule.mask(full) for rule in self.rules]).all(0)

    def values(self, units: torch.Tensor) -> torch.Tensor:
        """The (|S| + |Q|, U) replacement values of the rule set's own ``units`` by the setup's method."""
        X = self.X
        if self.setup.method == "resample":
            return X[torch.cat(self.donors)][:, units]
        if self.setup.method == "mean":
            into = X[self.pool_in][:, units].double().mean(0).expand(len(self.S), -1)
            out = X[self.pool_out][:, units].double().mean(0).expand(len(self.Q), -1)
            return torch.cat([into, out])
        parts = []
        for rows, into in ((self.S, True), (self.Q, False)):
            moved = torch.stack([clamp_unit(X[:, r.feature].double(), rows, r, into) for r in self.rules], 1)
            original = X[rows][:, units].double()
            parts.append(torch.where(torch.isnan(moved), original, moved))  # no observed value there: unchanged
        return torch.cat(parts)

    def control_values(self, units: torch.Tensor) -> torch.Tensor:
        """The (M, U) replacement values of a control draw (one row of units per sample) by the setup's method."""
        X, rows = self.X, torch.cat([self.S, self.Q])
        if self.setup.method == "resample":
            return X[torch.cat(self.donors)[:, None], units]
        if self.setup.method == "mean":
            into, out = X[self.pool_in].double().mean(0), X[self.pool_out].double().mean(0)
            return torch.cat([into[units[: len(self.S)]], out[units[len(self.S) :]]])
        values = X[rows[:, None], units].double()
        into = torch.arange(len(rows)) < len(self.S)
        for j, rule in enumerate(self.rules):  # by rank, one control unit at a time
            a, b = rank_bounds(X[:, rule.feature].double(), rule)
            for unit in torch.unique(units[:, j]).tolist():
                for side in (True, False):
                    pick = torch.nonzero((units[:, j] == unit) & (into == side)).flatten()
                    if len(pick):
                        moved = clamp_by_rank(X[:, unit].double(), rows[pick], a, b, side)
                        values[pick, j] = torch.where(torch.isnan(moved), values[pick, j], moved)
        return values
