"""``dpcalc train --plot`` (issue 25): the picture draws the run's own epoch records — the same
numbers as its ``--log`` lines — and a bad target is refused before any training."""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("matplotlib")

N_TRAIN, N_TEST = 300, 100  # the tiny_dir data (tests/train/conftest.py)
COMMON = ("train", "--model", "logistic", "--epochs", "3", "--batch-size", "100", "--noise-multiplier", "1",
          "--delta", "1e-4", "--max-grad-norm", "1", "--threads", "1", "--quiet")


def test_train_plot_draws_the_logged_epochs(tiny_dir, run_cli, tmp_path, monkeypatch):
    from dpcalc.cli import run_plots

    seen = {}
    draw = run_plots.plot_train

    def spy(history, path, **kw):
        seen["series"] = run_plots.train_series(history)
        draw(history, path, **kw)

    monkeypatch.setattr(run_plots, "plot_train", spy)
    log, png = tmp_path / "run.jsonl", tmp_path / "run.png"
    r = run_cli(*COMMON, "--data-dir", tiny_dir, "--log", log, "--plot", png, "--json")
    assert r.exit_code == 0, r.stderr
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert seen["series"] == run_plots.train_series(lines)  # the records the log has, value for value
    assert seen["series"]["epoch"] == [1, 2, 3]
    assert seen["series"]["epsilon"][-1] == r.json()["results"][0]["epsilon"]
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(os.listdir(tmp_path)) == ["run.jsonl", "run.png"]


@pytest.mark.parametrize("name", ["run.pdf", "missing/run.png"])
def test_train_plot_target_refused_before_training(tiny_dir, run_cli, tmp_path, name):
    log = tmp_path / "run.jsonl"
    line = run_cli(*COMMON, "--data-dir", tiny_dir, "--log", log, "--plot", tmp_path / name).one_line_error()
    assert "--plot" in line
    assert os.listdir(tmp_path) == []  # no log line: not one step was taken
