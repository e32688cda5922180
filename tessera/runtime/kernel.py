"""`tessera.kernel`: the decorator, and the Kernel object that dispatches each call to a mode."""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import threading
import types
import warnings
from typing import Any, Callable, NamedTuple

import torch

from tessera import backends, exc, settings
from tessera.config import Config
from tessera.frontend.block_slots import BlockSlotTable, scan_block_slots
from tessera.location import SourceLocation, strip_internal_frames, user_location
from tessera.frontend.device_expressions import BREAKPOINT, COMPARE, DEVICE_IF, MINMAX, PRINT, RANGE, TORCH_CALL
from tessera.frontend.rewrite import DEVICE_LOOP, DEVICE_RANGE, LAUNCH, STATIC_RANGE, RewrittenKernel, rewrite_kernel
from tessera.frontend.source import KernelSource
from tessera.frontend.specialized import pinned_values, specialized_arguments
from tessera.language.tile import grid, jagged_tile, tile
from tessera.runtime.argument_checks import stateful_graph_module, unsupported_argument
from tessera.runtime.bound import BoundKernel
from tessera.runtime.call_keys import common_device, device_type, plain_call_device
from tessera.language.control import (compare_helper, device_if_helper, device_loop_helper, device_range_helper,
                                      minmax_helper, range_helper, static_range_helper,
                                      torch_call_helper)
from tessera.language.debug import print_helper
from tessera.trace.proxy import TileValue
from tessera.runtime.compiled import VariantStore, launch_helper, run_compiled
from tessera.runtime.constexpr_arguments import Marks, compile_time_arguments, constexpr_parameters, has_wrapped
from tessera.runtime.eager import run_eager
from tessera.runtime.kernel_settings import Settings, requested_mode
from tessera.runtime.repeated_calls import CallDecision, RepeatedCalls
from tessera.runtime.host_replay import DECLINED, record_call
from tessera.frontend.replayable_host import ReplayableHost, replayable_host
from tessera.language.debug import breakpoint_helper
from tessera.runtime.tuning import ConfigChoices, autotune, choice_key, config_for_call, kernel_defined
from tessera.runtime.torch_library import announce, call_as_custom_op, is_traced_call
from tessera.runtime.autograd import BackwardRule, call_with_backward, needs_grad

MODES = ("eager", "interpret", "compiled")
_silencing = threading.local()  # set while a call with ignore_warnings runs (see Kernel._silenced)
_DEFAULT_CONFIG = Config()  # Config is immutable; one object keeps its cache-key repr stable


class CacheInfo(NamedTuple):
    hits: int
    misses: int
    variants: int


KernelSettings = Settings  # the name before Helion's settings joined it


# what eager mode follows the lanes of values for (Kernel.uses_jagged_tile)
_LANE_FOLLOWERS = (jagged_tile, torch.rand_like, torch.randn_like, torch.randint_like)


def _nested_call_error(name: str) -> exc.NestedKernelCallsNotSupported:
    """A kernel with tile loops called on tile values: from inside another kernel's tile loop."""
    return exc.NestedKernelCallsNotSupported(
        f"kernel {name}() is called inside another kernel's tile loop: a kernel cannot call a kernel",
        location=user_location(),
        hint=f"call {name}'s body as a plain Python helper function (without @tessera.kernel), or call "
             "the kernel on the host, between tile loops")


class Kernel:
    """A `@tessera.kernel` function. Call it like the function it wraps.

    >>> @tessera.kernel
    ... def add(x, y):
    ...     out = torch.empty_like(x)
    ...     for tile in hl.tile(out.size()):
    ...         out[tile] = x[tile] + y[tile]
    ...     return out
    """

    def __init__(self, fn: Callable[..., Any], kernel_settings: Settings) -> None:
        self.fn = fn
        self.settings = kernel_settings
        kernel_settings.watch(self.reset)  # a setting changed after decoration: compile afresh
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]
        self._rewritten: RewrittenKernel | None = None
        self._loop_lines: list[range] | None = None
        self.store = VariantStore()
        self.config_choices = ConfigChoices()  # the Config each call runs with (see tuning.py)
        # runners between calls (see run_compiled): the last one used, and others by (mode, Config key, device)
        self.idle_runners: list[Any] = []
        self.spare_runners: dict[tuple, Any] = {}
        kernel_defined(self)  # a kernel that will likely tune starts the tuning workers now (never raises)
        self.backward_rule: BackwardRule | None = None  # set by @kernel.backward (autograd.py)
        self.torch_ops: dict[Any, Any] = {}  # custom ops by argument structure (torch_library.py)
        self._binding_forms: set[tuple] = set()  # (argument count, keyword names...) that bound (_check_arguments)
        self._bound_kernels: dict[tuple, BoundKernel] = {}  # what `bind` gave, by `specialization_key`
        announce(self)  # torch.compile keeps its calls whole (torch_library.py)

    @property
    def __globals__(self) -> dict[str, Any]:
        """The function's globals, as a function has them: torch.library.custom_op(kernel) reads
        them to resolve string annotations (`from __future__ import annotations`)."""
        return self.fn.__globals__

    @functools.cached_property
    def source(self) -> KernelSource:
        return KernelSource(self.fn)

    @functools.cached_property
    def _scanned_block_slots(self) -> BlockSlotTable:
        # the AST scan costs ~150 us; it runs once, and each call gets a copy to learn into
        return scan_block_slots(self.source, self.source.resolver())

    @functools.cached_property
    def specialized_arguments(self) -> tuple[tuple[str, Any], ...]:
        """The argument sizes, strides and ints the host code pins with hl.specialize (see frontend/specialized.py)."""
        return specialized_arguments(self.source, self.source.resolver())

    def pinned_values(self, args: tuple, kwargs: dict) -> tuple:
        """This call's values of `specialized_arguments`: part of the key its Config is chosen by."""
        pinned = self.specialized_arguments
        return pinned_values(pinned, tuple(self.signature.parameters), args, kwargs) if pinned else ()

    def block_slots(self) -> BlockSlotTable:
        """A fresh table of which Config.block_sizes entry each tile call uses."""
        return self._scanned_block_slots.copy()

    def __repr__(self) -> str:
        return f"<tessera.kernel {self.fn.__qualname__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.settings.ignore_warnings and not getattr(_silencing, "active", False):
            return self._silenced(args, kwargs)
        try:  # one frame for the whole dispatch: this runs on every call
            # a user's key= function may answer differently for the same argument facts: decided afresh
            calls = (self._repeated_calls if not kwargs and self.backward_rule is None and self.settings.key is None
                     else None)
            if calls is not None:
                decision = calls.decide(args)
                if decision is not None:  # a plain call repeating an earlier one's facts (repeated_calls.py)
                    replay = decision.replay
                    if replay:  # its host code replayed from a record (host_replay.py)
                        result = replay(args)
                        if result is not DECLINED:
                            return result
                    elif replay is None and self._replay_form is not None:
                        return record_call(self, decision, args, self._replay_form)
                    # positional: a keyword argument costs this path ~0.1 us
                    return run_compiled(self, decision.mode, args, kwargs, decision.config, decision.device, None,
                                        decision.stamp)
            if self._constexpr_marks is not None or has_wrapped(args, kwargs):
                args, kwargs = compile_time_arguments(self._constexpr_marks, args, kwargs)
                calls = None
            self._check_arguments(args, kwargs)
            if self.backward_rule is not None and needs_grad(args, kwargs):
                return call_with_backward(self, self.backward_rule, args, kwargs)
            device = plain_call_device((*args, *kwargs.values()) if kwargs else args)  # the usual call: one pass
            if device is None:
                if any(isinstance(value, TileValue) for value in (*args, *kwargs.values())):
                    # called on tile values inside another kernel's tile loop: a kernel with tile
                    # loops of its own is refused (Helion's NestedKernelCallsNotSupported); one
                    # without (Helion: a decorated combine function) runs inline, its decorator ignored
                    if self._tile_loop_lines():
                        raise _nested_call_error(self.fn.__name__)
                    return self.fn(*args, **kwargs)
                if is_traced_call(args, kwargs):  # torch.compile's fake or functional tensors
                    return call_as_custom_op(self, args, kwargs)
                device = common_device(self.fn.__name__, args, kwargs)
                calls = None
            stamp = settings.call_stamp()  # taken before deciding: a change while deciding shows next call
            mode = self.mode_for(device, stamp)
            if mode == "eager":
                return self.call_eager(args, kwargs, device)
            config = self.choose_config(mode, args, kwargs, stamp)
            if calls is not None:
                calls.note(args, CallDecision(mode, config, device, stamp))
            return run_compiled(self, mode, args, kwargs, config, device, stamp=stamp)
        except exc.TesseraError as error:
            if settings.get("debug") == "raw":
                raise
            # a graph module that reads module state fails at whatever op of its code comes first:
            # the argument is the cause to name
            stateful = stateful_graph_module(self.fn.__name__, args, kwargs)
            if stateful is not None:
                raise stateful.with_traceback(None) from None
            if error.__cause__ is not None and not isinstance(error.__cause__, exc.TesseraError):
                # a torch error eager mode located (eager.py): a tensor no kernel can read is the
                # likelier cause, said as such
                refused = unsupported_argument(self.fn.__name__, args, kwargs)
                if refused is not None:
                    raise refused.with_traceback(None) from None
            raise error.with_traceback(strip_internal_frames(error.__traceback__)) from None
        except Exception:
            # checked only once a call failed (see argument_checks.py): a sparse, mkldnn, nested
            # or meta tensor fails wherever its pointer or strides are first read
            refused = unsupported_argument(self.fn.__name__, args, kwargs)
            if refused is None or settings.get("debug") == "raw":
                raise
            raise refused.with_traceback(None) from None

    def backward(self, function: Callable[..., Any] | None = None, *,
                 nondifferentiable_outputs: tuple[int, ...] = ()) -> Any:
        """Give this kernel a gradient rule (a decorator, bare or with settings); see autograd.py.

        The rule is called as `rule(ctx, *grad_outputs)`, one gradient per tensor the kernel
        returns, and returns one gradient per positional argument (None where there is none);
        `ctx.inputs`, `ctx.kwargs` and `ctx.output` are the forward call's arguments and result.
        `nondifferentiable_outputs`: positions of returned tensors that get no gradient (saved
        statistics, indices).

        >>> @softmax.backward                               # doctest: +SKIP
        ... def softmax_backward(ctx, grad_out):
        ...     return softmax_bwd(grad_out, ctx.output)
        """
        def attach(rule: Callable[..., Any]) -> Callable[..., Any]:
            self.backward_rule = BackwardRule(rule, tuple(nondifferentiable_outputs))
            return rule

        return attach(function) if function is not None else attach

    def _silenced(self, args: tuple, kwargs: dict) -> Any:
        """The call with the kernel's `ignore_warnings` classes silenced."""
        with warnings.catch_warnings():
            for category in self.settings.ignore_warnings:
                warnings.simplefilter("ignore", category)
            _silencing.active = True
            try:
                return self(*args, **kwargs)
            finally:
                _silencing.active = False

    def choose_config(self, mode: str, args: tuple, kwargs: dict, stamp: tuple[Any, ...] | None = None) -> Config:
        """The Config a compiled or interpreted call runs with (given, stored, tuned or heuristic);
        `tessera.aot_kernel` kernels choose from recorded data first. `stamp`: the call's
        `settings.call_stamp()`, when the caller has taken it."""
        return config_for_call(self, mode, args, kwargs, stamp)

    @property
    def configs(self) -> list[Config]:
        """The Configs given with `config=` / `configs=` (Helion's `Kernel.configs`)."""
        given = [self.settings.config] if self.settings.config is not None else []
        return given + list(self.settings.configs)

    @configs.setter
    def configs(self, configs: list[Config | dict[str, Any]]) -> None:
        """`kernel.configs = [...]` replaces the kernel's Configs (as Helion's attribute does); the
        kernel forgets what it compiled and chose, as after any settings change."""
        self.settings.config = None
        self.settings.configs = configs

    def autotune(self, *args: Any, **kwargs: Any) -> Config:
        """Tune for these arguments now; return the best Config (also stored on disk). Takes the
        arguments as a call does, `kernel.autotune(x, y)`, or as Helion does, one sequence of them
        (`kernel.autotune((x, y), force=True)`; `force` and the search options are accepted: the
        search is Tessera's)."""
        args, kwargs = self.helion_tuning_arguments(args, kwargs)
        return autotune(self, args, kwargs)

    def helion_tuning_arguments(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """(args, kwargs) of a tuning call given either way (see `autotune`)."""
        if len(args) != 1 or not isinstance(args[0], (tuple, list)):
            return args, kwargs
        try:
            inspect.signature(self.fn).bind(*args[0])
        except TypeError:
            return args, kwargs
        return tuple(args[0]), {}  # Helion's options (force=, ...) configure its own search

    def rewritten(self) -> RewrittenKernel:
        """The kernel function with tile loops rewritten into launches (built once)."""
        if self._rewritten is None:
            self._refuse_inner_decorators()
            self._rewritten = rewrite_kernel(
                self.source, self._tile_call_test(),
                {LAUNCH: launch_helper, DEVICE_LOOP: device_loop_helper, DEVICE_IF: device_if_helper,
                 COMPARE: compare_helper, RANGE: range_helper, MINMAX: minmax_helper,
                 STATIC_RANGE: static_range_helper, DEVICE_RANGE: device_range_helper,
                 TORCH_CALL: torch_call_helper, PRINT: print_helper,
                 BREAKPOINT: breakpoint_helper})
        return self._rewritten

    def _refuse_inner_decorators(self) -> None:
        """A decorator below the kernel's (or a functools.wraps wrapper given as the kernel) would
        run in eager mode only: the generated code is the function's own body (Helion refuses it too)."""
        decorators = getattr(self.source.tree, "decorator_list", [])  # (a lambda's source is no def: refused later)
        resolve = self.source.resolver()
        kernel_at = [i for i, d in enumerate(decorators)
                     if resolve(d.func if isinstance(d, ast.Call) else d) in KERNEL_DECORATORS]
        below = decorators[kernel_at[-1] + 1:] if kernel_at else []
        if not below and not hasattr(self.fn, "__wrapped__"):
            return
        site = below[0] if below else self.source.tree
        location = SourceLocation(self.source.filename, site.lineno, site.col_offset,
                                  site.end_col_offset or site.col_offset + 1, self.fn.__name__)
        raise exc.DecoratorAfterHelionKernelDecorator(
            f"{self.fn.__name__} is wrapped by a decorator applied before the kernel decorator: its generated code "
            "would skip the wrapper (Decorators after helion kernel decorator are not allowed)", location=location,
            hint="put other decorators above @tessera.kernel (they then wrap the kernel), or call the wrapper's work "
                 "inside the kernel function")

    def call_eager(self, args: tuple, kwargs: dict, device: torch.device) -> Any:
        """Run the kernel function in eager mode on `device` (also what tessera.experimental.backward
        differentiates)."""
        self.rewritten()  # the rewrite's checks (device values read on the host, ...) hold in eager too
        # module state a graph module reads is refused by the trace's capture check; eager mode
        # would read it whole and answer wherever one tile covers it
        stateful = stateful_graph_module(self.fn.__name__, args, kwargs)
        if stateful is not None:
            raise stateful
        # a function argument may call torch.rand_like in the loop: follow lanes for it too
        try:
            return run_eager(self.fn, args, kwargs, self.block_slots(), self.default_config(), device,
                             self.uses_jagged_tile or any(type(a) is types.FunctionType for a in args))
        except TypeError as error:  # Python's own at a line of a tile loop: the trace's located error
            located = next(filter(None, (exc.python_error_at_user_line(error, self.source.filename, lines)
                                         for lines in self._tile_loop_lines())), None)
            if located is None:
                raise
            raise located from error

    def _tile_call_test(self) -> Callable[[ast.expr], bool]:
        """Whether a loop's iterable is a call of hl.tile / hl.grid / hl.jagged_tile."""
        resolve = self.source.resolver()
        return lambda node: isinstance(node, ast.Call) and resolve(node.func) in (tile, grid, jagged_tile)

    def _tile_loop_lines(self) -> list[range]:
        """The lines of each tile loop of the kernel's source."""
        if self._loop_lines is None:
            is_tile_call = self._tile_call_test()
            self._loop_lines = [range(node.lineno, node.end_lineno + 1) for node in ast.walk(self.source.tree)
                                if isinstance(node, ast.For) and is_tile_call(node.iter)]
        return self._loop_lines

    def cache_info(self) -> CacheInfo:
        """Hits, misses and compiled variants held, over every launch of this kernel."""
        return CacheInfo(self.store.hits, self.store.misses, self.store.count())

    def reset(self) -> None:
        """Forget every compiled variant, the counts and the in-memory Config choices (the disk
        cache of tuned Configs stays): the next call starts as the first one did."""
        self.store = VariantStore()
        self.idle_runners = []
        self.spare_runners = {}
        self.config_choices.clear()
        self._bound_kernels = {}

    @functools.cached_property
    def uses_jagged_tile(self) -> bool:
        """Whether the kernel's body calls hl.jagged_tile or a torch.*_like random function: eager
        mode then follows the tiles of each value's dims, to leave out the lanes past each end, or
        to number random elements by their place in the loops (language/eager_lanes.py)."""
        resolve = self.source.resolver()
        # a fresh parse: the rewrite edits the source's tree (a torch call becomes a helper call)
        return any(isinstance(node, ast.Call) and resolve(node.func) in _LANE_FOLLOWERS
                   for node in ast.walk(ast.parse(textwrap.dedent(self.source.text))))

    @functools.cached_property
    def source_hash(self) -> str:
        """A digest of the kernel's source text (the disk cache of tuned configs is keyed by it)."""
        import hashlib
        return hashlib.sha256(self.source.text.encode()).hexdigest()[:20]

    def bind(self, *args: Any, **kwargs: Any) -> BoundKernel:
        """The kernel with these arguments: code, launch plans and runs per Config.

        Helion's spelling, one tuple (or list) of all the arguments (`kernel.bind((x, y))`,
        `kernel.bind((x,))`), means the same whenever its items bind as the arguments; else the
        tuple is the one argument.

        >>> kernel.bind(x, y).to_triton_code(tessera.Config(block_sizes=[64]))  # doctest: +SKIP
        """
        if len(args) == 1 and isinstance(args[0], (tuple, list)) and not kwargs and self._binds(tuple(args[0])):
            args = tuple(args[0])
        bound = self.bind_arguments(args, kwargs)
        # arguments with one specialization_key get one bound kernel, as in Helion (`kernel.bind(x) is
        # kernel.bind(torch.zeros_like(x))`): it keeps what it compiled; run/plan take the latest arguments
        try:
            key = self.specialization_key(bound.args, bound.kwargs)
            kept = self._bound_kernels.get(key)
        except (TypeError, RuntimeError):  # fake tensors of symbolic sizes (torch.compile) have no key: not kept
            return bound
        if kept is None:
            self._bound_kernels[key] = bound
            return bound
        kept.args, kept.kwargs = bound.args, bound.kwargs
        return kept

    def bind_arguments(self, args: tuple, kwargs: dict) -> BoundKernel:
        """A new bound kernel of its own (not the one `bind` keeps for these arguments' key), without
        guessing: `args` are the positional arguments, even a single tuple (a kernel whose one
        parameter is a tuple of tensors). The tuner binds this way: its copies stay its own."""
        if self._constexpr_marks is not None or has_wrapped(args, kwargs):
            args, kwargs = compile_time_arguments(self._constexpr_marks, args, kwargs)
        self._check_arguments(args, kwargs)
        return BoundKernel(self, args, kwargs)

    def specialization_key(self, args: tuple | list, kwargs: dict | None = None) -> tuple:
        """What calls that share compiled code and a chosen Config have in common (Helion's
        `kernel.specialization_key(args)`): per argument its dtype, rank, layout, size buckets
        (exact sizes under static_shapes), the values hl.specialize pins, and the mode and device."""
        args, kwargs = tuple(args), kwargs or {}
        device = common_device(self.fn.__name__, args, kwargs)
        return (device, *choice_key(self, self.mode_for(device), args, kwargs))

    def default_config(self) -> Config:
        if self.settings.config is not None:
            return self.settings.config
        if self.settings.configs:
            return self.settings.configs[0]
        return _DEFAULT_CONFIG

    def mode_for(self, device: torch.device, stamp: tuple[Any, ...] | None = None) -> str:
        """The mode of a call: the one the settings ask for (`requested_mode`), else by device;
        `stamp`: the call's `settings.call_stamp()`, when taken."""
        mode = requested_mode(self.settings, stamp)
        if mode is None:
            return "compiled" if device_type(device) == "cuda" else "interpret"
        if mode not in MODES:
            raise exc.ConfigError(f"TESSERA_MODE={mode!r} is not a mode", hint=f"use one of {', '.join(MODES)}")
        return mode

    @functools.cached_property
    def _repeated_calls(self) -> RepeatedCalls | None:
        """The memo of plain calls' decisions (repeated_calls.py), for kernels whose plain calls
        pass their arguments unchanged (no hl.constexpr parameter) and choose Configs the usual
        way (`tessera.aot_kernel` chooses per call); None for others."""
        if self._constexpr_marks is not None or type(self).choose_config is not Kernel.choose_config:
            return None
        return self.config_choices.calls

    @functools.cached_property
    def _replay_form(self) -> ReplayableHost | None:
        """Whether (and how) repeated calls may replay the host code instead of running it
        (frontend/replayable_host.py); None: they run it."""
        try:
            return replayable_host(self.source, self.rewritten().function)
        except Exception:  # noqa: BLE001  (a form it cannot read: the host code runs, as without replay)
            if settings.get("debug") == "raw":
                raise
            return None

    @functools.cached_property
    def _constexpr_marks(self) -> Marks | None:
        """The parameters annotated `hl.constexpr` (constexpr_arguments.py)."""
        return constexpr_parameters(self.source)

    @functools.cached_property
    def _positional_arity(self) -> tuple[int, int] | None:
        """(required, total) when every parameter is positional-or-keyword, else None."""
        parameters = self.signature.parameters.values()
        if any(p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters):
            return None
        return sum(p.default is inspect.Parameter.empty for p in parameters), len(parameters)

    def _binds(self, args: tuple) -> bool:
        try:
            self.signature.bind(*args)
        except TypeError:
            return False
        return True

    def _check_arguments(self, args: tuple, kwargs: dict) -> None:
        arity = self._positional_arity
        if not kwargs and arity is not None and arity[0] <= len(args) <= arity[1]:
            return  # binds for sure; signature.bind costs ~3 us per call
        # whether arguments bind depends only on their count and keyword names: a form that bound once binds again
        form = (len(args), *kwargs) if kwargs else None
        if form is not None and form in self._binding_forms:
            return
        try:
            self.signature.bind(*args, **kwargs)
            if form is not None and len(self._binding_forms) < 64:
                self._binding_forms.add(form)
        except TypeError as error:
            # the counts first, in the words Helion's message uses (tests match them)
            counts = (f"Too many arguments passed to the kernel, expected: {arity[1]} got: {len(args)}. "
                      if arity is not None and len(args) > arity[1] else "")
            raise exc.KernelArgumentError(
                f"{counts}{self.fn.__name__}(): {error}", location=user_location(),
                hint=f"the kernel's signature is {self.fn.__name__}{self.signature}") from None




# the decorators that make a Kernel (tessera.aot adds aot_kernel): one below them in a kernel's
# source would be skipped by the generated code
KERNEL_DECORATORS: set[Any] = set()


def kernel(fn: Callable[..., Any] | None = None, *, config: Config | dict[str, Any] | None = None,
           configs: list[Config | dict[str, Any]] | None = None, **options: Any) -> Any:
    """Make a function a Tessera kernel; usable bare or with settings.

    Settings (see runtime/kernel_settings.py for all, Helion's included): `config=` / `configs=`,
    `mode=` ('eager' | 'interpret' | 'compiled'), `static_shapes=`, `autotune_effort=`
    ('none' | 'quick' | 'full'), `autotune_budget_seconds=`, `dot_precision=` ('tf32' | 'ieee'),
    `fp8_fast_accum=` (fp8 products summed in the tensor cores' reduced precision, faster),
    `max_variants=`, `ignore_warnings=`, `autotune_baseline_fn=`, `autotune_config_overrides=`, ...
    They stay settable after decoration: `kernel.settings.static_shapes = True`.

    >>> @tessera.kernel(config=tessera.Config(block_sizes=[64]))   # doctest: +SKIP
    ... def add(x, y): ...
    """
    try:
        kernel_settings = Settings(config=config, configs=tuple(configs or ()), **options)
    except exc.ConfigError as error:
        raise error.with_location(user_location()) from None  # the decorator's line

    def decorate(function: Callable[..., Any]) -> Kernel:
        return Kernel(function, kernel_settings)

    return decorate(fn) if fn is not None else decorate


KERNEL_DECORATORS.add(kernel)
