"""The claim schema of ``dpcalc check``: what a published DP-SGD privacy claim states, read
from options or from a JSON / YAML file (one claim or a list), validated field by field.

The schema is written once, in :data:`FIELDS` (name → kind, allowed values, meaning); the JSON
Schema in ``docs/claims/claim.schema.json`` states the same fields for other tools (a test keeps
the two equal). A claim with a missing required field is kept and reported as *not checkable*
(the missing field named); a field of the wrong type, out of its range, or unknown (a typo) makes
the whole input malformed: a one-line :class:`~dpcalc.errors.ParameterError` (exit 2).

Files are read by the one safe reader (``dpcalc/_files.py``: regular files only, at most
:data:`MAX_BYTES`). YAML is parsed by PyYAML's safe loader (no Python objects; libyaml's when present) after a
first pass over its events refuses aliases and caps the node count, so an alias bomb ("billion
laughs") or a file of 10⁵ claims fails fast, before any claim is checked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from dpcalc.errors import ParameterError
from dpcalc.events import SAMPLINGS

__all__ = ["Claim", "FIELDS", "REQUIRED", "MAX_BYTES", "MAX_CLAIMS", "NEIGHBORINGS", "STEP_CONVENTIONS", "json_schema",
           "parse_claims", "load_claims", "claim_from_mapping"]

#: the largest claim file read (bytes)
MAX_BYTES = 1_000_000
#: the most claims one input may hold (each is a pld computation, ~0.1–2 s)
MAX_CLAIMS = 500
#: the most YAML nodes composed (a claim has ~25 nodes): stops a huge document while it is parsed
MAX_NODES = MAX_CLAIMS * 64
#: adjacency a claim may state (docs/design.md §9; zero-out: Chua et al. 2024 §2)
NEIGHBORINGS = ("add-remove", "replace", "zero-out")
#: how a paper turned epochs into steps T: ⌈E·N/B⌉, E·⌈N/B⌉, E·⌊N/B⌋ or ⌈E/q⌉
STEP_CONVENTIONS = ("ceil", "epochs-times-batches", "epochs-times-floor", "epochs-over-q")


@dataclass(frozen=True)
class FieldSpec:
    """One field of the schema: its kind (``number``, ``whole``, ``text``, ``bool``, ``choice``),
    its allowed values or range, and its meaning (shown in the docs and the JSON Schema)."""

    kind: str
    meaning: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    maximum: float | None = None


#: every field of a claim (the one list; the dataclass and the JSON Schema follow it)
FIELDS: dict[str, FieldSpec] = {
    "id": FieldSpec("text", "a short name of the claim"),
    "paper": FieldSpec("text", "the publication (authors, title, venue, year)"),
    "where": FieldSpec("text", "table, figure or section of the paper stating the claim"),
    "note": FieldSpec("text", "anything the reader should know (an assumption, a setting not stated)"),
    "verified": FieldSpec("bool", "whether the settings were checked against the source"),
    "claimed_epsilon": FieldSpec("number", "the ε the paper states", minimum=0.0, maximum=1e4),
    "delta": FieldSpec("number", "the δ of the claim", exclusive_minimum=0.0, exclusive_maximum=1.0),
    "noise_multiplier": FieldSpec("number", "σ: noise std / clipping norm", minimum=1e-3, maximum=1e8),
    "batch_size": FieldSpec("whole", "B: (expected) records per step", minimum=1, maximum=1e12),
    "dataset_size": FieldSpec("whole", "N: records in the training set", minimum=1, maximum=1e12),
    "epochs": FieldSpec("number", "E: passes over the data", exclusive_minimum=0.0, maximum=1e9),
    "steps": FieldSpec("whole", "T: noisy steps (if the paper states them)", minimum=1, maximum=1e12),
    "sample_rate": FieldSpec("number", "q: Poisson rate (instead of B and N)", exclusive_minimum=0.0, maximum=1.0),
    "sampling": FieldSpec("choice", "the batch sampler the training used (default poisson)", choices=SAMPLINGS),
    "max_batch_size": FieldSpec("whole", "B_max of truncated-poisson", minimum=1, maximum=1e12),
    "neighboring": FieldSpec("choice", "the adjacency the guarantee states (default add-remove; "
                             "zero-out for shuffle / balls-in-bins)", choices=NEIGHBORINGS),
    "accounted_neighboring": FieldSpec("choice", "the adjacency the paper's accountant used, if different",
                                       choices=NEIGHBORINGS),
    "accountant_used": FieldSpec("text", "the paper's accountant (rdp, moments accountant, prv, pld, ...)"),
    "steps_convention": FieldSpec("choice", "how the paper turned epochs into steps", choices=STEP_CONVENTIONS),
    "tuning_runs": FieldSpec("whole", "training runs made while tuning hyperparameters on the private data",
                             minimum=1, maximum=1e9),
    "tuning_accounted": FieldSpec("bool", "whether the tuning runs are included in the claimed ε"),
    "max_grad_norm": FieldSpec("number", "C: per-example clipping norm (for the record)",
                               exclusive_minimum=0.0, maximum=1e100),
}
#: fields without which no claim can be checked (the schedule is checked separately)
REQUIRED = ("claimed_epsilon", "delta", "noise_multiplier")


@dataclass(frozen=True)
class Claim:
    """A published privacy claim of a DP-SGD run, as stated (fields: :data:`FIELDS`).

    ``missing`` lists what the claim lacks to be checked (required fields, or the schedule:
    ``steps or epochs``, ``dataset_size``, ...); a claim with ``missing`` is *not checkable*.
    ``index`` is its position in the input (0-based).
    """

    index: int = 0
    id: str | None = None
    paper: str | None = None
    where: str | None = None
    note: str | None = None
    verified: bool | None = None
    claimed_epsilon: float | None = None
    delta: float | None = None
    noise_multiplier: float | None = None
    batch_size: int | None = None
    dataset_size: int | None = None
    epochs: float | None = None
    steps: int | None = None
    sample_rate: float | None = None
    sampling: str = "poisson"
    max_batch_size: int | None = None
    neighboring: str | None = None
    accounted_neighboring: str | None = None
    accountant_used: str | None = None
    steps_convention: str | None = None
    tuning_runs: int | None = None
    tuning_accounted: bool | None = None
    max_grad_norm: float | None = None
    missing: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        """The claim's id, or ``#i`` (1-based) without one."""
        return self.id or f"#{self.index + 1}"

    def stated(self) -> dict[str, Any]:
        """The fields the claim states (None and defaults left out), glossary names."""
        out = {}
        for f in fields(self):
            if f.name in ("index", "missing"):
                continue
            val = getattr(self, f.name)
            if val is None or (f.name == "sampling" and val == "poisson"):
                continue
            out[f.name] = val
        return out


def _where(index: int, claim_id: Any) -> str:
    return f"claim {index + 1}" + (f" ({claim_id})" if isinstance(claim_id, str) and claim_id else "")


def _number(name: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ParameterError(name, "a number", value,
                             message=f"{where}: {name} must be a number, got {_show(value)}")
    if isinstance(value, str):  # YAML 1.1 reads 1e-5 as text; JSON files may quote numbers
        try:
            value = float(value.strip().replace("_", ""))
        except ValueError:
            raise ParameterError(name, "a number", value,
                                 message=f"{where}: {name} must be a number, got {_show(value)}") from None
    x = float(value)
    if not math.isfinite(x):
        raise ParameterError(name, "a finite number", value, message=f"{where}: {name} must be finite, got {value!r}")
    return x


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _range_text(spec: FieldSpec) -> str:
    lo = (f"({spec.exclusive_minimum:g}" if spec.exclusive_minimum is not None
          else f"[{spec.minimum:g}" if spec.minimum is not None else "(-inf")
    hi = (f"{spec.exclusive_maximum:g})" if spec.exclusive_maximum is not None
          else f"{spec.maximum:g}]" if spec.maximum is not None else "inf)")
    return f"{lo}, {hi}"


def _value(name: str, raw: Any, where: str) -> Any:
    spec = FIELDS[name]
    if spec.kind == "text":
        if not isinstance(raw, str) or len(raw) > 2000:
            raise ParameterError(name, "text", raw, message=f"{where}: {name} must be text (at most 2,000 "
                                 f"characters), got {_show(raw)}")
        return raw
    if spec.kind == "bool":
        if not isinstance(raw, bool):
            raise ParameterError(name, "true or false", raw,
                                 message=f"{where}: {name} must be true or false, got {_show(raw)}")
        return raw
    if spec.kind == "choice":
        if not isinstance(raw, str) or raw not in spec.choices:
            raise ParameterError(name, "", raw, message=f"{where}: {name} must be one of "
                                 f"{', '.join(spec.choices)}, got {_show(raw)}")
        return raw
    x = _number(name, raw, where)
    ok = ((spec.minimum is None or x >= spec.minimum) and (spec.maximum is None or x <= spec.maximum)
          and (spec.exclusive_minimum is None or x > spec.exclusive_minimum)
          and (spec.exclusive_maximum is None or x < spec.exclusive_maximum))
    if spec.kind == "whole" and x != int(x):
        ok = False
    if not ok:
        what = "a whole number " if spec.kind == "whole" else ""
        raise ParameterError(name, _range_text(spec), raw,
                             message=f"{where}: {name} must be {what}in {_range_text(spec)}, got {_show(raw)}")
    return int(x) if spec.kind == "whole" else x


def _schedule_missing(c: Mapping[str, Any]) -> list[str]:
    """What a claim lacks to fix its schedule (q and T), or [] (conflicts are left to
    :func:`dpcalc.schedule.resolve_schedule`, which names them)."""
    has = {k for k, val in c.items() if val is not None}
    if "sample_rate" in has:
        return [] if has & {"steps", "epochs"} else ["steps or epochs"]
    if has & {"batch_size", "dataset_size"} or c.get("sampling", "poisson") != "poisson":
        miss = [k for k in ("batch_size", "dataset_size") if k not in has]
        if not has & {"steps", "epochs"}:
            miss.append("steps or epochs")
        return miss
    if "steps" in has:
        return []
    return ["batch_size, dataset_size and epochs (or sample_rate and steps)"]


def claim_from_mapping(obj: Any, index: int = 0) -> Claim:
    """One claim from a mapping (a JSON object / YAML mapping, or the command-line options).

    Args:
        obj: field name → value (:data:`FIELDS`); None values count as absent.
        index: the claim's position in its input (0-based), for messages.

    Returns:
        The :class:`Claim`; ``missing`` names the required fields it lacks (not checkable).

    Raises:
        ParameterError: not a mapping, an unknown field, a value of the wrong type or out of range.
    """
    if not isinstance(obj, Mapping):
        raise ParameterError("claims", "a mapping of fields", obj,
                             message=f"claim {index + 1} must be a mapping of fields, got {type(obj).__name__}")
    where = _where(index, obj.get("id"))
    unknown = [str(k) for k in obj if k not in FIELDS]
    if unknown:
        raise ParameterError(str(unknown[0]), "", None, message=(
            f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})"))
    values = {k: _value(k, raw, where) for k, raw in obj.items() if raw is not None}
    missing = [k for k in REQUIRED if k not in values]
    missing += _schedule_missing(values)
    return Claim(index=index, missing=tuple(missing), **values)


def parse_claims(data: Any) -> list[Claim]:
    """Claims from a parsed document: one mapping, a list of mappings, or ``{"claims": [...]}``.

    Raises:
        ParameterError: empty, more than :data:`MAX_CLAIMS`, or a malformed claim.
    """
    if data is None:  # an empty (or comment-only) file
        raise ParameterError("claims", "", None, message="--claims holds no claim (the file is empty)")
    if isinstance(data, Mapping) and set(data) == {"claims"}:
        data = data["claims"]
    items: Sequence[Any] = [data] if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise ParameterError("claims", "a claim or a list of claims", data, message=(
            f"--claims must hold a claim (a mapping) or a list of claims, got {type(data).__name__}"))
    if not items:
        raise ParameterError("claims", "", 0, message="--claims holds no claim")
    if len(items) > MAX_CLAIMS:
        raise ParameterError("claims", "", len(items), message=(
            f"--claims holds {len(items):,} claims, more than the limit of {MAX_CLAIMS:,}"))
    return [claim_from_mapping(obj, i) for i, obj in enumerate(items)]


def _yaml_load(text: str, name: str = "<stdin>") -> Any:
    """The YAML document ``text`` through PyYAML's safe loader, after a pass over its events that
    refuses aliases (no "billion laughs") and more than :data:`MAX_NODES` nodes."""
    try:
        import yaml
    except ImportError:
        raise ParameterError("claims", "", None, message=(
            "--claims: reading YAML needs PyYAML: pip install 'dpcalc[claims]' (or give the claims as JSON)")) from None

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: fast
    try:
        nodes = 0  # first pass over the events: no alias, a bounded number of nodes
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                raise ParameterError("claims", "", None, message=(
                    f"--claims: YAML aliases (*name) are not accepted in a claim file (line "
                    f"{event.start_mark.line + 1})"))
            if isinstance(event, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ParameterError("claims", "", None, message=(
                        f"--claims: the YAML document is too large (more than {MAX_NODES:,} values; "
                        f"at most {MAX_CLAIMS:,} claims)"))
        return yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader; no alias left to expand
    except yaml.YAMLError as e:
        where = _one_line(e).replace('"<unicode string>"', repr(name))
        raise ParameterError("claims", "", None, message=f"--claims {name!r} is not valid YAML: {where}") from None


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())[:300]


def load_claims(path: str) -> list[Claim]:
    """The claims of a JSON or YAML file (``-``: standard input), safely read and parsed.

    JSON is tried first (a ``.json`` name, or text starting with ``{`` or ``[``); anything
    else is YAML (safe loader, no aliases).

    Raises:
        ParameterError: unreadable, larger than :data:`MAX_BYTES`, not JSON/YAML, too deep,
            more than :data:`MAX_CLAIMS` claims, or a malformed claim.
    """
    from dpcalc._files import read_input_file

    raw = read_input_file(path, option="claims", max_bytes=MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParameterError("claims", "", path, message=f"--claims {path!r} is not UTF-8 text") from None
    stripped = text.lstrip()
    try:
        if not path.endswith((".yaml", ".yml")) and (path.endswith(".json") or stripped[:1] in ("{", "[")):
            try:
                data = json.loads(text, parse_constant=lambda c: c)  # NaN/Infinity stay text: refused later
            except json.JSONDecodeError as e:
                raise ParameterError("claims", "", path, message=f"--claims {path!r} is not valid JSON: {e}") from None
        else:
            data = _yaml_load(text, path if path != "-" else "<stdin>")
    except RecursionError:
        raise ParameterError("claims", "", path, message=f"--claims {path!r} is nested too deeply") from None
    return parse_claims(data)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a claim file, built from :data:`FIELDS` (the file
    ``docs/claims/claim.schema.json`` is this, and a test keeps it so)."""
    props: dict[str, Any] = {}
    for name, spec in FIELDS.items():
        p: dict[str, Any] = {"description": spec.meaning}
        if spec.kind == "text":
            p.update(type="string", maxLength=2000)
        elif spec.kind == "bool":
            p["type"] = "boolean"
        elif spec.kind == "choice":
            p.update(type="string", enum=list(spec.choices))
        else:
            p["type"] = "integer" if spec.kind == "whole" else "number"
            for key, val in (("minimum", spec.minimum), ("maximum", spec.maximum),
                             ("exclusiveMinimum", spec.exclusive_minimum),
                             ("exclusiveMaximum", spec.exclusive_maximum)):
                if val is not None:
                    p[key] = int(val) if spec.kind == "whole" and float(val).is_integer() else val
        props[name] = p
    claim = {"type": "object", "additionalProperties": False, "properties": props,
             "description": ("One published DP-SGD privacy claim. Needed to check it: "
                             + ", ".join(REQUIRED) + ", and batch_size, dataset_size with epochs or steps "
                             "(or sample_rate with steps or epochs); a claim lacking them is 'not checkable'.")}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "dpcalc check: published privacy claims",
        "description": f"One claim, a list of claims, or {{\"claims\": [...]}}; at most {MAX_CLAIMS} claims and "
                       f"{MAX_BYTES:,} bytes; YAML without aliases.",
        "$defs": {"claim": claim},
        "oneOf": [
            {"$ref": "#/$defs/claim"},
            {"type": "array", "items": {"$ref": "#/$defs/claim"}, "minItems": 1, "maxItems": MAX_CLAIMS},
            {"type": "object", "additionalProperties": False, "required": ["claims"],
             "properties": {"claims": {"type": "array", "items": {"$ref": "#/$defs/claim"}, "minItems": 1,
                                       "maxItems": MAX_CLAIMS}}},
        ],
    }
