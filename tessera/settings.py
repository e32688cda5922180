"""Every TESSERA_* environment variable, declared once with its type, default and meaning.

Nothing else in Tessera reads `os.environ`. Tests override values with `settings.override(...)`.

>>> from tessera import settings
>>> with settings.override(mode="eager"):
...     settings.get("mode")
'eager'
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import threading
from typing import Any, Callable, Iterator

from tessera.exc import SettingValueError


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _parse_bool(text: str) -> bool:
    return text.strip().lower() in ("1", "true", "yes", "on")


def _parse_set(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def _parse_optional_str(text: str) -> str | None:
    return text or None


def _parse_int(text: str) -> int:
    return int(text.strip())


# Helion's dot precisions: Triton's three, and the backend-neutral names that map onto them
DOT_PRECISIONS = ("tf32", "tf32x3", "ieee", "default", "high", "highest")


def _parse_dot_precision(text: str) -> str:
    if text.strip() not in DOT_PRECISIONS:
        raise ValueError(text)
    return text.strip()


_DECLARED: tuple[Setting, ...] = (
    Setting("mode", "TESSERA_MODE", _parse_optional_str, None,
            "Force a mode for every kernel: eager | interpret | compiled. Default: compiled on CUDA "
            "tensors, interpret on CPU tensors."),
    Setting("print_code", "TESSERA_PRINT_CODE", _parse_bool, False,
            "Print the generated source (Triton or Pallas) of each variant a call builds, once, headed by the kernel, "
            "tile loop, variant, mode and Config (plans and tuning runs do not print)."),
    Setting("backend", "TESSERA_BACKEND", _parse_optional_str, None,
            "The backend of kernels that do not name one: triton (default) | pallas."),
    Setting("dot_precision", "TRITON_F32_DEFAULT", _parse_dot_precision, "tf32",
            "Triton's own variable: the dot_precision of kernels that set none, one of " + ", ".join(DOT_PRECISIONS)
            + " (default = tf32, high = tf32x3, highest = ieee)."),
    Setting("log", "TESSERA_LOG", _parse_set, frozenset(),
            "Comma-separated log topics: recompiles, ir, autotune."),
    Setting("debug", "TESSERA_DEBUG", _parse_optional_str, None,
            "'raw' re-raises internal exceptions untouched, with Tessera's frames kept."),
    Setting("cache_dir", "TESSERA_CACHE_DIR", str,
            os.path.join(os.path.expanduser("~"), ".cache", "tessera"),
            "Where generated sources and autotune results are stored (a private temporary directory, "
            "with one warning, when it cannot be used)."),
    Setting("autotune_seed", "TESSERA_AUTOTUNE_SEED", _parse_int, 0,
            "Seed of the autotuner's random choices."),
    Setting("autotune_effort", "TESSERA_AUTOTUNE_EFFORT", _parse_optional_str, None,
            "Override every kernel's autotune_effort: none | quick | full (read on every call: a change "
            "takes effect on the next)."),
    Setting("op_fuzz_rounds", "TESSERA_OP_FUZZ_ROUNDS", int, 1,
            "Rounds of fresh edge values and input layouts per (op, dtype) pair of the differential op "
            "fuzzer (tests/test_op_fuzz.py); raise it for long runs, e.g. on the GPU."),
    Setting("check_indices", "TESSERA_CHECK_INDICES", _parse_bool, False,
            "Check index tensors: a gathered or scattered index outside its dimension in a lane that "
            "is not masked raises IndexingError at the kernel line (eager mode: at once; generated "
            "code: after the launch) instead of reading 0 / skipping the write, as every mode does "
            "by default. On the device it costs a sync per launch; tuning is skipped (the heuristic "
            "Config runs). Read on every call: a change takes effect on the next."),
    Setting("aot_mode", "TESSERA_AOT_MODE", _parse_optional_str, None,
            "What tessera.aot_kernel kernels do per call: evaluate (default: run the Config the recorded "
            "data picks for the nearest recorded shape, else the usual choice) | collect (tune each new "
            "shape and record its Config) | measure (time every recorded Config on each call's shape) | "
            "disabled (behave as tessera.kernel)."),
    Setting("aot_data_dir", "TESSERA_AOT_DATA_DIR", _parse_optional_str, None,
            "Where tessera.aot_kernel records tuned Configs and timings (default: <cache_dir>/aot)."),
    Setting("host_replay", "TESSERA_HOST_REPLAY", _parse_bool, True,
            "Let a repeated kernel call whose host code allows it skip that code: allocate, launch and "
            "return as a recorded call with the same argument facts did (runtime/host_replay.py); 0 runs "
            "the host code on every call. Read on every call: a change takes effect on the next."),
    Setting("prewarm", "TESSERA_PREWARM", _parse_bool, True,
            "Start the autotuning workers in the background when a kernel that will likely tune "
            "is defined (CUDA present, tuning on, no tuned config on disk); 0 turns it off."),
)

_BY_NAME: dict[str, Setting] = {setting.name: setting for setting in _DECLARED}
_overrides: list[dict[str, Any]] = []


def get(name: str) -> Any:
    """The current value of a setting: innermost override, else the environment, else default.

    Read afresh on every call (kernels read `mode` on every call): a change to `os.environ`
    takes effect at once.
    """
    if _overrides:
        for layer in reversed(_overrides):
            if name in layer:
                return layer[name]
    setting = _BY_NAME[name]
    text = _read_environment(setting.env)
    if text is None:
        return setting.default
    try:
        return setting.parse(text)
    except ValueError:
        raise SettingValueError(f"{setting.env}={text!r} is not a valid value ({setting.doc})",
                          hint=f"unset {setting.env} (default {setting.default!r}) or give a valid value") from None


def _read_environment(variable: str) -> str | None:
    """`os.environ.get(variable)`, without its per-read key encoding where CPython allows.

    `os.environ.get` encodes the key and decodes the value on every read (about 1 us); a
    kernel call reads TESSERA_MODE once. CPython's `os.environ` keeps the encoded mapping in
    `_data`, updated in place by every assignment; where that is not so (another Python, a
    replaced `os.environ`), the plain read is used.
    """
    raw = _read_raw(variable)
    decode = _environ_parts[3]
    return raw if raw is None or _environ_parts[1] is None else decode(raw)


def _read_raw(variable: str) -> Any:
    """The environment's value of `variable` as `os.environ` stores it (bytes on POSIX), not
    decoded; the decoded text where the stored mapping is not usable (see _read_environment)."""
    environ = os.environ
    if environ is not _environ_parts[0]:
        data = getattr(environ, "_data", None)
        encode, decode = getattr(environ, "encodekey", None), getattr(environ, "decodevalue", None)
        usable = isinstance(data, dict) and encode is not None and decode is not None
        _environ_parts[:] = [environ, data if usable else None, encode, decode]
        _ENCODED_KEYS.clear()
        if usable:
            _CALL_KEYS[:] = [encode(_BY_NAME[name].env) for name in CALL_SETTINGS]
    data = _environ_parts[1]
    if data is None:
        return environ.get(variable)
    key = _ENCODED_KEYS.get(variable)
    if key is None:
        key = _ENCODED_KEYS[variable] = _environ_parts[2](variable)
    return data.get(key)


def stamp(*names: str) -> tuple[Any, ...]:
    """A token of everything `get(name)` reads for each of `names`: the override layers (their
    generation, bumped by every `override` entry and exit) and the environment's stored values.
    While the token stays equal, `get` answers the same for each, so a decision made from them
    may be repeated.

    >>> stamp("mode") == stamp("mode")
    True
    """
    return (_override_generation[0], *[_read_raw(_BY_NAME[name].env) for name in names])


CALL_SETTINGS = ("mode", "check_indices", "autotune_effort", "host_replay")
"""The settings a kernel call's remembered decisions depend on: its mode, the variants it compiles
(index checks are lowered into them), its Config (the effort, which index checks force to
"none") and whether it replays its host code. Memos of those decisions hold `call_stamp()` and decide afresh when it changes."""


def call_stamp() -> tuple[Any, ...]:
    """`stamp(*CALL_SETTINGS)`, read the fast way: every kernel call takes it (three dict reads,
    about as long as `stamp("mode")` alone)."""
    parts = _environ_parts
    if os.environ is parts[0] and parts[1] is not None:
        get = parts[1].get
        mode, check_indices, effort, replay = _CALL_KEYS
        return _override_generation[0], get(mode), get(check_indices), get(effort), get(replay)
    return stamp(*CALL_SETTINGS)  # first use, or another os.environ: refreshes _environ_parts


def get_under(stamp: tuple[Any, ...], name: str) -> Any:
    """`get(name)` for one of CALL_SETTINGS, where `stamp` is `call_stamp()` taken by this call:
    read once per stamp, so the calls made under one stamp share the read (a dict lookup
    instead of parsing the environment on every call)."""
    known = _READ_UNDER.get(name)
    if known is not None and known[0] == stamp:
        return known[1]
    value = get(name)
    _READ_UNDER[name] = (stamp, value)  # one assignment: a concurrent reader sees a whole pair
    return value


_READ_UNDER: dict[str, tuple[tuple[Any, ...], Any]] = {}  # setting -> (the stamp it was read under, its value)
_environ_parts: list[Any] = [None, None, None, None]  # os.environ, and its mapping and codecs when usable
_override_generation = [0]  # bumped by each override() entry and exit (see stamp)
_ENCODED_KEYS: dict[str, Any] = {}
_CALL_KEYS: list[Any] = []  # the encoded environment keys of CALL_SETTINGS (see call_stamp)


_usable_cache_dirs: dict[str, str] = {}
_cache_dir_lock = threading.Lock()


def cache_dir() -> str:
    """The directory to write caches under: `TESSERA_CACHE_DIR` when it is, or can be made, a
    writable directory; else a private temporary directory for this process, with one warning.

    A cache is an optimization: a missing, unwritable or not-a-directory setting must not turn
    every kernel call into an OSError. The answer is remembered per configured path; callers
    still create subdirectories on every write (the directory may be deleted while we run).
    """
    configured = get("cache_dir")
    usable = _usable_cache_dirs.get(configured)
    if usable is None:
        with _cache_dir_lock:
            usable = _usable_cache_dirs.get(configured)
            if usable is None:
                usable = _usable_cache_dirs[configured] = _usable_directory(configured)
    return usable


def _usable_directory(configured: str) -> str:
    try:
        os.makedirs(configured, exist_ok=True)
        # os.access is wrong for root and some file systems: a real file write is the test
        descriptor, probe = tempfile.mkstemp(dir=configured, prefix=".tessera-probe-")
        os.close(descriptor)
        os.unlink(probe)
        return configured
    except OSError as error:
        fallback = tempfile.mkdtemp(prefix="tessera-cache-")
        print(f"[tessera] warning: TESSERA_CACHE_DIR={configured!r} cannot be used "
              f"({type(error).__name__}: {error.strerror or error}); caching in {fallback} for this process",
              file=sys.stderr)
        return fallback


def log_enabled(topic: str) -> bool:
    return topic in get("log")


@contextlib.contextmanager
def override(**values: Any) -> Iterator[None]:
    """Temporarily set settings by name (not by environment variable)."""
    unknown = set(values) - set(_BY_NAME)
    if unknown:
        raise KeyError(f"unknown Tessera settings: {sorted(unknown)}")
    _overrides.append(values)
    _override_generation[0] += 1
    try:
        yield
    finally:
        _overrides.remove(values)
        _override_generation[0] += 1


def describe() -> str:
    """A table of every environment variable, its default and meaning (the README lists the same in a table; tests/test_docs.py checks it)."""
    return "\n".join(f"{s.env} (default {s.default!r}): {s.doc}" for s in _DECLARED)
