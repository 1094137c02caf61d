"""The README's Python snippets run as written (with a small model and data in their namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import nn

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def test_readme_snippets_run(capsys):
    torch.manual_seed(0)
    model = Net().eval()
    images = torch.randn(600, 6)
    with torch.no_grad():  # make classes 7 and 1 common predictions
        for c in (7, 1):
            while float((model(images).argmax(1) == c).float().mean()) < 0.25:
                model.fc2.bias[c] += 0.05
    predicted = model(images).argmax(1).numpy()
    blocks = python_blocks()
    assert len(blocks) == 2
    explainer_block, rules_block = blocks
    namespace = {"model": model, "images": images}
    exec(compile(explainer_block, "README", "exec"), namespace)
    explanation = namespace["explanation"]
    subgroup = model(images).argmax(1) == 7
    assert torch.equal(explanation.subgroup.cpu(), subgroup)
    assert explanation.rule_sets and all(len(rs) <= 2 for rs in explanation.rule_sets)
    namespace = {"X": images.numpy(), "predicted": predicted}
    exec(compile(rules_block, "README", "exec"), namespace)
    best = namespace["rule_sets"][0]
    mask = best.mask(images)
    target = torch.from_numpy(predicted == 1)
    assert best.support == int(mask.sum()) >= 200
    assert best.confidence == float((mask & target).sum()) / best.support
    assert "THEN target" in capsys.readouterr().out
