"""A kernel's settings: `@tessera.kernel(static_shapes=True, ...)`, also `kernel.settings.x = v`.

Tessera's own settings and Helion's documented ones (helion/runtime/settings.py) share one
object, `Settings`. Each is checked when given and when assigned after decoration (which also
drops the kernel's compiled variants and choices: they may depend on it). What each does:

- honoured: `config`, `configs`, `mode`, `ref_mode` (`RefMode.EAGER` = `mode="eager"`; an explicit
  `RefMode.OFF` overrides TESSERA_MODE=eager, as it overrides HELION_INTERPRET),
  `static_shapes`, `autotune_effort`, `autotune_budget_seconds`, `autotune_random_seed`,
  `dot_precision` (default: TRITON_F32_DEFAULT, else tf32), `max_variants`, `backend`, `ignore_warnings` (warning classes from
  `tessera.exc`, silenced during the kernel's calls), `print_output_code` (the generated Triton
  source on stderr), `autotune_baseline_fn` (the tuner's accuracy reference instead of eager
  mode), `autotune_baseline_atol`/`autotune_baseline_rtol` (the tuner's tolerance),
  `autotune_accuracy_check` (False: candidates are not checked), `autotune_config_overrides`
  (these Config keys are pinned on every candidate and on the chosen Config),
  `autotune_ignore_errors` (Tessera always skips failing candidates), `force_autotune`
  (tune even when the disk cache has a Config), `key` (a function of the call's arguments whose
  hashable result joins the key a call's Config is chosen, tuned and cached by).
- accepted, warned once by name: every other Helion setting (`index_dtype`: Tessera picks int32
  or int64 per call from the sizes; `fast_math`; the autotuner's logging, precompile, subprocess
  and search knobs; ...), since it cannot change what Tessera does.

>>> settings = Settings(static_shapes=True)
>>> settings.static_shapes
True
"""
from __future__ import annotations

import enum
from typing import Any, Callable

import torch

from tessera import backends, exc
from tessera import settings as environment
from tessera.config import Config, warn_ignored

MODES = ("eager", "interpret", "compiled")


class RefMode(enum.Enum):
    """Helion's reference mode: EAGER runs the kernel as plain PyTorch (Tessera's eager mode)."""

    OFF = "off"
    EAGER = "eager"


def _choice(name: str, choices: tuple) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value not in choices:
            raise exc.ConfigError(f"unknown {name} {value!r}", hint=f"use one of {', '.join(map(repr, choices))}")
    return check


def _kind(name: str, kinds: tuple, example: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise exc.ConfigError(f"{name}={value!r} has the wrong type", hint=f"e.g. {name}={example}")
    return check


def _check_warnings(value: Any) -> None:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(w, type) and issubclass(w, exc.BaseWarning) for w in value):
        raise exc.ConfigError(f"ignore_warnings={value!r} must be a list of warning classes from tessera.exc",
                              hint="e.g. ignore_warnings=[tessera.exc.TensorOperationInWrapper]")


def _check_overrides(value: Any) -> None:
    if not isinstance(value, dict):
        raise exc.ConfigError(f"autotune_config_overrides={value!r} must be a dict of Config keys",
                              hint="e.g. autotune_config_overrides={'num_warps': 4}")
    Config(**value)  # the keys and values must make a valid Config


# Helion's other code generators: a kernel written for one runs through Tessera's Triton backend
OTHER_HELION_BACKENDS = ("cute", "metal", "tileir")


def _check_backend(value: Any) -> None:
    if value not in backends.names() and value not in OTHER_HELION_BACKENDS:
        _choice("backend", tuple(backends.names()))(value)


_NUMBER = (int, float)
# name -> (default, check): the settings Tessera honours
HONOURED: dict[str, tuple[Any, Callable[[Any], None] | None]] = {
    "config": (None, _kind("config", (Config, type(None)), "tessera.Config(block_sizes=[64])")),
    "configs": ((), None),
    "mode": (None, _choice("mode", (None, *MODES))),
    "ref_mode": (RefMode.OFF, _choice("ref_mode", tuple(RefMode))),
    "static_shapes": (False, _kind("static_shapes", (bool,), "True")),
    "autotune_effort": ("quick", _choice("autotune_effort", ("none", "quick", "full"))),
    "autotune_budget_seconds": (30.0, _kind("autotune_budget_seconds", _NUMBER, "30")),
    "autotune_random_seed": (None, _kind("autotune_random_seed", (int, type(None)), "0")),
    "dot_precision": ("tf32", _choice("dot_precision", environment.DOT_PRECISIONS)),
    "fp8_fast_accum": (False, _kind("fp8_fast_accum", (bool,), "True")),
    "max_variants": (64, _kind("max_variants", (int,), "64")),
    "backend": ("triton", _check_backend),
    "ignore_warnings": ((), _check_warnings),
    "print_output_code": (False, _kind("print_output_code", (bool,), "True")),
    "autotune_baseline_fn": (None, lambda fn: None if fn is None or callable(fn) else
                             _kind("autotune_baseline_fn", (type(None),), "a function of the kernel's arguments")(fn)),
    "autotune_baseline_atol": (None, _kind("autotune_baseline_atol", (*_NUMBER, type(None)), "1e-2")),
    "autotune_baseline_rtol": (None, _kind("autotune_baseline_rtol", (*_NUMBER, type(None)), "1e-2")),
    "autotune_accuracy_check": (True, _kind("autotune_accuracy_check", (bool,), "False")),
    "autotune_config_overrides": ({}, _check_overrides),
    "autotune_ignore_errors": (False, _kind("autotune_ignore_errors", (bool,), "True")),
    "force_autotune": (False, _kind("force_autotune", (bool,), "True")),
    "key": (None, lambda fn: None if fn is None or callable(fn) else
            _kind("key", (type(None),), "a function of the kernel's arguments returning a hashable value")(fn)),
}

# Helion settings that cannot change what Tessera does: accepted, and named once in a warning
IGNORED: dict[str, str] = {
    "index_dtype": "Tessera picks int32 or int64 indexing per call from the sizes",
    "fast_math": "no fast-math lowering",
    "persistent_reserved_sms": "persistent kernels use every SM",
    "autotune_force_persistent": "the tuner searches every pid_type",
    "distributed": "one-GPU kernels only",
    "autotune_log_level": "use TESSERA_LOG=autotune",
    "autotune_log": "use TESSERA_LOG=autotune",
    "autotune_log_details": "use TESSERA_LOG=autotune",
    "autotune_compile_timeout": "the tuner's workers have their own timeouts",
    "autotune_benchmark_subprocess": "candidates always run in worker processes",
    "autotune_benchmark_timeout": "the tuner's workers have their own timeouts",
    "autotune_precompile": "candidates always compile in worker processes",
    "autotune_precompile_jobs": "the worker count is the tuner's",
    "autotune_best_of_k": "one search per tuning run",
    "autotune_rebenchmark_threshold": "the tuner re-times its leaders itself",
    "autotune_suspicious_rebenchmark_ratio": "the tuner re-times its leaders itself",
    "autotune_search_acf": "PTXAS control files are not passed",
    "autotune_progress_bar": "use TESSERA_LOG=autotune",
    "autotune_max_generations": "the search is bounded by autotune_budget_seconds",
    "autotune_adaptive_timeout": "the tuner's workers have their own timeouts",
    "print_repro": "use print_output_code",
    "output_origin_lines": "generated code always names the kernel's source lines",
    "autotune_seed_configs": "use configs=",
    "disable_autotuner_heuristics": "the heuristic Config is always the search's start",
    "allow_warp_specialize": "use the range_warp_specializes Config key",
    "debug_dtype_asserts": "dtypes are checked while tracing",
    "autotune_cache": "the disk cache is Tessera's (TESSERA_CACHE_DIR)",
    "autotuner_fn": "the search is Tessera's",
    "autotune_baseline_accuracy_check_fn": "use autotune_baseline_atol/rtol",
    "autotune_benchmark_fn": "candidates are timed by the tuner's workers",
    "autotune_best_available_max_configs": "the disk cache keeps one Config per call key",
    "autotune_best_available_max_cache_scan": "the disk cache keeps one Config per call key",
    "autotune_initial_population_strategy": "the search starts from the heuristic Config",
    "torch_compile_fusion": "no torch.compile integration",
    "autotune_with_torch_compile_fusion": "no torch.compile integration",
    "autotune_config_filter": "use autotune_config_overrides or configs=",
    "pallas_collective_id": "a Pallas setting",
    "pallas_interpret": "a Pallas setting",
    "pallas_topk_recall_target": "a Pallas setting",
    "triton_do_not_specialize": "Tessera's call keys decide what is specialized",
    "autotune_log_search_space": "use TESSERA_LOG=autotune",
    "autotune_log_search_space_verbose": "use TESSERA_LOG=autotune",
    "autotune_log_search_space_path": "use TESSERA_LOG=autotune",
}


def requested_mode(settings: Settings, stamp: tuple[Any, ...] | None = None) -> str | None:
    """The mode these settings ask for: `mode=`, else TESSERA_MODE, None for the device's. An
    explicit `ref_mode=RefMode.OFF` (Helion: the kernel is compiled, whatever HELION_INTERPRET says)
    overrides TESSERA_MODE=eager, not interpret (Triton's interpreter is no reference mode).
    `stamp`: the call's `settings.call_stamp()`, when taken (TESSERA_MODE is then read once per stamp)."""
    mode = settings.mode or (environment.get("mode") if stamp is None else environment.get_under(stamp, "mode"))
    if mode == "eager" and settings.mode is None and settings.ref_mode_off:
        return None
    return mode


class Settings:
    """One kernel's settings (Helion's `helion.Settings`): attributes, checked when set.

    >>> kernel.settings.static_shapes = True    # doctest: +SKIP
    """

    def __init__(self, **values: Any) -> None:
        object.__setattr__(self, "_on_change", None)
        object.__setattr__(self, "ignored", {})  # Helion settings given that Tessera does not use
        # ref_mode=RefMode.OFF given explicitly: as in Helion, it beats the environment's eager request
        object.__setattr__(self, "ref_mode_off", False)
        for name, (default, _) in HONOURED.items():
            object.__setattr__(self, name, default)
        # a kernel that names no backend takes TESSERA_BACKEND's, read now (when it is defined)
        object.__setattr__(self, "backend", environment.get("backend") or "triton")
        object.__setattr__(self, "dot_precision", environment.get("dot_precision"))  # TRITON_F32_DEFAULT, as in Helion
        for name, value in values.items():
            self._set(name, value)
        if self.ref_mode is RefMode.EAGER and self.print_output_code:
            raise exc.RefEagerModeCodePrintError(
                "print_output_code=True with ref_mode=RefMode.EAGER: eager mode runs the function as PyTorch "
                "and generates no code to print", hint="drop one of the two (mode='interpret' prints the code it runs)")

    def __getattr__(self, name: str) -> Any:
        # (only names no attribute has) a Helion setting Tessera ignores reads back as given, else
        # None: code that reads `kernel.settings.index_dtype` runs as written
        if name in IGNORED:
            return self.ignored.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._set(name, value)
        if self._on_change is not None:
            self._on_change()

    def _set(self, name: str, value: Any) -> None:
        # Helion takes a dict of Config keys wherever it takes a Config
        if name == "config" and isinstance(value, dict):
            value = Config(**value)
        if name == "configs":
            value = tuple(Config(**c) if isinstance(c, dict) else c for c in value or ())
        if name in IGNORED:
            warn_ignored(f"kernel setting {name}={value!r}", IGNORED[name])
            self.ignored[name] = value
            return
        if name not in HONOURED:
            known = sorted([*HONOURED, *IGNORED])
            raise exc.ConfigError(f"unknown kernel setting {name!r}", hint=f"known settings: {', '.join(known)}")
        check = HONOURED[name][1]
        if check is not None:
            check(value)
        if name == "backend" and value not in backends.names():
            warn_ignored(f"kernel setting backend={value!r}", "Tessera lowers it through its Triton backend")
            value = "triton"
        if name == "ref_mode":
            object.__setattr__(self, "ref_mode_off", value is RefMode.OFF)
            if value is RefMode.EAGER:
                object.__setattr__(self, "mode", "eager")
            elif self.mode == "eager":  # OFF undoes an earlier EAGER: the mode goes back to the device's
                object.__setattr__(self, "mode", None)
        object.__setattr__(self, name, value)

    def runs_eager(self) -> bool:
        """Whether calls run in eager mode: `mode="eager"` (or `ref_mode=RefMode.EAGER`), else
        TESSERA_MODE=eager unless `ref_mode=RefMode.OFF` was given explicitly."""
        if self.mode is not None:
            return self.mode == "eager"
        return environment.get("mode") == "eager" and not self.ref_mode_off

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call `on_change` after each later assignment (the kernel forgets what it compiled)."""
        object.__setattr__(self, "_on_change", on_change)

    def to_dict(self) -> dict[str, Any]:
        """Every honoured setting and every accepted Helion one that was given."""
        return {**{name: getattr(self, name) for name in HONOURED}, **self.ignored}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_dict().items() if k not in HONOURED or v != HONOURED[k][0]}
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


__all__ = ["HONOURED", "IGNORED", "RefMode", "Settings", "requested_mode"]
