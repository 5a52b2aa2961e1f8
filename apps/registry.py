"""Name -> ProgramKind (apps/base.py). Built-ins are listed here; third parties register through the
``testbed.apps`` entry-point group (``name = "package.module:KindClass"``), as policies do through
``testbed.schedulers``."""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from testbed.schedulers.inputs import excerpt

from .base import ProgramKind

_BUILTIN = {
    "synthetic": "testbed.apps.synthetic:Synthetic",
    "divisible": "testbed.apps.divisible:Divisible",
    "vision": "testbed.apps.vision:Vision",
    "mpi": "testbed.apps.mpi:Mpi",
    "nas": "testbed.apps.nas.kind:Nas",
    "localuser": "testbed.apps.localuser:LocalUser",
}

#: The kind of an ``app:`` section that does not name one.
DEFAULT = "synthetic"


class UnknownKind(KeyError):
    def __str__(self) -> str:  # KeyError quotes its argument; say it plainly
        return str(self.args[0])


@functools.lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    # One scan of the installed distributions' entry points per process (~20 ms each).
    targets = dict(_BUILTIN)
    for ep in entry_points(group="testbed.apps"):
        targets.setdefault(ep.name, ep.value)
    return targets


@functools.cache
def _load(target: str) -> type[ProgramKind]:
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, ProgramKind)):
        raise TypeError(f"{target} is not a testbed ProgramKind subclass")
    return cls


def names() -> list[str]:
    return sorted(_targets())


def get(name: str) -> type[ProgramKind]:
    targets = _targets()
    if name not in targets:
        known = ", ".join(sorted(targets))
        raise UnknownKind(f"app.kind: unknown program kind {excerpt(name)}; known kinds: {known}")
    return _load(targets[name])


def all_kinds() -> list[type[ProgramKind]]:
    return [get(n) for n in names()]
