"""The arguments a call of the Python API takes, and the one-line refusal of any other.

Every public function and method of `parallel` checks its arguments against its signature
before it does anything: an unknown keyword (`sampels=`), a missing required one, a surplus
positional or one given twice is an `ArgumentError` naming it and the arguments the call
takes, as the caller spells them. Python would raise a TypeError too, but one that names a
private method (`Calls._regression()`) or, for calls whose options are keywords of a request
type, none at all: the option would be taken and ignored.

A call's signature is derived from its request type (`takes`): the options are declared once,
as the type's fields, and its required fields are the call's required keywords.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, cast

import msgspec

from aner_coord.errors import RequestError

F = TypeVar("F", bound=Callable[..., Any])

_KEYWORD = inspect.Parameter.KEYWORD_ONLY
_EITHER = inspect.Parameter.POSITIONAL_OR_KEYWORD
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, _EITHER)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class ArgumentError(RequestError, TypeError):
    """A call was given an argument it does not take, or not one it needs. A RequestError
    (nothing started), and a TypeError, as Python's own refusal of the call would be."""


def takes(
    kind: type[Any] | None,
    *,
    positional: Iterable[str] = (),
    required: Iterable[str] = (),
    keywords: Iterable[str] = (),
    placement: Iterable[str] = (),
    leave_out: Iterable[str] = (),
    file_instead: bool = False,
) -> inspect.Signature:
    """A method's signature: `self`; `required` then `positional` arguments (positional or
    keyword, the latter default None); then the fields of the request type `kind` as keywords
    (required where the field is, unless `file_instead`: a file may hold them all, and the
    call checks them when there is none, `missing_options`), less `leave_out`; then the other
    `keywords` (arguments that are not fields, as arrays of one value a row) and the
    `placement` keywords that are not fields, default None."""
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
    parameters += [inspect.Parameter(name, _EITHER) for name in required]
    parameters += [inspect.Parameter(name, _EITHER, default=None) for name in positional]
    fields = msgspec.structs.fields(kind) if kind is not None else ()
    omit = set(leave_out)
    for field in fields:
        if field.name not in omit:
            if not field.required:
                default = _default(field)
            else:
                default = None if file_instead else inspect.Parameter.empty
            parameters.append(inspect.Parameter(field.name, _KEYWORD, default=default))
    named = {field.name for field in fields}
    parameters += [
        inspect.Parameter(name, _KEYWORD, default=None)
        for name in (*keywords, *placement)
        if name not in named
    ]
    return inspect.Signature(parameters)


def _default(field: msgspec.structs.FieldInfo) -> Any:
    if field.default is msgspec.NODEFAULT:
        return field.default_factory()
    return field.default


def refuse_others(
    call: str, signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """Refuse, naming it, any argument of `call(*args, **kwargs)` that `signature` does not
    take, and any that it needs but was not given (ArgumentError)."""
    parameters = list(signature.parameters.values())
    keywords = [p.name for p in parameters if p.kind in (_EITHER, _KEYWORD) and p.name != "self"]
    listing = _listing(keywords)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        for name in kwargs:
            if name not in keywords:
                hint = difflib.get_close_matches(name, keywords, n=1)
                meant = f" (did you mean {hint[0]}=?)" if hint else ""
                raise ArgumentError(f"{call}() has no argument {name}={meant}: {listing}")
    positional = [p for p in parameters if p.kind in _POSITIONAL]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    if len(args) > len(positional) and not variadic:
        names = [p.name for p in positional if p.name != "self"]
        given = len(args) - (len(positional) - len(names))
        if names:
            takes = f"takes at most {len(names)} positional argument(s) ({', '.join(names)})"
            raise ArgumentError(f"{call}() {takes}, got {given}: {listing}")
        raise ArgumentError(f"{call}() takes keywords only, got {given} positional: {listing}")
    filled = {p.name for p in positional[: len(args)]}
    for name in kwargs:
        if name in filled:
            raise ArgumentError(f"{call}() got {name} twice, by position and as {name}=")
    supplied = filled | set(kwargs)
    for p in parameters:
        if p.default is p.empty and p.kind not in _VARIADIC and p.name not in supplied:
            raise ArgumentError(f"{call}() needs {p.name}=: {listing}")


def missing_options(call: str, kind: type[Any], options: dict[str, Any], instead: str) -> None:
    """Refuse options that leave out a required field of `kind`, where the argument `instead`
    (a file holding every option) was not given either (ArgumentError)."""
    for field in msgspec.structs.fields(kind):
        if field.required and field.name not in options:
            raise ArgumentError(f"{call}() needs {field.name}=, or {instead}= (a file of them all)")


def _listing(keywords: list[str]) -> str:
    if not keywords:
        return "it takes no arguments"
    return "it takes " + ", ".join(f"{name}=" for name in keywords)


def checked(function: F) -> F:
    """`function`, refusing with one line any argument its signature does not take (named
    as its callers call it: a method by its class, an `__init__` as the class)."""
    signature = inspect.signature(function)
    name = function.__qualname__.removesuffix(".__init__")

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        refuse_others(name, signature, args, kwargs)
        return function(*args, **kwargs)

    return cast(F, call)
