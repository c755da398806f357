"""``dpcalc train``: DP-SGD on MNIST-format data, reporting the ε dpcalc certifies.

This module must not import torch at import time (``dpcalc --help`` lists it): the
trainer is imported inside the command, and a missing torch gives one line.
"""

from __future__ import annotations

from typing import Any

import click

from dpcalc.cli.ledger import train_ledger_options
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    accountant_option,
    example_epilog,
    json_option,
    number_option,
)
from dpcalc.cli.person import check_train_user_processes, train_user_notes, train_user_options
from dpcalc.cli.plot_style import plot_option, prepare
from dpcalc.cli.render import Column, emit, fmt

DATASET_CHOICES = ["mnist", "fashion-mnist"]
DEVICE_CHOICES = ["auto", "cpu", "cuda"]
MODEL_CHOICES = ["tanh-cnn", "logistic", "scatternet-linear", "scatternet-cnn"]
#: ``--sampling`` (dpcalc.train.samplers; listed here so that --help does not import torch)
SAMPLING_CHOICES = ["poisson", "without-replacement", "with-replacement", "truncated-poisson", "shuffle",
                    "balls-in-bins", "cyclic"]


def _epsilon_cell(r: dict) -> str:
    eps = fmt(r.get("epsilon"), 5)
    lower = r.get("details", {}).get("epsilon_lower")
    if lower is not None:
        eps += f" [{fmt(lower, 5)}, {fmt(r.get('epsilon'), 5)}]"
    if not r.get("certified", True):
        eps += " approx."
    return eps


#: confidence of the canary audit: the empirical ε holds with probability ≥ 1 − AUDIT_BETA
AUDIT_BETA = 0.05


def _tpr_cell(r: dict) -> str:
    risk = r.get("risk")
    if risk is None or risk.get("tpr_bound") is None:
        return "—"
    return fmt(risk["tpr_bound"], 4, "up") + ("" if risk.get("certified", True) else " approx.")


COLUMNS = [
    Column("test accuracy", lambda r: f"{r['test_accuracy']:.2%}"),
    Column("ε", _epsilon_cell),
    Column("δ", lambda r: fmt(r.get("delta"))),
    Column("accountant", lambda r: r["accountant"], "left"),
    Column("σ", lambda r: fmt(r.get("noise_multiplier"), 5)),
    Column("q", lambda r: fmt(r.get("sample_rate"), 5)),
    Column("steps", lambda r: fmt(r.get("steps"))),
    Column("time", lambda r: f"{r['seconds']:.0f} s"),
]


@click.command("train", cls=StrictCommand, epilog=example_epilog(
    "dpcalc train --dataset fashion-mnist --target-epsilon 3 --epochs 40 --batch-size 2048 "
    "--lr 4 --max-grad-norm 0.1",
    "dpcalc train --dataset mnist --download --noise-multiplier 1.1 --epochs 5 --json",
))
@click.option("--dataset", type=click.Choice(DATASET_CHOICES), default="mnist", show_default=True,
              help="MNIST-format dataset (IDX files, raw or .gz).")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Directory holding the four IDX files. Otherwise searched: $DPCALC_DATA/<name>, "
                   "the user cache dir, /usr/share/datasets/<name>.")
@click.option("--download", is_flag=True,
              help="Fetch the official files (MD5-verified) into the user cache dir.")
@click.option("--model", default="tanh-cnn", show_default=True, metavar="|".join(MODEL_CHOICES) + "|MOD:FACTORY",
              help="tanh CNN of Papernot et al. 2021, logistic regression, a linear model / CNN on ScatterNet "
                   "features (Tramèr & Boneh 2021), or package.module:factory "
                   "(factory() returns your torch.nn.Module: (B, 1, 28, 28) images -> (B, 10) logits; "
                   "batch norm refused, GroupNorm/LayerNorm fine).")
@number_option("--noise-multiplier", "--sigma", "noise_multiplier", kind=RANGES["noise_multiplier_train"],
               default=None, help="σ: noise std divided by the clipping norm.")
@number_option("--target-epsilon", "--eps", "target_epsilon", kind=RANGES["epsilon_target_train"], default=None,
               help="Calibrate σ for this ε over the planned steps (as `dpcalc sigma`).")
@number_option("--delta", kind=RANGES["delta_train"], default=1e-5, show_default=True,
               help="δ, below 1/N.")
@number_option("--epochs", kind=RANGES["epochs_train"], default=10, show_default=True,
               help="Expected passes over the data; T = ceil(epochs·N/B) steps.")
@number_option("--batch-size", kind=RANGES["batch_size"], default=512, show_default=True,
               help="Batch size B (expected for Poisson sampling: rate q = B/N), at most N.")
@click.option("--noise", type=click.Choice(["independent", "correlated"]), default="independent", show_default=True,
              help="independent: DP-SGD's Gaussian noise each step; correlated: a matrix-factorization mechanism's "
                   "noise (MF-SGD / DP-FTRL, --strategy), generated online, on a fixed epoch order.")
@click.option("--strategy", default=None, metavar="S",
              help="With --noise correlated: tree, sqrt, banded:B, blt:DECAYS/SCALES or identity (as `dpcalc mf`).")
@click.option("--sampling", type=click.Choice(SAMPLING_CHOICES), default=None,
              help="[default: poisson; cyclic with --noise correlated] "
                   "Batch sampler, accounted as run: poisson (each record with probability B/N; add/remove), "
                   "without-replacement (exactly B each step; replace-one), with-replacement (B independent "
                   "uniform draws each step, duplicates kept; add/remove, rdp), truncated-poisson (Poisson capped at "
                   "--max-batch-size; add/remove, rdp), shuffle / balls-in-bins (each record in one batch per epoch; "
                   "zero-out; ε is the certified E-fold Gaussian bound, a lower bound and the Poisson ε beside it), cyclic "
                   "(one fixed permutation, the same batches every epoch; --noise correlated only).")
@click.option("--neighboring", type=click.Choice(["add-remove", "replace"]), default=None,
              help="Adjacency of --sampling without-replacement / with-replacement / truncated-poisson (default: "
                   "replace for without-replacement, add-remove for the others); a pair without a proof is refused.")
@number_option("--max-batch-size", kind=RANGES["batch_size"], default=None,
               help="B_max: cap of --sampling truncated-poisson (a random B_max of the sampled records are kept).")
@number_option("--lr", kind=RANGES["lr"], default=0.5, show_default=True, help="Learning rate.")
@click.option("--optimizer", type=click.Choice(["sgd", "momentum", "adam"]), default="momentum",
              show_default=True, help="Optimiser applied to the noisy gradient (post-processing).")
@number_option("--momentum", kind=RANGES["momentum"], default=0.9, show_default=True,
               help="Momentum of --optimizer momentum.")
@number_option("--max-grad-norm", kind=RANGES["max_grad_norm_train"], default=0.1, show_default=True,
               help="C: per-example L2 clipping norm over all parameters.")
@accountant_option(default=None, help="Accountant for ε (default: the tightest certified one).")
@number_option("--max-epsilon", kind=RANGES["max_epsilon"], default=None,
               help="Stop before the step that would take ε above this budget.")
@number_option("--max-physical-batch", kind=RANGES["max_physical_batch"], default=512, show_default=True,
               help="Most examples whose per-example gradients are in memory at once.")
@number_option("--seed", kind=RANGES["seed"], default=0, show_default=True, help="Random seed.")
@click.option("--checkpoint", type=click.Path(file_okay=False), default=None,
              help="Directory for per-epoch checkpoints and the privacy ledger.")
@click.option("--resume", is_flag=True, help="Continue the run in --checkpoint.")
@click.option("--log", "--log-file", "log", type=click.Path(dir_okay=False), default=None,
              help="Append one JSON line per epoch to this file (under torchrun write --log-file: "
                   "torchrun reads --log as its --log-dir).")
@click.option("--save-model", type=click.Path(dir_okay=False), default=None,
              help="Save the state dict here, with the privacy parameters in FILE.json.")
@number_option("--threads", kind=RANGES["threads"], default=None, help="torch CPU threads.")
@number_option("--audit-canaries", "audit_canaries", kind=RANGES["audit_canaries"], default=0, show_default=True,
               metavar="M",
               help="Insert M audit canaries (uniform-noise images with a random fixed label, each included "
                    "with probability ½; they count in N) and print the empirical ε lower bound of the "
                    "one-run audit (95%) beside the certified ε.")
@click.option("--risk", is_flag=True,
              help="Also print the certified bound on a membership-inference attack's TPR at FPR = 1e-3 "
                   "(as `dpcalc risk`).")
@click.option("--device", type=click.Choice(DEVICE_CHOICES), default="auto", show_default=True,
              help="auto: CUDA when available, else the CPU.")
@number_option("--nproc", kind=RANGES["nproc"], default=None, metavar="W",
               help="Train on W local processes (data parallel; launched through torch.distributed.run, "
                    "as `torchrun --standalone --nproc-per-node W -m dpcalc train ...`); same mechanism and ε.")
@click.option("--allow-non-finite-loss", is_flag=True,
              help="Train on when a step's loss is NaN or infinite (by default the run stops there, exit 1).")
@click.option("--quiet", is_flag=True, help="No progress display.")
@plot_option("After the run, draw test accuracy and ε spent per epoch into FILE.")
@train_user_options
@train_ledger_options
@json_option
@click.pass_context
def train_command(ctx: click.Context, json_output: bool, quiet: bool, risk: bool, nproc: int | None,
                  ledger_path: str | None, ledger_dataset: str | None, plot: str | None, **options: Any) -> None:
    """Train a classifier with DP-SGD and report the ε dpcalc certifies for it.

    Poisson sampling (each example joins a step with probability q = B/N),
    per-example gradients clipped to norm C, Gaussian noise N(0, σ²C²) on their sum,
    divided by the expected batch size (Abadi et al. 2016). ε comes from the
    accountant for (σ, q, steps taken), as `dpcalc epsilon` computes it.
    --sampling trains with another batch sampler and accounts for that one
    (shuffle / balls-in-bins: the certified E-fold Gaussian ε, the lower bound
    and the Poisson ε beside it).
    With --ledger FILE --ledger-dataset NAME the planned steps are reserved in the
    ledger before the first step (refused, exit 1, past the budget) and the steps
    taken are recorded as the run goes: poisson, truncated-poisson, without-replacement
    and with-replacement on an add/remove dataset, without-replacement, shuffle and
    balls-in-bins on a replace one (the others are refused with the reason).
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        raise click.UsageError(
            "dpcalc train needs PyTorch: pip install 'dpcalc[train]'") from None
    from dpcalc.errors import DpcalcError
    from dpcalc.train.config import TrainConfig
    from dpcalc.train.distributed import SilentError, context_from_environment, in_torchrun
    from dpcalc.train.loop import train

    if options["sampling"] is None:
        options["sampling"] = "cyclic" if options["noise"] == "correlated" else "poisson"
    config = TrainConfig(**options).validated()
    if config.noise == "correlated":
        _check_correlated(nproc, risk, ledger_path)
    check_train_user_processes(config, nproc)
    prepare(plot)  # a plot target that cannot be written is refused before any training
    if nproc is not None and in_torchrun():
        raise click.BadParameter("--nproc launches the processes itself; under torchrun leave it out "
                                 "(torchrun's --nproc-per-node sets the number)", param_hint="--nproc")
    if nproc is not None and nproc > 1:
        _ledger_hooks(ledger_path, ledger_dataset, config)  # every ledger check before any process starts
        raise click.exceptions.Exit(_launch(ctx, config, nproc))
    context = context_from_environment(config.device)
    if context.distributed:
        _stop_on_sigterm(context)
    finished = False
    try:
        reporter = None
        if not quiet and context.is_main:
            from dpcalc.cli.progress import RichReporter

            reporter = RichReporter()
        # the ledger is kept by the main process only (it also writes the run's own ledger file)
        hooks = _ledger_hooks(ledger_path, ledger_dataset, config) if context.is_main else None
        try:
            if hooks is not None:
                hooks.inner = reporter
                result = train(config, reporter=hooks, on_step=hooks.on_step, context=context)
                hooks.finish(result.steps)
            else:
                result = train(config, reporter=reporter, context=context)
        except SilentError as e:  # rank 0 prints the error that stopped every rank
            raise click.exceptions.Exit(e.exit_code) from None
        except (DpcalcError, click.ClickException, KeyboardInterrupt):
            raise
        except Exception as e:  # a rank never prints a traceback: one line, the rank, the reason
            if not context.distributed:
                raise
            text = " ".join(str(e).split())[:300]
            raise DpcalcError(f"rank {context.rank}: {type(e).__name__}: {text}; this rank stopped"
                              f"{context.ledger_note}") from None
        finished = True
    finally:
        if context.distributed and not finished:
            # stopping with an error: the launcher's SIGTERM to the surviving ranks may now arrive
            # while this one is already exiting (atexit); it must not raise a second, traceback-
            # printing error there — the one-line error is already on its way
            import signal

            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        context.close(finished=finished)
    if not context.is_main:
        return
    res = result.to_json()
    inputs = {
        "dataset": config.dataset, "model": config.model, "dataset_size": result.dataset_size,
        "batch_size": config.batch_size, "epochs": config.epochs, "lr": config.lr,
        "optimizer": config.optimizer, "max_grad_norm": config.max_grad_norm,
        "noise_multiplier": config.noise_multiplier, "target_epsilon": config.target_epsilon,
        "delta": config.delta, "max_epsilon": config.max_epsilon, "seed": config.seed,
        "audit_canaries": config.audit_canaries or None, "device": str(context.device.type),
        "processes": context.world_size if context.world_size > 1 else None,
    }
    inputs = {k: val for k, val in inputs.items() if val is not None}
    unit_inputs, notes = train_user_notes(result, config, res["accountant"])
    inputs.update(unit_inputs)
    if result.stopped:
        notes.append(result.stopped[0].upper() + result.stopped[1:] + ".")
    if result.calibration is not None and result.sampler is not None and "passes" in result.sampler:
        notes.append(f"σ calibrated on the certified bound ({res['accountant']}) for ε = {config.target_epsilon:g} "
                     f"over {result.calibration.details.get('passes')} epoch(s) ({result.planned_steps:,} planned steps).")
    elif result.calibration is not None and config.noise == "correlated":
        notes.append(f"σ calibrated for ε = {config.target_epsilon:g} over {result.planned_steps:,} planned steps: "
                     "σ = Δ·σ_MF, σ_MF as `dpcalc mf --eps` computes it (rounded up, ε verified).")
    elif result.calibration is not None:
        notes.append(f"σ calibrated by {res['accountant']} for ε = {config.target_epsilon:g} over "
                     f"{result.planned_steps:,} planned steps (as `dpcalc sigma`).")
    notes.extend(result.notes)
    if result.orphaned_steps:
        notes.append(f"ε covers all {result.steps:,} steps the data was used in: "
                     f"{result.steps - result.orphaned_steps:,} applied to this model and "
                     f"{result.orphaned_steps:,} orphaned steps of interrupted runs (taken after "
                     "their last checkpoint; their updates were lost).")
        eps = result.accounting.epsilon
        if config.target_epsilon is not None and eps is not None and eps > config.target_epsilon:
            notes.append(f"ε exceeds --target-epsilon {config.target_epsilon:g} because of the "
                         "orphaned steps.")
    columns = list(COLUMNS)
    if result.canaries is not None:
        audit = audit_canaries(result, delta=config.delta, beta=AUDIT_BETA)
        res["audit"] = audit
        res["empirical_epsilon_lower"] = audit["epsilon_lower"]
        columns.insert(2, Column(f"empirical ε ≥ ({1 - AUDIT_BETA:.0%})",
                                 lambda r: fmt(r["empirical_epsilon_lower"], 4, "down")))
        notes.extend(audit_notes(res, audit))
    if risk:
        res["risk"] = train_risk(result, config)
        columns.insert(2 + (result.canaries is not None),
                       Column("TPR at FPR 1e-3 ≤", _tpr_cell))
        if res["risk"].get("tpr_bound") is not None:
            notes.append(f"TPR at FPR 1e-3: no membership-inference test on this model beats TPR "
                         f"{fmt(res['risk']['tpr_bound'], 4, 'up')} at FPR 0.001 "
                         f"({'certified' if res['risk']['certified'] else 'approximate'}, {res['accountant']} "
                         f"privacy curve; the (ε, δ) pair alone allows {fmt(res['risk']['single_pair'], 4, 'up')}); "
                         "as `dpcalc risk`.")
    if result.sampler is None and result.users is None:
        notes.append(f"Same as: dpcalc epsilon --sigma {result.noise_multiplier!r} --sample-rate "
                     f"{result.sample_rate!r} --steps {result.steps} --delta {config.delta!r} "
                     f"--accountant {res['accountant']}")
        notes.append("Assumes Poisson sampling and add/remove adjacency; "
                     f"source: {res.get('source') or res['accountant']}.")
    elif result.sampler is None:
        notes.append("Poisson sampling of users, add/remove adjacency (a user added or removed); "
                     f"source: {res.get('source') or res['accountant']}.")
    else:
        notes.extend(sampler_notes(result, res, config))
        inputs["sampling"] = config.sampling
        if config.neighboring is not None:
            inputs["neighboring"] = config.neighboring
        if config.max_batch_size is not None:
            inputs["max_batch_size"] = config.max_batch_size
        columns.insert(columns.index(next(c for c in columns if c.header == "accountant")) + 1,
                       Column("sampler", lambda r: r["details"]["sampling"], "left"))
        if result.sampler.get("poisson_epsilon") is not None:
            columns.insert(columns.index(next(c for c in columns if c.header == "ε")) + 1,
                           Column("ε if Poisson", lambda r: fmt(r["details"].get("poisson_epsilon"), 5)))
    if hooks is not None:
        info = hooks.summary()
        res["ledger"] = info
        notes.append(f"Recorded in ledger {info['file']} (dataset {info['dataset']!r}, event #{info['event']}): "
                     f"{info['steps_taken']} of {info['steps_reserved']} reserved steps taken; ε spent "
                     f"{fmt(info['filter_epsilon'], rounding='up')} of {fmt(info['budget_epsilon'])} at "
                     f"δ = {fmt(info['delta'])} (RDP filter), {fmt(info['left'], rounding='down')} left.")
    if config.save_model:
        notes.append(f"Model saved to {config.save_model} (privacy parameters in {config.save_model}.json).")
        notes.append(save_statement(config.save_model, res))
    if plot is not None:
        from dpcalc.cli.run_plots import plot_train

        plot_train(result.history, plot, accountant=res["accountant"], delta=config.delta,
                   where=f"{config.dataset}, {config.model}, σ = {result.noise_multiplier:.4g}, q = "
                         f"{result.sample_rate:.4g}, {result.steps:,} steps")
        notes.append(f"Plot written to {plot} (test accuracy and ε after each of {len(result.history)} epochs).")
    emit(command="train", inputs=inputs, results=[res], json_output=json_output, columns=columns,
         title="MF-SGD result (correlated noise)" if config.noise == "correlated" else "DP-SGD result",
         notes=notes)


def _check_correlated(nproc: int | None, risk: bool, ledger_path: str | None) -> None:
    """The options ``--noise correlated`` does not support, refused in one line."""
    from dpcalc.errors import ParameterError

    for flag, bad in (("--nproc", nproc is not None and nproc > 1), ("--risk", risk), ("--ledger", ledger_path)):
        if bad:
            raise ParameterError(flag.lstrip("-"), "", None, message=(
                f"{flag} is not supported with --noise correlated (one process, its own accounting: the "
                "noise stream is not shared between processes, and the risk and ledger charges are DP-SGD's)"))


def save_statement(model_path: str, res: dict) -> str:
    """Write the run's DP statement (Markdown, as ``dpcalc report --run MODEL.json``) beside the saved
    model, ``MODEL.dp.md``, with the canary audit when there was one; returns the note saying so (or
    why it was not written: the model and its sidecar are already saved, so this never fails the run)."""
    import json

    from dpcalc.claims.statement import build_statement, render_markdown, run_from_sidecar
    from dpcalc.cli.report import write_statement
    from dpcalc.errors import DpcalcError

    sidecar, path = f"{model_path}.json", f"{model_path}.dp.md"
    try:
        with open(sidecar, encoding="utf-8") as fh:
            meta = json.load(fh)
        if res.get("audit") is not None:
            meta["audit"] = res["audit"]
        statement = build_statement(run_from_sidecar(meta), source=f"the run file {sidecar}")
        write_statement(path, render_markdown(statement), option="--save-model")
    except (DpcalcError, OSError, ValueError) as e:
        return f"DP statement not written: {e}"
    return f"DP statement for the model card written to {path} (as dpcalc report --run {sidecar})."


def sampler_notes(result, res: dict, config) -> list[str]:
    """The sentences under the table of a non-Poisson run: the sampler, its adjacency, the
    equivalent calculator command and, for shuffle / balls-in-bins, the bracket and the Poisson ε."""
    s = result.sampler
    name, b, n = s["sampling"], s["batch_size"], result.dataset_size
    common = (f"--sigma {result.noise_multiplier!r} --batch-size {b} --dataset-size {n} --steps {result.steps} "
              f"--delta {config.delta:g}")
    if name == "without-replacement":
        how = ("replace-one adjacency (N is public; the default for this sampler, --neighboring add-remove for the "
               "add/remove bound)" if s["adjacency"] == "replace" else
               "add/remove adjacency (Birrell, Ebrahimi, Behnia, Pacheco 2024 Thm 3.1/3.3)")
        return [f"Sampler: without-replacement — each step a uniformly random batch of exactly B = {b} of the "
                f"N = {n} records; accounted under {how}.",
                f"Same as: dpcalc epsilon {common} --sampling without-replacement --neighboring {s['adjacency']} "
                f"--accountant {res['accountant']}; source: {res.get('source') or res['accountant']}."]
    if name == "with-replacement":
        return [f"Sampler: with-replacement — each step B = {b} independent uniform draws from the N = {n} records "
                "(a record drawn twice counts twice); accounted under add/remove adjacency (Birrell, Ebrahimi, "
                "Behnia, Pacheco 2024 Thm 3.6; the only adjacency with a proof for this sampler).",
                f"Same as: dpcalc epsilon {common} --sampling with-replacement --accountant {res['accountant']}; "
                f"source: {res.get('source') or res['accountant']}."]
    if name == "truncated-poisson":
        return [f"Sampler: truncated-poisson — each record joins with probability q = B/N = "
                f"{result.sample_rate:.4g}, batch capped at B_max = {s['max_batch_size']} (a random B_max kept); "
                "add/remove adjacency.",
                f"Same as: dpcalc epsilon {common} --sampling truncated-poisson --max-batch-size "
                f"{s['max_batch_size']} --accountant {res['accountant']}; source: {res.get('source') or res['accountant']}."]
    if name == "cyclic":
        return [f"Correlated noise: strategy {s['strategy']} (matrix-factorization mechanism, MF-SGD), batches in a "
                f"fixed epoch order (T = ⌈N/B⌉ = {s['steps_per_epoch']} batches, the same every epoch: "
                f"{s['epochs']} participation(s) at min-separation {s['steps_per_epoch']}); zero-out adjacency; "
                f"noise held in {s['noise_buffers']} array(s) of the parameters' size.",
                f"ε is the Gaussian mechanism's with sensitivity Δ = {res['details']['sensitivity']:.6g} "
                f"(μ = Δ/σ = {res['details']['mu']:.6g}"
                + (f"; orphaned steps add {s['orphaned_passes']} release(s) of Δ" if s["orphaned_passes"] else "")
                + f"); source: {res.get('source')}.",
                f"Same as: dpcalc mf --strategy {s['strategy']} --steps {s['steps_per_epoch'] * s['epochs']} "
                f"--epochs {s['epochs']} --sigma {res['noise_multiplier'] / s['sensitivity']!r} --delta {config.delta:g} "
                "(whose σ is the noise std over Δ)."]
    t, passes = s["steps_per_epoch"], s["passes"]
    layout = ("one uniformly random permutation per epoch cut into" if name == "shuffle"
              else "each record put in one of")
    out = [f"Sampler: {name} — {layout} T = ⌈N/B⌉ = {t} batches; adjacency zero-out (a record replaced by one "
           "with zero gradient; Chua et al. 2024 §2).",
           f"ε is the certified upper bound: each record is in one batch per epoch, so {passes} epoch(s) "
           f"are at most the {passes}-fold Gaussian mechanism (μ = √E/σ; a partial epoch counts as a whole one"
           + (f", orphaned steps add {s['orphaned_passes']}" if s["orphaned_passes"] else "") + "); "
           f"source: {res.get('source')}."]
    if not s["orphaned_passes"] and result.steps == passes * t:
        out.append(f"Same as the {name} row of: dpcalc sampling-cost --sigma {result.noise_multiplier!r} "
                   f"--batch-size {b} --dataset-size {n} --epochs {passes} --delta {config.delta:g}"
                   + (" (which also prints a Monte Carlo estimate, approximate)" if name == "balls-in-bins" else ""))
    low, pois = s.get("epsilon_lower"), s.get("poisson_epsilon")
    if low is not None:
        out.append(f"Lower bound {fmt(low, 4, 'down')} ({s['lower_bound_epochs']} whole epoch(s); "
                   f"{s['source_lower']}): a proven lower bound on this sampler's ε, never an ε — the true ε "
                   f"lies in [{fmt(low, 4, 'down')}, {fmt(res['epsilon'], 5)}].")
    else:
        out.append("No lower bound: " + (s.get("epsilon_lower_reason") or "less than one whole epoch was applied "
                                         "to the model") + ".")
    if pois is not None:
        under = (f"; it is below the proven lower bound: reporting it would under-report ε by ≥ "
                 f"{low / pois:.3g}×" if low is not None and pois > 0 and low > pois else "")
        out.append(f"ε if Poisson {fmt(pois, 5)}: the Poisson number ({s['poisson_accountant']}, same σ, q = B/N, "
                   f"{result.steps:,} steps) "
                   f"a user might have reported for this run — not this run's ε{under}.")
    return out


def _ledger_hooks(ledger_path, ledger_dataset, config):
    """The ledger hooks of a run with --ledger (None without); every ledger check (file, dataset)
    happens here, before any data is loaded."""
    from dpcalc.cli.ledger import _both
    from dpcalc.errors import ParameterError

    if not _both(ledger_path, ledger_dataset, "--ledger-dataset"):
        return None
    if config.resume:
        raise ParameterError("resume", "", None, message=(
            "--resume with --ledger is not supported: the interrupted run's reservation already "
            "counts all its planned steps; start a new run"))
    if config.privacy_unit == "user":  # review finding: the user-level ε is not this run's cost per record
        raise ParameterError("ledger", "", None, message=(
            "--ledger with --privacy-unit user is refused: a ledger dataset's budget is for one record, and "
            "removing one record of a user who holds several changes that user's update (a replace, not an "
            "add/remove, of a user), which the user-level ε does not bound; train without --ledger, or at "
            "the record level"))
    from dpcalc.ledger import Ledger
    from dpcalc.ledger.training import LedgerHooks

    params = {"model": config.model, "image_dataset": config.dataset, "batch_size": config.batch_size,
              "epochs": config.epochs, "max_grad_norm": config.max_grad_norm, "delta": config.delta,
              "seed": config.seed}
    # a sampler without a sound charge on the dataset's adjacency is refused here (exit 2, nothing written)
    return LedgerHooks(Ledger(ledger_path), ledger_dataset, params=params, sampling=config.sampling)


def audit_canaries(result, *, delta: float, beta: float = AUDIT_BETA) -> dict:
    """The one-run audit (Steinke, Nasr, Jagielski 2023; :func:`dpcalc.risk.audit.one_run_audit`)
    of a ``--audit-canaries`` run: each canary's inclusion coin and its score (negative loss under
    the final model), at the run's δ, confidence 1 − β.

    Returns:
        JSON-ready dict: ``epsilon_lower`` (the empirical lower bound), ``confidence``, ``beta``,
        ``delta``, ``canaries``, ``included``, ``guesses``, ``correct``, ``rule``, ``rules_tried``,
        ``score``, ``kind``, ``seed``, ``method``, ``source``.
    """
    from dpcalc.risk.audit import ONE_RUN_SOURCE, AuditData, one_run_audit

    c = result.canaries
    a = one_run_audit(AuditData(c.included, scores=c.scores), delta=delta, beta=beta)
    return {"method": "one-run", "epsilon_lower": a.epsilon_lower, "confidence": 1.0 - beta, "beta": beta,
            "delta": delta, "canaries": a.canaries, "included": int(c.included.sum()), "guesses": a.guesses,
            "correct": a.correct, "rule": a.rule, "rules_tried": a.rules_tried,
            "score": "negative cross-entropy loss under the final model", "kind": c.record["kind"],
            "seed": c.record["seed"], "source": ONE_RUN_SOURCE}


def audit_notes(res: dict, audit: dict) -> list[str]:
    """The sentences printed under the table of a ``--audit-canaries`` run."""
    eps, low = res.get("epsilon"), audit["epsilon_lower"]
    conf = f"{audit['confidence']:.0%}"
    notes = [f"Audit: {audit['canaries']:,} canaries ({audit['kind']}), each included with probability ½ "
             f"(seed {audit['seed']}, recorded in the privacy ledger); the {audit['included']:,} included are "
             f"training records, so N = {res['details']['dataset_size']:,} counts them and the certified ε "
             "covers them; the test accuracy is that of the model trained with them."]
    if eps is not None and low > eps:
        notes.append(f"Empirical ε ≥ {fmt(low, 4, 'down')} EXCEEDS the certified ε = {fmt(eps, 6, 'up')}: the "
                     f"guarantee does not hold for this run (an implementation or accounting bug), with "
                     f"probability ≥ {conf}.")
    else:
        notes.append(f"Empirical ε ≥ {fmt(low, 4, 'down')} ({conf} confidence; one-run audit, rule "
                     f"'{audit['rule']}', {audit['correct']:,} of {audit['guesses']:,} guesses right): a LOWER "
                     "bound on the true ε of this training run, shown beside the certified ε (an upper bound) — "
                     "never a replacement for it. A small value does not mean the run is more private than "
                     "certified; it only means this attack found no more.")
    return notes


def train_risk(result, config) -> dict:
    """The TPR bound at FPR 10⁻³ (:func:`dpcalc.risk.curve.tpr_bound_at`) of the run's (σ, q, steps)
    under the accountant that reported its ε."""
    from dpcalc.accounting.registry import default_accountant
    from dpcalc.events import dpsgd_event
    from dpcalc.risk.curve import RISK_FPR, tpr_bound_at

    if result.steps == 0:
        return {"fpr": RISK_FPR, "tpr_bound": RISK_FPR, "tpr_bound_lower": RISK_FPR, "single_pair": RISK_FPR,
                "certified": True, "method": "no steps taken", "source": ""}
    s = result.sampler
    if s is None:
        event = dpsgd_event(noise_multiplier=result.noise_multiplier, sample_rate=result.sample_rate,
                            steps=result.steps)
        return tpr_bound_at(event, accountant=result.accounting.accountant, delta=config.delta)
    if "passes" in s:  # shuffle / balls-in-bins: the certified E-fold Gaussian mechanism (zero-out = add/remove
        # for the Gaussian mechanism without sampling), under the registry's default accountant
        from dpcalc.accounting.registry import default_accountant

        event = dpsgd_event(noise_multiplier=result.noise_multiplier, steps=s["passes"])
        return tpr_bound_at(event, accountant=default_accountant(), delta=config.delta)
    event = dpsgd_event(noise_multiplier=result.noise_multiplier, sample_rate=result.sample_rate, steps=result.steps,
                        sampling=s["sampling"], batch_size=s["batch_size"], dataset_size=result.dataset_size,
                        max_batch_size=s.get("max_batch_size"))
    return tpr_bound_at(event, accountant=result.accounting.accountant, delta=config.delta,
                        neighboring=s["adjacency"])


def _launch(ctx: click.Context, config, nproc: int) -> int:
    """``dpcalc train --nproc W``: check what can be checked here (settings, device, data, W ≤ N), then
    run the same command on W processes through ``torch.distributed.run``; returns the exit status."""
    from dpcalc.errors import ParameterError
    from dpcalc.train.distributed import launch
    from dpcalc.train.loop import load_data

    data = load_data(config)  # downloads once here (--download), so the ranks find the files
    if nproc > data.dataset_size:
        raise ParameterError("nproc", "", nproc, message=(
            f"--nproc must be at most the number of training records N = {data.dataset_size} (each process "
            f"samples its own shard of them), got {nproc}"))
    _check_nproc(config, nproc)
    args = ["train"]
    for param in ctx.command.params:
        if param.name in (None, "nproc", "download") or not isinstance(param, click.Option):
            continue
        value = ctx.params.get(param.name)
        flag = max(param.opts, key=len)
        if param.is_flag:
            if value:
                args.append(flag)
        elif value is not None:
            args += [flag, repr(value) if isinstance(value, float) else str(value)]
    if config.download:  # the files are now in the cache: the ranks read them from there
        from dpcalc.train.data import find_dataset

        args += ["--data-dir", str(find_dataset(config.dataset, None)["train_images"].parent)]
    status, error = launch(args, nproc=nproc, threads=config.threads)
    if error is not None:
        click.echo(f"Error: {error}", err=True)
    return status


def _check_nproc(config, nproc: int) -> None:
    """Refuse W processes that cannot help (issue 33), before any is started: more processes than
    examples in a batch (each rank would handle less than one example per step on average), or, on
    the CPU, more processes than CPUs this process may run on (their start-up alone, each importing
    torch, grows with W; their steps compete for the same cores).

    Raises:
        ParameterError: one line with the reason and the largest useful W.
    """
    import os

    from dpcalc.errors import ParameterError

    if config.batch_size < nproc:
        raise ParameterError("nproc", "", nproc, message=(
            f"--nproc {nproc} would give each process B/W = {config.batch_size / nproc:.3g} examples per step "
            f"on average (--batch-size {config.batch_size}): more processes than examples in a batch only add "
            f"start-up and communication; use --nproc at most {config.batch_size}"))
    if config.device == "cuda":
        return
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    if nproc > cpus and (config.device == "cpu" or not _cuda_available()):
        raise ParameterError("nproc", "", nproc, message=(
            f"--nproc {nproc} is more than the {cpus} CPU(s) this process may use: the processes would "
            f"compete for the same cores and start-up grows with each (all import torch); use --nproc at "
            f"most {cpus} on the CPU"))


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _stop_on_sigterm(context) -> None:
    """Under torchrun, the launcher stops the other ranks with SIGTERM when one fails: say so in
    one line (exit status 1) instead of dying silently."""
    import signal

    import torch

    from dpcalc.train.distributed import PeerLostError

    # torch imports an optional module on the first record_function (every optimizer step opens
    # one) inside `except Exception: log.warning(..., exc_info=True)`: a SIGTERM landing during
    # that import (slow on a fresh install: bytecode compiled) was logged with a traceback before
    # the one-line error (seen in CI). That first use happens here, before the handler exists.
    with torch.autograd.profiler.record_function("dpcalc.warm-up"):
        pass

    def stop(signum, frame):
        where = f"during step {context.step}" if context.step else "while starting"
        raise PeerLostError(f"rank {context.rank}: stopped by the launcher (SIGTERM) {where}, after another "
                            f"rank failed{context.ledger_note}")

    signal.signal(signal.SIGTERM, stop)
