"""Lowerings of code the user writes in Triton or PTX directly: `hl.inline_asm_elementwise`,
`hl.inline_triton` / `hl.triton_kernel`, and `hl.device_print` (rows of lowering.LOWERINGS).

>>> inline_triton(emitter, node)    # writes `v3 = inline_triton_v3(v1, v2)` and the helper   # doctest: +SKIP
"""
from __future__ import annotations

from tessera.backends.triton.emitter import TRITON_DTYPES, Emitter
from tessera.backends.triton.printer import print_expr
from tessera.ir.graph import Node


def inline_asm(emitter: Emitter, node: Node) -> None:
    dtypes = node.params.get("dtypes") or (node.dtype,)
    types = TRITON_DTYPES[dtypes[0]] if len(dtypes) == 1 else f"({', '.join(TRITON_DTYPES[d] for d in dtypes)},)"
    names = emitter.name_of(node) if len(dtypes) == 1 else ", ".join(f"{emitter.name_of(node)}_{i}" for i in range(len(dtypes)))
    arguments = ", ".join(emitter.name_of(value) for value in node.inputs)
    emitter.line(f"{names} = tl.inline_asm_elementwise({node.params['asm']!r}, {node.params['constraints']!r}, "
                 f"[{arguments}], dtype={types}, is_pure={node.params['is_pure']}, pack={node.params['pack']})")


def inline_triton(emitter: Emitter, node: Node) -> None:
    """A call of a @triton.jit function defined once at module level: the user's (hl.triton_kernel),
    or one made of a snippet (hl.inline_triton) whose placeholders are its parameters and whose
    last line it returns, so the snippet's own names cannot clash with the kernel's."""
    texts = [emitter.name_of(node.inputs[value]) if kind == "value" else print_expr(value) if kind == "expr"
             else value for kind, value in node.params["arguments"]]
    keys, count = node.params["keys"], node.params["outputs"]
    function = node.params["function"]
    if function is not None:
        for name, text in node.params["source"]:  # the function, its @triton.jit helpers and constexpr globals
            emitter.generated[f"user_{name}"] = ["", *text.splitlines(), ""]
        arguments = [f"{k}={t}" for k, t in zip(keys, texts)] if keys is not None else texts
    else:
        function = f"inline_triton_{emitter.name_of(node)}"
        parameters = [f"arg{i}" for i in range(len(texts))]
        source = node.params["source"]
        filled = source.format(**dict(zip(map(str, keys), parameters))) if keys is not None else source.format(*parameters)
        lines = filled.splitlines()
        if count:
            lines[-1] = f"return {lines[-1]}"
        emitter.generated[function] = ["", "@triton.jit", f"def {function}({', '.join(parameters)}):",
                                       *(f"    {line}" for line in lines), ""]
        arguments = texts
    call = f"{function}({', '.join(arguments)})"
    if count == 0:
        emitter.line(call)
        return
    names = [emitter.name_of(node)] if count == 1 else [f"{emitter.name_of(node)}_{i}" for i in range(count)]
    emitter.line(f"{', '.join(names)}{',' if count > 1 else ''} = {call}")
    shapes = node.params.get("shapes") or (node.shape,)
    dtypes = node.params.get("dtypes") or (node.dtype,)
    for name, shape, dtype in zip(names, shapes, dtypes):  # the declared shape and dtype, or Triton's error
        emitter.line(f"{name} = tl.broadcast_to({name}, {emitter.block_shape(shape)}).to({TRITON_DTYPES[dtype]})")


def device_print(emitter: Emitter, node: Node) -> None:
    values = "".join(f", {emitter.name_of(value)}" for value in node.inputs)
    emitter.line(f"tl.device_print({node.params['prefix']!r}{values})")


def device_breakpoint(emitter: Emitter, node: Node) -> None:
    # Triton's interpreter runs the kernel as Python: each program stops here (backend.check
    # refuses it for the GPU)
    emitter.line("breakpoint()")


__all__ = ["device_breakpoint", "device_print", "inline_asm", "inline_triton"]
