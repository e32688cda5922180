"""Arguments a kernel takes as compile-time constants: parameters annotated `hl.constexpr`, and
values passed wrapped in `hl.constexpr(...)`.

Such an int is a `SpecializedInt` (as after `hl.specialize`): usable where Python needs an int
while compiling (`hl.static_range(n)`, tuple positions, allocation sizes) and part of the cache
key. A wrapped value of another kind is unwrapped (a float stays a number the kernel reads; a
bool, None or str is compiled in as always).

>>> @tessera.kernel                                            # doctest: +SKIP
... def gather(buffers, WORLD_SIZE: hl.constexpr): ...
"""
from __future__ import annotations

import ast
from typing import Any

from tessera.frontend.source import KernelSource
from tessera.language.constexpr import SpecializedInt, constexpr

Marks = tuple[frozenset[int], frozenset[str]]


def constexpr_parameters(source: KernelSource) -> Marks | None:
    """(positions, names) of the parameters annotated `hl.constexpr`; None when there is none."""
    resolve = source.resolver()
    arguments = getattr(source.tree, "args", None)
    if not isinstance(arguments, ast.arguments):  # a lambda's source line: no annotations
        return None

    def marked(parameter: ast.arg) -> bool:
        annotation = parameter.annotation
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # "hl.constexpr"
            try:
                annotation = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return False
        return annotation is not None and resolve(annotation) is constexpr

    positional = arguments.posonlyargs + arguments.args
    positions = frozenset(position for position, parameter in enumerate(positional) if marked(parameter))
    names = frozenset(p.arg for p in positional + arguments.kwonlyargs if marked(p))
    return (positions, names) if names else None


def compile_time(value: Any) -> Any:
    """The value a constexpr argument stands for while the kernel runs."""
    if type(value) is constexpr:
        value = value.value
    if isinstance(value, int) and not isinstance(value, (bool, SpecializedInt)):
        return SpecializedInt(value)
    return value


def has_wrapped(args: tuple, kwargs: dict) -> bool:
    """Whether a value is passed wrapped in `hl.constexpr(...)` (its subclasses keep their own meaning)."""
    return constexpr in map(type, args) or (bool(kwargs) and constexpr in map(type, kwargs.values()))


def compile_time_arguments(marks: Marks | None, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`args` and `kwargs` with each constexpr argument replaced by `compile_time` of it."""
    positions, names = marks if marks is not None else (frozenset(), frozenset())
    args = tuple(compile_time(value) if position in positions or type(value) is constexpr else value
                 for position, value in enumerate(args))
    kwargs = {name: compile_time(value) if name in names or type(value) is constexpr else value
              for name, value in kwargs.items()}
    return args, kwargs
