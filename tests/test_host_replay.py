"""Host replay (runtime/host_replay.py, frontend/replayable_host.py): a repeated call whose host
code only sizes, views and allocates skips it, allocating and launching as a recorded call did.

Interpret mode replays through each launch's remembered decision (no direct launch on a CPU);
the stand-in driver of test_direct_launch.py checks the pointer launches a GPU takes. Every
result is compared with PyTorch, and every change of an argument's facts, of a setting or of a
global the host code reads must take the usual path.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch

import tessera
import tessera.language as hl
import examples.add
from tessera import settings
from tessera.runtime import host_replay
from tests.test_direct_launch import _Driver, _hook_chain, _launchers, driver  # noqa: F401  (a fixture)

_OUT_DTYPE = torch.float32  # a module global the host code of `_global_dtype_add` reads


def _add_kernel(block_sizes: tuple[int, ...] = (4, 16)) -> Any:
    """examples/add.py's function as a fresh kernel with a fixed Config."""
    return tessera.kernel(examples.add.add.fn, config=tessera.Config(block_sizes=list(block_sizes)))


def _count_host_runs(kernel: Any) -> list[int]:
    """Counts of runs of the kernel's (rewritten) host code, as they happen."""
    rewritten = kernel.rewritten()
    counts = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        counts[0] += 1
        return rewritten.function(*args, **kwargs)

    kernel._rewritten = dataclasses.replace(rewritten, function=counting)
    return counts


def _replay_of(kernel: Any, *args: Any) -> Any:
    decision = kernel.config_choices.calls.decide(args)
    return None if decision is None else decision.replay


@pytest.mark.parametrize("shapes", [((1, 16), (1, 16)), ((5, 19), (19,)), ((3, 1), (1, 33)), ((64, 48), (64, 48)),
                                    ((7, 2, 9), (2, 1))], ids=str)
def test_a_repeated_add_replays_its_host_code_and_computes_the_sum(shapes: tuple) -> None:
    add = _add_kernel((2, 4, 16)[3 - len(shapes[0]):])
    x, y = torch.randn(shapes[0]), torch.randn(shapes[1])
    for _ in range(3):  # compiles; remembers the decisions; records
        torch.testing.assert_close(add(x, y), x + y)
    assert callable(_replay_of(add, x, y))
    runs = _count_host_runs(add)
    hits = add.cache_info().hits
    for _ in range(3):
        result = add(x, y)
        torch.testing.assert_close(result, x + y)
        assert result.shape == torch.broadcast_shapes(x.shape, y.shape) and result.is_contiguous()
    assert runs[0] == 0 and add.cache_info().hits == hits + 3


def test_each_replay_returns_a_fresh_tensor() -> None:
    add = _add_kernel()
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    results = [add(x, y) for _ in range(5)]
    assert len({r.data_ptr() for r in results}) == 5  # all alive: none shares memory with another
    for result in results:
        torch.testing.assert_close(result, x + y)


@pytest.mark.parametrize("change", ["shape", "stride", "dtype", "promotion", "alignment", "broadcast"])
def test_other_argument_facts_take_the_usual_path_and_compute_the_right_sum(change: str) -> None:
    add = _add_kernel()
    x, y = torch.randn(6, 32), torch.randn(6, 32)
    changed = {
        "shape": lambda: (torch.randn(7, 33), torch.randn(7, 33)),
        "stride": lambda: (torch.randn(32, 6).t(), torch.randn(6, 32)),
        "dtype": lambda: (torch.randn(6, 32, dtype=torch.float64), torch.randn(6, 32, dtype=torch.float64)),
        "promotion": lambda: (torch.randn(6, 32, dtype=torch.float16), torch.randn(6, 32)),
        "alignment": lambda: (torch.randn(6 * 32 + 1)[1:].view(6, 32), torch.randn(6, 32)),
        "broadcast": lambda: (torch.randn(6, 32), torch.randn(32)),
    }[change]()
    for _ in range(4):
        torch.testing.assert_close(add(x, y), x + y)
    runs = _count_host_runs(add)
    result = add(*changed)
    torch.testing.assert_close(result, changed[0] + changed[1])
    assert result.dtype == torch.promote_types(changed[0].dtype, changed[1].dtype)
    assert runs[0] == 1  # not replayed: these facts have no decision yet
    for inputs in [(x, y), changed] * 4:  # both sets of facts replay, each its own record
        torch.testing.assert_close(add(*inputs), inputs[0] + inputs[1])
    assert runs[0] == 3


def test_views_with_the_same_facts_replay_at_their_own_addresses() -> None:
    add = _add_kernel()
    bases = torch.randn(9, 32), torch.randn(9, 32)
    for _ in range(4):
        add(bases[0][:6], bases[1][2:8])
    runs = _count_host_runs(add)
    for first, second in [(1, 3), (3, 0), (2, 2)]:  # storage offsets of whole rows: the same facts
        x, y = bases[0][first:first + 6], bases[1][second:second + 6]
        torch.testing.assert_close(add(x, y), x + y)
    assert runs[0] == 0


def test_scalar_arguments_are_facts_of_the_replay() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[32]))
    def affine(x: torch.Tensor, shift: int, alpha: float) -> torch.Tensor:
        out = x.new_empty(x.shape)
        for tile in hl.tile(x.shape[0]):
            out[tile] = (x[tile] + shift) * alpha
        return out

    x = torch.randn(50)
    for shift, alpha in [(3, 2.0)] * 4 + [(3, -0.5)] * 4 + [(16, 2.0)] * 4 + [(3, 2.0), (3, -0.5), (16, 2.0)]:
        torch.testing.assert_close(affine(x, shift, alpha), (x + shift) * alpha)
    assert callable(_replay_of(affine, x, 3, 2.0)) and callable(_replay_of(affine, x, 3, -0.5))


def test_turning_host_replay_off_runs_the_host_code_on_the_next_call(monkeypatch: pytest.MonkeyPatch) -> None:
    add = _add_kernel()
    x, y = torch.randn(4, 8), torch.randn(8)
    for _ in range(4):
        add(x, y)
    runs = _count_host_runs(add)
    monkeypatch.setenv("TESSERA_HOST_REPLAY", "0")
    for _ in range(4):
        torch.testing.assert_close(add(x, y), x + y)
    assert runs[0] == 4 and _replay_of(add, x, y) is False
    monkeypatch.delenv("TESSERA_HOST_REPLAY")
    for _ in range(5):
        torch.testing.assert_close(add(x, y), x + y)
    assert runs[0] == 4 + 3  # decided and recorded again under the new stamp, then replayed


def test_a_mode_change_is_not_replayed() -> None:
    add = _add_kernel()
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(4):
        add(x, y)
    hits = add.cache_info().hits
    with settings.override(mode="eager"):
        torch.testing.assert_close(add(x, y), x + y)
    assert add.cache_info().hits == hits  # eager mode ran: no compiled launch, replayed or not
    torch.testing.assert_close(add(x, y), x + y)
    assert add.cache_info().hits == hits + 1


def test_a_torch_function_mode_sees_the_host_code() -> None:
    add = _add_kernel()
    x, y = torch.randn(4, 8), torch.randn(8)
    for _ in range(4):
        add(x, y)
    seen: list[Any] = []

    class Watching(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watching():
        torch.testing.assert_close(add(x, y), x + y)
    assert torch.broadcast_tensors in seen


def test_a_rebound_global_stops_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = tessera.kernel(_global_dtype_add, config=tessera.Config(block_sizes=[16]))
    x = torch.randn(40)
    for _ in range(4):
        assert kernel(x).dtype == torch.float32
    monkeypatch.setattr(__import__(__name__, fromlist=["_OUT_DTYPE"]), "_OUT_DTYPE", torch.float64)
    result = kernel(x)
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, (x + 1).double())


def _global_dtype_add(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape, dtype=_OUT_DTYPE, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = (x[tile] + 1).to(out.dtype)
    return out


def test_a_kernel_called_with_its_defaults_replays() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def shifted(x: torch.Tensor, shift: float = 1.0, scale: torch.dtype = torch.float32) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=scale, device=x.device)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + shift
        return out

    x = torch.randn(40)
    for _ in range(5):
        torch.testing.assert_close(shifted(x), x + 1)
        torch.testing.assert_close(shifted(x, 2.0), x + 2)
        torch.testing.assert_close(shifted(x, 2.0, torch.float64), (x + 2).double())
    assert callable(_replay_of(shifted, x)) and callable(_replay_of(shifted, x, 2.0, torch.float64))
    shifted.fn.__defaults__ = (5.0, torch.float32)  # defaults changed after the kernel was rewritten
    for _ in range(5):
        torch.testing.assert_close(shifted(x), x + 5)
    with settings.override(mode="eager"):
        torch.testing.assert_close(shifted(x), x + 5)


def test_a_zeros_allocation_is_zeroed_on_every_replay() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def first_half(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for tile in hl.tile(x.size(0) // 2):
            out[tile] = x[tile] * 3
        return out

    x = torch.randn(100)
    expected = torch.cat([x[:50] * 3, torch.zeros(50)])
    for _ in range(8):
        torch.empty(100).fill_(7.0)  # leaves a freed block of sevens for the next allocation
        torch.testing.assert_close(first_half(x), expected)
    assert callable(_replay_of(first_half, x))


def test_several_launches_and_a_tuple_with_a_constant_replay_in_order() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16, 16]))
    def two_loops(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
        n = x.size(0)
        first = torch.empty_like(x)
        for tile in hl.tile(n):
            first[tile] = x[tile] + 1
        second = x.new_empty(x.shape)
        for tile in hl.tile(n):
            second[tile] = first[tile] * 2
        return first, second, n

    x = torch.randn(37)
    for _ in range(6):
        first, second, n = two_loops(x)
        torch.testing.assert_close(first, x + 1)
        torch.testing.assert_close(second, (x + 1) * 2)
        assert n == 37
    assert callable(_replay_of(two_loops, x))


def test_a_list_result_is_a_new_list_each_call() -> None:
    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def as_list(x: torch.Tensor) -> list[torch.Tensor]:
        out = torch.empty_like(x)
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] - 1
        return [out, x]

    x = torch.randn(20)
    results = [as_list(x) for _ in range(5)]
    assert all(type(r) is list and r[1] is x for r in results) and results[3] is not results[4]
    assert callable(_replay_of(as_list, x))
    results[4].append(None)  # the caller's list to change
    assert len(as_list(x)) == 2


def _in_place(x: torch.Tensor) -> None:
    for tile in hl.tile(x.size(0)):
        x[tile] = x[tile] + 1


def _copy_then_double(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()  # a copy when x is not contiguous: its values would be lost in a replay
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * 2
    return out


def _returns_its_argument(x: torch.Tensor) -> torch.Tensor:
    n = x.numel()
    doubled = torch.empty_like(x)
    for tile in hl.tile(n):
        doubled[tile] = x[tile] * 2
    return x


def test_calls_whose_facts_do_not_settle_the_host_code_are_not_replayed_and_stay_right() -> None:
    add = _add_kernel()
    x = torch.randn(4, 8)
    for _ in range(5):  # one tensor twice: views of either would be told apart by storage
        torch.testing.assert_close(add(x, x), x + x)
    assert not _replay_of(add, x, x)
    a, b = torch.randn(1, 1), torch.randn(1, 1)
    for _ in range(5):  # one-element tensors: their values could be sizes
        torch.testing.assert_close(add(a, b), a + b)
    assert _replay_of(add, a, b) is False
    kernel = tessera.kernel(_in_place, config=tessera.Config(block_sizes=[16]))
    x = torch.zeros(20)
    for _ in range(5):
        kernel(x)
    torch.testing.assert_close(x, torch.full((20,), 5.0))
    assert _replay_of(kernel, x) is False
    kernel = tessera.kernel(_copy_then_double, config=tessera.Config(block_sizes=[16]))
    for _ in range(5):
        x = torch.randn(40)[::2]
        torch.testing.assert_close(kernel(x), x * 2)
    assert _replay_of(kernel, x) is False
    contiguous = torch.randn(20)  # contiguous() returns the argument itself: replayed
    for _ in range(5):
        torch.testing.assert_close(kernel(contiguous), contiguous * 2)
    assert callable(_replay_of(kernel, contiguous))


@pytest.mark.parametrize("body", [
    "x.add_(1)\n    out = torch.empty_like(x)",
    "print(x.shape)\n    out = torch.empty_like(x)",
    "noise = torch.randn(3)\n    out = torch.empty_like(x)",
    "out = torch.empty(x.shape, device=x.device)",
    "out = torch.empty(x.shape, dtype=x.dtype)",
    "out = torch.empty_like(x)\n    if x.size(0) > 3:\n        out = torch.zeros_like(x)",
    "out = torch.empty(int(x.sum().item()), dtype=x.dtype, device=x.device)",
    "out = torch.empty_like(x)\n    out[0] = 1.0",
    "out = torch.empty(SIZE, dtype=x.dtype, device=x.device)",
    "out = torch.empty_like(x, requires_grad=True)",
    "out = torch.empty_like(x)\n    n = x.shape[x.size(0) - 1]",
    "out = torch.empty_like(x)\n    n = x.new_ones(3)",
])
def test_host_code_with_effects_or_hidden_inputs_is_not_replayable(body: str, tmp_path: Any) -> None:
    import importlib.util
    path = tmp_path / "refused.py"
    path.write_text("import torch\nimport tessera.language as hl\nSIZE = 4\n\n"
                    f"def kernel(x):\n    {body}\n    for tile in hl.tile(x.size(0)):\n        out[tile] = x[tile]\n"
                    "    return out\n")
    spec = importlib.util.spec_from_file_location("refused", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    assert tessera.kernel(module.kernel)._replay_form is None


@pytest.mark.parametrize("kernel_name", ["add", "_global_dtype_add", "_copy_then_double", "_returns_its_argument"])
def test_host_code_of_sizes_views_and_named_allocations_is_replayable(kernel_name: str) -> None:
    fn = examples.add.add.fn if kernel_name == "add" else globals()[kernel_name]
    form = tessera.kernel(fn)._replay_form
    assert form is not None
    returns_argument = kernel_name == "_returns_its_argument"
    assert form.allocations == {"doubled" if returns_argument else "out": "empty"}
    assert (form.returned, form.single) == (("x",) if returns_argument else ("out",), True)


def test_modules_a_kernel_closes_over_are_read_as_the_rewrite_read_them() -> None:
    import tessera.language as language
    import torch as th

    @tessera.kernel(config=tessera.Config(block_sizes=[16]))
    def negated(x: th.Tensor) -> th.Tensor:
        out = th.empty(x.shape, dtype=x.dtype, device=x.device)
        for tile in language.tile(x.size(0)):
            out[tile] = -x[tile]
        return out

    x = torch.randn(30)
    for _ in range(5):
        torch.testing.assert_close(negated(x), -x)
    assert negated._replay_form.global_names == () and callable(_replay_of(negated, x))


def test_a_returned_argument_is_the_argument_itself() -> None:
    kernel = tessera.kernel(_returns_its_argument, config=tessera.Config(block_sizes=[16]))
    x = torch.randn(20)
    for _ in range(5):
        assert kernel(x) is x
    assert callable(_replay_of(kernel, x))  # x itself: the same object every time


def test_a_replay_that_launches_directly_passes_data_pointers(driver: _Driver,  # noqa: F811
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    registered: dict[int, torch.Tensor] = {}
    driver.pointer_tensors = registered

    def registering(allocate: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def allocating(*args: Any, **kwargs: Any) -> torch.Tensor:
            tensor = allocate(*args, **kwargs)
            registered[tensor.data_ptr()] = tensor  # the stand-in binary finds tensors by address
            return tensor
        return allocating

    add = _add_kernel()
    assert add._replay_form is not None  # read from the source with torch's own torch.empty
    monkeypatch.setattr(torch, "empty", registering(torch.empty))
    monkeypatch.setattr(torch, "empty_strided", registering(torch.empty_strided))
    monkeypatch.setattr(host_replay, "_FACTORIES", {})  # generated now, with the registering allocation
    x, y = torch.randn(5, 16), torch.randn(16)
    registered.update({x.data_ptr(): x, y.data_ptr(): y})
    for _ in range(3):
        torch.testing.assert_close(add(x, y), x + y)
    runs = _count_host_runs(add)
    calls_before = len(driver.binary_calls)
    for _ in range(3):
        result = add(x, y)
        torch.testing.assert_close(result, x + y)
        pointers = driver.binary_calls[-1][4]
        assert result.data_ptr() in pointers and x.data_ptr() in pointers and y.data_ptr() in pointers
        assert all(type(value) is int for value in pointers)
    assert runs[0] == 0 and len(driver.binary_calls) == calls_before + 3
    (launcher,) = _launchers(add)
    assert launcher.slow_launches == 1


def test_a_replay_takes_the_remembered_launch_while_launch_hooks_are_installed(driver: _Driver) -> None:  # noqa: F811
    add = _add_kernel()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    for _ in range(4):
        add(x, y)
    seen: list[Any] = []
    driver.hooks.launch_enter_hook.add(seen.append)
    torch.testing.assert_close(add(x, y), x + y)
    assert len(seen) == 1  # Triton's own path launched it, and its hook saw it
    driver.hooks.launch_enter_hook.remove(seen.append)


def test_gpu_repeat_calls_replay_through_the_real_driver(device: torch.device) -> None:
    if device.type != "cuda":
        pytest.skip("the real driver needs a GPU: run with --device cuda")
    add = _add_kernel()
    for shape, other in [((5, 19), (19,)), ((1, 16), (1, 16)), ((64, 33), (64, 33))]:
        x, y = torch.randn(*shape, device=device), torch.randn(*other, device=device)
        for _ in range(6):
            torch.testing.assert_close(add(x, y), x + y)
        assert callable(_replay_of(add, x, y))


def test_a_record_that_fails_leaves_the_call_on_its_usual_path(monkeypatch: pytest.MonkeyPatch) -> None:
    add = _add_kernel()
    x, y = torch.randn(4, 8), torch.randn(8)

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a record that cannot be read")

    monkeypatch.setattr(host_replay._Recorder, "replay", failing)
    for _ in range(5):
        torch.testing.assert_close(add(x, y), x + y)
    assert _replay_of(add, x, y) is False
    with settings.override(debug="raw"):  # a new stamp: decided afresh, and the third call records
        add(x, y)
        add(x, y)
        with pytest.raises(RuntimeError, match="cannot be read"):
            add(x, y)
