"""Lowering generated Pallas kernels for TPU on a host without one.

`jax.export(jax.jit(f), platforms=["tpu"])` runs Pallas's TPU lowering (the Pallas kernel to a
Mosaic MLIR module inside a TPU custom call) on a CPU host: no TPU is needed until the exported
module is compiled. So a kernel run here in interpret mode can also be checked for TPU:

    with recorded_launches() as launches:
        kernel(x, y)                       # interpret mode, as usual
    for launch in launches:
        export_for_tpu(launch)             # a jax.export.Exported, or a located TesseraError

What this does not check: Mosaic's own compilation (layouts, VMEM limits) and the result on a
TPU, which need libtpu and a TPU (docs/backends.md says what was and was not verified).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import jax

from tessera import exc
from tessera.backends.pallas import backend
from tessera.backends.pallas.blocks import Refusal
from tessera.backends.triton.modules import generated_line

Launch = tuple[Any, tuple[int, ...], list[Any]]  # (PallasKernel, grid, arguments)


@contextlib.contextmanager
def recorded_launches() -> Iterator[list[Launch]]:
    """Every Pallas launch made inside the block, with its grid and arguments."""
    launches: list[Launch] = []
    backend._RECORDERS.append(launches)
    try:
        yield launches
    finally:
        backend._RECORDERS.remove(launches)


def export_for_tpu(launch: Launch) -> Any:
    """`jax.export` of one recorded launch for TPU (interpret off): the `Exported`, or an
    `UnsupportedOperationError` at the kernel line that the flat form or Mosaic could not take."""
    kernel, grid, arguments = launch
    refusal: Refusal | None = kernel.lowered.launch_options.get("tpu_refusal")
    if refusal is not None:
        raise exc.UnsupportedOperationError(
            f"this kernel does not lower for TPU: {refusal.reason}", location=refusal.location,
            hint="it runs in the flat form, in Pallas's interpreter only; see docs/backends.md for what "
                 "the blocked (TPU) form needs")
    _, values = kernel.runner.values(arguments)
    structs = [jax.ShapeDtypeStruct(value.shape, value.dtype) for value in values]
    compiled_launch = jax.jit(functools.partial(kernel.runner.launch, interpret=False), static_argnums=0)
    try:
        return jax.export.export(compiled_launch, platforms=["tpu"])(grid, *structs)
    except Exception as error:  # noqa: BLE001 - Mosaic's refusals come as many exception types
        lowered = kernel.lowered
        line = generated_line(error, kernel.path, lowered.source, lowered.name)
        earlier = [number for number in lowered.locations if line is not None and number <= line]
        location = lowered.locations[max(earlier)] if earlier else lowered.location
        text = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise exc.UnsupportedOperationError(
            f"Pallas's TPU (Mosaic) lowering refused this kernel: {text[:300]}", location=location,
            hint=f"the generated source is {kernel.path}{'' if line is None else f':{line}'}; run with "
                 "backend='triton' or in Pallas's interpreter") from error


__all__ = ["export_for_tpu", "recorded_launches"]
