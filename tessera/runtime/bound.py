"""`kernel.bind(args)`: one kernel with one set of arguments, seen under any Config.

    >>> bound = add.bind(x, y)                                          # doctest: +SKIP
    >>> print(bound.to_triton_code(tessera.Config(block_sizes=[128])))  # the generated source
    >>> plan = bound.plan(config)   # what the call would launch, without launching it

Used by users to read generated code and by the autotuner to compile and time candidates.
Each bound kernel keeps its own variants, so trying many configs never fills the kernel's cache.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable

import torch

from tessera import exc
from tessera.backends.config_space import ConfigSpace
from tessera.config import Config
from tessera.ir.graph import KernelIR
from tessera.location import user_location
from tessera.language.rng import generator_at, generator_state
from tessera.runtime.call_keys import argument_key, common_device
from tessera.runtime.compiled import CompiledRunner, IRRecorder, VariantStore, run_compiled
from tessera.runtime.eager import run_eager
from tessera.runtime.fake_calls import fake_mode_active
from tessera.runtime.plan import KernelPlan, LaunchRecord
from tessera.runtime.planning_writes import arguments_kept
from tessera.runtime.repro import INTERPRET_HEADER, repro_caller
from tessera.runtime.tuning import config_space_for


class BoundKernel:
    """A kernel together with the arguments of one call."""

    def __init__(self, kernel: Any, args: tuple, kwargs: dict) -> None:
        self.kernel = kernel
        self.args = args
        self.kwargs = kwargs
        self.device = common_device(kernel.fn.__name__, args, kwargs)
        mode = kernel.mode_for(self.device)
        # eager has no generated code; its bound kernel plans and reads code as the device's default
        self.mode = mode if mode != "eager" else ("compiled" if self.device.type == "cuda" else "interpret")
        self._store = VariantStore()
        self._generator_state: torch.Tensor | None = None  # see same_random_draws
        self._config: Config | None = None  # set_config: what this bound kernel's calls run with

    def __repr__(self) -> str:
        return f"<bound {self.kernel!r} mode={self.mode}>"

    def specialization_key(self) -> str:
        """What a tuned config is cached under: dtypes, ranks, layouts, size buckets, the values
        the host code pins with hl.specialize and the value of the kernel's `key=` function."""
        static = self.kernel.settings.static_shapes
        parts = [argument_key(v, static) for v in self.args] + \
                [(k, argument_key(v, static)) for k, v in sorted(self.kwargs.items())]
        pinned = self.kernel.pinned_values(self.args, self.kwargs)
        if pinned:  # (kept out of the digest when empty: existing disk caches stay valid)
            parts.append(("pinned", pinned))
        if self.kernel.settings.key is not None:  # the user's key= (Helion's): its value's own Config
            parts.append(("key", self.kernel.settings.key(*self.args, **self.kwargs)))
        return hashlib.sha256(repr((self.mode, parts)).encode()).hexdigest()[:20]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the kernel on new arguments (Helion's `bound(*args)`), as `kernel(*args)` would,
        or under the Config `set_config` gave."""
        if self._config is None:
            return self.kernel(*args, **kwargs)
        return self._run_with(self._config, args, kwargs)

    def _run_with(self, config: Config, args: tuple, kwargs: dict) -> Any:
        if self.kernel.mode_for(self.device) == "eager":
            return run_eager(self.kernel.fn, args, kwargs, self.kernel.block_slots(), config, self.device)
        return run_compiled(self.kernel, self.mode, args, kwargs, config, self.device, self._runner(config))

    def set_config(self, config: Config | dict[str, Any]) -> None:
        """Run this bound kernel's calls under `config` from now on (Helion's `bound.set_config`),
        e.g. a Config tuned for other sizes.

        >>> bound.set_config(tessera.Config(block_sizes=[64])); bound(x)    # doctest: +SKIP
        """
        self._config = _as_config(config)

    @property
    def settings(self) -> Any:
        """The kernel's settings (Helion's `bound.settings`)."""
        return self.kernel.settings

    @property
    def configs(self) -> list[Config]:
        """The Configs the kernel was given (Helion's `bound.configs`)."""
        return self.kernel.configs

    def autotune(self, args: Any = None, *, force: bool = True, **options: Any) -> Config:
        """Tune on `args` (a sequence of arguments; default: this bound kernel's) and run this bound
        kernel's calls under the result (Helion's `bound.autotune`; its search options are accepted)."""
        config = self.kernel.autotune(*(self.args if args is None else tuple(args)),
                                      **(self.kwargs if args is None else {}))
        self.set_config(config)
        return config

    def ensure_config_exists(self, args: Any = None) -> None:
        """Choose this bound kernel's Config now if none is set: a given, cached or heuristic one,
        tuning where the kernel's settings ask for it (Helion's `bound.ensure_config_exists`)."""
        if self._config is None:
            call = self.args if args is None else tuple(args)
            self._config = self.kernel.choose_config(self.mode, call, self.kwargs if args is None else {})

    def run_ref(self, *args: Any, **kwargs: Any) -> Any:
        """The kernel run as plain PyTorch (eager mode) on these arguments (Helion's `bound.run_ref`)."""
        device = common_device(self.kernel.fn.__name__, args, kwargs)
        return run_eager(self.kernel.fn, args, kwargs, self.kernel.block_slots(), self._config or self.kernel.default_config(),
                         device, self.kernel.uses_jagged_tile)

    def format_kernel_decorator(self, config: Config | dict[str, Any], settings: Any = None) -> str:
        """The `@tessera.kernel(...)` line that pins `config` (and the settings that change the
        generated code), to paste above the kernel."""
        settings = settings or self.kernel.settings
        return f"@tessera.kernel(config=tessera.{_as_config(config)!r}, static_shapes={settings.static_shapes})"

    def run(self, config: Config | dict[str, Any] | None = None) -> Any:
        """Call the kernel with `config` (default: the kernel's) in this bound kernel's mode."""
        config = _as_config(config)
        return run_compiled(self.kernel, self.mode, self.args, self.kwargs, config or self.kernel.default_config(),
                            self.device, self._runner(config))

    def compile_config(self, config: Config | dict[str, Any] | None = None, allow_print: bool = True) -> Callable[..., Any]:
        """Helion's `bound.compile_config(config)`: a function that runs this kernel's generated code
        under `config` (no tuning) on arguments like this call's. `allow_print` is accepted (the
        code is printed by `print_output_code` / TESSERA_PRINT_CODE)."""
        config = _as_config(config) or self.kernel.default_config()
        kernel, mode = self.kernel, self.mode

        def run(*args: Any, _launcher: Any = None, **kwargs: Any) -> Any:
            # `_launcher`: Helion's hook that replaces the launch (its fake-tensor shape inference
            # passes a no-op); under a FakeTensorMode nothing is launched anyway (fake_calls.py)
            if _launcher is not None and not fake_mode_active():
                raise exc.UnsupportedOperationError(
                    "compile_config(...)(..., _launcher=...) with real tensors: Tessera launches its own kernels",
                    location=user_location(), hint="call it without _launcher (or on fake tensors, which never launch)")
            device = common_device(kernel.fn.__name__, args, kwargs)
            if fake_mode_active():  # a runner of its own (it traces, never launches): nothing is kept for real calls
                return run_compiled(kernel, mode, args, kwargs, config, device, CompiledRunner(kernel, mode, config))
            return run_compiled(kernel, mode, args, kwargs, config, device)
        return run

    @property
    def config_spec(self) -> ConfigSpace:
        """Helion's `bound.config_spec`: this call's tuning space (`.default_config()`, `.axes`).

        >>> code = bound.to_triton_code(bound.config_spec.default_config())   # doctest: +SKIP
        """
        return config_space_for(self.plan(Config()), self.kernel.settings.backend)

    def plan(self, config: Config | dict[str, Any] | None = None) -> KernelPlan:
        """Trace and generate code for every launch under `config`, recording instead of launching."""
        config = _as_config(config) or self.kernel.default_config()
        records: list[LaunchRecord] = []
        runner = self._runner(config, records)
        with self.same_random_draws(), arguments_kept(self.args, self.kwargs):
            result = run_compiled(self.kernel, self.mode, self.args, self.kwargs, config, self.device, runner)
        tunables = [runner.tunables[index] for index in sorted(runner.tunables)]
        dims = runner.launch_dims
        launch_dims = tuple(dims.get(i, 0) for i in range(max(dims) + 1)) if dims else ()
        rows = runner.loopable_rows
        reduction_extents = tuple(rows.get(i, 0) for i in range(max(rows) + 1)) if rows else ()
        return KernelPlan(config, records, result, tunables, launch_dims=launch_dims,
                          reduction_extents=reduction_extents, whole_rows=tuple(runner.whole_rows.values()),
                          user_tunables=tuple(runner.user_tunables.items()),
                          whole_elements=max(runner.whole_elements.values(), default=1),
                          launch_tunables=tuple(runner.launch_tunables[i] for i in sorted(runner.launch_tunables)),
                          launch_sources=tuple(runner.launch_sources[i] for i in sorted(runner.launch_sources)),
                          carried_rows=tuple(runner.carried_rows[i] for i in sorted(runner.carried_rows)),
                          score_tiles=tuple(runner.score_tiles[i] for i in sorted(runner.score_tiles)),
                          split_reductions=tuple(runner.split_reductions[i] for i in sorted(runner.split_reductions)),
                          unit_dims=tuple(runner.unit_dims[i] for i in sorted(runner.unit_dims)),
                          pipelined_loads=tuple(runner.pipelined_loads[i] for i in sorted(runner.pipelined_loads)))

    def to_ir(self, config: Config | dict[str, Any] | None = None) -> KernelIR | tuple[KernelIR, ...]:
        """The IR each launch of this call lowers under `config`, after the passes: one
        `KernelIR`, or a tuple of them (source order) when the call launches several kernels.

        >>> print(add.bind(x, y).to_ir(tessera.Config(block_sizes=[64])))   # doctest: +SKIP
        """
        config = _as_config(config) or self.kernel.default_config()
        runner = IRRecorder(self.kernel, self.mode, config, self.kernel.block_slots(), store=VariantStore(), recorder=[])
        run_compiled(self.kernel, self.mode, self.args, self.kwargs, config, self.device, runner)
        return runner.irs[0] if len(runner.irs) == 1 else tuple(runner.irs)

    def to_code(self, config: Config | dict[str, Any] | None = None) -> str:
        """The generated source of every launch of this call under `config` (the kernel's backend)."""
        return self.to_triton_code(config)

    def to_triton_code(self, config: Config | dict[str, Any] | None = None, *, emit_repro_caller: bool = False,
                       output_origin_lines: bool | None = None) -> str:
        """The generated Triton source of every launch of this call under `config`. With
        `emit_repro_caller=True`, a script that runs it: a `__main__` block launches each kernel
        on fresh inputs like this call's (runtime/repro.py). `output_origin_lines` is accepted:
        the code always names the kernel source line of each statement."""
        plan = self.plan(config)
        parts, functions = [], []
        for number, launch in enumerate(plan.launches, 1):
            with open(launch.source_path) as handle:
                source = handle.read()
            function = launch.function_name
            if emit_repro_caller and function in functions:  # two launches of one name: the script needs both
                function = f"{function}_launch{number}"
                source = source.replace(f"def {launch.function_name}(", f"def {function}(", 1)
            functions.append(function)
            if len(plan.launches) > 1:
                source = f"# ---- launch {number} of {len(plan.launches)} ----\n{source}"
            parts.append(source)
        if emit_repro_caller:
            header = INTERPRET_HEADER if self.mode == "interpret" else ""
            return header + "\n".join(parts) + repro_caller(plan, functions)
        return "\n".join(parts)

    def reference(self) -> Any:
        """The kernel's result in eager mode, on clones of the arguments (the accuracy reference)."""
        def clone(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.clone()
            if isinstance(value, (list, tuple)):
                return type(value)(clone(v) for v in value)
            return value
        args = tuple(clone(a) for a in self.args)
        kwargs = {k: clone(v) for k, v in self.kwargs.items()}
        with self.same_random_draws():
            return run_eager(self.kernel.fn, args, kwargs, self.kernel.block_slots(), self.kernel.default_config(),
                             self.device, self.kernel.uses_jagged_tile)

    def same_random_draws(self) -> Any:
        """A context in which torch's generator starts where it stood at this bound kernel's first
        plan or reference, and is put back after: every plan and the eager reference draw the same
        seeds for torch.rand_like & co. (the tuner compares them), and the user's draws go on as if
        no tuning had run."""
        if self._generator_state is None:
            self._generator_state = generator_state(self.device)
        return generator_at(self.device, self._generator_state)

    def _runner(self, config: Config | None, recorder: list[LaunchRecord] | None = None) -> CompiledRunner:
        return CompiledRunner(self.kernel, self.mode, config or self.kernel.default_config(),
                              self.kernel.block_slots(), store=self._store, recorder=recorder)


def _as_config(config: Config | dict[str, Any] | None) -> Config | None:
    """Helion passes a dict of Config keys wherever it passes a Config."""
    return Config(**config) if isinstance(config, dict) else config
