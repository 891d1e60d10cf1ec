"""Keyword arguments passed on to another callable, so that each argument is spelled and documented once.

A preset (``vit_small`` builds a :class:`~ensemblize.models.vit.ViT`) or a subclass that changes a few of
its parent's arguments (``ResNet1d``, ``NormalizedTabMLP``) takes ``**kwargs`` and passes them on.
:func:`passes_keywords` gives such a callable the target's keyword-only parameters as its signature, so
``inspect.signature`` and ``help`` list the real knobs, and checks every call against them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

__all__ = ["passes_keywords"]

Fn = TypeVar("Fn", bound=Callable[..., Any])


def passes_keywords(
    target: Callable[..., Any], *, drop: Iterable[str] = (), defaults: Mapping[str, Any] | None = None
) -> Callable[[Fn], Fn]:
    """Decorate ``f(..., **kwargs)`` whose ``**kwargs`` are keyword-only arguments of ``target``
    (a decorated class: its ``__init__``).

    The decorated callable's signature is ``f``'s own parameters (less ``**kwargs``) followed by the
    keyword-only parameters of ``target`` that ``f`` does not name itself and ``drop`` does not list, with
    ``defaults`` replacing their defaults. A call is bound to that signature first, so an unknown keyword
    or a missing required one raises ``TypeError`` as a spelled-out signature would; ``f`` then receives
    every parameter by name, defaults applied (``kwargs`` always holds all the forwarded ones).
    """
    drop = frozenset(drop)
    new_defaults = dict(defaults or {})
    target_params = inspect.signature(target).parameters
    unknown = sorted((drop | new_defaults.keys()) - target_params.keys())
    if unknown:
        raise TypeError(f"{getattr(target, '__qualname__', target)!r} has no parameters {unknown}")

    def decorate(f: Fn) -> Fn:
        if isinstance(f, type):
            f.__init__ = decorate(f.__init__)  # type: ignore[misc]
            return f
        own = inspect.signature(f)
        params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in params} | drop
        params += [
            p.replace(default=new_defaults.get(name, p.default))
            for name, p in target_params.items()
            if p.kind is p.KEYWORD_ONLY and name not in taken
        ]
        signature = own.replace(parameters=params)

        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:  # name the callable, as Python's own message does
                raise TypeError(f"{f.__qualname__}() {exc}") from None
            bound.apply_defaults()
            return f(*bound.args, **bound.kwargs)

        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate
