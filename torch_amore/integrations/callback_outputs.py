"""What the Lightning callback writes and logs: the explanation's files, its metrics, the rule table and figure."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import LightningModule, Trainer

from torch_amore.explain.explanation import RegionalExplanation

_METRICS = ("support", "confidence", "fitness", "n_rule_sets")
_HELD_OUT = ("held_out_confidence", "held_out_p_value")


class CallbackOutputs:
    """The output methods of :class:`~torch_amore.integrations.callbacks.RegionalRuleExtractor`."""

    def _write(self, trainer: Trainer, explanation: RegionalExplanation) -> None:
        dirpath = self.dirpath if self.dirpath is not None else Path(trainer.log_dir or trainer.default_root_dir)
        self.last_path = dirpath / f"{self.filename}.json"
        if trainer.is_global_zero:
            dirpath.mkdir(parents=True, exist_ok=True)
            explanation.to_json(self.last_path)
            every = explanation.format(max_rows=None, distinct=False, include_negative=True)  # the full list
            (dirpath / f"{self.filename}.txt").write_text(every + "\n")
            if self.html:
                explanation.to_html(dirpath / f"{self.filename}.html")
        trainer.strategy.barrier("RegionalRuleExtractor.write")

    def _evidence_names(self) -> list[str]:
        """The evidence metrics the options compute: held-out confidence and p-value, the search-aware p-value."""
        options = getattr(self, "options", None)
        held = getattr(options, "holdout", None) is not None or getattr(self, "holdout_rows", None) is not None
        names = list(_HELD_OUT) if held else []
        return names + (["p_value"] if getattr(options, "permutations", 0) else [])

    def _metric_names(self) -> list[str]:
        return [f"{self.log_prefix}{m}" for m in (*_METRICS, *self._evidence_names())]

    def _metrics(self, explanation: RegionalExplanation) -> dict[str, float]:
        """The best rule set's criteria (NaN when there is no rule set), the number of rule sets and the best rule
        set's evidence computed (NaN where missing)."""
        best = explanation.best
        values = (best.support, best.confidence, best.fitness) if best is not None else (math.nan,) * 3
        held = None if best is None else best.held_out
        evidence = {
            "held_out_confidence": math.nan if held is None else held.confidence,
            "held_out_p_value": math.nan if held is None else held.p_value,
            "p_value": math.nan if best is None or best.p_value is None else best.p_value,
        }
        extra = [evidence[name] for name in self._evidence_names()]
        return dict(zip(self._metric_names(), [float(v) for v in (*values, len(explanation), *extra)]))

    def _log_placeholders(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """NaN ("not extracted at this epoch") for the metrics a ModelCheckpoint monitors, which it requires at every
        validation epoch; it ranks NaN below every extracted value."""
        monitored = {getattr(cb, "monitor", None) for cb in trainer.callbacks} & set(self._metric_names())
        nan = torch.tensor(math.nan, dtype=torch.float32, device=pl_module.device)  # the dtype of the extracted values
        for name in sorted(monitored):
            pl_module.log(name, nan, on_step=False, on_epoch=True, sync_dist=False)

    def _log(
        self, trainer: Trainer, pl_module: LightningModule, explanation: RegionalExplanation, in_loop: bool
    ) -> None:
        metrics = {name: torch.tensor(value, dtype=torch.float32) for name, value in self._metrics(explanation).items()}
        if in_loop:  # inside a loop: through Lightning, so that ModelCheckpoint and trainer.test's results see them
            for name, value in metrics.items():  # equal on every rank
                pl_module.log(name, value.to(pl_module.device), on_step=False, on_epoch=True, sync_dist=False)
        elif trainer.is_global_zero:  # float32 values as the loops log them
            for logger in trainer.loggers:
                logger.log_metrics({name: value.item() for name, value in metrics.items()}, step=trainer.global_step)
                logger.save()
        if not trainer.is_global_zero:
            return
        text = "\n".join("    " + line for line in explanation.format().splitlines())  # markdown code block
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if callable(getattr(experiment, "add_text", None)):
                experiment.add_text(f"{self.log_prefix}rules", text, global_step=trainer.global_step)
        if self.log_figures:
            self._log_figures(trainer, explanation)

    def _log_figures(self, trainer: Trainer, explanation: RegionalExplanation) -> None:
        """The rule table and the best rule set's figure to every logger that takes figures (if matplotlib is there)."""
        figures = {"table": _rule_table_figure(explanation)}
        if figures["table"] is None:
            return
        if explanation.best is not None and explanation.best.rules and explanation.features_matrix is not None:
            from torch_amore.report.plot import plot_rule

            figures["best_rule_set"] = plot_rule(explanation)  # this rank's rows under DDP
        step = trainer.global_step
        for logger in trainer.loggers:
            add_figure = getattr(getattr(logger, "experiment", None), "add_figure", None)
            for name, figure in figures.items():
                if callable(add_figure):
                    add_figure(f"{self.log_prefix}{name}", figure, global_step=step, close=False)
                elif callable(getattr(logger, "log_image", None)):
                    logger.log_image(key=f"{self.log_prefix}{name}", images=[figure], step=step)
        import matplotlib.pyplot as plt

        for figure in figures.values():
            plt.close(figure)


def _rule_table_figure(explanation: RegionalExplanation, max_rows: int = 10) -> Any:
    """The rule table as a matplotlib Figure (``None`` without matplotlib)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - depends on the environment
        return None
    rows = [
        [
            str(i),
            str(rs.support),
            f"{rs.confidence:.3f}",
            f"{rs.fitness:.3f}",
            " AND ".join(r.format() for r in rs.rules),
        ]
        for i, rs in explanation.shown()[:max_rows]
    ] or [["", "", "", "", "(no rule sets with positive fitness)"]]
    figure = Figure(figsize=(10, 0.35 * (len(rows) + 2)))
    ax = figure.add_subplot()
    ax.axis("off")
    ax.set_title(explanation.format(max_rows=0).splitlines()[0], fontsize=9)
    table = ax.table(
        cellText=rows,
        colLabels=["#", "support", "confidence", "fitness", "rule set"],
        loc="center",
        cellLoc="left",
        colWidths=[0.04, 0.09, 0.11, 0.09, 0.67],
    )
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    return figure
