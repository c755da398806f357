"""The ``dpcalc train`` progress display (``dpcalc.cli.progress``, moved out of ``dpcalc.train``
by issue 9): the trainer reports through its ``Reporter`` protocol; the lines printed are the
ones the display printed before the move (pinned here, character for character)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

pytest.importorskip("torch")

from dpcalc.cli.progress import RichReporter  # noqa: E402
from dpcalc.train.config import TrainConfig  # noqa: E402
from dpcalc.train.results import EpochRecord, Reporter  # noqa: E402


def record(**kw):
    fields = dict(epoch=1, steps=10, epsilon=1.23456789, delta=1e-5, accountant="pld", train_loss=0.5,
                  mean_batch_size=60.2, test_accuracy=0.905, seconds=3.4)
    fields.update(kw)
    return EpochRecord(**fields)


def run_display(config, *, note=None, terminal=False):
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, force_terminal=terminal,
                      color_system=None)
    rep = RichReporter(console)
    rep.start(config=config, noise_multiplier=1.1, sample_rate=0.1, planned_steps=30000,
              accountant="pld", note=note)
    rep.start_epoch(0, 3, 10, 0.0)
    for _ in range(10):
        rep.step(loss=0.25, batch_size=60)
    rep.end_epoch(record())
    rep.message("stopped after 10 of 30 planned steps")
    return out.getvalue()


def test_lines_are_unchanged_by_the_move():
    text = run_display(TrainConfig(model="logistic", noise_multiplier=1.1, max_grad_norm=1.0),
                       note="resumed at step 10 (epoch 2)")
    assert text.splitlines() == [
        "DP-SGD on mnist (logistic): σ = 1.1 (given), q = 0.1, C = 1, 30,000 steps planned, δ = 1e-05, "
        "accountant pld",
        "resumed at step 10 (epoch 2)",
        "epoch 1: steps 10  train loss 0.5 (not private)  test accuracy 90.50%  ε = 1.235 at δ = 1e-05 "
        "(pld)  3 s",
        "stopped after 10 of 30 planned steps",
    ]
    calibrated = run_display(TrainConfig(target_epsilon=3.0, max_grad_norm=0.1)).splitlines()[0]
    assert calibrated == ("DP-SGD on mnist (tanh-cnn): σ = 1.1 (calibrated for ε = 3), q = 0.1, C = 0.1, "
                          "30,000 steps planned, δ = 1e-05, accountant pld")


def test_terminal_shows_a_transient_bar_with_epsilon_so_far():
    text = run_display(TrainConfig(noise_multiplier=1.1), terminal=True)
    assert "epoch 1/3" in text and "ε so far 0 (pld)" in text and "loss 0.25" in text
    assert "epoch 1: steps 10" in text


def test_rich_reporter_implements_the_trainers_protocol():
    for name in ("start", "start_epoch", "step", "end_epoch", "message"):
        assert callable(getattr(RichReporter, name)) and hasattr(Reporter, name)
