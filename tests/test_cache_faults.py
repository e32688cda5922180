"""Caches on disk are untrusted: damaged, edited, deleted or unwritable entries and directories
cost a rebuild (or one warning), never a wrong answer or a raw OSError/SyntaxError. Each case
runs in a fresh Python process with its own TESSERA_CACHE_DIR, as a user's next run would;
threads and processes sharing one cache start at once."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

KERNELS = '''
import torch
import tessera
import tessera.language as hl


@tessera.kernel
def add_one(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + 1.0
    return out


@tessera.kernel
def double(x):
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2.0
    return out
'''

CHECK = '''
import torch
from kernels import add_one, double
x = torch.arange(40.0)
assert torch.equal(add_one(x), x + 1.0), add_one(x)
assert torch.equal(double(x), x * 2.0), double(x)
print("OK")
'''


def run_python(tmp_path: pathlib.Path, code: str, cache_dir: str | pathlib.Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter next to kernels.py, with this cache directory."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    environment = {**os.environ, "TESSERA_CACHE_DIR": str(cache_dir), "TESSERA_MODE": "interpret",
                   "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    environment.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, env=environment,
                          capture_output=True, text=True, timeout=300)


def assert_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def generated_files(cache: pathlib.Path) -> list[pathlib.Path]:
    return sorted((cache / "tessera_generated").glob("*.py"))


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A cache directory after one run of CHECK (made once; tests damage copies of it)."""
    where = tmp_path_factory.mktemp("filled")
    assert_ok(run_python(where, CHECK, where / "cache"))
    assert generated_files(where / "cache")
    return where / "cache"


@pytest.mark.parametrize("damage", ["edited", "truncated", "garbage"])
def test_a_damaged_generated_source_is_rebuilt(tmp_path: pathlib.Path, filled_cache: pathlib.Path,
                                               damage: str) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(filled_cache, cache)
    files = generated_files(cache)
    for path in files:
        text = path.read_text()
        damaged = {"edited": "\n".join(line for line in text.splitlines() if "tl.store" not in line),
                   "truncated": text[: len(text) // 2],
                   "garbage": "\x00\x01 this is not python ("}[damage]
        path.write_text(damaged)
    assert_ok(run_python(tmp_path, CHECK, cache))
    assert all("tl.store" in path.read_text() for path in files)  # written again


def test_a_cache_directory_deleted_while_running_is_made_again(tmp_path: pathlib.Path) -> None:
    cache = tmp_path / "cache"
    code = '''
    import os, shutil, torch
    from kernels import add_one, double
    x = torch.arange(40.0)
    assert torch.equal(add_one(x), x + 1.0)
    shutil.rmtree(os.environ["TESSERA_CACHE_DIR"])
    assert torch.equal(double(x), x * 2.0)                         # a new kernel
    assert torch.equal(add_one(x.to(torch.float64)), x.double() + 1.0)  # a new variant

    # deleted between writing a variant's source and importing it (another process cleaning up)
    from tessera.backends.triton import backend
    importing = backend.TritonKernel._import

    def delete_then_import(self):
        shutil.rmtree(os.environ["TESSERA_CACHE_DIR"], ignore_errors=True)
        importing(self)
    backend.TritonKernel._import = delete_then_import
    assert torch.equal(add_one(x.to(torch.int64)), x.long() + 1)
    print("OK")
    '''
    assert_ok(run_python(tmp_path, code, cache))


def _not_a_directory(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "a_file"
    path.write_text("not a directory")
    return path


def _below_a_file(tmp_path: pathlib.Path) -> pathlib.Path:
    return _not_a_directory(tmp_path) / "cache"


def _read_only(tmp_path: pathlib.Path) -> pathlib.Path:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    path = tmp_path / "read_only"
    path.mkdir()
    path.chmod(0o500)
    return path


@pytest.mark.parametrize("make_cache_dir", [_not_a_directory, _below_a_file, _read_only])
def test_an_unusable_cache_directory_falls_back_with_one_warning(tmp_path: pathlib.Path, make_cache_dir) -> None:
    result = run_python(tmp_path, CHECK, make_cache_dir(tmp_path))
    assert_ok(result)
    assert result.stderr.count("TESSERA_CACHE_DIR") == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr


def test_a_damaged_tuning_cache_entry_is_ignored_and_reported_once(tmp_path: pathlib.Path) -> None:
    code = '''
    import os
    from tessera.autotune import disk_cache
    key = disk_cache.CacheKey("source", "call", "device", "torch", "triton")
    path = disk_cache._path(key)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    for text in ["[" * 100000 + "]" * 100000, '{"format": 1, "key": [1, 2]', "[]"]:
        with open(path, "w") as handle:
            handle.write(text)
        assert disk_cache.lookup(key) is None
        assert disk_cache.lookup(key) is None
    assert not disk_cache.has_entry_for("source")
    print("OK")
    '''
    result = run_python(tmp_path, code, tmp_path / "cache")
    assert_ok(result)
    assert result.stderr.count("damaged autotune cache entry") == 1, result.stderr[-3000:]


def test_first_calls_from_several_threads_at_once(tmp_path: pathlib.Path) -> None:
    code = '''
    import threading, torch
    from kernels import add_one
    failures, barrier = [], threading.Barrier(4)

    def first_call(length):
        x = torch.arange(float(length))
        barrier.wait()
        try:
            assert torch.equal(add_one(x), x + 1.0)
        except BaseException as error:
            failures.append(repr(error))

    threads = [threading.Thread(target=first_call, args=(8 + i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [], failures
    x = torch.arange(5.0)
    assert torch.equal(add_one(x), x + 1.0)   # and later calls still work
    print("OK")
    '''
    assert_ok(run_python(tmp_path, code, tmp_path / "cache"))


def test_several_processes_share_one_cache_directory(tmp_path: pathlib.Path) -> None:
    (tmp_path / "kernels.py").write_text(KERNELS)
    environment = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path / "cache"), "TESSERA_MODE": "interpret",
                   "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    processes = [subprocess.Popen([sys.executable, "-c", CHECK], cwd=tmp_path, env=environment,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for process in processes:
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0 and "OK" in stdout, stderr[-3000:]
    leftovers = [p.name for p in (tmp_path / "cache" / "tessera_generated").iterdir() if not p.name.endswith(".py")
                 or p.name.startswith(".")]
    assert leftovers == []  # no temporary file left behind
