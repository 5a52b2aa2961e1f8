"""The base of every model a scenario's text is read into: the scenario's sections
(testbed/scenario/model.py), its local users and divisible tasks, and each program kind's config
(apps/base.py ``AppConfig``). Scheduler parameters have their own, strict, base (schedulers/params.py).

One definition, so that every such model refuses the same things: unknown fields, non-finite numbers, and
a boolean given for a number. Pydantic's lax mode takes ``true`` as 1 (``nodes: true`` was a cluster of one
node), but a boolean where a number belongs is a mistake in the file. Also here: how an error message
echoes a user's value (:func:`excerpt`, :func:`cut`, :func:`cut_path`), which every layer uses.

It lives in the bottom layer, beside the policies' own parameter base, because every layer above reads
input and echoes it: schedulers/ imports nothing of the testbed (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

#: The most characters of a user's value that an error message echoes: a message is one line, and a value
#: of 200,000 characters (a name, a key, a path) made it a line of 200 KB.
EXCERPT_CHARS = 60


def cut(text: str) -> str:
    """``text`` as a message echoes it unquoted (a key in a field's path): its first
    :data:`EXCERPT_CHARS` characters and "..." when longer."""
    if len(text) <= EXCERPT_CHARS:
        return text
    return text[:EXCERPT_CHARS] + "..."


#: The most characters of a path that names no file that a message echoes. A path is worth more than a
#: value's excerpt (a user finds the mistake in the whole of it, and a scratch folder's path alone is 100
#: characters), but within PATH_MAX (4096) it can still make a line of kilobytes.
PATH_CHARS = 240


def cut_path(path: str) -> str:
    """``path`` whole up to :data:`PATH_CHARS`, else its start and its end (the file's name) around "..."."""
    if len(path) <= PATH_CHARS:
        return path
    head = PATH_CHARS // 3
    return path[:head] + "..." + path[head - PATH_CHARS :]


def excerpt(value: Any) -> str:
    """``value`` as a message echoes it: a string quoted (its repr), anything else as its repr, each cut
    to :data:`EXCERPT_CHARS` characters of the value and "..." (a path: :func:`cut_path`)."""
    if isinstance(value, str):
        if len(value) <= EXCERPT_CHARS:
            return repr(value)
        return repr(value[:EXCERPT_CHARS]) + "..."
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts (sys.get_int_max_str_digits)
        text = f"an {type(value).__name__} too long to show"
    return cut(text)


class InputModel(BaseModel):
    """Frozen, unknown fields refused, numbers finite, and no boolean for a number."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is not None and _boolean_for_number(field.annotation, v):
            raise ValueError("a boolean (true or false) is not a number; give a number")
        return v


def _boolean_for_number(tp: Any, v: Any) -> bool:
    """True when ``v`` is, or a list of numbers ``v`` holds, a boolean where type ``tp`` wants a number
    (an int or a float) and no boolean."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _boolean_for_number(get_args(tp)[0], v)
    if origin is Union or origin is types.UnionType:
        members = get_args(tp)
        if isinstance(v, bool) and bool in members:
            return False  # a field that takes a boolean as such
        return any(_boolean_for_number(m, v) for m in members)
    if isinstance(v, bool):
        return tp is int or tp is float
    if isinstance(v, list | tuple) and origin in (list, tuple, typing.Sequence):
        elems = [a for a in get_args(tp) if a is not Ellipsis]
        return any(_boolean_for_number(e, x) for x in v for e in elems)
    return False
