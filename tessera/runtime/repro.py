"""A standalone script that runs one call's generated Triton code (`to_triton_code(..., emit_repro_caller=True)`).

The generated source is followed by a `__main__` block that launches each of the call's kernels
with the recorded grid, warps and stages, on fresh tensors of the recorded shapes, strides,
dtypes and devices (floating ones random, others zero: zero indices stay in bounds) and the
recorded scalars. Tensors the call passed to several launches stay one tensor in the script.

>>> print(bound.to_triton_code(config, emit_repro_caller=True))   # doctest: +SKIP
"""
from __future__ import annotations

import math
from typing import Any

import torch

from tessera.runtime.plan import KernelPlan

INTERPRET_HEADER = ('import os\n'
                    'os.environ["TRITON_INTERPRET"] = "1"  # the code was generated for Triton\'s CPU interpreter\n')


def _scalar(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


def _tensor(value: torch.Tensor) -> str:
    created = (f"torch.empty_strided({tuple(value.shape)!r}, {tuple(value.stride())!r}, dtype={value.dtype}, "
               f"device={value.device.type!r})")
    if value.dtype.is_floating_point and value.element_size() > 1:
        return f"{created}.normal_()"
    return f"{created}.zero_()"


def repro_caller(plan: KernelPlan, functions: list[str]) -> str:
    """The `__main__` block that launches every kernel of `plan` (see the module docstring);
    `functions` names each launch's kernel function in the script."""
    lines = ["", "", 'if __name__ == "__main__":',
             f"    # Tessera repro: one call's launches under {plan.config!r}",
             "    import torch", ""]
    names: dict[int, str] = {}
    for launch, function in zip(plan.launches, functions):
        arguments = []
        for value in launch.arguments:
            if isinstance(value, torch.Tensor):
                if id(value) not in names:
                    names[id(value)] = f"tensor_{len(names)}"
                    lines.append(f"    {names[id(value)]} = {_tensor(value)}")
                arguments.append(names[id(value)])
            else:
                arguments.append(_scalar(value))
        lines.append(f"    {function}[{tuple(launch.grid)!r}]({', '.join(arguments)}, "
                     f"num_warps={launch.num_warps}, num_stages={launch.num_stages})")
    lines.append('    print("repro: every launch ran")')
    return "\n".join(lines) + "\n"


__all__ = ["INTERPRET_HEADER", "repro_caller"]
