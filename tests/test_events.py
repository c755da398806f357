"""Events, schedules and validation at the public boundary."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpcalc.errors import ParameterError
from dpcalc.events import (
    GaussianEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
    dpsgd_event,
)
from dpcalc.schedule import resolve_schedule


def test_dpsgd_event_shape():
    ev = dpsgd_event(noise_multiplier=1.1, sample_rate=0.01, steps=7)
    assert ev == SelfComposedEvent(PoissonSampledEvent(0.01, GaussianEvent(1.1)), 7)
    # q = 1 is the plain Gaussian mechanism composed T times
    assert dpsgd_event(noise_multiplier=2.0, sample_rate=1.0, steps=3) == SelfComposedEvent(GaussianEvent(2.0), 3)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "1", True])
def test_gaussian_rejects_bad_sigma(bad):
    with pytest.raises(ParameterError) as e:
        GaussianEvent(bad)
    assert e.value.name == "noise_multiplier"


def test_schedule_from_batches_is_exact():
    # Opacus-style MNIST: B = 256 of N = 60,000, 60 epochs → T = ceil(60·60000/256) = 14063
    s = resolve_schedule(batch_size=256, dataset_size=60000, epochs=60)
    assert (s.sample_rate, s.steps, s.source) == (256 / 60000, 14063, "batches")
    # Abadi et al. 2016: lot 600 of 60,000, 100 epochs → q = 0.01, T = 10,000
    s = resolve_schedule(batch_size=600, dataset_size=60000, epochs=100)
    assert (s.sample_rate, s.steps) == (0.01, 10000)
    # 0.1 epochs of 60,000 / 600 is exactly 10 steps (no binary rounding up to 11)
    assert resolve_schedule(batch_size=600, dataset_size=60000, epochs=0.1).steps == 10


def test_schedule_unsampled_and_direct():
    assert resolve_schedule(steps=100).sample_rate == 1.0
    assert resolve_schedule(steps=100).source == "unsampled"
    assert resolve_schedule(sample_rate=0.5, steps=1e9).steps == 10**9


@given(b=st.integers(1, 10**5), extra=st.integers(0, 10**6), epochs=st.integers(1, 500))
def test_schedule_steps_cover_epochs(b, extra, epochs):
    n = b + extra
    s = resolve_schedule(batch_size=b, dataset_size=n, epochs=epochs)
    # T·q ≥ epochs (expected passes), and one step fewer would fall short
    assert s.steps * b >= epochs * n > (s.steps - 1) * b


def test_flatten_unrolls_and_merges():
    from dpcalc.events import ComposedEvent, LaplaceEvent, flatten

    a = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=5)
    b = SelfComposedEvent(ComposedEvent([LaplaceEvent(2.0), a]), 3)
    steps = flatten(ComposedEvent([a, b, SelfComposedEvent(LaplaceEvent(9.0), 0)]))
    assert steps == [(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 5 + 15), (LaplaceEvent(2.0), 3)]
    # q = 1 is the unsampled mechanism itself
    assert flatten(SelfComposedEvent(PoissonSampledEvent(1.0, GaussianEvent(2.0)), 4)) == [(GaussianEvent(2.0), 4)]
