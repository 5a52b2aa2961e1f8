"""Typed scheduler parameters.

Each scheduler declares its parameters as a :class:`PolicyParams` model: types, bounds, cross-field rules,
defaults and a one-line description each. Groups that several schedulers share (memory-aware allocation,
NLS's mpl/packing, the coscheduling family's nice and wake-boost settings) are models of their own that
the schedulers' models inherit, so each parameter is defined once.

:func:`parse` turns a scenario's ``scheduler.params`` into an instance of the model, which the policies
receive as their typed ``params``, or raises :class:`PolicyConfigError` with one line per problem in the
scenario's format (``scheduler.params.<name>: what is wrong; the fix``; unknown names share one
``scheduler.params:`` line that lists the known ones). The wording of a refusal is built from the field's
own declaration (its noun and bounds), so the message and the check cannot drift apart.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from .inputs import cut, excerpt

#: The pydantic error type of a cross-field rule (:func:`rule_error`).
RULE = "param_rule"


class PolicyConfigError(ValueError):
    """A policy parameter is invalid; each line names one parameter, what is wrong and the fix."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class PolicyParams(BaseModel):
    """Base of every scheduler's parameter model.

    Strict: a scenario is YAML, so a number given as a string ("3") or a boolean given as 1 is a mistake
    in the file, not something to coerce (an int is still a valid float). Unknown names are refused.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    # Read by name, as when policies got a dict: third-party policies written that way keep working (the
    # testbed's own read attributes).
    def __getitem__(self, name: str) -> Any:
        if name not in type(self).model_fields:
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return name in type(self).model_fields

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default


P = TypeVar("P", bound=PolicyParams)


#: The shortest slot or quantum a policy may ask for: the kernel's timer tick is 1 ms, so a node cannot
#: switch faster, and a shorter one only multiplies the simulator's events (1e-9 ms wrote 1.2 GB a minute).
MIN_QUANTUM_MS = 1.0
#: The most rows an Ousterhout matrix may have: the papers use a handful; each row is a slot the whole
#: cluster cycles through, and 1e8 rows allocated for half a minute before failing.
MAX_ROWS = 256


def param(default: Any, description: str, *, noun: str | None = None, **bounds: Any) -> Any:
    """A parameter field: its default, its one-line description, and what it must be. ``noun`` says what
    kind of value it takes ("a number of milliseconds"; default: from its type); ``bounds`` are pydantic's
    ``ge``/``gt``/``le``/``lt``."""
    extra = {"noun": noun} if noun else None
    return Field(default, description=description, json_schema_extra=extra, **bounds)


def rule_error(field: str, message: str) -> PydanticCustomError:
    """A cross-field rule broken, blamed on ``field``: raise it from a model validator. ``message``
    follows the scheduler's name ("plans each slot ... ; lower lead_ms")."""
    return PydanticCustomError(RULE, "{message}", {"field": field, "message": message})


# --------------------------------------------------------------------------------------------------------
# Describing a field


def _shown(value: Any) -> str:
    """A value as a scenario file writes it."""
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else repr(value)


def _num(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _bounds(info: FieldInfo, whole: bool) -> str:
    lo = hi = None
    for m in info.metadata:
        if isinstance(m, annotated_types.Ge):
            lo = (">=", m.ge)
        elif isinstance(m, annotated_types.Gt):
            lo = (">", m.gt)
        elif isinstance(m, annotated_types.Le):
            hi = ("<=", m.le)
        elif isinstance(m, annotated_types.Lt):
            hi = ("<", m.lt)
    if whole and lo and hi and lo[0] == ">=" and hi[0] == "<=":
        return f"in {_num(lo[1])}..{_num(hi[1])}"
    return " and ".join(f"{b[0]} {_num(b[1])}" for b in (lo, hi) if b)


def _base_type(annotation: Any) -> tuple[Any, bool]:
    """``annotation`` without None, and whether None is accepted; (None, ...) for a union of several
    other types."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(annotation))
        return (args[0] if len(args) == 1 else None), nullable
    return annotation, False


def needs(info: FieldInfo) -> str | None:
    """What a value of this field must be, in words ("a number of milliseconds > 0"); None when its type
    is beyond these words (then pydantic's own message is used)."""
    kind, nullable = _base_type(info.annotation)
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if kind is bool:
        what = "true or false"
    elif typing.get_origin(kind) is Literal:
        what = " or ".join(repr(v) for v in typing.get_args(kind))
    else:
        noun = extra.get("noun") or {int: "a whole number", float: "a number", str: "a string"}.get(kind)
        if noun is None:
            return None
        bounds = _bounds(info, whole=kind is int)
        what = f"{noun} {bounds}" if bounds else noun
    return f"{what} or null" if nullable else what


def defaults(model: type[PolicyParams]) -> dict[str, Any]:
    """Every parameter of ``model`` with its default, in declaration order (required ones left out)."""
    return {
        name: info.get_default(call_default_factory=True)
        for name, info in model.model_fields.items()
        if not info.is_required()
    }


def describe(model: type[PolicyParams]) -> list[tuple[str, str, str, str]]:
    """Each parameter as (name, default as a scenario writes it, what it accepts, description)."""
    rows = []
    for name, info in model.model_fields.items():
        default = "(required)" if info.is_required() else _shown(info.get_default(call_default_factory=True))
        accepts = needs(info) or _type_name(info.annotation)
        rows.append((name, default, accepts, info.description or ""))
    return rows


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def untyped(name: str, values: Mapping[str, Any]) -> type[PolicyParams]:
    """A model for a scheduler that declares its parameters as a plain ``defaults`` dict: the names are
    checked, the values are the policy's to check."""
    fields: dict[str, Any] = {k: (Any, Field(v)) for k, v in values.items()}
    return create_model(f"{name}Params", __base__=PolicyParams, **fields)


def given(params: PolicyParams | Mapping[str, Any]) -> PolicyParams:
    """A policy's parameters as its constructor got them: the model instance that
    :meth:`Scheduler.make_global <testbed.schedulers.base.Scheduler.make_global>` passes, or, for a policy
    built directly from a mapping (code written when policies got a dict), those values as they are,
    unchecked, in a model of exactly those names."""
    if isinstance(params, PolicyParams):
        return params
    if not isinstance(params, Mapping):
        raise TypeError(f"policy parameters: needs a PolicyParams model or a mapping, got {params!r}")
    return untyped("Given", params).model_validate(dict(params))


# --------------------------------------------------------------------------------------------------------
# Validation


def parse(model: type[P], params: Mapping[str, Any], scheduler: str) -> P:
    """``params`` checked against ``model``: the model's instance (defaults filled in), or
    :class:`PolicyConfigError` with one line per problem."""
    if not isinstance(params, Mapping):
        raise PolicyConfigError(
            f"scheduler.params: {scheduler} needs a mapping of parameter names to values, "
            f"got {excerpt(params)}"
        )
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise PolicyConfigError(*problems(model, exc, scheduler)) from None


def problems(model: type[PolicyParams], exc: ValidationError, scheduler: str) -> list[str]:
    """One line per problem of ``exc``, each naming the parameter(s), what is wrong and the fix."""
    fields = model.model_fields
    lines: list[str] = []
    unknown: list[str] = []
    seen: set[str] = set()  # a union type reports each of its members: one line per field is enough
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if err["type"] == RULE:
            lines.append(f"scheduler.params.{err['ctx']['field']}: {scheduler} {err['msg']}")
            continue
        if err["type"] == "extra_forbidden" and len(loc) == 1:
            unknown.append(loc[0])
            continue
        where = "scheduler.params." + ".".join(map(cut, loc)) if loc else "scheduler.params"
        info = fields.get(loc[0]) if loc else None
        what = needs(info) if info is not None and len(loc) == 1 else None
        if err["type"] == "missing":
            needed = f": {what}" if what else ""
            lines.append(f"{where}: {scheduler} requires this parameter; add it{needed}")
            continue
        if where in seen:
            continue
        seen.add(where)
        got = err.get("input")
        if what is None:
            lines.append(f"{where}: {err['msg']}, got {excerpt(got)}")
            continue
        default = (
            "" if info.is_required() else f" (default {_shown(info.get_default(call_default_factory=True))})"
        )
        lines.append(f"{where}: {scheduler} needs {what}, got {excerpt(got)}{default}")
    if unknown:
        lines.insert(0, _unknown_line(unknown, sorted(fields), scheduler))
    return lines


def _unknown_line(unknown: list[str], known: list[str], scheduler: str) -> str:
    """Every unknown name on one line, with the closest known name for each typo and all the known ones."""
    unknown = unknown[:5] + ([f"and {len(unknown) - 5} more"] if len(unknown) > 5 else [])  # one line
    near = {u: m[0] for u in unknown if (m := difflib.get_close_matches(u, known, n=1))}
    if len(unknown) == 1 and near:
        hint = f"did you mean '{near[unknown[0]]}'? "
    elif near:
        hint = "did you mean " + ", ".join(f"'{m}' for {excerpt(u)}" for u, m in near.items()) + "? "
    else:
        hint = ""
    return (
        f"scheduler.params: unknown parameter(s) {', '.join(map(cut, unknown))} for scheduler '{scheduler}'; "
        f"{hint}known parameters: {', '.join(known) or '(none)'}"
    )
