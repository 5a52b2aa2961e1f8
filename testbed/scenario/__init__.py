"""The scenario: a YAML file validated into a model (model.py), its workload built into jobs
(workload.py, with swf.py and divisible.py), its sweep expanded into variants (sweep.py).

This package's public names, for the rest of the testbed: :func:`load` (a file or a document with
``--set`` overrides, every sweep variant checked), :class:`Scenario`, :class:`ScenarioError`,
:func:`effective_tdf`. Modules inside the package import each other directly.
"""

from __future__ import annotations

from pathlib import Path

from testbed.scenario.model import Scenario, ScenarioError, effective_tdf, from_file_or_doc
from testbed.scenario.sweep import variants


def load(path: str | Path | None = None, overrides: list[str] = (), doc: dict | None = None) -> Scenario:
    """The validated scenario from a file (or ``doc``) with ``--set`` overrides applied; anything wrong
    with it, in the file or in any variant of its sweep, raises :class:`ScenarioError` naming the field
    and the fix."""
    scn = from_file_or_doc(path, overrides, doc)
    if scn.sweep:
        variants(scn)  # every variant is checked up front; ScenarioError names the variant and field
    return scn


__all__ = ["Scenario", "ScenarioError", "effective_tdf", "load"]
