"""The DP statement of a training run for a model card (``dpcalc report``; written by ``dpcalc train
--save-model`` beside the model): what is protected, by which mechanism, with which certified
(ε, δ), what that means for an attacker, and the reporting checklist of Ponomareva et al.,
"How to DP-fy ML: A Practical Guide to Machine Learning with Differential Privacy", JAIR 77
(2023), §5.3, each item answered or marked "not recorded".

A statement is a plain dict (its JSON form) built by :func:`build_statement` from a *run*: the
JSON sidecar ``dpcalc train --save-model FILE`` writes (``FILE.json``, :func:`run_from_sidecar`)
or the same fields given as options. The certified ε is recomputed here from (σ, q, T, sampler,
adjacency, δ) by the accountants (:func:`dpcalc.claims.check.certified_bracket`) and never stated
below the ε the run itself recorded; the attack bounds come from the risk library
(:func:`dpcalc.risk.curve.curve_from_accountant`, or the exact μ-GDP curve of the E-fold Gaussian
for shuffled batches). :func:`render_markdown` and :func:`render_html` format it; nothing here
computes a privacy number itself.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

from dpcalc._rounding import format_bound
from dpcalc._version import __version__
from dpcalc.claims.check import certified_bracket, check_claim
from dpcalc.claims.schema import Claim, claim_from_mapping
from dpcalc.errors import ParameterError
from dpcalc.events import EPOCH_SAMPLINGS

__all__ = ["build_statement", "statement_and_curve", "run_from_sidecar", "render_markdown", "render_html", "CHECKLIST_SOURCE",
           "RISK_FPR_REPORTED", "NOT_RECORDED", "markdown_section", "markdown_checklist"]

CHECKLIST_SOURCE = ("Ponomareva, Hazimeh, Kurakin, Xu, Denison, McMahan, Vassilvitskii, Chien, Thakurta, "
                    "\"How to DP-fy ML: A Practical Guide to Machine Learning with Differential Privacy\", "
                    "JAIR 77 (2023), §5.3 (reporting)")
#: the FPR at which the membership-inference TPR bound is stated
RISK_FPR_REPORTED = 1e-3
NOT_RECORDED = "not recorded"

_ADJACENCY_TEXT = {
    "add-remove": "add/remove one training example (the neighbouring dataset has one example more or less)",
    "replace": "replace one training example (same N; one example's value changed)",
    "zero-out": ("zero-out: one training example replaced by a ghost whose gradient is zero (Chua et al. "
                 "ICML 2024 §2); N and the batch layout stay fixed"),
}
#: the same texts for a user-level run (dpcalc train --privacy-unit user): the unit is a user, N = U users
_USER_TEXT = {
    "adjacency": "add/remove one user with all of their records (the neighbouring dataset has one user more or less)",
    "sampler": "Poisson sampling of users: each user joins each step independently with probability q = B/U",
    "algorithm": ("DP-SGD at the user level (each sampled user's mean gradient clipped to C, Gaussian noise added "
                  "to the sum over users; McMahan et al. 2018 Alg. 1)"),
}
_SAMPLER_TEXT = {
    "poisson": "Poisson sampling: each example joins each step independently with probability q",
    "shuffle": "shuffled batches: one random permutation per epoch, cut into ⌈N/B⌉ batches",
    "balls-in-bins": "balls-in-bins: each example put into one of ⌈N/B⌉ batches at random, per epoch",
    "without-replacement": "fixed-size batches: a uniformly random B of the N examples, fresh each step",
    "with-replacement": "B independent uniform draws each step (an example may repeat)",
    "truncated-poisson": "Poisson sampling capped at B_max (a random B_max kept when more joined)",
}


def _get(meta: Mapping[str, Any], key: str, default: Any = None) -> Any:
    details = meta.get("details") if isinstance(meta.get("details"), Mapping) else {}
    val = meta.get(key)
    return details.get(key, default) if val is None else val


def run_from_sidecar(meta: Any) -> dict[str, Any]:
    """The run fields of a ``dpcalc train --save-model`` sidecar (``FILE.json``).

    Args:
        meta: the parsed sidecar (a JSON object).

    Returns:
        A run dict: the claim fields (:data:`dpcalc.claims.schema.FIELDS`: ``noise_multiplier``,
        ``delta``, ``batch_size``, ``dataset_size``, ``steps``, ``sampling``, ``neighboring``,
        ``max_grad_norm``, ...) plus what the statement shows beside them (``recorded_epsilon``,
        ``recorded_accountant``, ``recorded_certified``, ``dpcalc_version``, ``model``, ``dataset``,
        ``epochs``, ``canaries``, ``audit``, ``orphaned_steps``).

    Raises:
        ParameterError: not a sidecar (a field missing or of the wrong type), named.
    """
    if not isinstance(meta, Mapping):
        raise ParameterError("run", "", None, message="--run must be a JSON object (the FILE.json of "
                                                      "dpcalc train --save-model FILE)")
    for key in ("noise_multiplier", "sample_rate", "steps", "delta"):
        if meta.get(key) is None:
            raise ParameterError("run", "", None, message=(
                f"--run is not a dpcalc train sidecar: field {key!r} is missing"))
    sampling = _get(meta, "sampling") or "poisson"
    adjacency = _get(meta, "adjacency") or _get(meta, "neighboring")
    run: dict[str, Any] = {
        "noise_multiplier": meta["noise_multiplier"], "delta": meta["delta"], "steps": meta["steps"],
        "dataset_size": _get(meta, "dataset_size"), "sampling": sampling,
        "max_grad_norm": meta.get("max_grad_norm"), "max_batch_size": _get(meta, "max_batch_size"),
        "neighboring": adjacency if adjacency in ("add-remove", "replace", "zero-out") else None,
    }
    batch = meta.get("batch_size")
    n = run["dataset_size"]
    q = meta["sample_rate"]
    if isinstance(batch, int) and isinstance(n, int) and n > 0 and isinstance(q, (int, float)) \
            and abs(batch / n - q) <= 1e-12 * max(q, 1e-300):
        run["batch_size"] = batch
    else:  # q not B/N (the trainer's q is B/N; a hand-made file may differ): account q as given
        run["sample_rate"] = q
        run["dataset_size"] = None
    claim = claim_from_mapping({k: v for k, v in run.items() if v is not None})  # validates every field
    del claim
    run.update(
        recorded_epsilon=meta.get("epsilon"), recorded_accountant=meta.get("accountant"),
        recorded_certified=meta.get("certified"), dpcalc_version=meta.get("dpcalc_version"),
        model=meta.get("model"), dataset=meta.get("dataset"), epochs=meta.get("epochs"),
        canaries=_get(meta, "canaries"), audit=meta.get("audit"),
        orphaned_steps=_get(meta, "orphaned_steps", 0) or 0, dataset_size_total=n,
        tuning_runs=meta.get("tuning_runs"), tuning_accounted=meta.get("tuning_accounted"),
    )
    if _get(meta, "privacy_unit") == "user":  # dpcalc train --privacy-unit user (dpcalc/train/users.py)
        most = _get(meta, "max_records_per_user")
        run["privacy_unit"] = ("one user: all of a user's records (user-level DP; each sampled user's mean "
                               "gradient clipped to C" + (f"; at most {most} records per user" if most else "") + ")")
        run["user_level"] = True
    return run


def _claim_of(run: Mapping[str, Any]) -> Claim:
    from dpcalc.claims.schema import FIELDS

    fields = {k: v for k, v in run.items() if k in FIELDS and v is not None}
    if run.get("recorded_epsilon") is not None and math.isfinite(run["recorded_epsilon"]):
        fields["claimed_epsilon"] = run["recorded_epsilon"]
    return claim_from_mapping(fields)


def _risk(claim: Claim, bracket, epsilon: float) -> tuple[Any, dict[str, Any]]:
    """TPR at FPR 10⁻³ and the advantage, from the risk library (certified upper bounds)."""
    from dpcalc.risk.curve import curve_from_accountant, gdp_curve
    from dpcalc.schedule import resolve_schedule

    pair = (epsilon, claim.delta)
    if claim.sampling in EPOCH_SAMPLINGS and bracket.neighboring == "zero-out":
        per_epoch = -(-claim.dataset_size // claim.batch_size)
        epochs = -(-bracket.steps // per_epoch)
        curve = gdp_curve(math.sqrt(epochs) / claim.noise_multiplier)
        method = f"exact μ-GDP curve of the {epochs}-fold Gaussian (μ = √E/σ), which dominates the run"
    else:
        sched = resolve_schedule(sample_rate=claim.sample_rate, batch_size=claim.batch_size,
                                 dataset_size=claim.dataset_size, steps=bracket.steps, sampling=claim.sampling,
                                 max_batch_size=claim.max_batch_size)
        neighboring = "replace" if bracket.neighboring == "replace" else "add-remove"
        curve, _ = curve_from_accountant(sched.event(claim.noise_multiplier), accountant=bracket.accountant,
                                         delta=claim.delta, neighboring=neighboring, fprs=(RISK_FPR_REPORTED,))
        method = f"{bracket.accountant} privacy curve (trade-off envelope of certified profile points)"
    rows = {r["quantity"]: r for r in curve.bounds(fprs=[RISK_FPR_REPORTED], pair=pair)}
    tpr, adv = rows["tpr_at_fpr"], rows["advantage"]
    return curve, {"fpr": RISK_FPR_REPORTED, "tpr_bound": tpr["bound"], "tpr_single_pair": tpr["single_pair"],
            "advantage_bound": adv["bound"], "advantage_single_pair": adv["single_pair"],
            "certified": bool(curve.certified), "method": method, "source": tpr["source"]}


def _delta_text(delta: float, n: int | None) -> str:
    if n is None:
        return f"δ = {delta:g}; N {NOT_RECORDED}, so δ cannot be compared with 1/N"
    ratio = delta * n
    if ratio >= 1:
        return (f"δ = {delta:g} is at least 1/N = {1 / n:.3g} (N = {n:,}): a mechanism that publishes one random "
                "example in the clear satisfies such a δ — the guarantee is weak")
    return f"δ = {delta:g} = {ratio:.3g}/N (N = {n:,}): below 1/N"


def _audit(run: Mapping[str, Any], epsilon: float) -> dict[str, Any]:
    audit, canaries = run.get("audit"), run.get("canaries")
    if isinstance(audit, Mapping) and audit.get("epsilon_lower") is not None:
        low = audit["epsilon_lower"]
        verdict = ("EXCEEDS the certified ε: the guarantee does not hold for this run" if low > epsilon
                   else "consistent with the certified ε")
        return {"performed": True, "epsilon_lower": low, "confidence": audit.get("confidence"),
                "canaries": audit.get("canaries"), "method": audit.get("method", "one-run"),
                "text": (f"one-run audit with {audit.get('canaries', '?')} canaries: empirical ε ≥ {format_bound(low, 'down')} "
                         f"at {audit.get('confidence', 0.95):.0%} confidence, {verdict} "
                         f"({audit.get('source') or 'one-run audit'}; a lower bound, never an ε)")}
    if isinstance(canaries, Mapping):
        return {"performed": False, "text": (f"{canaries.get('count', '?')} canaries were inserted; the audit result "
                                             f"is {NOT_RECORDED} here (dpcalc train prints it; dpcalc audit)")}
    return {"performed": False, "text": "no empirical audit (no canaries were inserted)"}


def build_statement(run: Mapping[str, Any], *, source: str, risk: bool = True) -> dict[str, Any]:
    """The DP statement of a run (:func:`statement_and_curve` without the curve)."""
    return statement_and_curve(run, source=source, risk=risk)[0]


def statement_and_curve(run: Mapping[str, Any], *, source: str, risk: bool = True) -> tuple[dict[str, Any], Any]:
    """The DP statement of a run, and the certified trade-off curve its attack bounds come from
    (a :class:`dpcalc.risk.curve.RiskCurve`; None without ``risk``).

    Args:
        run: the run fields (:func:`run_from_sidecar`, or the options of ``dpcalc report``): at least
            ``noise_multiplier``, ``delta`` and a schedule (``batch_size``, ``dataset_size`` and
            ``epochs`` or ``steps``; or ``sample_rate`` and ``steps``); optionally ``sampling``,
            ``neighboring``, ``max_grad_norm``, ``recorded_epsilon``, ``tuning_runs``,
            ``tuning_accounted``, ``privacy_unit``, ``released``, ``data_covered``, ``audit``, ``canaries``.
        source: where the run came from (a file name, or ``"options"``), stated in the provenance.
        risk: compute the attack bounds (TPR at FPR 10⁻³, advantage).

    Returns:
        (statement, curve): the statement as a JSON-ready dict (``guarantee``, ``mechanism``,
        ``risk``, ``audit``, ``tuning``, ``checklist``, ``provenance``, ``summary``) and the curve.

    Raises:
        ParameterError: a field missing or out of range (named).
    """
    claim = _claim_of(run)
    bracket = certified_bracket(claim)
    if bracket.upper is None:
        raise ParameterError("sampling", "", claim.sampling, message=(
            f"no certified accountant models this run: {bracket.reason}"))
    recorded = run.get("recorded_epsilon")
    epsilon = bracket.upper
    if recorded is not None and run.get("recorded_certified") and math.isfinite(recorded) and recorded > epsilon:
        epsilon = recorded  # never below what the run recorded (orphaned steps, a looser accountant)
    recheck = check_claim(claim) if claim.claimed_epsilon is not None else None
    n = run.get("dataset_size_total", claim.dataset_size)
    steps, q = bracket.steps, bracket.sample_rate
    user = bool(run.get("user_level"))
    sampler = _USER_TEXT["sampler"] if user else _SAMPLER_TEXT.get(claim.sampling, claim.sampling)
    c = claim.max_grad_norm
    mechanism = {
        "algorithm": (_USER_TEXT["algorithm"] if user else
                      "DP-SGD (per-example clipping, Gaussian noise added to the sum of clipped gradients)"),
        "sampling": claim.sampling, "sampler": sampler, "sample_rate": q, "batch_size": claim.batch_size,
        "dataset_size": n, "steps": steps, "epochs": run.get("epochs", claim.epochs),
        "noise_multiplier": claim.noise_multiplier, "max_grad_norm": c,
        "noise_std": None if c is None else claim.noise_multiplier * c,
    }
    guarantee = {
        "epsilon": epsilon, "epsilon_lower": bracket.lower, "delta": claim.delta, "certified": bracket.certified,
        "accountant": bracket.accountant, "accountant_source": bracket.source, "neighboring": bracket.neighboring,
        "adjacency": (_USER_TEXT["adjacency"] if user and bracket.neighboring == "add-remove"
                      else _ADJACENCY_TEXT.get(bracket.neighboring, bracket.neighboring)),
        "privacy_unit": run.get("privacy_unit") or "one training example (example-level DP)",
        "delta_vs_n": _delta_text(claim.delta, n) + (" — N counts users" if user and n is not None else ""), "delta_below_1_over_n": None if n is None else claim.delta * n < 1,
        "recorded_epsilon": recorded, "recorded_accountant": run.get("recorded_accountant"),
        "poisson_epsilon": bracket.poisson,
        "recheck": None if recheck is None else {"verdict": recheck.verdict,
                                                 "flags": [dict(f) for f in recheck.flags]},
    }
    tuning_runs, tuning_accounted = run.get("tuning_runs"), run.get("tuning_accounted")
    if tuning_runs is None:
        tuning = {"recorded": False, "text": f"hyperparameter tuning on the private data: {NOT_RECORDED} (if runs "
                                             "were tuned on it, their cost is not in ε: dpcalc tune)"}
    elif tuning_runs <= 1 or tuning_accounted:
        tuning = {"recorded": True, "runs": tuning_runs, "accounted": bool(tuning_accounted),
                  "text": f"{tuning_runs:,} run(s) on the private data" + (", included in ε" if tuning_accounted
                                                                           else "")}
    else:
        tuning = {"recorded": True, "runs": tuning_runs, "accounted": False,
                  "text": (f"{tuning_runs:,} runs on the private data while tuning; NOT included in ε (the released "
                           "model's ε is larger: Papernot & Steinke 2022; dpcalc tune)")}
    curve, risk_row = _risk(claim, bracket, epsilon) if risk else (None, None)
    statement: dict[str, Any] = {
        "title": "Differential privacy statement", "model": run.get("model"), "dataset": run.get("dataset"),
        "guarantee": guarantee, "mechanism": mechanism,
        "risk": risk_row,
        "audit": _audit(run, epsilon), "tuning": tuning,
        "provenance": {"dpcalc_version": __version__, "run_dpcalc_version": run.get("dpcalc_version"),
                       "source": source, "recheck_command": _recheck_command(claim, bracket, epsilon)},
    }
    statement["checklist"] = _checklist(statement, run)
    statement["summary"] = _summary(statement)
    return statement, curve


def _recheck_command(claim: Claim, bracket, epsilon: float) -> str:
    parts = ["dpcalc check", f"--claimed-eps {format_bound(epsilon)}", f"--delta {claim.delta:g}",
             f"--sigma {claim.noise_multiplier!r}"]
    if claim.batch_size is not None:
        parts += [f"--batch-size {claim.batch_size}", f"--dataset-size {claim.dataset_size}"]
    else:
        parts.append(f"--sample-rate {bracket.sample_rate!r}")
    parts.append(f"--steps {bracket.steps}")
    if claim.sampling != "poisson":
        parts.append(f"--sampling {claim.sampling}")
        if claim.max_batch_size is not None:
            parts.append(f"--max-batch-size {claim.max_batch_size}")
    if claim.neighboring is not None:
        parts.append(f"--neighboring {claim.neighboring}")
    return " ".join(parts)


def _checklist(st: Mapping[str, Any], run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The reporting items of Ponomareva et al. 2023 §5.3, answered from the run or "not recorded"."""
    g, m = st["guarantee"], st["mechanism"]

    def item(name: str, answer: str | None) -> dict[str, Any]:
        return {"item": name, "answer": answer if answer else NOT_RECORDED, "recorded": bool(answer)}

    released = run.get("released")
    return [
        item("DP setting", "central DP: a trusted trainer runs DP-SGD on the raw training data"),
        item("Data accesses covered", run.get("data_covered") or (
            f"the {m['dataset_size']:,} training examples of this run" if m.get("dataset_size") else None)),
        item("Final mechanism output", released or "the model and every intermediate model (DP-SGD's guarantee "
                                                   "covers all iterates)"),
        item("Unit of privacy", g["privacy_unit"]),
        item("Adjacency definition", g["adjacency"]),
        item("Type of accounting", f"{g['accountant']} ({'certified upper bound' if g['certified'] else 'approximate'}"
                                   f"; dpcalc {__version__}; {g['accountant_source']})"),
        item("Accounting assumptions", f"{m['sampler']}; q = {m['sample_rate']:.6g}, T = {m['steps']:,} steps, "
                                       f"σ = {m['noise_multiplier']:g}" + (
                                           f", C = {m['max_grad_norm']:g}" if m["max_grad_norm"] else "")),
        item("Formal DP statement", f"({format_bound(g['epsilon'])}, {g['delta']:g})-DP"),
        item("Hyperparameter tuning", st["tuning"]["text"] if st["tuning"]["recorded"] else None),
        item("Empirical audit", st["audit"]["text"] if st["audit"]["performed"] else None),
        item("Transparency and verifiability", f"recomputed by dpcalc {__version__}: {st['provenance']['recheck_command']}"),
    ]


def _summary(st: Mapping[str, Any]) -> str:
    g, m = st["guarantee"], st["mechanism"]
    what = "This model was" if st.get("model") is None else f"The model {st['model']!r} was"
    data = f" on {st['dataset']}" if st.get("dataset") else ""
    adjacency = {"add-remove": "add/remove", "replace": "replace-one"}.get(g["neighboring"], g["neighboring"])
    batches = "Poisson-sampled" if m["sampling"] == "poisson" else m["sampling"]
    return (f"{what} trained{data} with DP-SGD and satisfies ({format_bound(g['epsilon'])}, {g['delta']:g})-differential "
            f"privacy for {g['privacy_unit']}, under {adjacency} adjacency, with {batches} batches: "
            f"σ = {m['noise_multiplier']:g}, q = {m['sample_rate']:.4g}, {m['steps']:,} steps "
            f"({g['accountant']}, {'certified' if g['certified'] else 'approximate'}).")


# ----------------------------------------------------------------------------- rendering

def _rows(st: Mapping[str, Any]) -> list[tuple[str, list[tuple[str, str]]]]:
    g, m, r = st["guarantee"], st["mechanism"], st.get("risk")
    lo = g["epsilon_lower"]
    eps = f"ε = {format_bound(g['epsilon'])} at δ = {g['delta']:g} ({'certified upper bound' if g['certified'] else 'approx.'})"
    if lo is not None:
        eps += f"; the true ε lies in [{format_bound(lo, 'down')}, {format_bound(g['epsilon'])}]"
    guarantee = [("privacy unit", g["privacy_unit"]), ("adjacency", g["adjacency"]), ("ε at δ", eps),
                 ("δ relative to 1/N", g["delta_vs_n"]),
                 ("accounting", f"{g['accountant']}, dpcalc {st['provenance']['dpcalc_version']}; "
                                f"{g['accountant_source']}")]
    if g.get("recorded_epsilon") is not None:
        rec = f"{format_bound(g['recorded_epsilon'])} ({g.get('recorded_accountant') or 'accountant not recorded'})"
        if g.get("recheck"):
            rec += f": re-checked, {g['recheck']['verdict']}"
        guarantee.append(("ε recorded by the run", rec))
    if g.get("poisson_epsilon") is not None:
        guarantee.append(("Poisson ε of the same σ, q, T", f"{format_bound(g['poisson_epsilon'])} — not this run's "
                                                            "guarantee (it did not use Poisson sampling)"))
    mech = [("algorithm", m["algorithm"]), ("sampler", m["sampler"]),
            ("sample rate q", f"{m['sample_rate']:.6g}" + (f" (B = {m['batch_size']:,} of N = {m['dataset_size']:,})"
                                                          if m.get("batch_size") else "")),
            ("steps T", f"{m['steps']:,}" + (f" ({m['epochs']:g} epochs)" if m.get("epochs") else "")),
            ("clipping norm C", NOT_RECORDED if m["max_grad_norm"] is None else f"{m['max_grad_norm']:g}"),
            ("noise multiplier σ", f"{m['noise_multiplier']:g}" + (
                "" if m["noise_std"] is None else f" (noise std σ·C = {m['noise_std']:.6g})"))]
    sections = [("Guarantee", guarantee), ("Training mechanism", mech)]
    if r is not None:
        sections.append(("What an attacker can do", [
            (f"membership inference, TPR at FPR = {r['fpr']:g}",
             f"≤ {format_bound(r['tpr_bound'])} (the (ε, δ) pair alone allows ≤ {format_bound(r['tpr_single_pair'])})"),
            ("membership advantage TPR − FPR", f"≤ {format_bound(r['advantage_bound'])}"),
            ("how", f"{r['method']}; {'certified' if r['certified'] else 'approximate'}")]))
    sections.append(("Empirical audit", [("audit", st["audit"]["text"])]))
    sections.append(("Hyperparameter tuning", [("tuning", st["tuning"]["text"])]))
    return sections


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_section(heading: str, rows: list[tuple[str, str]]) -> list[str]:
    """A ``## heading`` and a two-column Markdown table of ``rows`` (label, text), as lines
    ending in a blank one (cells escaped)."""
    return [f"## {heading}", "", "| | |", "|---|---|", *(f"| {_md(k)} | {_md(v)} |" for k, v in rows), ""]


def markdown_checklist(items: list[Mapping[str, Any]]) -> list[str]:
    """The ``## Reporting checklist`` section (the items of :data:`CHECKLIST_SOURCE`, each
    ``{"item", "answer"}``) as Markdown lines, without a trailing blank line."""
    return ["## Reporting checklist", "", f"The items of {CHECKLIST_SOURCE}.", "", "| item | answer |", "|---|---|",
            *(f"| {_md(i['item'])} | {_md(i['answer'])} |" for i in items)]


def render_markdown(st: Mapping[str, Any]) -> str:
    """The statement as Markdown (headings, two-column tables, the checklist), ending in a newline."""
    out = [f"# {st['title']}", "", st["summary"], ""]
    for heading, rows in _rows(st):
        out += markdown_section(heading, rows)
    flags = (st["guarantee"].get("recheck") or {}).get("flags") or []
    if flags:
        out += ["## Flags", ""] + [f"- **{f['flag']}**: {_md(f['message'])}" for f in flags] + [""]
    out += markdown_checklist(st["checklist"])
    p = st["provenance"]
    out += ["", "## Provenance", "",
            f"Written by dpcalc {p['dpcalc_version']} from {p['source']}"
            + (f" (a run of dpcalc {p['run_dpcalc_version']})" if p.get("run_dpcalc_version") else "")
            + f". Re-check the stated ε: `{p['recheck_command']}`", ""]
    return "\n".join(out)


def render_html(st: Mapping[str, Any], *, png: bytes | None = None) -> str:
    """The statement as one self-contained HTML page (the trade-off plot embedded as a PNG data
    URI when ``png`` is given); every text is escaped."""
    import base64

    e = html.escape
    body = [f"<h1>{e(st['title'])}</h1>", f"<p>{e(st['summary'])}</p>"]
    for heading, rows in _rows(st):
        body.append(f"<h2>{e(heading)}</h2><table>")
        body += [f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows]
        body.append("</table>")
        if heading == "What an attacker can do" and png is not None:
            body.append('<img alt="trade-off curve and membership-inference ROC bound" '
                        f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
    flags = (st["guarantee"].get("recheck") or {}).get("flags") or []
    if flags:
        body.append("<h2>Flags</h2><ul>" + "".join(f"<li><b>{e(f['flag'])}</b>: {e(f['message'])}</li>"
                                                   for f in flags) + "</ul>")
    body.append(f"<h2>Reporting checklist</h2><p>The items of {e(CHECKLIST_SOURCE)}.</p><table>")
    body += [f"<tr><th>{e(i['item'])}</th><td>{e(i['answer'])}</td></tr>" for i in st["checklist"]]
    p = st["provenance"]
    body.append(f"</table><h2>Provenance</h2><p>Written by dpcalc {e(p['dpcalc_version'])} from {e(p['source'])}. "
                f"Re-check the stated ε:</p><pre>$ {e(p['recheck_command'])}</pre>")
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;"
             "vertical-align:top}img{max-width:100%}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{e(st['title'])}</title><style>{style}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
