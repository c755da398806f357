"""Accountants by name, so ``--accountant`` choices and new accountants are one line each.

Entries are imported lazily: naming an accountant does not import its module.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpcalc.accounting.base import Accountant
from dpcalc.errors import ParameterError

__all__ = ["ACCOUNTANTS", "ALIASES", "resolve_alias", "available", "get_accountant", "get_class", "default_accountant",
           "register", "unregister"]

#: name -> "module:Class" (or the class itself), in order of preference (tightest certified first).
ACCOUNTANTS: dict[str, str | type[Accountant]] = {
    "pld": "dpcalc.accounting.pld:PldAccountant",
    "rdp": "dpcalc.accounting.rdp:RdpAccountant",
    "zcdp": "dpcalc.accounting.zcdp:ZcdpAccountant",
    "ma": "dpcalc.accounting.moments:MomentsAccountant",
    "gdp": "dpcalc.accounting.gdp:GdpAccountant",
}


#: peers' accountant names -> (the registered name that runs, the one-line note naming what ran).
#: prv_accountant (Gopi, Lee, Wutschitz 2021) computes the privacy curve from the privacy loss
#: distribution, the method family of pld (Koskela et al. 2020; Doroshenko et al. 2022).
ALIASES: dict[str, tuple[str, str]] = {
    "prv": ("pld", "--accountant prv: ran pld, dpcalc's privacy-loss-distribution accountant "
                   "(prv_accountant's PRV method, Gopi, Lee, Wutschitz 2021, is of the same PLD family)."),
}


def resolve_alias(name: str) -> tuple[str, str | None]:
    """The registered name for ``name`` and the note saying what ran (None when ``name`` is not
    an alias of :data:`ALIASES`: it is returned unchanged)."""
    if name in ALIASES and name not in ACCOUNTANTS:
        target, note = ALIASES[name]
        return target, note
    return name, None


def register(name: str, target: str | type[Accountant], *, before: str | None = None) -> None:
    """Register an accountant under ``name`` (``target``: a class or ``"module:Class"``).

    Args:
        name: the registry name (``--accountant`` and ``--method`` choice).
        target: the class, or ``"package.module:Class"`` to import it lazily.
        before: insert before this registered name (the order is the order of preference,
            tightest certified first); default: last.

    Raises:
        ParameterError: ``name`` already registered, or ``before`` unknown.
    """
    if name in ACCOUNTANTS:
        raise ParameterError("accountant", "a name not yet registered", name)
    if before is not None and before not in ACCOUNTANTS:
        raise ParameterError("before", "one of " + ", ".join(ACCOUNTANTS), before)
    items = list(ACCOUNTANTS.items())
    at = len(items) if before is None else [k for k, _ in items].index(before)
    items.insert(at, (name, target))
    ACCOUNTANTS.clear()
    ACCOUNTANTS.update(items)


def unregister(name: str) -> None:
    """Remove ``name`` from the registry (tests that register a toy accountant).

    Raises:
        ParameterError: unknown name.
    """
    if name not in ACCOUNTANTS:
        raise ParameterError("accountant", "one of " + ", ".join(ACCOUNTANTS), name)
    del ACCOUNTANTS[name]


def available() -> tuple[str, ...]:
    """Registered accountant names, tightest certified first."""
    return tuple(ACCOUNTANTS)


def get_class(name: str) -> type[Accountant]:
    """The accountant class registered as ``name``.

    Raises:
        ParameterError: unknown name.
    """
    try:
        target = ACCOUNTANTS[name]
    except KeyError:
        raise ParameterError("accountant", "one of " + ", ".join(ACCOUNTANTS), name) from None
    if not isinstance(target, str):
        return target
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def get_accountant(name: str, **options: Any) -> Accountant:
    """An accountant instance by registry name; ``options`` go to its constructor
    (e.g. ``neighboring="replace"``)."""
    return get_class(name)(**options)


def default_accountant() -> str:
    """The tightest certified accountant registered (used by ``dpcalc sigma``)."""
    for name in ACCOUNTANTS:
        if get_class(name).certified:
            return name
    raise RuntimeError("no certified accountant registered")  # pragma: no cover
