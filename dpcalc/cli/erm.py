"""``dpcalc erm``: differentially private empirical risk minimisation with linear predictors —
the noise of output and objective perturbation and the excess risk it buys (calculator), or a
real private logistic regression on a CSV file (``--fit``)."""

from __future__ import annotations

import click

from dpcalc.cli.ledger import release_ledger_options
from dpcalc.cli.options import (
    RANGES,
    OnlyWith,
    StrictCommand,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.render import Column, emit, fmt


def _noise_cell(r) -> str:
    if r.get("rate") is not None:
        return "rate " + fmt(r["rate"], 6, "down")
    if r.get("noise_std") is not None:
        return "σ = " + fmt(r["noise_std"], 6, "up")
    return "—"


def _atomic_write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`dpcalc._files.atomic_write`: a reader sees the
    old file or the new one, never half of one; a device or a directory is never replaced)."""
    from dpcalc._files import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"), option="--save-model")


_FIT = OnlyWith("with --fit FILE", lambda p: p["fit_path"] is not None)
_CALC = OnlyWith("without --fit (the calculator; with --fit the counts are counted from the --fit file)",
                 lambda p: p["fit_path"] is None)
#: the option table (docs/design.md §5): the options of the calculator and of --fit
ONLY_WITH = {
    "label": _FIT, "norm_bound": _FIT, "test_fraction": _FIT, "split_seed": _FIT, "seed": _FIT,
    "save_path": _FIT,
    "dataset_size": _CALC, "dims": _CALC,
    "beta": OnlyWith("without --fit (the calculator's (1 − β) quantile of the noise norm)",
                     lambda p: p["fit_path"] is None),
}


@click.command("erm", cls=StrictCommand, only_with=ONLY_WITH, epilog=example_epilog(
    "dpcalc erm --eps 1 --dataset-size 455 --dims 31 --lambda 0.01",
    "dpcalc erm --eps 1 --delta 1e-5 --dataset-size 10000 --dims 785 --lambda 1e-3",
    "dpcalc erm --fit docs/examples/breast-cancer.csv --label diagnosis --eps 1 --lambda 0.01 --method objective",
))
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_gaussian"], required=True,
               help="ε > 0 of the released model.")
@number_option("--delta", kind=RANGES["delta_erm"], default=0.0, show_default=True,
               help="δ: 0 = ε-DP (noise ∝ exp(−rate·‖b‖)); in (0, 1) = Gaussian noise.")
@number_option("--lambda", "lam", kind=RANGES["lambda_erm"], required=True,
               help="λ > 0: J(w) = (1/n)Σ loss + (λ/2)‖w‖².")
@click.option("--method", type=click.Choice(["all", "output", "objective"]), default="all", show_default=True,
              help="output perturbation (CMS11 Alg. 1), objective perturbation (CMS11 Alg. 2; KST12 "
                   "with δ), or both.")
@number_option("--dataset-size", kind=RANGES["dataset_size"], default=None,
               help="n: training records (calculator; --fit counts them).")
@number_option("--dims", kind=RANGES["dims"], default=None,
               help="d: number of weights, features plus intercept (calculator; --fit counts them).")
@number_option("--lipschitz", kind=RANGES["lipschitz"], default=1.0, show_default=True,
               help="L ≥ |loss'| for rows of norm ≤ 1 (logistic: 1). Calculator only.")
@number_option("--smoothness", kind=RANGES["smoothness"], default=0.25, show_default=True,
               help="c ≥ loss'' for rows of norm ≤ 1 (logistic: 1/4). Calculator only.")
@number_option("--beta", kind=RANGES["beta"], default=0.05, show_default=True,
               help="β in (0, 1): the noise-norm quantile printed holds with probability 1 − β.")
@click.option("--fit", "fit_path", type=str, default=None,
              help="CSV file with a header row: fit a private logistic regression on it.")
@click.option("--label", type=str, default=None, help="--fit: the label column (two classes).")
@number_option("--norm-bound", kind=RANGES["norm_bound"], default=None,
               help="--fit: clip each row's features to L2 norm B and divide by B (default: divide "
                    "each row by its own norm).")
@number_option("--test-fraction", kind=RANGES["test_fraction"], default=0.2, show_default=True,
               help="--fit: fraction of rows held out for the test accuracy.")
@number_option("--split-seed", kind=RANGES["seed"], default=0, show_default=True,
               help="--fit: seed of the random train/test split (public).")
@number_option("--seed", kind=RANGES["seed"], default=None,
               help="--fit: seed the noise (reproducible, for tests; not for a real release). "
                    "Default: the OS CSPRNG.")
@click.option("--save-model", "save_path", type=str, default=None,
              help="--fit: write the private model (weights, classes, scaling, calibration) as JSON.")
@release_ledger_options
@json_option
def erm_command(epsilon, delta, lam, method, dataset_size, dims, lipschitz, smoothness, beta, fit_path, label,
                norm_bound, test_fraction, split_seed, seed, save_path, ledger_path, ledger_dataset, json_output):
    """DP-ERM: output and objective perturbation for L2-regularised linear models.

    J(w) = (1/n) Σ loss(yᵢ wᵀxᵢ) + (λ/2)‖w‖² with ‖xᵢ‖ ≤ 1, |loss'| ≤ L, loss'' ≤ c;
    neighbours replace one record (n public). Output perturbation (Chaudhuri, Monteleoni,
    Sarwate 2011 Alg. 1): w* + b, Δ₂ = 2L/(nλ), b ∝ exp(−r‖b‖) with rate r = ε/Δ₂ (or the
    analytic Gaussian under (ε, δ)). Objective perturbation (CMS11 Alg. 2): minimise
    J(w) + bᵀw/n + (Δ/2)‖w‖² with ε' = ε − ln(1 + 2c/(nλ) + c²/(n²λ²)), r = ε'/(2L), and
    the fallback Δ = c/(n(e^{ε/4} − 1)) − λ, ε' = ε/2 when ε' ≤ 0; Gaussian noise under
    (ε, δ) (Kifer, Smith, Thakurta 2012, σ as derived in docs/design.md §4).

    The calculator prints the noise and a bound on the expected excess regularised risk
    E[J(w_priv)] − J(w*) that holds for every dataset. --fit runs the private logistic
    regression (L = 1, c = 1/4 after the stated row scaling) and compares its test accuracy
    with the non-private fit at the same λ. With --ledger FILE --dataset NAME (a dataset whose
    budget is under replace adjacency) the released model(s) are recorded before the noise is
    drawn and refused (exit 1) past the budget.
    """
    from dpcalc.cli.ledger import release_guard
    from dpcalc.errors import ParameterError

    methods = ["output", "objective"] if method == "all" else [method]
    delta_value = delta if delta else None
    guard = release_guard(ledger_path, ledger_dataset, releasing=fit_path is not None, release_flag="--fit")
    if guard is not None:
        _check_ledger(guard, methods, delta_value)
    if fit_path is None:  # the options of --fit alone are refused by ONLY_WITH
        for flag, val in (("dataset_size", dataset_size), ("dims", dims)):
            if val is None:
                raise ParameterError(flag, "given", None, message=(
                    f"--{flag.replace('_', '-')} is required (or --fit FILE to fit a model)"))
        _calculator(methods, epsilon, delta_value, lam, dataset_size, dims, lipschitz, smoothness, beta,
                    json_output)
        return
    for flag, val, default in (("lipschitz", lipschitz, 1.0), ("smoothness", smoothness, 0.25)):
        if val != default:
            raise ParameterError(flag, f"{default:g} with --fit", val, message=(
                f"--{flag} is fixed by the logistic loss with --fit (L = 1, c = 1/4 for rows of norm ≤ 1), got {val:g}"))
    if label is None:
        raise ParameterError("label", "given with --fit", None, message="--label COLUMN is required with --fit")
    if save_path is not None and len(methods) != 1:
        raise ParameterError("save_model", "used with --method output or objective", save_path,
                             message="--save-model needs one model: --method output or --method objective")
    _fit(methods, epsilon, delta_value, lam, fit_path, label, norm_bound, test_fraction, split_seed, seed,
         save_path, json_output, guard)


def _check_ledger(guard, methods, delta) -> None:
    """What the ledger can record of an ``erm --fit`` (docs/design.md §11).

    Raises:
        ParameterError: a dataset not under replace adjacency (the guarantees of CMS11 and KST12
            are for replace-one neighbours with n public), or objective perturbation with δ > 0
            (an (ε, δ) guarantee without a Rényi-DP curve: the filter cannot account for it).
    """
    from dpcalc.errors import ParameterError

    ds = guard.ledger.dataset(guard.dataset)
    if ds.adjacency != "replace":
        raise ParameterError("dataset", "", ds.name, message=(
            f"dataset {ds.name!r} has a budget under {ds.adjacency} adjacency; erm's guarantees are for replace-one "
            "neighbours (n public, CMS11): record erm --fit in a dataset created with --adjacency replace"))
    if delta is not None and "objective" in methods:
        raise ParameterError("method", "", "objective", message=(
            "--method objective with --delta > 0 cannot be recorded in a ledger: its (ε, δ) guarantee (KST12) has "
            "no Rényi-DP curve for the ledger's filter; use --method output (a Gaussian mechanism) or --delta 0"))


def _ledger_events(methods, epsilon, delta):
    """(filter event, non-adaptive event) of the released model(s): pure ε for the Gamma-norm noise
    (CMS11 Alg. 1–2); for output perturbation with Gaussian noise the Gaussian mechanism of noise
    multiplier σ/Δ₂ (Balle & Wang 2018 analytic σ; the multiplier taken 1e-12 relatively smaller, so
    its RDP is never below the mechanism's) and its (ε, δ) beside it."""
    from dpcalc.events import ComposedEvent, EpsilonDeltaEvent, GaussianEvent
    from dpcalc.mechanisms.gaussian import analytic_noise_std

    flt, dp = [], []
    for _method in methods:
        if delta is None:
            flt.append(EpsilonDeltaEvent(epsilon, 0.0))
            dp.append(EpsilonDeltaEvent(epsilon, 0.0))
        else:  # output only (_check_ledger)
            mult = analytic_noise_std(epsilon=epsilon, delta=delta, sensitivity=1.0) * (1.0 - 1e-12)
            flt.append(GaussianEvent(mult))
            dp.append(EpsilonDeltaEvent(epsilon, delta))
    if len(flt) == 1:
        return flt[0], (None if delta is None else dp[0])
    return ComposedEvent(tuple(flt)), (None if delta is None else ComposedEvent(tuple(dp)))


def _calculator(methods, epsilon, delta, lam, n, dims, lipschitz, smoothness, beta, json_output) -> None:
    from dpcalc.mechanisms import erm

    results = [erm.erm_noise(method=m, epsilon=epsilon, delta=delta, n=n, dims=dims, lam=lam,
                             lipschitz=lipschitz, smoothness=smoothness, beta=beta) for m in methods]
    inputs = {"epsilon": epsilon, "delta": delta or 0.0, "dataset_size": n, "dims": dims, "regularization": lam,
              "lipschitz": lipschitz, "smoothness": smoothness, "beta": beta}
    cols = [Column("method", lambda r: r["method"], "left"),
            Column("noise", _noise_cell, "left"),
            Column("Δ₂", lambda r: fmt(r.get("sensitivity"), 6, "up")),
            Column("ε'", lambda r: fmt(r["epsilon_noise"], 6, "down")),
            Column("extra λ (Δ)", lambda r: fmt(r["extra_regularization"], 6, "up")),
            Column("E‖b‖", lambda r: fmt(r["expected_noise_norm"], 6, "up")),
            Column(f"‖b‖ ≤ (1−β = {fmt(1 - beta)})", lambda r: fmt(r["noise_norm_quantile"], 6, "up")),
            Column("E excess risk ≤", lambda r: fmt(r["excess_risk_bound"], 6, "up"))]
    notes = []
    kinds = "Gaussian noise N(0, σ²I)" if delta else "noise density ∝ exp(−rate·‖b‖): ‖b‖ ~ Gamma(d, 1/rate), uniform direction"
    notes.append(f"{kinds}; neighbours replace one record (n public); rows of norm ≤ 1.")
    for r in results:
        if r.get("branch") == "fallback":
            notes.append("objective: ε' = ε − ln(1 + 2c/(nλ) + c²/(n²λ²)) ≤ 0, so the fallback branch: "
                         "extra regularisation Δ = c/(n(e^{ε/4} − 1)) − λ and ε' = ε/2 (CMS11 Alg. 2).")
        if r.details.get("kst12_published_noise_std") is not None:
            notes.append(f"objective (ε, δ): σ by the bound of docs/design.md §4. KST12 Alg. 1 prints σ = "
                         f"{fmt(r.details['kst12_published_noise_std'])} for its own split (Δ = 2c/(nε), noise "
                         "share ε/2), where dpcalc's bound needs about twice that: not used.")
    notes.append("E excess risk: E[J(w_priv)] − J(w*) for every dataset, J the regularised empirical risk "
                 "(docs/design.md §4).")
    notes.append("Sources: " + "; ".join(dict.fromkeys(r.source for r in results)) + ".")
    emit(command="erm", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         title="DP-ERM noise", columns=cols, notes=notes,
         input_labels={"epsilon": "ε", "delta": "δ", "dataset_size": "n", "dims": "d", "regularization": "λ",
                       "lipschitz": "L", "smoothness": "c", "beta": "β"})


def _fit(methods, epsilon, delta, lam, path, label, norm_bound, test_fraction, split_seed, seed, save_path,
         json_output, guard=None) -> None:
    import json
    import math

    import numpy as np

    from dpcalc.mechanisms import erm
    from dpcalc.results import MechanismResult

    data = erm.read_csv_dataset(path, label=label)
    z, rule = erm.scale_rows(data.features, norm_bound=norm_bound)
    train, test = erm.split_indices(z.shape[0], test_fraction=test_fraction, seed=split_seed)
    zt, yt, ze, ye = z[train], data.labels[train], z[test], data.labels[test]
    w0, g0 = erm.fit_logistic(zt, yt, reg=lam)
    rng = None if seed is None else np.random.default_rng(seed)
    if guard is not None:  # before any noise is drawn
        event, dp_event = _ledger_events(methods, epsilon, delta)
        guard.reserve(mechanism="erm-logistic-" + "+".join(methods), event=event, dp_event=dp_event,
                      params={"epsilon": epsilon, "delta": delta or 0.0, "regularization": lam,
                              "methods": methods, "dataset_size": int(zt.shape[0]), "dims": int(z.shape[1]),
                              "norm_bound": norm_bound})
    results = [MechanismResult(
        method="non-private", values={"epsilon": math.inf, "delta": 0.0,
                                      "train_accuracy": erm.accuracy(w0, zt, yt),
                                      "test_accuracy": erm.accuracy(w0, ze, ye),
                                      "weight_norm": float(np.linalg.norm(w0))},
        certified=False, reason="no privacy: the exact minimiser, for comparison",
        source="", details={"gradient_norm": g0})]
    fits = {}
    for m in methods:
        f = erm.private_logistic_regression(zt, yt, method=m, epsilon=epsilon, delta=delta, lam=lam, rng=rng)
        fits[m] = f
        cal = dict(f.calibration)
        vals = {"epsilon": epsilon, "delta": delta or 0.0}
        for key in ("sensitivity", "rate", "noise_std", "epsilon_noise", "extra_regularization", "branch"):
            if key in cal:
                vals[key] = cal[key]
        vals.update(train_accuracy=erm.accuracy(f.weights, zt, yt), test_accuracy=erm.accuracy(f.weights, ze, ye),
                    weight_norm=float(np.linalg.norm(f.weights)))
        exact = m == "objective"
        results.append(MechanismResult(
            method=m, values=vals, certified=not exact,
            reason=("the objective-perturbation analysis (CMS11 Thm 9; docs/design.md §4) covers the exact "
                    "minimiser of the perturbed objective; "
                    f"this is a numerical one (gradient norm {f.gradient_norm:.1e})") if exact else None,
            source=(erm.SOURCE_OBJECTIVE_GAUSS if delta else erm.SOURCE_OBJECTIVE) if exact else
            (erm.SOURCE_OUTPUT_GAUSS if delta else erm.SOURCE_OUTPUT),
            details={"gradient_norm": f.gradient_norm}))
    if save_path is not None:
        model = erm.model_json(fits[methods[0]], feature_names=data.feature_names, classes=data.classes,
                               rule=rule, norm_bound=norm_bound)
        _atomic_write(save_path, json.dumps(model, indent=2, allow_nan=False) + "\n")
    inputs = {"fit": path, "label": label, "epsilon": epsilon, "delta": delta or 0.0, "regularization": lam,
              "dataset_size": int(zt.shape[0]), "test_rows": int(ze.shape[0]), "dims": int(z.shape[1]),
              "norm_bound": norm_bound, "test_fraction": test_fraction, "split_seed": split_seed, "seed": seed}
    cols = [Column("model", lambda r: r["method"], "left"),
            Column("ε", lambda r: fmt(r["epsilon"]) if r["epsilon"] is not None else "∞"),
            Column("noise", _noise_cell, "left"),
            Column("extra λ (Δ)", lambda r: fmt(r.get("extra_regularization"), 6, "up")),
            Column("‖w‖", lambda r: fmt(r["weight_norm"], 4)),
            Column("train acc", lambda r: fmt(r["train_accuracy"], 4)),
            Column("test acc", lambda r: fmt(r["test_accuracy"], 4))]
    notes = [f"Rows: {rule}; L = 1, c = 1/4 (logistic loss).",
             f"Classes: {data.classes[0]!r} → −1, {data.classes[1]!r} → +1; n = {zt.shape[0]:,} training rows, "
             f"{ze.shape[0]:,} test rows (split seed {split_seed}); λ = {fmt(lam)}.",
             "Only the private weights are private: the accuracies and the non-private row use the data "
             "without noise (evaluation, not for publication).",
             ("Noise: seeded (--seed), reproducible, not for a real release." if seed is not None else
              "Noise: the OS CSPRNG (floating point); ‖b‖ ~ Gamma(d, 1/rate) × uniform direction"
              + (" / N(0, σ²I)." if delta else "."))]
    if "output" in fits:
        notes.append(f"output: Δ₂ = 2/(nλ) + 2g/λ with the solver's verified gradient norm g ≤ {erm.GRADIENT_TOL:g} "
                     "(covers the numerical minimiser).")
    if "objective" in fits:
        notes.append("objective: the guarantee is for the exact minimiser of the perturbed objective "
                     f"(solved to gradient norm ≤ {erm.GRADIENT_TOL:g}); certified=false in JSON for that reason.")
    if save_path is not None:
        notes.append(f"Model written to {save_path}.")
    out = [r.to_json() for r in results]
    if guard is not None:
        from dpcalc.cli.ledger import with_ledger

        out[1] = with_ledger(out[1], guard, notes)
    emit(command="erm", inputs=inputs, results=out, json_output=json_output,
         title=f"private logistic regression (label {label!r})", columns=cols, notes=notes)
    if guard is not None:
        guard.released()
