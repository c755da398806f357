"""Benchmark: private logistic regression (``dpcalc erm``) against ε on two real datasets, next
to diffprivlib's ``LogisticRegression`` on the same splits and the same rows.

Datasets (no download):

* Wisconsin diagnostic breast cancer, bundled with scikit-learn (569 rows, 30 features;
  benign/malignant). Features are min–max scaled with the per-feature ranges *published in the
  dataset's description* (``load_breast_cancer().DESCR``, "Summary Statistics"), treated as
  public domain knowledge, and clipped to [0, 1]; rows then follow dpcalc's rule with
  ``--norm-bound 2`` (features clipped to norm 2, divided by 2, intercept appended, ÷√2).
  Split: 20 % test, split seed 0 (455 training rows).
* Fashion-MNIST, two classes (T-shirt/top vs pullover), from the Debian package
  ``dataset-fashion-mnist`` (/usr/share/datasets/fashion-mnist/): the 12,000 training images
  of the two classes for training, their 2,000 test images for testing; pixels / 255, each
  row divided by its norm (dpcalc's default rule), intercept appended, ÷√2 (d = 785).

For each ε the private models are fitted ``--repeat`` times (noise seeds 0, 1, …) and the mean
± standard deviation of the test accuracy is printed, for dpcalc output perturbation, dpcalc
objective perturbation (CMS11 Alg. 2) and diffprivlib (objective perturbation with the vector
mechanism; C = 1/(nλ), data_norm = 1 on the same scaled feature rows, its own intercept). The
non-private fit at the same λ is the last column. ε-DP throughout (δ = 0).

Run:  .venv/bin/python benchmarks/bench_erm.py [--repeat 10] [--dataset breast-cancer|fashion|all]
      .venv/bin/python benchmarks/bench_erm.py --write-example docs/examples/breast-cancer.csv
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dpcalc.mechanisms import erm  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"
EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)


def breast_cancer() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features min–max scaled by the DESCR's published ranges, labels ±1 (+1 = benign)."""
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer()
    rows = re.findall(r"^\s*([A-Za-z ()]+?):\s+([0-9.]+)\s+([0-9.]+)\s*$", d.DESCR, flags=re.M)
    assert len(rows) == d.data.shape[1], "the DESCR's summary table changed"
    lo = np.array([float(r[1]) for r in rows])
    hi = np.array([float(r[2]) for r in rows])
    x = np.clip((d.data - lo) / (hi - lo), 0.0, 1.0)
    return x, np.where(d.target == 1, 1, -1), [str(n) for n in d.feature_names]


def _idx(path: str) -> np.ndarray:
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def fashion(classes=(0, 2)) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train x, train y, test x, test y) of two Fashion-MNIST classes, pixels / 255, y = ±1."""
    out = []
    for split in ("train", "t10k"):
        x = _idx(f"{FASHION}/{split}-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0
        y = _idx(f"{FASHION}/{split}-labels-idx1-ubyte.gz")
        keep = np.isin(y, classes)
        out += [x[keep], np.where(y[keep] == classes[1], 1, -1)]
    return out[0], out[1], out[2], out[3]


def diffprivlib_accuracy(x_tr, y_tr, x_te, y_te, *, epsilon, lam, seed) -> float:
    from diffprivlib.models import LogisticRegression

    n = x_tr.shape[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LogisticRegression(epsilon=epsilon, data_norm=1.0, C=1.0 / (n * lam), random_state=seed,
                                 max_iter=1000)
        clf.fit(x_tr, y_tr)
    return float(np.mean(clf.predict(x_te) == y_te))


def run(name: str, x_tr, y_tr, x_te, y_te, *, norm_bound, lam, repeat) -> None:
    z_tr, rule = erm.scale_rows(x_tr, norm_bound=norm_bound)
    z_te, _ = erm.scale_rows(x_te, norm_bound=norm_bound)
    # diffprivlib gets the same feature rows (norm ≤ 1, before dpcalc's intercept and ÷√2)
    f_tr, f_te = z_tr[:, :-1] * np.sqrt(2), z_te[:, :-1] * np.sqrt(2)
    f_tr = f_tr / np.maximum(np.linalg.norm(f_tr, axis=1), 1.0)[:, None]
    f_te = f_te / np.maximum(np.linalg.norm(f_te, axis=1), 1.0)[:, None]
    t0 = time.perf_counter()
    w0, _ = erm.fit_logistic(z_tr, y_tr, reg=lam)
    base = erm.accuracy(w0, z_te, y_te)
    n = z_tr.shape[0]
    print(f"\n### {name}: n = {n:,} training rows, {z_te.shape[0]:,} test rows, d = {z_tr.shape[1]}, "
          f"λ = {lam:g}, {repeat} noise seeds per cell")
    print(f"Rows: {rule}.\n")
    print("| ε | dpcalc output | dpcalc objective | diffprivlib | non-private |")
    print("|---:|---:|---:|---:|---:|")
    for eps in EPSILONS:
        cells = []
        for method in ("output", "objective"):
            accs = [erm.accuracy(erm.private_logistic_regression(
                z_tr, y_tr, method=method, epsilon=eps, lam=lam, rng=np.random.default_rng(s)).weights, z_te, y_te)
                for s in range(repeat)]
            cells.append(accs)
        cells.append([diffprivlib_accuracy(f_tr, y_tr, f_te, y_te, epsilon=eps, lam=lam, seed=s)
                      for s in range(repeat)])
        shown = " | ".join(f"{np.mean(a):.3f} ± {np.std(a):.3f}" for a in cells)
        print(f"| {eps:g} | {shown} | {base:.3f} |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


def write_example(path: str) -> None:
    """The README's example file: the 10 'mean' features (scaled as above, 4 decimals) and the diagnosis."""
    x, y, names = breast_cancer()
    cols = [i for i, nm in enumerate(names) if nm.startswith("mean ")]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join([names[i].replace(" ", "_") for i in cols] + ["diagnosis"]) + "\n")
        for row, lab in zip(x[:, cols], y, strict=True):
            fh.write(",".join(f"{v:.4f}" for v in row) + "," + ("benign" if lab == 1 else "malignant") + "\n")
    print(f"wrote {path} ({x.shape[0]} rows, {len(cols)} features)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--dataset", choices=["breast-cancer", "fashion", "all"], default="all")
    ap.add_argument("--write-example", default=None)
    opts = ap.parse_args()
    if opts.write_example:
        write_example(opts.write_example)
        return
    if opts.dataset in ("breast-cancer", "all"):
        x, y, _ = breast_cancer()
        tr, te = erm.split_indices(x.shape[0], test_fraction=0.2, seed=0)
        run("Breast cancer (Wisconsin, scikit-learn)", x[tr], y[tr], x[te], y[te], norm_bound=2.0, lam=0.01,
            repeat=opts.repeat)
    if opts.dataset in ("fashion", "all"):
        if not os.path.isdir(FASHION):
            sys.exit(f"{FASHION} is missing: apt-get install -y dataset-fashion-mnist")
        x_tr, y_tr, x_te, y_te = fashion()
        run("Fashion-MNIST, T-shirt/top vs pullover", x_tr, y_tr, x_te, y_te, norm_bound=None, lam=1e-3,
            repeat=opts.repeat)


if __name__ == "__main__":
    main()
