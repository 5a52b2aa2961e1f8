"""Events between cooperating nodes (schedulers/base.py CoopEvent): their form in the event log, the same in
both backends, and on the wire between two NICs (JSON naming the event's class, which must be a
CoopEvent subclass that the receiving node has imported: its policy's module defines it)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from testbed.schedulers.base import CoopEvent


class CoopError(ValueError):
    """A CoopEvent that cannot be carried: a field of another type, or a class that no node knows."""


def name_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def log_fields(event: CoopEvent) -> dict[str, Any]:
    """The event as the log records it: ``event`` (its class's name) and ``fields`` (its fields, job_id
    among them: apart, so that none can take the name of a field of the record's own)."""
    return {"event": type(event).__name__, "fields": _fields(event)}


def _fields(event: CoopEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


def encode(event: CoopEvent, src: int) -> bytes:
    """The event from node ``src`` as JSON bytes; raises CoopError for a field JSON would not give back."""
    fields = _fields(event)
    for name, value in fields.items():
        if not _plain(value):
            raise CoopError(
                f"{type(event).__name__}.{name} = {value!r}: a CoopEvent's fields must be str, int, float, "
                "bool or tuples of them"
            )
    return json.dumps({"type": name_of(type(event)), "src": src, "fields": fields}).encode()


def decode(body: bytes) -> tuple[int, CoopEvent]:
    """(sender node, event) from :func:`encode`'s bytes; raises CoopError for anything else."""
    try:
        doc = json.loads(body)
        cls = _known().get(doc["type"])
        if cls is None:
            raise CoopError(f"unknown CoopEvent type {doc['type']!r}")
        fields = {k: _tuples(v) for k, v in doc["fields"].items()}
        return int(doc["src"]), cls(**fields)
    except CoopError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise CoopError(f"not a CoopEvent: {exc}") from None


def _plain(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, str | int | float | bool)


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _known() -> dict[str, type[CoopEvent]]:
    """Every CoopEvent subclass imported in this process, by name."""
    found: dict[str, type[CoopEvent]] = {}
    todo = list(CoopEvent.__subclasses__())
    while todo:
        cls = todo.pop()
        found[name_of(cls)] = cls
        todo.extend(cls.__subclasses__())
    return found
