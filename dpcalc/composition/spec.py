r"""The input of ``dpcalc compose``: flags or a spec file → a validated sequence of mechanisms.

The one description of a mechanism is its :mod:`dpcalc.events` event. :class:`MechanismSpec`
is only a thin, validated builder of one event (:meth:`MechanismSpec.event`) run ``count``
times, plus its display label and JSON echo; everything downstream (the generic (ε, δ) view,
the accountants, the grid) works on the events.

Identical items are merged (counts added) before anything is accounted, so a spec file with
a million copies of one mechanism costs what ``--count 1000000`` costs (composition is
symmetric, so the order of the items does not matter).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpcalc import _validate as v
from dpcalc._files import read_input_file
from dpcalc.errors import ParameterError
from dpcalc.events import (
    SAMPLINGS,
    ComposedEvent,
    EpsilonDeltaEvent,
    Event,
    ExponentialMechanismEvent,
    GaussianEvent,
    GNMaxEvent,
    GroupEvent,
    LaplaceEvent,
    LNMaxEvent,
    MixtureOfGaussiansEvent,
    SelfComposedEvent,
    sampled_step,
)

__all__ = ["MechanismSpec", "MECHANISMS", "MAX_COUNT", "SPEC_MAX_BYTES", "parse_spec", "parse_spec_text", "load_spec_file",
           "merge", "sequence_event"]

MECHANISMS = ("dp", "gaussian", "laplace", "exponential", "lnmax", "gnmax", "mog")

#: other names of a mechanism a user may type (dp_accounting's event name for the mixture of Gaussians)
MECHANISM_ALIASES = {"mixture-of-gaussians": "mog", "MixtureOfGaussiansDpEvent": "mog",
                     "MixtureOfGaussiansEvent": "mog"}

#: the largest spec file read (bytes)
SPEC_MAX_BYTES = 16 * 2**20

#: the largest count of one item, and of all items together (10¹⁵ runs)
MAX_COUNT = 10**15

_PARAMS = {
    "dp": {"epsilon", "delta"},
    "laplace": {"epsilon"},
    "exponential": {"epsilon"},
    "gaussian": {"noise_multiplier", "sample_rate", "sampling", "batch_size", "dataset_size", "max_batch_size",
                 "group_size"},
    # mixture of Gaussians (dp_accounting's MixtureOfGaussiansDpEvent fields)
    "mog": {"standard_deviation", "sensitivities", "sampling_probs"},
    # PATE queries (noise in votes; votes: one query's counts for the data-dependent bound)
    "lnmax": {"scale", "votes"},
    "gnmax": {"noise_multiplier", "votes"},
}


def _count(value: Any) -> int:
    n = v.count("count", value, minimum=1)
    if n > MAX_COUNT:
        raise ParameterError("count", f"a whole number in [1, {MAX_COUNT:.0e}]", value)
    return n


@dataclass(frozen=True)
class MechanismSpec:
    """One item of the sequence: ``count`` runs of one mechanism (a validated event builder).

    Attributes:
        mechanism: ``"dp"`` (a generic (ε, δ)-DP mechanism), ``"gaussian"``, ``"laplace"`` or
            ``"exponential"`` (an ε-bounded-range mechanism: the exponential mechanism,
            :class:`~dpcalc.events.ExponentialMechanismEvent`).
        count: how many times it runs, in [1, :data:`MAX_COUNT`].
        epsilon: ε of a ``dp``, ``laplace`` or ``exponential`` mechanism (Laplace scale
            b = Δ₁/ε; for the exponential mechanism its usual ε, > 0 and at most 700).
        delta: δ of a ``dp`` mechanism, in [0, 1).
        noise_multiplier: σ of a ``gaussian`` mechanism (noise std over L2 sensitivity).
        sample_rate: Poisson sampling rate q of a ``gaussian`` mechanism, in (0, 1] (for
            ``truncated-poisson`` too; for the fixed-size samplers it is derived, B/N).
        sampling: the batch sampler of a ``gaussian`` mechanism (:data:`dpcalc.events.SAMPLINGS`,
            default ``"poisson"``); ``without-replacement``/``with-replacement`` need
            ``batch_size`` and ``dataset_size``, ``truncated-poisson`` needs ``sample_rate``,
            ``dataset_size`` and ``max_batch_size`` (:func:`dpcalc.events.sampled_step`).
        batch_size, dataset_size, max_batch_size: B, N, B_max of the sampler (whole numbers).
        scale: Laplace scale b (votes) of an ``lnmax`` PATE query (ε₀ = 2/b).
        votes: one PATE query's vote counts (``lnmax``/``gnmax``; the data-dependent bound, rdp
            only), or None. ``gnmax`` takes its σ (votes) as ``noise_multiplier``.
        group_size: k ≥ 1 of a Poisson-sampled ``gaussian``: the run as a group of k records sees it
            (:class:`~dpcalc.events.GroupEvent`, the binomial mixture of Gaussians).
        standard_deviation, sensitivities, sampling_probs: a ``mog`` mechanism
            (:class:`~dpcalc.events.MixtureOfGaussiansEvent`, dp_accounting's fields; the
            mechanism may also be named ``MixtureOfGaussiansDpEvent``).

    Raises:
        ParameterError: a parameter out of range (named, with the range and the value).
    """

    mechanism: str
    count: int
    epsilon: float | None = None
    delta: float = 0.0
    noise_multiplier: float | None = None
    sample_rate: float = 1.0
    sampling: str = "poisson"
    batch_size: int | None = None
    dataset_size: int | None = None
    max_batch_size: int | None = None
    scale: float | None = None
    votes: tuple[int, ...] | None = None
    group_size: int = 1
    standard_deviation: float | None = None
    sensitivities: tuple[float, ...] | None = None
    sampling_probs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, str):
            raise ParameterError("mechanism", "one of " + ", ".join(MECHANISMS), self.mechanism)
        v.choice("mechanism", self.mechanism, MECHANISMS)
        object.__setattr__(self, "count", _count(self.count))
        if self.mechanism == "dp":
            object.__setattr__(self, "epsilon", v.nonnegative("epsilon", self.epsilon))
            d = v.closed_unit("delta", self.delta)
            if d >= 1:
                raise ParameterError("delta", "in [0, 1)", d)
            object.__setattr__(self, "delta", d)
        elif self.mechanism == "laplace":
            object.__setattr__(self, "epsilon", v.positive("epsilon", self.epsilon))
        elif self.mechanism in ("lnmax", "gnmax"):
            ev = (LNMaxEvent(self.scale, self.votes) if self.mechanism == "lnmax"
                  else GNMaxEvent(self.noise_multiplier, self.votes))  # validates
            object.__setattr__(self, "votes", ev.votes)
            if self.mechanism == "lnmax":
                object.__setattr__(self, "scale", ev.scale)
            else:
                object.__setattr__(self, "noise_multiplier", ev.noise_multiplier)
        elif self.mechanism == "mog":
            ev = MixtureOfGaussiansEvent(self.standard_deviation, self.sensitivities, self.sampling_probs)
            for name in ("standard_deviation", "sensitivities", "sampling_probs"):
                object.__setattr__(self, name, getattr(ev, name))
        elif self.mechanism == "exponential":
            e = v.positive("epsilon", self.epsilon)
            if e > 700.0:
                raise ParameterError("epsilon", "a number in (0, 700]", e)
            object.__setattr__(self, "epsilon", e)
        else:
            object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
            object.__setattr__(self, "sample_rate", v.half_open_unit("sample_rate", self.sample_rate))
            self._check_sampler()
        k = v.count("group_size", self.group_size, minimum=1)
        if k > 1 and (self.mechanism != "gaussian" or self.sampling != "poisson"):
            raise ParameterError("group_size", "", k, message="group_size applies to a Poisson-sampled (or unsampled) "
                                 "gaussian only (the group-level mixture of Gaussians)")
        object.__setattr__(self, "group_size", k)
        if self.mechanism != "gaussian" and (self.sampling != "poisson" or self.batch_size is not None
                                             or self.dataset_size is not None or self.max_batch_size is not None):
            raise ParameterError("sampling", "", self.sampling,
                                 message="sampling, batch_size, dataset_size and max_batch_size apply to gaussian only")

    def _check_sampler(self) -> None:
        name = v.choice("sampling", self.sampling, SAMPLINGS)
        needs = {"poisson": (), "without-replacement": ("batch_size", "dataset_size"),
                 "with-replacement": ("batch_size", "dataset_size"),
                 "truncated-poisson": ("dataset_size", "max_batch_size"),
                 "shuffle": ("batch_size", "dataset_size"),
                 "balls-in-bins": ("batch_size", "dataset_size")}.get(name)
        if needs is None:  # a sampler added to SAMPLINGS without a rule here
            raise ParameterError("sampling", "a sampler compose knows", name)
        for attr in ("batch_size", "dataset_size", "max_batch_size"):
            val = getattr(self, attr)
            if attr in needs and val is None:
                raise ParameterError(attr, "", None, message=f"sampling {name} needs {attr}")
            if attr not in needs and val is not None:
                raise ParameterError(attr, "", val, message=f"{attr} does not apply to sampling {name}")
            if val is not None:
                object.__setattr__(self, attr, v.count(attr, val, minimum=1))
        if needs and "batch_size" in needs:
            if self.sample_rate not in (1.0, self.batch_size / self.dataset_size):
                raise ParameterError("sample_rate", "", self.sample_rate,
                                     message=f"sampling {name} derives q = batch_size/dataset_size; give no sample_rate")
            self.event()  # B ≤ N checked by the event
            object.__setattr__(self, "sample_rate", self.batch_size / self.dataset_size)
    def event(self) -> Event:
        """The :mod:`dpcalc.events` description of one run."""
        if self.mechanism == "dp":
            return EpsilonDeltaEvent(self.epsilon, self.delta)
        if self.mechanism == "laplace":
            return LaplaceEvent(1.0 / self.epsilon)
        if self.mechanism == "exponential":
            return ExponentialMechanismEvent(self.epsilon)
        if self.mechanism == "lnmax":
            return LNMaxEvent(self.scale, self.votes)
        if self.mechanism == "gnmax":
            return GNMaxEvent(self.noise_multiplier, self.votes)
        if self.mechanism == "mog":
            return MixtureOfGaussiansEvent(self.standard_deviation, self.sensitivities, self.sampling_probs)
        g = GaussianEvent(self.noise_multiplier)
        step = sampled_step(g, self.sampling, sample_rate=self.sample_rate, batch_size=self.batch_size,
                            dataset_size=self.dataset_size, max_batch_size=self.max_batch_size)
        return GroupEvent(self.group_size, step) if self.group_size > 1 else step

    def key(self) -> tuple:
        """What identifies the mechanism (everything but the count)."""
        return (self.mechanism, self.epsilon, self.delta, self.noise_multiplier, self.sample_rate,
                self.sampling, self.batch_size, self.dataset_size, self.max_batch_size, self.scale,
                self.votes, self.group_size, self.standard_deviation, self.sensitivities, self.sampling_probs)

    def describe(self) -> dict:
        """The item as JSON ``inputs`` (glossary names)."""
        out: dict[str, Any] = {"mechanism": self.mechanism, "count": self.count}
        if self.mechanism == "dp":
            out.update(epsilon=self.epsilon, delta=self.delta)
        elif self.mechanism in ("laplace", "exponential"):
            out.update(epsilon=self.epsilon)
        elif self.mechanism in ("lnmax", "gnmax"):
            out.update({"scale": self.scale} if self.mechanism == "lnmax" else {"noise_multiplier": self.noise_multiplier})
            if self.votes is not None:
                out["votes"] = list(self.votes)
        elif self.mechanism == "mog":
            out.update(standard_deviation=self.standard_deviation, sensitivities=list(self.sensitivities),
                       sampling_probs=list(self.sampling_probs))
        else:
            out.update(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)
            if self.sampling != "poisson":
                out["sampling"] = self.sampling
                out.update({k: getattr(self, k) for k in ("batch_size", "dataset_size", "max_batch_size")
                            if getattr(self, k) is not None})
            if self.group_size > 1:
                out["group_size"] = self.group_size
        return out

    def label(self) -> str:
        """``"100 × DP(ε=0.1, δ=0)"`` for tables."""
        if self.mechanism == "dp":
            body = f"DP(ε={self.epsilon:g}, δ={self.delta:g})"
        elif self.mechanism == "laplace":
            body = f"Laplace(ε={self.epsilon:g})"
        elif self.mechanism == "exponential":
            body = f"Exponential(ε={self.epsilon:g}, bounded range)"
        elif self.mechanism in ("lnmax", "gnmax"):
            par = f"b={self.scale:g}" if self.mechanism == "lnmax" else f"σ={self.noise_multiplier:g}"
            body = f"PATE {self.mechanism.upper().replace('MAX', 'Max')}({par}" + (
                f", votes={list(self.votes)})" if self.votes is not None else ")")
        elif self.mechanism == "mog":
            body = (f"MixtureOfGaussians(σ={self.standard_deviation:g}, shifts={list(self.sensitivities)}, "
                    f"p={list(self.sampling_probs)})")
        else:
            body = f"Gaussian(σ={self.noise_multiplier:g}" + (
                f", q={self.sample_rate:g}" if self.sample_rate < 1 else "")
            if self.sampling == "truncated-poisson":
                body += f", truncated-poisson N={self.dataset_size}, B_max={self.max_batch_size}"
            elif self.sampling != "poisson":
                body += f", {self.sampling} B={self.batch_size} of N={self.dataset_size}"
            body += f", group of {self.group_size})" if self.group_size > 1 else ")"
        return f"{self.count:,} × {body}"


def merge(sequence: Iterable[MechanismSpec]) -> list[MechanismSpec]:
    """Identical mechanisms merged into one item (counts added), in first-seen order.

    Raises:
        ParameterError: a merged count beyond :data:`MAX_COUNT`.
    """
    out: dict[tuple, MechanismSpec] = {}
    for m in sequence:
        k = m.key()
        if k in out:
            prev = out[k]
            out[k] = dataclasses.replace(prev, count=_count(prev.count + m.count))
        else:
            out[k] = m
    total = sum(m.count for m in out.values())
    if total > MAX_COUNT:
        raise ParameterError("count", "", total, message=f"the total count of all mechanisms must be at most "
                             f"{MAX_COUNT:.0e}, got {total}")
    return list(out.values())


def _freeze(x: Any) -> Any:
    """A hashable stand-in for a JSON/TOML value (raises TypeError for unhashable leaves)."""
    if isinstance(x, Mapping):
        return ("{}", tuple((k, _freeze(val)) for k, val in x.items()))
    if isinstance(x, list):
        return ("[]", tuple(_freeze(val) for val in x))
    hash(x)
    return x


def _thaw(x: Any) -> Any:
    """Undo ``object_pairs_hook=tuple``: tuples of (key, value) pairs back to dicts."""
    if isinstance(x, tuple):
        return {k: _thaw(val) for k, val in x}
    if isinstance(x, list):
        return [_thaw(val) for val in x]
    return x


def _distinct(entries: list) -> list[tuple[int, Any, int]]:
    """(index of first occurrence, entry, multiplicity) of each distinct entry, in order."""
    try:
        counts = Counter(entries)  # JSON entries arrive as hashable tuples of pairs
    except TypeError:
        counts = None
    if counts is not None:
        first = {e: i for i, e in reversed(list(enumerate(entries)))} if len(counts) < len(entries) else None
        return [(first[e] if first else i, e, c) for i, (e, c) in enumerate(counts.items())]
    seen: dict[Any, list] = {}
    out: list[list] = []
    for i, e in enumerate(entries):
        try:
            key = _freeze(e)
        except TypeError:
            out.append([i, e, 1])
            continue
        if key in seen:
            seen[key][2] += 1
        else:
            seen[key] = [i, e, 1]
            out.append(seen[key])
    return [tuple(x) for x in out]  # type: ignore[misc]


def parse_spec(entries: Any, *, origin: str = "spec") -> list[MechanismSpec]:
    """Validate a list of ``{mechanism, parameters, count}`` objects (from JSON or TOML);
    identical entries are merged (:func:`merge`).

    Args:
        entries: a list of mappings (TOML files hold it under ``[[mechanisms]]``;
            a JSON file may be the list itself or ``{"mechanisms": [...]}``).
        origin: the name used in error messages (the option, ``spec``).

    Raises:
        ParameterError: one line naming the entry and what is wrong (unknown mechanism,
            unknown parameter, count out of range, value out of range, wrong shape).
    """
    if isinstance(entries, tuple):  # JSON read with object_pairs_hook=tuple
        try:
            entries = dict(entries)
        except (TypeError, ValueError):
            pass
    if isinstance(entries, Mapping) and "mechanisms" in entries:
        entries = entries["mechanisms"]
    if not isinstance(entries, list) or not entries:
        raise ParameterError("spec", "", None, message=f"{origin} must be a non-empty list of "
                             "{mechanism, parameters, count} entries")
    out = []
    for index, entry, mult in _distinct(entries):
        where = f"{origin} entry {index + 1}"
        if isinstance(entry, tuple):
            try:
                entry = _thaw(entry)
            except (TypeError, ValueError):
                entry = None
        if not isinstance(entry, Mapping):
            raise ParameterError("spec", "", None, message=f"{where} must be a table/object with mechanism, parameters, count")
        extra = set(entry) - {"mechanism", "parameters", "count"}
        if extra:
            raise ParameterError("spec", "", None, message=f"{where}: unknown key(s) {', '.join(sorted(map(str, extra)))} "
                                 "(allowed: mechanism, parameters, count)")
        mech = entry.get("mechanism")
        mech = MECHANISM_ALIASES.get(mech, mech) if isinstance(mech, str) else mech
        if not isinstance(mech, str) or mech not in _PARAMS:
            raise ParameterError("spec", "", None, message=f"{where}: unknown mechanism {mech!r} "
                                 f"(allowed: {', '.join(MECHANISMS)})")
        params = entry.get("parameters", {})
        if not isinstance(params, Mapping):
            raise ParameterError("spec", "", None, message=f"{where}: parameters must be a table/object")
        unknown = set(params) - _PARAMS[mech]
        if unknown:
            raise ParameterError("spec", "", None, message=f"{where}: unknown parameter(s) "
                                 f"{', '.join(sorted(map(str, unknown)))} for {mech} "
                                 f"(allowed: {', '.join(sorted(_PARAMS[mech]))})")
        try:
            item = MechanismSpec(mech, entry.get("count", 1), **dict(params))
            if mult > 1:
                item = dataclasses.replace(item, count=_count(item.count * mult))
        except ParameterError as e:
            raise ParameterError("spec", "", None, message=f"{where}: {e.message}") from None
        out.append(item)
    return merge(out)


def _json_int(text: str) -> int | float:
    """A JSON integer; one of more than 30 digits is read as a float (beyond every range a spec
    accepts, so refused by the entry's check, not by Python's 4,300-digit conversion limit)."""
    return float(text) if len(text) > 30 else int(text)


def parse_spec_text(raw: bytes, *, name: str, toml: bool) -> list[MechanismSpec]:
    """Parse the bytes of a spec file (JSON, or TOML when ``toml``) and :func:`parse_spec` it.

    Args:
        raw: the file's content.
        name: the file name for messages.
        toml: TOML (else JSON).

    Raises:
        ParameterError: not UTF-8, malformed, nested too deeply, or a bad entry (one line).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParameterError("spec", "", name, message=f"--spec {name} is not UTF-8 text: {e.reason} at byte "
                             f"{e.start}") from None
    if not toml:
        try:
            data = json.loads(text, object_pairs_hook=tuple, parse_int=_json_int)
        except json.JSONDecodeError as e:
            raise ParameterError("spec", "", name, message=f"--spec {name} is not valid JSON: {e}") from None
        except RecursionError:
            raise ParameterError("spec", "", name, message=f"--spec {name} is nested too deeply to be a "
                                 "list of {mechanism, parameters, count} entries") from None
    else:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ParameterError("spec", "", name, message=f"--spec {name} is not valid TOML: {e}") from None
        except ValueError as e:  # an integer beyond Python's 4,300-digit conversion limit
            raise ParameterError("spec", "", name, message=(
                f"--spec {name} cannot be read as TOML: a number has more than 4,300 digits ({e.__class__.__name__})"
                if "digits" in str(e) else f"--spec {name} is not valid TOML: {str(e)[:200]}")) from None
        except RecursionError:
            raise ParameterError("spec", "", name, message=f"--spec {name} is nested too deeply") from None
    try:
        return parse_spec(data, origin="--spec")
    except RecursionError:
        raise ParameterError("spec", "", name, message=f"--spec {name} is nested too deeply") from None


def load_spec_file(path: str) -> list[MechanismSpec]:
    """Read a JSON (``.json``) or TOML (any other suffix) spec file and :func:`parse_spec` it.

    Read by the one safe reader (:func:`dpcalc._files.read_input_file`): opened without
    blocking, regular files only (no device such as /dev/zero, no FIFO), at most
    :data:`SPEC_MAX_BYTES`.

    Raises:
        ParameterError: not a regular file, too large, unreadable or malformed (one line with the
            reason).
    """
    raw = read_input_file(path, option="spec", max_bytes=SPEC_MAX_BYTES)
    return parse_spec_text(raw, name=path, toml=not path.lower().endswith(".json"))


def sequence_event(sequence: Sequence[MechanismSpec]) -> Event:
    """The whole sequence as one event (``SelfComposedEvent`` per item, ``ComposedEvent`` of them)."""
    parts = tuple(SelfComposedEvent(m.event(), m.count) for m in sequence)
    return parts[0] if len(parts) == 1 else ComposedEvent(parts)
