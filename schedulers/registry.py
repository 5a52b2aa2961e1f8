"""Name -> Scheduler. Built-ins are listed here; third parties register through the
``testbed.schedulers`` entry-point group (``name = "package.module:SchedulerClass"``)."""

from __future__ import annotations

import functools
import importlib
from importlib.metadata import entry_points

from .base import Scheduler
from .inputs import excerpt

_BUILTIN = {
    "batch": "testbed.schedulers.batch:Batch",
    "local": "testbed.schedulers.local:Local",
    "gang": "testbed.schedulers.gang:Gang",
    "1gs": "testbed.schedulers.multiclass:OneGs",
    "2dcs-tdm": "testbed.schedulers.multiclass:TwoDcsTdm",
    "2dcs-ps": "testbed.schedulers.multiclass:TwoDcsPs",
    "paired": "testbed.schedulers.paired:Paired",
    "spin": "testbed.schedulers.cosched:Spin",
    "dcs": "testbed.schedulers.cosched:Dcs",
    "sb": "testbed.schedulers.cosched:Sb",
    "sy": "testbed.schedulers.cosched:Sy",
    "pb": "testbed.schedulers.cosched:Pb",
    "pbsb": "testbed.schedulers.cosched:PbSb",
    "cc": "testbed.schedulers.cosched:Cc",
    "hybrid": "testbed.schedulers.cosched:Hybrid",
    "dynamic": "testbed.schedulers.ccs:Dynamic",
    "ccs": "testbed.schedulers.ccs:Ccs",
    "mcdf": "testbed.schedulers.divisible:Mcdf",
    "fifo-anna": "testbed.schedulers.divisible:FifoAnna",
    "fifo-an": "testbed.schedulers.divisible:FifoAn",
    "fifo-mn": "testbed.schedulers.divisible:FifoMn",
    "edf-anna": "testbed.schedulers.divisible:EdfAnna",
    "edf-an": "testbed.schedulers.divisible:EdfAn",
    "edf-mn": "testbed.schedulers.divisible:EdfMn",
}


class UnknownScheduler(KeyError):
    def __str__(self) -> str:  # KeyError quotes its argument; say it plainly
        return str(self.args[0])


def _load(target: str) -> type[Scheduler]:
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"{target} is not a testbed Scheduler subclass")
    return cls


@functools.lru_cache(maxsize=1)
def _targets() -> dict[str, str]:
    # Scanning the installed distributions' entry points costs ~20 ms; the set does not change while a
    # process runs, and the workload builder looks a scheduler up for every job.
    targets = dict(_BUILTIN)
    for ep in entry_points(group="testbed.schedulers"):
        targets.setdefault(ep.name, ep.value)
    return targets


def names() -> list[str]:
    return sorted(_targets())


def get(name: str) -> type[Scheduler]:
    targets = _targets()
    if name not in targets:
        raise UnknownScheduler(
            f"scheduler.name: unknown scheduler {excerpt(name)}; "
            f"known schedulers: {', '.join(sorted(targets))}"
        )
    return _load(targets[name])


def all_schedulers() -> list[type[Scheduler]]:
    return [get(n) for n in names()]
