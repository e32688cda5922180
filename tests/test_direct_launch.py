"""Direct launches on the hit path (backends/triton/launcher.py, runtime/variants.py), on CPU.

A compiled launch ends in Triton's C launch function; a CPU has none. These tests stand in for
the driver at that one seam: each generated kernel gets a real `TritonLauncher` whose
`LaunchDriver` is a stand-in and whose "binary" runs the kernel in Triton's interpreter. So the
launcher's keys, the remembered launches and the generated direct launch functions all run as
they do on a GPU, and every result is checked against PyTorch.

On a GPU, `pytest tests/test_direct_launch.py --device cuda` runs the real driver's test (the
stand-in tests need the interpreter and are skipped there).
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
import examples.add
from tessera import settings
from tessera.backends.triton import backend as triton_backend, modules
from tessera.backends.triton.launcher import LaunchDriver, TritonLauncher, _direct_factory

CPU_DEVICE = -1  # what `get_device()` says of a CPU tensor: the stand-in driver's current device


def _hook_chain() -> type:
    """Triton's HookChain, Triton imported with its interpreter (skipped in a GPU run: conftest.py)."""
    modules._ensure_triton(True)
    from triton import knobs
    return knobs.HookChain


class _Hooks:
    """Stands in for `triton.knobs.runtime`: the two launch hook chains."""

    def __init__(self) -> None:
        self.launch_enter_hook = _hook_chain()()
        self.launch_exit_hook = _hook_chain()(reversed=True)


class _Driver:
    """The stand-in driver: a settable current device, stream 0, its own hook chains, and a log
    of every call of a binary's C launch function."""

    def __init__(self) -> None:
        self.device = CPU_DEVICE
        self.hooks = _Hooks()
        self.binary_calls: list[tuple] = []
        self.failure: Exception | None = None  # raised by the next binary call
        # direct launches given data pointers (fast_checks.py) are offered only when a test says
        # which tensors those pointers are: the interpreter needs the tensors back
        self.pointer_tensors: dict[int, torch.Tensor] | None = None

    def launch_driver(self) -> LaunchDriver:
        return LaunchDriver(lambda: self.device, lambda device: 0, self.hooks, _hook_chain())


class _Binary:
    """A compiled kernel as `binary_entry` reads it; its C launch function runs the interpreter."""

    def __init__(self, interpreted: Any, driver: _Driver, options: dict) -> None:
        self.function, self.packed_metadata = 1234, (options["num_warps"], 1, 0)
        self.run = self  # CompiledKernel.run is the CudaLauncher
        self.launch_cooperative_grid = self.launch_pdl = False
        self.global_scratch_size = self.profile_scratch_size = 0
        self._interpreted, self._driver, self._options = interpreted, driver, options

    def launch(self, gx: int, gy: int, gz: int, stream: int, function: int, cooperative: bool, pdl: bool,
               global_scratch: Any, profile_scratch: Any, metadata: tuple, launch_metadata: Any,
               enter_hook: Any, exit_hook: Any, *arguments: Any) -> None:
        assert (function, metadata, launch_metadata, enter_hook, exit_hook) == (1234, self.packed_metadata, None,
                                                                                None, None)
        self._driver.binary_calls.append((gx, gy, gz, stream, arguments))
        if self._driver.pointer_tensors is not None:
            arguments = tuple(self._driver.pointer_tensors.get(a, a) if type(a) is int else a for a in arguments)
        if self._driver.failure is not None:
            raise self._driver.failure
        with triton_backend._INTERPRETER_LOCK:
            self._interpreted[(gx, gy, gz)](*arguments, **self._options)


class _JITStandIn:
    """A `JITFunction` as the launcher uses it: parameters, pre-run hooks, and `run` (which
    calls the hooks Triton calls, launches, and returns the binary)."""

    def __init__(self, interpreted: Any, driver: _Driver) -> None:
        from triton.runtime.jit import JITFunction
        self.params = JITFunction(interpreted.fn).params
        self.pre_run_hooks: list[Callable[..., Any]] = []
        self._interpreted, self._driver = interpreted, driver
        self.runs = 0

    def run(self, *arguments: Any, grid: tuple[int, ...], warmup: bool, **options: Any) -> _Binary:
        self.runs += 1
        for hook in self.pre_run_hooks:
            hook(*arguments, **options)
        self._driver.hooks.launch_enter_hook({"name": "stand-in"})
        with triton_backend._INTERPRETER_LOCK:
            self._interpreted[grid](*arguments, **options)
        return _Binary(self._interpreted, self._driver, options)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> _Driver:
    """Every kernel generated in the test gets a launcher on the stand-in driver."""
    stand_in = _Driver()
    original = triton_backend.TritonKernel._import

    def import_with_launcher(self: Any) -> None:
        original(self)
        self.launcher = TritonLauncher(_JITStandIn(self.function, stand_in), self.num_warps, self.num_stages,
                                       key_pointers=False, driver=stand_in.launch_driver())

    monkeypatch.setattr(triton_backend.TritonKernel, "_import", import_with_launcher)
    offer = triton_backend.TritonKernel.direct_launch

    def direct_launch(self: Any, grid: Any, arguments: Any, tensor_slots: Any, pointers: bool = False) -> Any:
        return None if pointers and stand_in.pointer_tensors is None else offer(self, grid, arguments, tensor_slots,
                                                                              pointers)

    monkeypatch.setattr(triton_backend.TritonKernel, "direct_launch", direct_launch)
    return stand_in


def _launchers(kernel: Any) -> list[TritonLauncher]:
    return [v.loaded.launcher for vs in kernel.store.variants.values() for v in vs]


def _count_generic_launches(kernel: Any) -> list[int]:
    """Counts of `TritonLauncher.launch` calls (the keyed path), per launcher, as they happen."""
    counts = [0]

    def counting(launcher: TritonLauncher) -> None:
        original = launcher.launch

        def launch(grid: tuple[int, ...], arguments: list[Any]) -> None:
            counts[0] += 1
            original(grid, arguments)
        launcher.launch = launch  # type: ignore[method-assign]

    for launcher in _launchers(kernel):
        counting(launcher)
    return counts


def _add_kernel() -> Any:
    """examples/add.py's function as a fresh kernel (its own variants and counts) with a fixed Config."""
    return tessera.kernel(examples.add.add.fn, config=tessera.Config(block_sizes=[4, 16]))


def _warmed_add() -> tuple[Any, torch.Tensor, torch.Tensor, TritonLauncher]:
    """An add kernel called three times on two [4, 16] tensors (its direct launch is built), with its launcher."""
    add = _add_kernel()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    for _ in range(3):
        add(x, y)
    (launcher,) = _launchers(add)
    return add, x, y, launcher


def test_a_repeat_call_launches_directly(driver: _Driver) -> None:
    add = _add_kernel()
    x, y = torch.randn(5, 19), torch.randn(5, 19)
    torch.testing.assert_close(add(x, y), x + y)
    generic = _count_generic_launches(add)
    for _ in range(5):
        torch.testing.assert_close(add(x, y), x + y)
    (launcher,) = _launchers(add)
    # the first call compiles (Triton's path); the second repeats the memo's decision through the
    # launcher's keyed path and builds the direct launch; the last four launch directly
    assert (launcher.slow_launches, launcher.fast_launches, generic[0]) == (1, 5, 1)
    assert len(driver.binary_calls) == 5 and add.cache_info().misses == 1


def test_a_direct_launch_passes_the_grid_stream_and_int_arguments_as_the_keyed_path_does(driver: _Driver) -> None:
    add = _add_kernel()
    x, y = torch.randn(3, 40), torch.randn(3, 40)
    for _ in range(3):
        add(x, y)
    keyed, direct = driver.binary_calls[0], driver.binary_calls[1]
    assert keyed[:4] == direct[:4] and len(keyed[4]) == len(direct[4])
    for through_key, through_direct in zip(keyed[4], direct[4]):
        if isinstance(through_key, torch.Tensor):
            assert through_key.shape == through_direct.shape and through_key.dtype == through_direct.dtype
        else:
            assert type(through_key) is type(through_direct) and through_key == through_direct


@pytest.mark.parametrize("change", ["shape", "size 1", "stride", "dtype", "alignment", "broadcast"])
def test_a_changed_argument_redispatches_and_computes_the_right_sum(driver: _Driver, change: str) -> None:
    add = _add_kernel()
    x, y = torch.randn(6, 32), torch.randn(6, 32)
    changed = {
        "shape": lambda: (torch.randn(7, 33), torch.randn(7, 33)),
        "size 1": lambda: (torch.randn(1, 32), torch.randn(1, 32)),  # an int of 1 is a constexpr in Triton's key
        "stride": lambda: (torch.randn(32, 6).t(), torch.randn(6, 32)),
        "dtype": lambda: (torch.randn(6, 32, dtype=torch.float16), torch.randn(6, 32, dtype=torch.float16)),
        "alignment": lambda: (torch.randn(6 * 32 + 1)[1:].view(6, 32), torch.randn(6, 32)),  # 4 bytes off 16
        "broadcast": lambda: (torch.randn(6, 32), torch.randn(32)),
    }[change]()
    for inputs in [(x, y)] * 3 + [changed] * 3 + [(x, y)] * 2 + [changed] * 2:
        torch.testing.assert_close(add(*inputs), inputs[0] + inputs[1])
    generic = _count_generic_launches(add)
    for inputs in [(x, y), changed] * 2:  # both decisions are remembered, with direct launches
        torch.testing.assert_close(add(*inputs), inputs[0] + inputs[1])
    assert generic[0] == 0


def test_scalar_arguments_are_part_of_the_decision(driver: _Driver) -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[32]))
    def scaled(x: torch.Tensor, alpha: float, shift: int) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * alpha + shift
        return out

    x = torch.randn(50)
    for alpha, shift in [(2.0, 3)] * 3 + [(-0.5, 3)] * 3 + [(2.0, 1)] * 3 + [(2.0, 16)] * 2 + [(2.0, 3)] * 2:
        torch.testing.assert_close(scaled(x, alpha, shift), x * alpha + shift)
    generic = _count_generic_launches(scaled)
    torch.testing.assert_close(scaled(x, -0.5, 3), x * -0.5 + 3)
    assert generic[0] == 0


def test_several_launches_of_one_call_each_launch_directly(driver: _Driver) -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16, 16]))
    def two_loops(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        first = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            first[tile] = x[tile] + 1
        second = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            second[tile] = first[tile] * 2
        return first, second

    x = torch.randn(37)
    for _ in range(3):
        first, second = two_loops(x)
    generic = _count_generic_launches(two_loops)
    for _ in range(3):
        first, second = two_loops(x)
        torch.testing.assert_close(first, x + 1)
        torch.testing.assert_close(second, (x + 1) * 2)
    assert generic[0] == 0 and len(_launchers(two_loops)) == 2


def test_launch_hooks_take_tritons_path_while_installed(driver: _Driver) -> None:
    add, x, y, launcher = _warmed_add()
    seen: list[Any] = []
    driver.hooks.launch_enter_hook.add(seen.append)
    torch.testing.assert_close(add(x, y), x + y)
    assert len(seen) == 1 and launcher.slow_launches == 2  # the hook saw the launch: Triton launched it
    driver.hooks.launch_enter_hook.remove(seen.append)
    driver.hooks.launch_exit_hook = lambda metadata: None  # a chain replaced by a function: a hook too
    add(x, y)
    assert launcher.slow_launches == 3
    driver.hooks.launch_exit_hook = _hook_chain()(reversed=True)
    add(x, y)
    assert launcher.slow_launches == 3 and len(seen) == 1


def test_pre_run_hooks_take_tritons_path(driver: _Driver) -> None:
    add, x, y, launcher = _warmed_add()
    calls: list[int] = []
    launcher.function.pre_run_hooks.append(lambda *args, **kwargs: calls.append(1))
    torch.testing.assert_close(add(x, y), x + y)
    assert calls == [1] and launcher.slow_launches == 2


def test_another_current_device_is_not_launched_directly(driver: _Driver) -> None:
    add, x, y, launcher = _warmed_add()
    generic = _count_generic_launches(add)
    driver.device = 0  # the binary was loaded with device -1 current
    torch.testing.assert_close(add(x, y), x + y)
    assert generic[0] == 1 and launcher.slow_launches == 2  # keyed by device: Triton loads it there
    driver.device = CPU_DEVICE
    torch.testing.assert_close(add(x, y), x + y)
    assert generic[0] == 1


def test_a_tensor_on_another_device_than_the_binary_is_not_launched_directly() -> None:
    driver = _Driver()  # (no kernel runs: this one needs no interpreter, but Triton's HookChain)
    driver.device = 0  # the binary's device; the tensors below are CPU tensors (device -1)
    calls: list[tuple] = []
    factory = _direct_factory(0, (0, None))
    launcher = TritonLauncher.__new__(TritonLauncher)
    launcher.fast_launches = 0
    direct = factory(launcher, driver.launch_driver(), lambda *args: calls.append(args), [], 0, 1, 1, 1, 7)
    assert direct([torch.zeros(2)]) is False and calls == []


def test_a_failing_launch_is_reported_not_retried(driver: _Driver) -> None:
    add, x, y, launcher = _warmed_add()
    driver.failure = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        add(x, y)
    assert launcher.slow_launches == 1  # not retried through Triton: the error is the user's to see
    driver.failure = None
    torch.testing.assert_close(add(x, y), x + y)


def test_index_checks_launch_through_the_keyed_path(driver: _Driver) -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def gather(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        out = torch.empty(index.shape, dtype=x.dtype)
        for tile in hl.tile(index.size(0)):
            out[tile] = x[index[tile]]
        return out

    x, index = torch.randn(30), torch.randint(0, 30, (20,))
    with settings.override(check_indices=True):
        for _ in range(4):
            torch.testing.assert_close(gather(x, index), x[index])
        remembered = [launch for memo in gather.store.memos.values() for launch in memo.values()]
        assert remembered and all(launch.direct is None for launch in remembered)


def test_interpret_mode_keeps_its_path() -> None:
    _hook_chain()  # interpret mode (skipped in a GPU run)
    add = _add_kernel()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    for _ in range(3):
        torch.testing.assert_close(add(x, y), x + y)
    remembered = [launch for memo in add.store.memos.values() for launch in memo.values()]
    assert remembered and all(launch.asked and launch.direct is None for launch in remembered)
    assert all(launcher is None for launcher in _launchers(add))


def test_direct_launch_functions_are_generated_once_per_argument_layout() -> None:
    assert _direct_factory(3, (0, None, 1)) is _direct_factory(3, (0, None, 1))
    assert _direct_factory(3, (0, None, 1)) is not _direct_factory(3, (1, None, 0))


def test_gpu_repeat_calls_launch_directly_through_the_real_driver(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip("the real driver needs a GPU: run with --device cuda")
    add = _add_kernel()
    for shape in [(5, 19)] * 4 + [(1, 16)] * 3 + [(64, 33)] * 3:
        x, y = torch.randn(*shape, device=device), torch.randn(*shape, device=device)
        for _ in range(2):
            torch.testing.assert_close(add(x, y), x + y)
    (launcher,) = _launchers(add)
    remembered = [launch for memo in add.store.memos.values() for launch in memo.values()]
    assert launcher.enabled and all(launch.direct is not None for launch in remembered)
    assert launcher.slow_launches == 3  # one binary per int specialisation: (5, 19), (1, 16), (64, 33)
    assert launcher.fast_launches == 20 - 3


def test_a_kernel_drawing_random_numbers_takes_fresh_seeds_on_every_repeat_call(driver: _Driver) -> None:
    # torch.rand_like in a tile loop takes seeds drawn from torch's generator, appended at each
    # launch: a direct launch with its arguments built in would drop them or repeat one call's
    def body(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + torch.rand_like(x[tile])
        return out

    noisy = tessera.kernel(body, config=tessera.Config(block_sizes=[16]))
    x = torch.zeros(40)
    torch.manual_seed(7)
    expected = tessera.kernel(body, mode="eager")(x)
    for _ in range(4):
        torch.manual_seed(7)
        torch.testing.assert_close(noisy(x), expected)
    draws = [noisy(x) for _ in range(3)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])


def _split_k_matmul() -> Any:
    from examples.matmul import matmul
    return tessera.kernel(matmul.fn, config=tessera.Config(block_sizes=[16, 16, 32], split_k=4), dot_precision="ieee")


@pytest.fixture
def kept_scratch(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Scratch buffers kept between launches as on a GPU (runtime/scratch.py), on a settable
    stream (the list's one item); the CPU interpreter otherwise makes fresh ones per launch."""
    from tessera.runtime import scratch
    stream = [0]
    monkeypatch.setattr(scratch, "keeps_scratch", lambda device: True)
    monkeypatch.setattr(scratch, "stream_handle", lambda device: stream[0])
    monkeypatch.setattr(scratch, "_SCRATCH", {})
    return stream


def test_split_k_repeat_calls_launch_directly_with_the_kept_scratch_buffers(driver: _Driver,
                                                                            kept_scratch: list[int]) -> None:
    split = _split_k_matmul()
    x, y = torch.randn(16, 128), torch.randn(128, 16)
    for _ in range(3):
        torch.testing.assert_close(split(x, y), x @ y, rtol=1e-4, atol=1e-4)
    generic = _count_generic_launches(split)
    for _ in range(3):
        torch.testing.assert_close(split(x, y), x @ y, rtol=1e-4, atol=1e-4)
    assert generic[0] == 0  # direct launches, each passing the kept buffers after the arguments
    from tessera.runtime import scratch
    kept = {id(tensor) for tensor in scratch._SCRATCH.values()}
    assert kept and kept <= {id(a) for a in driver.binary_calls[-1][4] if isinstance(a, torch.Tensor)}


def test_split_k_on_another_stream_takes_that_streams_buffers(driver: _Driver, kept_scratch: list[int]) -> None:
    split = _split_k_matmul()
    x, y = torch.randn(16, 128), torch.randn(128, 16)
    for _ in range(3):
        split(x, y)
    from tessera.runtime import scratch
    first = dict(scratch._SCRATCH)
    kept_scratch[0] = 1  # another current stream: its launches must not share the first stream's buffers
    for _ in range(3):
        torch.testing.assert_close(split(x, y), x @ y, rtol=1e-4, atol=1e-4)
    on_second = [a for a in driver.binary_calls[-1][4] if isinstance(a, torch.Tensor)]
    assert not {id(t) for t in first.values()} & {id(t) for t in on_second}


def test_split_k_takes_fresh_buffers_where_none_are_kept(driver: _Driver, kept_scratch: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    split = _split_k_matmul()
    x, y = torch.randn(16, 128), torch.randn(128, 16)
    for _ in range(3):
        split(x, y)
    from tessera.runtime import scratch
    monkeypatch.setattr(scratch, "keeps_scratch", lambda device: False)  # e.g. while a CUDA graph is captured
    generic = _count_generic_launches(split)
    for _ in range(2):
        torch.testing.assert_close(split(x, y), x @ y, rtol=1e-4, atol=1e-4)
    assert generic[0] == 2  # the keyed launch, which allocates fresh buffers


def test_a_checked_repeat_launch_passes_the_data_pointers_of_its_tensors(driver: _Driver) -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def doubled_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * 2
        return out

    x, out = torch.randn(40), torch.empty(40)
    driver.pointer_tensors = {x.data_ptr(): x, out.data_ptr(): out}
    for _ in range(5):
        out.zero_()
        torch.testing.assert_close(doubled_into(x, out), x * 2)
    keyed, last = driver.binary_calls[0][4], driver.binary_calls[-1][4]
    assert len(keyed) == len(last)
    for through_key, given in zip(keyed, last):
        if isinstance(through_key, torch.Tensor):  # the checked launch passes the very address
            assert type(given) is int and given == through_key.data_ptr()
        else:
            assert type(given) is type(through_key) and given == through_key
    y = torch.randn(40)  # another tensor with the same facts: its own address
    driver.pointer_tensors[y.data_ptr()] = y
    torch.testing.assert_close(doubled_into(y, out), y * 2)
    assert y.data_ptr() in driver.binary_calls[-1][4]
