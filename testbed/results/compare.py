"""Results across folders (``testbed compare DIR...``): one row per run, labelled by its folder and its
sweep variant, with the mean and standard deviation over its repetitions; the rows have the columns of a
sweep's comparison (testbed/results/comparison.py), so its table, CSV and the report's bars take them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from testbed.results import comparison, stats
from testbed.results import summary as results

#: A repetition's folder: its runs are one entry, with a mean and a spread.
REPETITION = re.compile(r"rep-\d+")


class CompareError(ValueError):
    """A folder that holds nothing to compare; one line naming it and the fix."""


@dataclass
class Entry:
    """One run, or one run's repetitions: its folder, its label, its sweep variant (or '')."""

    folder: Path
    label: str
    variant: str
    summaries: list[dict]


def summary_of(run: Path) -> dict:
    try:
        return json.loads((run / "summary.json").read_text())
    except OSError:
        raise CompareError(
            f"{run}: no summary.json; rebuild it with `testbed results {run}`, then compare again"
        ) from None
    except ValueError as exc:
        raise CompareError(
            f"{run}/summary.json: not JSON ({exc}); rebuild it with `testbed results {run}`"
        ) from None


def entries(dirs: list[Path]) -> list[Entry]:
    """Every run at or below each of ``dirs`` (a run, a folder of repetitions, a sweep), its repetitions
    grouped. Labels are the shortest trailing paths that tell the entries apart."""
    found: list[tuple[Path, Path, list[Path]]] = []  # (given dir, entry folder, its runs)
    for d in dirs:
        if not d.is_dir():
            raise CompareError(f"{d}: no such folder; give results folders (a run, repetitions or a sweep)")
        groups: dict[Path, list[Path]] = {}
        for run in results.run_folders(d):
            key = run.parent if REPETITION.fullmatch(run.name) and run != d else run
            groups.setdefault(key, []).append(run)
        if not groups:
            raise CompareError(f"{d}: holds no run (no events.jsonl or events/*.jsonl below it)")
        found.extend((d, key, runs) for key, runs in groups.items())
    labels = _labels([key.resolve() for _, key, _ in found])
    out = []
    for (given, key, runs), label in zip(found, labels, strict=True):
        variant = "" if key == given else str(key.relative_to(given))
        out.append(Entry(key, label, variant, [summary_of(r) for r in runs]))
    return out


def repetitions(folder: Path) -> list[Entry] | None:
    """A run's repetitions (``folder/rep-k``), each its own entry, then their mean as one more; None when
    ``folder`` is not a folder of repetitions."""
    runs = results.run_folders(folder)
    if not runs or any(r.parent != folder or not REPETITION.fullmatch(r.name) for r in runs):
        return None
    runs.sort(key=lambda r: int(r.name.split("-")[1]))
    each = [Entry(r, r.name, "", [summary_of(r)]) for r in runs]
    return [*each, Entry(folder, "mean", "", [e.summaries[0] for e in each])]


def _labels(paths: list[Path]) -> list[str]:
    """The shortest trailing parts of each path that make every label unique ('quick/gang', 'p001/mcdf')."""
    depth = 1
    while True:
        labels = ["/".join(p.parts[-depth:]) for p in paths]
        if len(set(labels)) == len(labels) or depth >= max(len(p.parts) for p in paths):
            return labels
        depth += 1


def _value(s: dict, name: str) -> float | None:
    if name in comparison.JOB_STATES:  # a count of jobs by final state
        return float((s.get("jobs_by_state") or {}).get(comparison.JOB_STATES[name], 0))
    v = s.get(name)
    return None if v is None else float(v)


def rows(es: list[Entry]) -> list[dict]:
    """One row per entry, with comparison.csv's metric columns (mean, and ``_stdev`` and ``_ci95`` where
    an entry has repetitions)."""
    found = {
        k for e in es for s in e.summaries for k, v in s.items() if v is not None and comparison.is_metric(k)
    }
    metrics = [*comparison.METRICS, *(m for m in comparison.OPTIONAL_METRICS if m in found)]
    metrics += sorted(k for k in found if results.is_rate(k))
    multi = any(len(e.summaries) > 1 for e in es)
    out = []
    for e in es:
        first = e.summaries[0]
        row: dict = {
            "variant": e.label,
            "folder": str(e.folder),
            "sweep_variant": e.variant,
            "scheduler": first.get("scheduler"),
            "backend": first.get("backend"),
            "status": comparison.VariantStatus.OK
            if not first.get("error")
            else comparison.VariantStatus.FAILED,
            "repetitions": len(e.summaries),
        }
        for m in (*metrics, *comparison.JOB_STATES):
            vals = [x for x in (_value(s, m) for s in e.summaries) if x is not None]
            row[m] = sum(vals) / len(vals) if vals else None
            if multi:  # as a sweep's comparison: the spread and the 95 % interval of the mean
                d = stats.describe(vals)
                row[f"{m}{comparison.STDEV}"] = d.stdev if d is not None else None
                row[f"{m}{comparison.CI95}"] = d.ci95_half if d is not None else None
        row["error"] = first.get("error") or ""
        out.append(row)
    return out
