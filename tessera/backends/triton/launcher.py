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

A caller that launches the same grid with the same non-tensor arguments again and again (a
Tessera remembered launch: its exact facts fix every int) asks for a *direct launch*: one
function, generated for that launch, that checks what can change without its knowing (launch
hooks, pre-run hooks, the current device, the tensors' device) and calls the binary's C launch
function with the grid, the stream and the int arguments written in as constants.

    >>> direct = launcher.direct((programs,), [out, x, y, n], ((0, 0), (1, 1), (2, 2)))  # doctest: +SKIP
    >>> direct([out, x, y])     # True: launched; False: nothing launched, use launch()  # doctest: +SKIP

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

import dataclasses
from typing import Any, Callable, Sequence

import torch

# Triton releases whose JITFunction.run / CompiledKernel.run / CudaLauncher were read and
# matched against this module (argument order of the launch call, hook handling, scratch).
_CHECKED_TRITON_VERSIONS: tuple[str, ...] = ("3.6.",)

_GRID_PADDING: dict[int, tuple[int, ...]] = {1: (1, 1), 2: (1,), 3: ()}  # unused grid dims run one program
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


@dataclasses.dataclass(frozen=True)
class LaunchDriver:
    """What a launcher asks of the GPU runtime besides the binary: the narrowest seam, so that
    tests on a CPU can stand in for the driver (`TritonLauncher(..., driver=...)`).

    `hooks` is the object holding Triton's launch hook chains (`triton.knobs.runtime`), read on
    every fast launch: a profiler may install hooks at any time, and hooked launches go through
    Triton's own path. `hook_chain` is the class of an unreplaced chain (`knobs.HookChain`).
    """

    current_device: Callable[[], int]
    current_stream: Callable[[int], int]  # the raw stream of a device (torch's current stream)
    hooks: Any
    hook_chain: type

    def hooks_idle(self) -> bool:
        """Whether no launch hook is installed (a chain replaced by a plain function counts as one)."""
        enter, exit_ = self.hooks.launch_enter_hook, self.hooks.launch_exit_hook
        return (enter.__class__ is self.hook_chain and exit_.__class__ is self.hook_chain
                and not enter.calls and not exit_.calls)


def cuda_driver() -> LaunchDriver:
    """The calls triton's `JITFunction.run` makes, taken from torch where it makes them cheaper:
    `torch.cuda.current_device()` re-checks lazy initialisation on every call; the raw getter
    does not (the first launch, through Triton, initialised CUDA)."""
    from triton import knobs
    from triton.runtime.driver import driver
    current_device = getattr(torch._C, "_cuda_getDevice", None) or driver.active.get_current_device
    return LaunchDriver(current_device, driver.active.get_current_stream, knobs.runtime, knobs.HookChain)


class TritonLauncher:
    """Launches one generated `@triton.jit` function with fixed options, fast on repeat calls.

    `key_pointers=False` says the caller's own cache key already fixes every pointer
    argument's dtype and 16-byte alignment (Tessera's `value_key` does), so the launcher does
    not read them again. `driver`: a stand-in for the CUDA driver (tests); the real one is
    taken on the first launch.
    """

    def __init__(self, function: Any, num_warps: int, num_stages: int, key_pointers: bool = True,
                 driver: LaunchDriver | None = None) -> None:
        self.function = function
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        self.key_pointers = key_pointers
        self.binaries: dict[tuple, tuple[Callable[..., Any], tuple]] = {}
        self.fast_launches = 0  # launches that skipped JITFunction.run (direct ones included)
        self.slow_launches = 0
        self._key: Callable[..., tuple] | None = None  # set by the first call when the fast path applies
        self._enabled = driver is not None or _fast_path_possible(function)
        self.driver = driver

    @property
    def enabled(self) -> bool:
        """Whether repeat calls can skip JITFunction.run (False: every call goes through it)."""
        return self._enabled

    def launch(self, grid: tuple[int, ...], arguments: Sequence[Any]) -> None:
        """Run the kernel on `grid` (1 to 3 program counts) with `arguments` in parameter order."""
        if self._key is None:
            self._launch_first(grid, arguments)
            return
        driver = self.driver
        device = driver.current_device()
        try:
            key = self._key(device, *arguments)
        except (TypeError, AttributeError):  # an argument of another kind than on the first call
            self._launch_through_triton(grid, arguments, None)
            return
        binary = self.binaries.get(key)
        if binary is None or not self._call_binary(binary, device, grid, arguments):
            self._launch_through_triton(grid, arguments, key)

    def direct(self, grid: tuple[int, ...], arguments: Sequence[Any], tensor_slots: Sequence[tuple[int, int]],
               pointers: bool = False) -> Callable[[Sequence[Any]], bool] | None:
        """A function launching this launch again, or None where there is no fast path (yet).

        `arguments` are a launch's arguments as just launched; `tensor_slots` are (argument
        position, index into `values`) pairs: `direct(values)` launches with each tensor
        argument taken from `values` and every other argument as it is now. It returns False,
        launching nothing, when hooks are installed or the device is not the one of the binary
        (the caller then calls `launch`). The binary is the one `launch` chose for these
        arguments: their ints pick it, and the caller guarantees they do not change.

        `pointers`: `values` will hold each tensor's data pointer (an int) instead of the tensor,
        and the caller guarantees each is a tensor on the device this launch's tensors are on now.
        Triton's C launch function takes an int as the address itself; given a tensor it calls
        `data_ptr()` and asks the driver whether the address is device memory (to refuse a CPU
        tensor), which the caller's device check makes redundant. None unless every tensor is on
        the binary's device.
        """
        if self._key is None or not 1 <= len(grid) <= 3:
            return None
        driver = self.driver
        device = driver.current_device()
        try:
            binary = self.binaries.get(self._key(device, *arguments))
        except (TypeError, AttributeError):
            return None
        if binary is None:
            return None
        if pointers and any(isinstance(value, torch.Tensor) and value.get_device() != device for value in arguments):
            return None
        return direct_launch_function(self, binary, device, grid, arguments, tensor_slots, check_devices=not pointers)

    def _call_binary(self, binary: tuple[Callable[..., Any], tuple], device: int, grid: tuple[int, ...],
                     arguments: Sequence[Any]) -> bool:
        """Launch `binary` directly; False (nothing launched) while launch or pre-run hooks are set:
        a profiler's hooks need triton's own launch path."""
        driver = self.driver
        if not driver.hooks_idle() or self.function.pre_run_hooks:
            return False
        call, prefix = binary
        call(*grid, *_GRID_PADDING[len(grid)], driver.current_stream(device), *prefix, *arguments)
        self.fast_launches += 1
        return True

    def _launch_first(self, grid: tuple[int, ...], arguments: Sequence[Any]) -> None:
        """Build the key function on the first call; without a fast path, launch the usual way."""
        if self._enabled:
            self._key = self._build_key(arguments)
            if self._key is not None:
                if self.driver is None:
                    self.driver = cuda_driver()
                self.launch(grid, arguments)
                return
            self._enabled = False
        self.slow_launches += 1
        self.function[grid](*arguments, **self.options)

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


def direct_launch_function(launcher: TritonLauncher, binary: tuple[Callable[..., Any], tuple], device: int,
                           grid: tuple[int, ...], arguments: Sequence[Any], tensor_slots: Sequence[tuple[int, int]],
                           check_devices: bool = True) -> Callable[[Sequence[Any]], bool]:
    """`launcher.direct`'s function for `binary` (a `binary_entry`) loaded on `device`;
    `check_devices=False`: the values are data pointers the caller checked (see `direct`)."""
    call, prefix = binary
    tensors = dict(tensor_slots)
    constants = [value for position, value in enumerate(arguments) if position not in tensors]
    factory = _direct_factory(len(prefix), tuple(tensors.get(p) for p in range(len(arguments))), check_devices)
    return factory(launcher, launcher.driver, call, launcher.function.pre_run_hooks, device,
                   *grid, *_GRID_PADDING[len(grid)], *prefix, *constants)


_DIRECT_FACTORIES: dict[tuple[int, tuple[int | None, ...], bool], Callable[..., Callable[[Sequence[Any]], bool]]] = {}


def _direct_factory(prefix_length: int, value_indexes: tuple[int | None, ...],
                    check_devices: bool = True) -> Callable[..., Any]:
    """The factory of direct launch functions of one argument layout, generated once per layout.

    `value_indexes[p]` is the index into `values` of argument `p` when it is a tensor, else None
    (a constant the factory takes). The generated function reads nothing but the hooks, the
    current device, the first tensor's device and the stream: everything else is a constant of
    its closure, so one launch costs one Python frame and the C launch call.
    """
    key = (prefix_length, value_indexes, check_devices)
    factory = _DIRECT_FACTORIES.get(key)
    if factory is None:
        factory = _DIRECT_FACTORIES[key] = _compile_direct_factory(prefix_length, value_indexes, check_devices)
    return factory


def _compile_direct_factory(prefix_length: int, value_indexes: tuple[int | None, ...],
                            check_devices: bool = True) -> Callable[..., Any]:
    prefix = [f"p{i}" for i in range(prefix_length)]
    constants = [f"c{p}" for p, index in enumerate(value_indexes) if index is None]
    arguments = [f"c{p}" if index is None else f"values[{index}]" for p, index in enumerate(value_indexes)]
    tensors = [index for index in value_indexes if index is not None]
    # the tensors' device: a binary is loaded on one device, and a tensor of another must not reach it
    device_check = f" or values[{tensors[0]}].get_device() != device" if tensors and check_devices else ""
    parameters = ", ".join(["launcher", "driver", "call", "pre_run_hooks", "device", "gx", "gy", "gz",
                            *prefix, *constants])
    # LaunchDriver.hooks_idle, inlined: a call costs as much as the check
    source = (
        f"def direct_factory({parameters}):\n"
        "    current_device, current_stream, hooks, chain = (driver.current_device, driver.current_stream,\n"
        "                                                     driver.hooks, driver.hook_chain)\n"
        "    def direct_launch(values):\n"
        "        enter, exit_ = hooks.launch_enter_hook, hooks.launch_exit_hook\n"
        "        if (pre_run_hooks or enter.__class__ is not chain or exit_.__class__ is not chain or enter.calls\n"
        f"                or exit_.calls or current_device() != device{device_check}):\n"
        "            return False\n"
        f"        call(gx, gy, gz, current_stream(device), {', '.join([*prefix, *arguments])})\n"
        "        launcher.fast_launches += 1\n"
        "        return True\n"
        "    return direct_launch\n")
    namespace: dict[str, Any] = {}
    exec(compile(source, "<tessera direct launch>", "exec"), namespace)  # once per argument layout
    return namespace["direct_factory"]


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
