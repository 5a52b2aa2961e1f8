"""Sweeps: one scenario, several variants (schedulers or parameter values), each run on the same generated
workload (same seed), compared in one table (``comparison.csv``) and one plot per metric
(``plots/<metric>.png``).

A scenario's ``sweep`` is either a list of named variants::

    sweep:
      - {name: batch, set: {scheduler.name: batch, scheduler.params: {}}}
      - {name: gang-q100, set: {scheduler.name: gang, scheduler.params.quantum_ms: 100}}

or a grid, the cartesian product of one or more keys' values, named from the values::

    sweep: {scheduler.name: [batch, gang, hybrid]}

A variant is the base scenario (``sweep`` removed) with its ``set`` applied through the same machinery as
``--set`` (:func:`testbed.scenario.model.apply_override`), then validated like a file. The workload section is
the base's unless a variant overrides a workload key, and then the notes say so.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from testbed.scenario.model import Scenario, ScenarioError, apply_override, from_file_or_doc
from testbed.scenario.workload import build
from testbed.schedulers import registry

# --------------------------------------------------------------------------------------------------------
# Variants: the base scenario with each variant's overrides, all validated before anything runs


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, Any]  # dotted key -> value, as the sweep gives them
    scenario: Scenario  # the base with the overrides applied; no sweep
    notes: tuple[str, ...] = ()  # what the user should know (workload overridden, parameters dropped)


def base_doc(scn: Scenario) -> dict:
    """The scenario as its author wrote it (fields left at their defaults stay out: a job's wait mode,
    for instance, depends on whether it was set), without the sweep."""
    doc = scn.model_dump(mode="json", exclude_unset=True)
    doc.pop("sweep", None)
    return doc


def _drop_foreign_params(doc: dict, sets: dict[str, Any]) -> list[str]:
    """A variant that changes scheduler.name without replacing scheduler.params keeps the base's params
    the new scheduler accepts and drops the rest (the base's gang quantum means nothing to batch); its
    own scheduler.params.X keys apply after that, and are checked."""
    if "scheduler.name" not in sets or any(k in ("scheduler", "scheduler.params") for k in sets):
        return []
    params = (doc.get("scheduler") or {}).get("params") or {}
    try:
        accepted = registry.get(sets["scheduler.name"]).all_defaults()
    except Exception:  # noqa: BLE001 - unknown scheduler: validation reports it, naming the variant
        return []
    dropped = sorted(set(params) - set(accepted))
    if dropped:
        doc["scheduler"]["params"] = {k: v for k, v in params.items() if k in accepted}
    return dropped


def _job_fingerprint(scn: Scenario) -> list[tuple]:
    """The generated jobs as data, less the receive and send wait modes and spin time (coscheduling schemes
    impose their own on every job: that is the policy under test, not a different workload)."""
    out = []
    for j in build(scn):
        app = j.app.model_dump()
        app.pop("wait_mode", None)
        app.pop("spin_time_us", None)
        out.append((j.spec, tuple(sorted(app.items()))))
    return out


def variants(scn: Scenario) -> list[Variant]:
    """Every variant of ``scn``'s sweep, validated; a :class:`ScenarioError` lists every bad variant with
    the field and the fix."""
    if not scn.sweep:
        return []
    base = base_doc(scn)
    built: list[Variant] = []
    errors: list[str] = []
    for sv in scn.sweep:
        doc = copy.deepcopy(base)
        notes = []
        try:
            dropped = _drop_foreign_params(doc, sv.set)
            if dropped:
                notes.append(
                    f"variant '{sv.name}': base scheduler.params {', '.join(dropped)} dropped "
                    f"(not parameters of '{sv.set['scheduler.name']}')"
                )
            for key, value in sv.set.items():
                apply_override(doc, key.split("."), copy.deepcopy(value))
            vs = from_file_or_doc(doc=doc)
        except ScenarioError as exc:
            errors.extend(f"variant '{sv.name}': {p.replace('--set ', 'set ')}" for p in exc.problems)
            continue
        wl = [k for k in sv.set if k.split(".")[0] == "workload"]
        if wl:
            notes.append(
                f"variant '{sv.name}' overrides {', '.join(wl)}: its jobs are not the other variants' jobs"
            )
        built.append(Variant(sv.name, dict(sv.set), vs, tuple(notes)))
    if errors:
        raise ScenarioError.listing("invalid sweep", errors)
    # Same seed, same jobs: say so when a variant's keys change the jobs without naming the workload
    # (cluster.cpu_rate, for instance, changes how many iterations a drawn duration is). A scheduler key
    # changes only the wait mode, which the fingerprint leaves out, so those variants are not rebuilt.
    ref = None
    for i, v in enumerate(built):
        if all(k.split(".")[0] == "scheduler" for k in v.overrides) or any(
            k.split(".")[0] == "workload" for k in v.overrides
        ):
            continue
        ref = _job_fingerprint(scn) if ref is None else ref
        if _job_fingerprint(v.scenario) != ref:
            keys = ", ".join(v.overrides)
            note = f"variant '{v.name}': its jobs differ from the base scenario's (it sets {keys})"
            built[i] = Variant(v.name, v.overrides, v.scenario, (*v.notes, note))
    return built


# --------------------------------------------------------------------------------------------------------
# Repetitions: the same scenario again, with the workload seed of repetition k


def seeds_vary(scn: Scenario, backend: str) -> bool:
    """Whether ``scn``'s repetitions on ``backend`` draw their workloads from different seeds: ``vary``,
    or ``auto`` in the simulator (a deterministic run repeated with one seed is one run, counted again)."""
    mode = scn.repetition_seeds
    return mode == "vary" or (mode == "auto" and backend == "sim")


def repetition(scn: Scenario, k: int, backend: str) -> Scenario:
    """Repetition ``k`` (from 0) of ``scn`` on ``backend``: its workload seed is ``workload.seed + k`` when
    the seeds vary (:func:`seeds_vary`), ``workload.seed`` otherwise."""
    if k == 0 or not seeds_vary(scn, backend):
        return scn
    workload = scn.workload.model_copy(update={"seed": scn.workload.seed + k})
    return scn.model_copy(update={"workload": workload})
