"""Launch a compiled Triton kernel without going through `JITFunction.run` on every call.

`kernel[grid](*args)` in triton 3.6 does, per call: read the device and stream, run pre-run
hooks, bind the arguments with its generated binder (one specialization entry per parameter),
build its cache key from that tuple plus `str(options)`, look the key up, check the globals the
kernel read, build launch metadata, and finally call the binary's launcher. A Tessera variant
already fixes most of what that key holds: dtypes, pointer alignment (`value_key`) and the
options (`num_warps`, `num_stages`). What can still pick a different Triton binary on a Tessera
cache hit are the int arguments (sizes, strides, scalars):

- an int equal to 1 becomes a constexpr (the binary is specialized on the value);
- an int divisible by 16 carries a divisibility attribute;
- the value range picks the parameter type: i32, else i64, or u64 at 2**63 and above.

`TritonLauncher` keys binaries by exactly those facts (and, unless told the caller keys them,
by each pointer's dtype and 16-byte alignment), gets each binary from the `JITFunction.run`
call that first needs it (in triton 3.6 `run` returns the `CompiledKernel` it launched), and on
later calls hands the arguments straight to the binary's launcher on the current stream.

    >>> launcher = TritonLauncher(generated_kernel, num_warps=4, num_stages=2)   # doctest: +SKIP
    >>> launcher.launch((programs,), [out, x, y, n])                             # doctest: +SKIP

It falls back to `JITFunction.run` for every call whenever the cheap key cannot be trusted: an
interpreted function, a Triton version whose launch path was not checked, annotated or `const`
parameters, argument kinds other than tensor / int / float / bool / None, launch hooks (a
profiler such as proton installs them) or pre-run hooks. Not checked on the fast path: the
globals a kernel read (`JITFunction.run` raises if one changed). Tessera's generated modules
only read `triton`, `tl` and `libdevice`, which never change.

Import cost: nothing from triton is imported until a launcher is built, so that importing this
module never fixes Triton's interpret mode (see `modules._ensure_triton`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

# Triton releases whose JITFunction.run / CompiledKernel.run / CudaLauncher were read and
# matched against this module (argument order of the launch call, hook handling, scratch).
_CHECKED_TRITON_VERSIONS: tuple[str, ...] = ("3.6.",)

_GRID_PADDING: dict[int, tuple[int, ...]] = {2: (1,), 3: ()}  # unused grid dims run one program
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1
_UINT64_FROM = 2 ** 63

# Codes of an int argument in the binary key (mirrors triton's native specialize_impl):
# 0: equal to 1 (a constexpr); 1/2: i32 not / divisible by 16; 3/4: i64; 5/6: u64.
_INT_EXPRESSION = (
    "(0 if {a} == 1 else ((1 if {a} & 15 else 2) if {lo} <= {a} <= {hi} else "
    "(3 if {a} & 15 else 4) if {a} < {big} else (5 if {a} & 15 else 6)))"
)
_INT_NO_ALIGN_EXPRESSION = "(0 if {a} == 1 else 1 if {lo} <= {a} <= {hi} else 3 if {a} < {big} else 5)"
_INT_NO_SPECIALIZE_EXPRESSION = "(1 if {lo} <= {a} <= {hi} else 3 if {a} < {big} else 5)"


def argument_kind(value: Any) -> str | None:
    """'pointer', 'int', 'float', 'bool' or 'none'; None for what the fast path does not handle."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, torch.Tensor):
        return "pointer"
    return None


def binary_key_source(params: Sequence[Any], kinds: Sequence[str], key_pointers: bool) -> str | None:
    """Python source of `_binary_key(device, a0, a1, ...)`, or None if a parameter is unsupported.

    `params` are the JITFunction's `KernelParam`s, `kinds` the `argument_kind` of each argument
    of the first call. Each key entry is what triton's specialization would make of that
    argument, minus what never varies for this kind (a float is always fp32, a bool u1).
    """
    if len(params) != len(kinds):
        return None
    names = [f"a{index}" for index in range(len(params))]
    entries: list[str] = []
    bounds = {"lo": _INT32_MIN, "hi": _INT32_MAX, "big": _UINT64_FROM}
    for name, param, kind in zip(names, params, kinds):
        if param.is_constexpr:
            entries.append(name)  # the value is part of the binary
            continue
        if param.annotation_type or param.is_const:
            return None  # annotated types skip or change specialization: not mirrored here
        specialize = not param.do_not_specialize
        align = not param.do_not_specialize_on_alignment
        if kind == "int":
            template = (_INT_NO_SPECIALIZE_EXPRESSION if not specialize
                        else _INT_EXPRESSION if align else _INT_NO_ALIGN_EXPRESSION)
            entries.append(template.format(a=name, **bounds))
        elif kind == "pointer":
            if key_pointers:
                alignment = f"{name}.data_ptr() & 15 == 0" if specialize and align else "None"
                entries.append(f"({name}.dtype, {alignment})")
        elif kind == "none":
            entries.append(f"{name} is None")
        elif kind not in ("float", "bool"):
            return None
    body = ", ".join(["device", *entries])
    return f"def _binary_key(device, {', '.join(names)}):\n    return ({body},)\n"


def _compile_key_function(source: str) -> Callable[..., tuple]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<tessera binary key>", "exec"), namespace)  # built once per launcher
    return namespace["_binary_key"]


def _cuda_entry_points() -> tuple[Callable[[], int], Callable[[int], int]]:
    """(current device index, raw current stream of a device): the calls triton's run makes."""
    from triton.runtime.driver import driver
    active = driver.active
    return active.get_current_device, active.get_current_stream


class TritonLauncher:
    """Launches one generated `@triton.jit` function with fixed options, fast on repeat calls.

    `key_pointers=False` says the caller's own cache key already fixes every pointer
    argument's dtype and 16-byte alignment (Tessera's `value_key` does), so the launcher does
    not read them again.
    """

    def __init__(self, function: Any, num_warps: int, num_stages: int, key_pointers: bool = True) -> None:
        self.function = function
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        self.key_pointers = key_pointers
        self.binaries: dict[tuple, tuple[Callable[..., Any], tuple]] = {}
        self.fast_launches = 0
        self.slow_launches = 0
        self._key: Callable[..., tuple] | None = None  # set by the first call when the fast path applies
        self._enabled = _fast_path_possible(function)
        if self._enabled:
            from triton import knobs
            self._runtime_knobs = knobs.runtime

    @property
    def enabled(self) -> bool:
        """Whether repeat calls can skip JITFunction.run (False: every call goes through it)."""
        return self._enabled

    def launch(self, grid: tuple[int, ...], arguments: Sequence[Any]) -> tuple | None:
        """Run the kernel on `grid` (1 to 3 program counts) with `arguments` in parameter order.

        Returns the binary key this launch used (it starts with the device), or None where the
        fast path does not apply.
        """
        if self._key is None:
            return self._launch_first(grid, arguments)
        device = self._current_device()
        try:
            key = self._key(device, *arguments)
        except (TypeError, AttributeError):  # an argument of another kind than on the first call
            self._launch_through_triton(grid, arguments, None)
            return None
        binary = self.binaries.get(key)
        if binary is None or not self._call_binary(binary, device, grid, arguments):
            self._launch_through_triton(grid, arguments, key)
        return key

    def launch_remembered(self, grid: tuple[int, ...], arguments: Sequence[Any], memory: list[Any]) -> None:
        """`launch`, for a caller whose int arguments are the same on every call that passes this
        `memory` (a list [device, binary] the launcher fills): a repeat skips the binary key."""
        if memory[1] is not None:
            device = self._current_device()
            if device == memory[0] and self._call_binary(memory[1], device, grid, arguments):
                return
        key = self.launch(grid, arguments)
        binary = self.binaries.get(key) if key is not None else None
        if binary is not None:  # the fast path applies: remember the binary the launch used
            memory[0], memory[1] = key[0], binary

    def _call_binary(self, binary: tuple[Callable[..., Any], tuple], device: int, grid: tuple[int, ...],
                     arguments: Sequence[Any]) -> bool:
        """Launch `binary` directly; False (nothing launched) while launch or pre-run hooks are set:
        a profiler's hooks need triton's own launch path."""
        runtime = self._runtime_knobs
        if runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls or self.function.pre_run_hooks:
            return False
        call, prefix = binary
        if len(grid) == 1:
            call(grid[0], 1, 1, self._current_stream(device), *prefix, *arguments)
        else:
            call(*grid, *_GRID_PADDING[len(grid)], self._current_stream(device), *prefix, *arguments)
        self.fast_launches += 1
        return True

    def _launch_first(self, grid: tuple[int, ...], arguments: Sequence[Any]) -> tuple | None:
        """Build the key function on the first call; without a fast path, launch the usual way."""
        if self._enabled:
            self._key = self._build_key(arguments)
            if self._key is not None:
                self._current_device, self._current_stream = _cuda_entry_points()
                return self.launch(grid, arguments)
            self._enabled = False
        self.slow_launches += 1
        self.function[grid](*arguments, **self.options)
        return None

    def _build_key(self, arguments: Sequence[Any]) -> Callable[..., tuple] | None:
        kinds = [argument_kind(value) for value in arguments]
        if any(kind is None for kind in kinds):
            return None
        source = binary_key_source(self.function.params, kinds, self.key_pointers)
        return None if source is None else _compile_key_function(source)

    def _launch_through_triton(self, grid: tuple[int, ...], arguments: Sequence[Any], key: tuple | None) -> None:
        self.slow_launches += 1
        compiled = self.function.run(*arguments, grid=grid, warmup=False, **self.options)
        if compiled is None or key is None:
            return
        if hasattr(compiled, "result"):  # an async compile's future
            compiled = compiled.result()
        self.binaries[key] = binary_entry(compiled)


def binary_entry(compiled: Any) -> tuple[Callable[..., Any], tuple]:
    """(call, prefix) such that `call(gx, gy, gz, stream, *prefix, *arguments)` launches `compiled`.

    With no scratch memory to allocate, CudaLauncher.__call__ only forwards to the C launch
    function, so that function is called directly; otherwise the CudaLauncher itself.
    """
    run = compiled.run  # a property: loads the binary on first use
    metadata_and_hooks = (compiled.packed_metadata, None, None, None)  # no launch metadata, no hooks
    raw = getattr(run, "launch", None)
    if (raw is not None and getattr(run, "global_scratch_size", 1) == 0
            and getattr(run, "profile_scratch_size", 1) == 0):
        return raw, (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     *metadata_and_hooks)
    return run, (compiled.function, *metadata_and_hooks)


def _fast_path_possible(function: Any) -> bool:
    import triton
    from triton.runtime.jit import JITFunction
    if not isinstance(function, JITFunction):
        return False  # e.g. triton's InterpretedFunction in interpret mode
    if not triton.__version__.startswith(_CHECKED_TRITON_VERSIONS):
        return False
    from triton import knobs
    if knobs.runtime.interpret:
        return False
    chains = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
    return all(hasattr(chain, "calls") for chain in chains)
