"""The best Config per kernel and call shape, kept on disk so that tuning happens once per machine.

An entry is one JSON file under `<cache_dir>/autotune/`, named by a hash of its key and holding
the key itself: a file whose stored key differs (a hash collision, a file copied from another
machine or version) is foreign and ignored, as is one that does not parse or whose Config no
longer validates; the next tuning run rewrites it. Writes go to a temporary file that
`os.replace` moves into place, so a reader never sees half an entry, even with two processes
tuning the same kernel at once.

The key holds everything a tuned result depends on: the kernel's source hash, the call's
specialization key, the GPU's name, and the torch and Triton versions (the last two looked up
once per process: a lookup is on the path of every first call of a kernel).

>>> key = CacheKey("3f2a...", "9c1b...", "NVIDIA H100 80GB HBM3", "2.11.0", "3.6.0")  # doctest: +SKIP
>>> store(key, Config(block_sizes=[1]), time_ms=0.12, effort="quick")             # doctest: +SKIP
>>> lookup(key).config                                                             # doctest: +SKIP
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
from typing import Any

import torch

from tessera import settings
from tessera.config import Config
from tessera.exc import TesseraError

FORMAT_VERSION = 1
EFFORT_RANK = {"none": 0, "given": 1, "quick": 2, "full": 3}


@dataclasses.dataclass(frozen=True)
class CacheKey:
    source_hash: str
    specialization: str
    device_name: str
    torch_version: str
    triton_version: str

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    config: Config
    time_ms: float
    effort: str


def device_name(device: torch.device) -> str:
    """The GPU's marketing name (tuned configs do not carry over between GPU models)."""
    if device.type == "cuda":
        return _cuda_device_name(torch.cuda.current_device() if device.index is None else device.index)
    return f"{device.type} (interpret)"


@functools.lru_cache(maxsize=None)
def _cuda_device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def make_key(source_hash: str, specialization: str, device: torch.device, backend: str = "triton") -> CacheKey:
    """The key of a tuned Config; the backend's compiler and its version are part of it (a Config
    tuned for Triton is not reused for the same kernel on Pallas)."""
    compiler = _triton_version() if backend == "triton" else f"{backend} {_package_version('jax')}"
    return CacheKey(source_hash, specialization, device_name(device), torch.__version__, compiler)


@functools.lru_cache(maxsize=4)
def _package_version(name: str) -> str:
    # read from the package metadata: importing triton here would fix its interpreter mode
    # for the whole process before the first kernel call chose it (and jax costs a second)
    from importlib import metadata
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def _triton_version() -> str:
    return _package_version("triton")


def _path(key: CacheKey) -> str:
    return os.path.join(settings.cache_dir(), "autotune", f"{key.digest()}.json")


# What a damaged entry raises while read: JSON errors (ValueError), too deep a nesting for the
# parser (RecursionError), a wrong shape of data (TypeError, KeyError, AttributeError), a
# Config that no longer validates (TesseraError).
_DAMAGED = (ValueError, RecursionError, TypeError, KeyError, AttributeError, TesseraError)
_reported: set[str] = set()


def lookup(key: CacheKey, at_least: str = "none") -> CacheEntry | None:
    """The stored entry for `key`, if present, intact, ours, and tuned with at least that effort.

    A damaged entry is ignored (the next tuning run rewrites it) and reported once per process.
    """
    path = _path(key)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError:
        return None
    except _DAMAGED as error:
        _report_damaged(path, error)
        return None
    try:
        if data.get("format") != FORMAT_VERSION or data.get("key") != dataclasses.asdict(key):
            return None  # foreign (another version, a collision): not damage, ignored quietly
        entry = CacheEntry(Config(**data["config"]), float(data["time_ms"]), str(data["effort"]))
    except _DAMAGED as error:
        _report_damaged(path, error)
        return None
    if EFFORT_RANK.get(entry.effort, -1) < EFFORT_RANK.get(at_least, 0):
        return None
    return entry


def _report_damaged(path: str, error: BaseException) -> None:
    if path in _reported:
        return
    _reported.add(path)
    print(f"[tessera] warning: ignoring the damaged autotune cache entry {path} ({type(error).__name__}); "
          "it is rewritten by the next tuning run of its kernel", file=sys.stderr)


def has_entry_for(source_hash: str, device_names: frozenset[str] | None = None) -> bool:
    """Whether any entry holds a config of the kernel with this source hash, tuned with this
    process's torch and Triton (on one of `device_names`, or on any GPU if None).

    What prewarm.py asks when a kernel is defined: no call's specialization is known then. The
    directory is read once per change (its modification time), not once per kernel.
    """
    return any(hash_ == source_hash and (device_names is None or name in device_names)
               for hash_, name in _tuned_kernels(os.path.join(settings.cache_dir(), "autotune")))


_scans: dict[str, tuple[int, frozenset[tuple[str, str]]]] = {}


def _tuned_kernels(directory: str) -> frozenset[tuple[str, str]]:
    """(source hash, GPU name) of the entries in `directory` made with this torch and Triton."""
    try:
        stamp = os.stat(directory).st_mtime_ns
    except OSError:
        return frozenset()
    if directory in _scans and _scans[directory][0] == stamp:
        return _scans[directory][1]
    found = set()
    versions = (torch.__version__, _triton_version())
    try:
        names = os.listdir(directory)
    except OSError:  # not a directory, or removed since the stat
        return frozenset()
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                key = json.load(handle)["key"]
            if (key["torch_version"], key["triton_version"]) == versions:
                found.add((key["source_hash"], key["device_name"]))
        except (OSError, *_DAMAGED):
            continue  # a temporary file, a foreign or broken entry (lookup reports it)
    _scans[directory] = (stamp, frozenset(found))
    return _scans[directory][1]


def store(key: CacheKey, config: Config, *, time_ms: float, effort: str) -> str:
    """Write the entry atomically; returns its path."""
    path = _path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data: dict[str, Any] = {"format": FORMAT_VERSION, "key": dataclasses.asdict(key),
                            "config": config.to_dict(), "time_ms": time_ms, "effort": effort}
    descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".entry-", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path


__all__ = ["CacheEntry", "CacheKey", "device_name", "has_entry_for", "lookup", "make_key", "store"]
