"""Ahead-of-time tuning (Helion's `helion.aot_kernel`): tune a kernel for a set of shapes once,
record the results on disk, and pick a Config per call from them with no tuning at run time.

An `aot_kernel` is a `tessera.kernel` (dynamic shapes by default) whose Config comes from the
data recorded in `TESSERA_AOT_DATA_DIR` (default `<cache_dir>/aot`), one JSON file per kernel
source and device. `TESSERA_AOT_MODE` says what a compiled or interpreted call does:

- `collect`: a call whose shape features were not seen is tuned now (the usual autotuner) and its
  best Config recorded. With `collect_fn=` the first call tunes every input it returns instead,
  and with `measure_fn=` too it then measures (below) on every input that returns: one run
  does the whole workflow.
- `measure`: each call times every recorded Config on its own arguments and records the times.
- `evaluate` (the default): the Config recorded as fastest for the nearest recorded shape (the
  same non-numeric features, least summed |log2| distance of the numeric ones) runs; with
  nothing recorded the kernel chooses as `tessera.kernel` does.
- `disabled`: exactly `tessera.kernel`.

A shape's features are, per argument, a tensor's dtype and sizes (without the dims `batched=`
marks, so batch sizes share a Config) and an int's value; or whatever `key=(*args)` returns,
flattened. Eager calls need no Config and ignore all of this.

>>> @tessera.aot_kernel(batched=[[0, None], None])                  # doctest: +SKIP
... def rms_norm(x, eps=1e-5): ...
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any, Callable, Iterable, Sequence

import torch

from tessera import exc, settings
from tessera.autotune.disk_cache import device_name
from tessera.autotuner.benchmarking import do_bench_generic
from tessera.config import Config
from tessera.location import user_location
from tessera.runtime.call_keys import common_device
from tessera.runtime.compiled import run_compiled
from tessera.runtime.kernel import KERNEL_DECORATORS, Kernel
from tessera.runtime.kernel_settings import Settings
from tessera.runtime.tuning import autotune, config_for_call

AOT_MODES = ("evaluate", "collect", "measure", "disabled")
FORMAT_VERSION = 1
Features = tuple


def aot_kernel(fn: Callable[..., Any] | None = None, *, config: Config | None = None,
               configs: list[Config] | None = None, batched: Sequence[Any] | None = None,
               collect_fn: Callable[[], Iterable[tuple]] | None = None,
               measure_fn: Callable[[], Iterable[tuple]] | None = None,
               key: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`tessera.kernel` with ahead-of-time tuning (module docstring); usable bare or with settings.

    `batched`: per argument, for a tensor a list with an int (batched) or None per dim, else None.
    `key`: a function of the kernel's arguments giving the features Configs are chosen by.
    `collect_fn` / `measure_fn`: functions returning the argument tuples to tune / to time.
    """
    options.setdefault("static_shapes", False)
    try:
        kernel_settings = Settings(config=config, configs=tuple(configs or ()), **options)
    except exc.ConfigError as error:
        raise error.with_location(user_location()) from None

    def decorate(function: Callable[..., Any]) -> AOTKernel:
        return AOTKernel(function, kernel_settings, batched=batched, key=key, collect_fn=collect_fn,
                         measure_fn=measure_fn)

    return decorate(fn) if fn is not None else decorate


def aot_mode() -> str:
    """`TESSERA_AOT_MODE`, checked."""
    mode = settings.get("aot_mode") or "evaluate"
    if mode not in AOT_MODES:
        raise exc.ConfigError(f"TESSERA_AOT_MODE={mode!r} is not a mode", hint=f"use one of {', '.join(AOT_MODES)}")
    return mode


class AOTKernel(Kernel):
    """A kernel whose Config per call comes from recorded tuning data (see the module docstring)."""

    def __init__(self, fn: Callable[..., Any], kernel_settings: Settings, *, batched: Sequence[Any] | None,
                 key: Callable[..., Any] | None, collect_fn: Callable[[], Iterable[tuple]] | None,
                 measure_fn: Callable[[], Iterable[tuple]] | None) -> None:
        super().__init__(fn, kernel_settings)
        self.batched = list(batched) if batched is not None else None
        self.key = key
        self.collect_fn, self.measure_fn = collect_fn, measure_fn
        self._records: dict[str, AOTRecords] = {}   # by data file path
        self._picked: dict[tuple, Config | None] = {}  # evaluate: (path, features) -> Config
        self._one_shot_done = False

    def features(self, args: tuple, kwargs: dict) -> Features:
        """The shape features a Config is chosen by (module docstring)."""
        if self.key is not None:
            return tuple(_flattened(self.key(*args, **kwargs)))
        found: list[Any] = []
        for position, value in enumerate([*args, *kwargs.values()]):
            spec = self.batched[position] if self.batched is not None and position < len(self.batched) else None
            if isinstance(value, torch.Tensor):
                found.append(str(value.dtype).replace("torch.", ""))
                found += [size for dim, size in enumerate(value.shape)
                          if not (spec is not None and dim < len(spec) and spec[dim] is not None)]
            elif isinstance(value, int) and not isinstance(value, bool):
                found.append(value)
        return tuple(found)

    def choose_config(self, mode: str, args: tuple, kwargs: dict, stamp: tuple[Any, ...] | None = None) -> Config:
        phase = aot_mode()
        if phase == "disabled" or self.settings.config is not None:
            return config_for_call(self, mode, args, kwargs, stamp)
        records = self.records(common_device(self.fn.__name__, args, kwargs))
        if phase == "collect":
            self._run_one_shot(mode, records)
            if self.collect_fn is None:
                self.collect(mode, args, kwargs, records)
        elif phase == "measure":
            self.measure(mode, args, kwargs, records)
        features = self.features(args, kwargs)
        memo_key = (records.path, features, records.version)
        if memo_key not in self._picked:
            self._picked[memo_key] = records.best_for(features)
        picked = self._picked[memo_key]
        return picked if picked is not None else config_for_call(self, mode, args, kwargs, stamp)

    def records(self, device: torch.device) -> AOTRecords:
        """This kernel's recorded data on `device` (read from disk once per process)."""
        directory = settings.get("aot_data_dir") or os.path.join(settings.cache_dir(), "aot")
        path = os.path.join(directory, f"{self.fn.__name__}_{self.source_hash[:16]}_"
                                       f"{_file_safe(device_name(device))}.json")
        if path not in self._records:
            self._records[path] = AOTRecords.read(path, self.fn.__name__)
        return self._records[path]

    def collect(self, mode: str, args: tuple, kwargs: dict, records: AOTRecords) -> None:
        """Tune these arguments' shape unless recorded; record the result."""
        features = self.features(args, kwargs)
        if records.entry(features) is not None:
            return
        config = autotune(self, args, kwargs)
        records.add_tuned(features, config)

    def measure(self, mode: str, args: tuple, kwargs: dict, records: AOTRecords) -> None:
        """Time every recorded Config on these arguments; record the times."""
        features = self.features(args, kwargs)
        device = common_device(self.fn.__name__, args, kwargs)
        times: dict[Config, float] = {}
        for config in records.configs():
            try:
                times[config] = float(do_bench_generic(lambda: run_compiled(self, mode, args, kwargs, config, device),
                                                       warmup=5, rep=20))
            except exc.TesseraError:
                continue  # a Config that cannot run this shape is not a candidate for it
        if times:
            records.add_times(features, times)

    def _run_one_shot(self, mode: str, records: AOTRecords) -> None:
        """`collect_fn` (then `measure_fn`) inputs, once per process."""
        if self._one_shot_done or self.collect_fn is None:
            return
        self._one_shot_done = True
        for inputs in self.collect_fn():
            self.collect(mode, tuple(inputs), {}, records)
        for inputs in self.measure_fn() if self.measure_fn is not None else ():
            self.measure(mode, tuple(inputs), {}, records)


class AOTRecords:
    """One kernel's recorded tuning data: per shape features, its tuned Config and the measured
    times of Configs on it; written back atomically after each change."""

    def __init__(self, path: str, kernel_name: str, entries: list[dict[str, Any]]) -> None:
        self.path = path
        self.kernel_name = kernel_name
        self.entries = entries
        self.version = 0  # counts changes: a choice made from older data is made again

    @classmethod
    def read(cls, path: str, kernel_name: str) -> AOTRecords:
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
            if data.get("format") != FORMAT_VERSION:
                raise ValueError(f"format {data.get('format')!r}")
            entries = [{"features": list(entry["features"]), "tuned": entry.get("tuned"),
                        "times": list(entry.get("times", []))} for entry in data["entries"]]
            for entry in entries:  # every Config must still validate
                for config in _entry_configs(entry):
                    Config(**config)
        except FileNotFoundError:
            entries = []
        except (OSError, ValueError, KeyError, TypeError, exc.ConfigError) as error:
            print(f"[tessera] warning: ignoring the damaged AOT data {path} ({type(error).__name__}: {error}); "
                  "collect again to rewrite it", flush=True)
            entries = []
        return cls(path, kernel_name, entries)

    def entry(self, features: Features) -> dict[str, Any] | None:
        return next((e for e in self.entries if tuple(e["features"]) == tuple(features)), None)

    def configs(self) -> list[Config]:
        """Every distinct Config recorded, in recording order."""
        seen: list[Config] = []
        for entry in self.entries:
            for values in _entry_configs(entry):
                config = Config(**values)
                if config not in seen:
                    seen.append(config)
        return seen

    def add_tuned(self, features: Features, config: Config) -> None:
        entry = self._entry_for(features)
        entry["tuned"] = config.to_dict()
        self._write()

    def add_times(self, features: Features, times: dict[Config, float]) -> None:
        entry = self._entry_for(features)
        entry["times"] = [[config.to_dict(), ms] for config, ms in times.items()]
        self._write()

    def best_for(self, features: Features) -> Config | None:
        """The fastest Config measured (else the tuned one) for the nearest recorded features."""
        nearest, best_distance = None, math.inf
        for entry in self.entries:
            distance = _distance(tuple(entry["features"]), tuple(features))
            if distance < best_distance:
                nearest, best_distance = entry, distance
        if nearest is None:
            return None
        if nearest["times"]:
            values, _ = min(nearest["times"], key=lambda pair: pair[1])
            return Config(**values)
        return Config(**nearest["tuned"]) if nearest["tuned"] is not None else None

    def _entry_for(self, features: Features) -> dict[str, Any]:
        entry = self.entry(features)
        if entry is None:
            entry = {"features": list(features), "tuned": None, "times": []}
            self.entries.append(entry)
        return entry

    def _write(self) -> None:
        self.version += 1
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        data = {"format": FORMAT_VERSION, "kernel": self.kernel_name, "entries": self.entries}
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=".aot-", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise


def _entry_configs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return ([entry["tuned"]] if entry["tuned"] is not None else []) + [values for values, _ in entry["times"]]


def _distance(recorded: Features, wanted: Features) -> float:
    """Summed |log2| distance of numeric features; infinite where the non-numeric ones differ."""
    if len(recorded) != len(wanted):
        return math.inf
    total = 0.0
    for a, b in zip(recorded, wanted):
        numeric = isinstance(a, (int, float)) and isinstance(b, (int, float))
        if not numeric:
            if a != b:
                return math.inf
            continue
        total += abs(math.log2(abs(a) + 1) - math.log2(abs(b) + 1))
    return total


def _flattened(value: Any) -> list[Any]:
    """A key function's result as a flat list of ints, floats and strings (dtypes: their item size)."""
    if isinstance(value, (tuple, list)):
        return [item for part in value for item in _flattened(part)]
    if isinstance(value, torch.dtype):
        return [torch.empty((), dtype=value).element_size()]
    if value is None:
        return []
    if isinstance(value, (bool, int, float, str)):
        return [value]
    return [str(value)]


def _file_safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)


__all__ = ["AOTKernel", "AOTRecords", "aot_kernel", "aot_mode"]


KERNEL_DECORATORS.add(aot_kernel)
