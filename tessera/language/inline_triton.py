"""Raw Triton inside a tile loop: `hl.inline_triton` (a snippet) and `hl.triton_kernel` (a
`@triton.jit` function, defined once in the generated module and called).

Placeholders name what the snippet reads: a tile value is its block, a tensor argument its data
pointer, a number or runtime scalar its value. `output_like` (a tile value, a tuple or list of
them, or None) gives the results' shapes and dtypes; the snippet's last line is their value.
Triton code has no meaning in eager mode, which refuses both, located; interpret mode runs them
in Triton's interpreter and compiled mode on the GPU.

>>> out[tile] = hl.inline_triton("{0} + {1}", args=(a, b), output_like=a)     # doctest: +SKIP
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any, Mapping, Sequence

import sympy

from tessera import exc
from tessera.ir.graph import Op
from tessera.ir.primitive import defined_primitive
from tessera.location import user_frame, user_location
from tessera.trace.proxy import TensorProxy, TileValue
from tessera.trace.tracer import Tracer


def inline_triton(triton_source: str, args: Sequence[Any] | Mapping[str, Any], output_like: Any) -> Any:
    """Splice `triton_source` (placeholders `{0}`/`{name}` filled from `args` by str.format) into
    the generated kernel; its last line is the result, shaped like `output_like` (None: no result).

    >>> s, d = hl.inline_triton("s = {0} + {1}\\nd = {0} - {1}\\ns, d", args=(a, b), output_like=(a, a))  # doctest: +SKIP
    """
    if not isinstance(triton_source, str):
        raise exc.InvalidAPIUsage(f"hl.inline_triton: triton_source must be a string, got "
                                  f"{type(triton_source).__name__}", location=user_location())
    _check_arguments("hl.inline_triton", args, output_like)
    source = textwrap.dedent(triton_source).strip("\n")
    _check_placeholders(source, args)
    return _bind(source, None, args, output_like)


def triton_kernel(triton_source_or_fn: Any, args: Sequence[Any] | Mapping[str, Any], output_like: Any) -> Any:
    """Call a `@triton.jit` function (its source text, or the function) with `args` (positional,
    or keywords from a mapping); it is defined once in the generated module. Its return value is
    the result, shaped like `output_like`.

    >>> out[tile] = hl.triton_kernel(add_pairs, args=(a, b), output_like=a)   # doctest: +SKIP
    """
    definitions, name = _function_source(triton_source_or_fn)
    _check_arguments("hl.triton_kernel", args, output_like)
    return _bind(definitions, name, args, output_like)


def _bind(source: Any, function: str | None, args: Any, output_like: Any) -> Any:
    """`source`: a snippet's text, or a function's definitions ((name, source), ...)."""
    keys = tuple(args) if isinstance(args, Mapping) else None
    values = tuple(args.values()) if isinstance(args, Mapping) else tuple(args)
    outputs = output_like if isinstance(output_like, (tuple, list)) else None if output_like is None else (output_like,)
    result = inline_triton_p.bind(values, tuple(outputs or ()), source=source, function=function, keys=keys)
    if output_like is None or not isinstance(output_like, (tuple, list)):
        return result
    return type(output_like)(result)


def _check_arguments(what: str, args: Any, output_like: Any) -> None:
    if isinstance(args, (str, bytes)) or not isinstance(args, (Mapping, Sequence)):
        raise exc.InvalidAPIUsage(f"{what}: args must be a tuple, list or mapping, got {type(args).__name__}",
                                  location=user_location(2))
    items = output_like if isinstance(output_like, (tuple, list)) else () if output_like is None else (output_like,)
    for position, item in enumerate(items):
        if not hasattr(item, "dtype") or not hasattr(item, "shape") or isinstance(item, (str, bytes)):
            raise exc.InvalidAPIUsage(f"{what}: output_like item {position} is {type(item).__name__}, not a tensor",
                                      location=user_location(2),
                                      hint="pass a tile value shaped like the result, a tuple of them, or None")


def _check_placeholders(source: str, args: Any) -> None:
    try:
        if isinstance(args, Mapping):
            source.format(**{str(k): "x" for k in args})
        else:
            source.format(*("x" for _ in args))
    except (KeyError, IndexError, ValueError) as error:
        raise exc.InvalidAPIUsage(f"hl.inline_triton: placeholder {error} has no argument", location=user_location(2),
                                  hint="args=(a, b) fills {0} and {1}; args={'x': a} fills {x}") from None


def _function_source(source_or_fn: Any) -> tuple[tuple[tuple[str, str], ...], str]:
    """(definitions, function name) of a @triton.jit function given as source text, as the
    function, or by its name in the calling module: each definition is (name, source), the
    function's own and those of the @triton.jit helpers and tl.constexpr globals it reads."""
    if isinstance(source_or_fn, str) and source_or_fn.isidentifier():
        caller = user_frame(1)
        found = caller.f_globals.get(source_or_fn) if caller is not None else None
        if found is None:
            raise exc.InvalidAPIUsage(f"hl.triton_kernel: no function {source_or_fn!r} in the kernel's module",
                                      location=user_location(2), hint="define it with @triton.jit at module level")
        source_or_fn = found
    if isinstance(source_or_fn, str):
        source = textwrap.dedent(source_or_fn).strip("\n")
        return ((_defined_name(source), _jitted(source)),), _defined_name(source)
    if not callable(source_or_fn):
        raise exc.InvalidAPIUsage(f"hl.triton_kernel expects source text, a function or its name, got "
                                  f"{type(source_or_fn).__name__}", location=user_location(2))
    definitions: dict[str, str] = {}
    _collect(source_or_fn, definitions)
    return tuple(definitions.items()), getattr(source_or_fn, "fn", source_or_fn).__name__


def _collect(function: Any, definitions: dict[str, str]) -> None:
    """The source of `function` (a triton JITFunction or a plain function) and, recursively, of the
    @triton.jit functions and tl.constexpr values among the globals it names."""
    plain = getattr(function, "fn", function)
    if plain.__name__ in definitions:
        return
    try:
        definitions[plain.__name__] = _jitted(textwrap.dedent(inspect.getsource(plain)))
    except (OSError, TypeError):
        raise exc.InvalidAPIUsage(f"hl.triton_kernel: the source of {plain.__name__} cannot be read",
                                  location=user_location(3), hint="define it in a .py file") from None
    for name in plain.__code__.co_names:
        value = plain.__globals__.get(name)
        if inspect.isfunction(getattr(value, "fn", None)):  # a JITFunction (an InterpretedFunction when interpreting)
            _collect(value, definitions)
        elif type(value).__name__ == "constexpr" and name not in definitions:
            definitions[name] = f"{name} = tl.constexpr({value.value!r})"


def _defined_name(source: str) -> str:
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise exc.InvalidAPIUsage(f"hl.triton_kernel: its source does not parse: {error.msg}",
                                  location=user_location(3)) from None
    definitions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if len(definitions) != 1:
        raise exc.InvalidAPIUsage("hl.triton_kernel: the source must define exactly one function",
                                  location=user_location(3), hint="@triton.jit\ndef add(a, b):\n    return a + b")
    return definitions[0].name


def _jitted(source: str) -> str:
    """The source with `@triton.jit` in front unless it has it (a plain function is jitted)."""
    name = _defined_name(source)
    tree = ast.parse(source)
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == name)
    if any(ast.unparse(d).endswith("jit") for d in function.decorator_list):
        return source
    return "@triton.jit\n" + source


# -- eager: Triton code has no PyTorch meaning ------------------------------------------------------
def _inline_triton_eager(values: tuple, outputs: tuple, **params: Any) -> Any:
    what = "hl.triton_kernel" if params["function"] else "hl.inline_triton"
    raise exc.UnsupportedOperationError(
        f"{what} runs Triton code, which eager mode (plain PyTorch) cannot execute", location=user_location(),
        hint="run the kernel with mode='interpret' (CPU) or 'compiled' (GPU), or write the step with torch ops")


# -- trace: an INLINE_TRITON node; placeholders become text the lowering fills in ------------------
def _argument(tracer: Tracer, value: Any, inputs: list) -> tuple:
    """How the lowering writes one argument: ("value", input index), ("text", ...), ("expr", sympy)."""
    if isinstance(value, TileValue):
        inputs.append(value.node)
        return ("value", len(inputs) - 1)
    if isinstance(value, TensorProxy):
        if value.is_view:
            raise exc.UnsupportedOperationError(f"inline Triton reading a view of {value.name}",
                                                location=user_location(), hint="pass the tensor argument itself")
        return ("text", value.name)
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return ("text", repr(value))
    if isinstance(value, sympy.Basic):
        return ("expr", tracer.symbols.canonical(value))
    raise exc.InvalidAPIUsage(f"inline Triton argument of type {type(value).__name__}", location=user_location(),
                              hint="pass tile values, tensor arguments, numbers or runtime scalars")


def _inline_triton_trace(tracer: Tracer, values: tuple, outputs: tuple, *, source: str, function: str | None,
                         keys: tuple | None) -> Any:
    inputs: list = []
    arguments = tuple(_argument(tracer, value, inputs) for value in values)
    for output in outputs:
        if not isinstance(output, TileValue):
            raise exc.InvalidAPIUsage("output_like must be tile values (their shapes and dtypes are the results')",
                                      location=user_location())
    params = {"source": source, "function": function, "keys": keys, "arguments": arguments}
    if not outputs:
        tracer.emit(Op.INLINE_TRITON, inputs, (), None, outputs=0, **params)
        return None
    if len(outputs) == 1:
        return tracer.emit(Op.INLINE_TRITON, inputs, outputs[0].axes, outputs[0].dtype, outputs=1, **params)
    node = tracer.emit(Op.INLINE_TRITON, inputs, outputs[0].axes, None, outputs=len(outputs),
                       dtypes=tuple(o.dtype for o in outputs), shapes=tuple(o.axes for o in outputs), **params).node
    return tuple(tracer.emit(Op.ITEM, [node], output.axes, output.dtype, index=i) for i, output in enumerate(outputs))


inline_triton_p = defined_primitive("inline_triton", _inline_triton_eager, _inline_triton_trace)
