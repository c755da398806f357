"""Shared fixtures of the trainer's tests: small MNIST-format IDX files the tests generate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def _images(rng, n: int, noise: float):
    """Class c lights up block c of a 2×5 grid, on noisy background: learnable, not trivial."""
    y = rng.integers(0, 10, n)
    x = rng.normal(60, noise, (n, 28, 28))
    for c in range(10):
        r, col = divmod(c, 5)
        x[y == c, 3 + r * 12: 13 + r * 12, 1 + col * 5: 6 + col * 5] += 120
    return x.clip(0, 255).astype(np.uint8), y.astype(np.uint8)


@pytest.fixture(scope="session")
def tiny_idx(tmp_path_factory):
    """``tiny_idx(name, n_train, n_test, *, seed=0, noise=70) -> Path``: a directory with the four
    MNIST IDX files (gzip) of seeded synthetic images (train drawn first, then test)."""
    from dpcalc.train.data import write_idx

    def make(name: str, n_train: int, n_test: int, *, seed: int = 0, noise: float = 70) -> Path:
        d = tmp_path_factory.mktemp(name)
        rng = np.random.default_rng(seed)
        x, y = _images(rng, n_train, noise)
        xt, yt = _images(rng, n_test, noise)
        write_idx(d / "train-images-idx3-ubyte.gz", x)
        write_idx(d / "train-labels-idx1-ubyte.gz", y)
        write_idx(d / "t10k-images-idx3-ubyte.gz", xt)
        write_idx(d / "t10k-labels-idx1-ubyte.gz", yt)
        return d

    return make


@pytest.fixture(scope="module")
def tiny_dir(tiny_idx, request):
    """The directory of the test module's tiny dataset, generated once per module: the module's
    ``N_TRAIN`` training and ``N_TEST`` test images, generator seed ``TINY_SEED`` (default 0) and
    background noise ``TINY_NOISE`` (default 70)."""
    mod = request.module
    name = "tiny-" + mod.__name__.rsplit(".", 1)[-1]
    return tiny_idx(name, mod.N_TRAIN, mod.N_TEST, seed=getattr(mod, "TINY_SEED", 0),
                    noise=getattr(mod, "TINY_NOISE", 70))


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    """The module's tiny dataset, loaded (MNIST format)."""
    from dpcalc.train.data import load_dataset

    return load_dataset("mnist", tiny_dir)
