"""What a call leaves behind, and what a later call may reuse: module globals read by a tile
body, typed cache keys, state after a failed call, outputs that overlap themselves, caches that
must not hold user tensors, and located errors for arguments kernels cannot take."""
from __future__ import annotations

import gc
import itertools
import types
from typing import Any
import weakref

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from tessera.runtime.constant_keys import constant_key
from tessera.runtime.exact_facts import exact_facts
from tessera.runtime.overlap import internal_overlap

SCALE = 2.0
USE_BIAS = True
OFFSETS = [1.0]


def scaled(v: torch.Tensor) -> torch.Tensor:
    return v * SCALE


@tessera.kernel
def scale_by_global(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * SCALE
    return out


@tessera.kernel
def bias_if_flag(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        if USE_BIAS:
            v = v + 1.0
        out[tile] = v
    return out


@tessera.kernel
def scale_through_helper(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = scaled(x[tile])
    return out


@tessera.kernel
def add_first_offset(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + OFFSETS[0]
    return out


def _set_global(name: str, value: object) -> object:
    previous = globals()[name]
    globals()[name] = value
    return previous


@pytest.mark.parametrize("kernel, name, new_value, expected", [
    (scale_by_global, "SCALE", 3.0, lambda x: x * 3.0),
    (bias_if_flag, "USE_BIAS", False, lambda x: x),
    (scale_through_helper, "SCALE", 5.0, lambda x: x * 5.0),
])
def test_a_changed_module_global_compiles_a_new_variant(kernel, name, new_value, expected, device) -> None:
    x = torch.arange(8.0, device=device)
    first = kernel(x)
    previous = _set_global(name, new_value)
    try:
        torch.testing.assert_close(kernel(x), expected(x))  # not the value traced first
        torch.testing.assert_close(kernel(x), expected(x))  # and the memo repeats the new one
    finally:
        _set_global(name, previous)
    torch.testing.assert_close(kernel(x), first)  # the old value finds its variant again


class _Settings:
    class_scale = 1.0

    def __init__(self) -> None:
        self.scale = 2.0
        self.inner = types.SimpleNamespace(offset=1.0)


CFG = _Settings()
USER_MODULE = types.ModuleType("user_settings")  # a user's settings module, read as `mod.ATTR`
USER_MODULE.SHIFT = 0.0


@tessera.kernel
def scale_by_attributes(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * CFG.scale * _Settings.class_scale + CFG.inner.offset + USER_MODULE.SHIFT
    return out


@pytest.mark.parametrize("change, expected", [
    (lambda: setattr(CFG, "scale", 3.0), lambda x: x * 3.0 + 1.0),
    (lambda: setattr(CFG.inner, "offset", -4.0), lambda x: x * 2.0 - 4.0),
    (lambda: setattr(CFG, "inner", types.SimpleNamespace(offset=7.0)), lambda x: x * 2.0 + 7.0),
    (lambda: setattr(_Settings, "class_scale", 0.5), lambda x: x + 1.0),
    (lambda: setattr(USER_MODULE, "SHIFT", 10.0), lambda x: x * 2.0 + 11.0),
])
def test_a_changed_attribute_of_a_global_compiles_a_new_variant(change, expected, device) -> None:
    x = torch.arange(6.0, device=device)
    saved = (CFG.scale, CFG.inner, CFG.inner.offset, _Settings.class_scale, USER_MODULE.SHIFT)
    first = scale_by_attributes(x)
    torch.testing.assert_close(first, x * 2.0 + 1.0)
    change()
    try:
        torch.testing.assert_close(scale_by_attributes(x), expected(x))
        torch.testing.assert_close(scale_by_attributes(x), expected(x))  # and the memo repeats it
    finally:
        CFG.scale, CFG.inner, _Settings.class_scale = saved[0], saved[1], saved[3]
        CFG.inner.offset, USER_MODULE.SHIFT = saved[2], saved[4]
    torch.testing.assert_close(scale_by_attributes(x), first)


@tessera.kernel
def scale_by_argument_attribute(x: torch.Tensor, cfg: Any) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * cfg.scale
    return out


def test_a_changed_attribute_of_an_object_argument_compiles_a_new_variant(device) -> None:
    x = torch.arange(5.0, device=device)
    cfg = types.SimpleNamespace(scale=2.0)
    torch.testing.assert_close(scale_by_argument_attribute(x, cfg), x * 2.0)
    cfg.scale = 3.0  # the same object: its identity keys the variant, its attribute changed
    torch.testing.assert_close(scale_by_argument_attribute(x, cfg), x * 3.0)
    torch.testing.assert_close(scale_by_argument_attribute(x, types.SimpleNamespace(scale=-1.0)), -x)


def _closure_helper(factor: float) -> tuple[Any, Any]:
    def apply(v: torch.Tensor) -> torch.Tensor:
        return v * factor

    def set_factor(value: float) -> None:
        nonlocal factor
        factor = value
    return apply, set_factor


SCALE_CELL, SET_SCALE_CELL = _closure_helper(2.0)


@tessera.kernel
def scale_through_closure(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = SCALE_CELL(x[tile])
    return out


def test_a_rebound_closure_cell_of_a_helper_compiles_a_new_variant(device) -> None:
    x = torch.arange(5.0, device=device)
    torch.testing.assert_close(scale_through_closure(x), x * 2.0)
    SET_SCALE_CELL(7.0)
    try:
        torch.testing.assert_close(scale_through_closure(x), x * 7.0)
    finally:
        SET_SCALE_CELL(2.0)
    torch.testing.assert_close(scale_through_closure(x), x * 2.0)


def test_a_global_list_mutated_in_place_is_seen(device) -> None:
    x = torch.zeros(4, device=device)
    torch.testing.assert_close(add_first_offset(x), x + 1.0)
    OFFSETS[0] = 4.0
    try:
        torch.testing.assert_close(add_first_offset(x), x + 4.0)
    finally:
        OFFSETS[0] = 1.0


def test_an_int_global_becoming_a_float_is_a_change(device) -> None:
    x = torch.ones(4, device=device)
    previous = _set_global("SCALE", 2)
    try:
        scale_by_global(x)
        globals()["SCALE"] = 2.5
        torch.testing.assert_close(scale_by_global(x), x * 2.5)
    finally:
        _set_global("SCALE", previous)


@tessera.kernel
def times_first(x: torch.Tensor, factors) -> torch.Tensor:
    out = torch.empty(x.size(0), dtype=torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = (x[tile] * factors[0]).to(torch.float32)
    return out


def test_a_tuple_of_an_int_is_not_a_tuple_of_a_float(device) -> None:
    x = torch.full((4,), 2 ** 30, dtype=torch.int32, device=device)
    times_first.reset()
    for factors in [(2.0,), (2,)]:  # equal as Python values, different promotion: int32 * 2 wraps
        torch.testing.assert_close(times_first(x, factors), (x * factors[0]).to(torch.float32))
    assert times_first.cache_info().variants == 2


def test_a_new_list_with_the_same_contents_reuses_its_variant(device) -> None:
    times_first.reset()
    x = torch.ones(4, device=device)
    for _ in range(80):  # more than max_variants
        times_first(x, [2.0])
    assert times_first.cache_info().variants == 1


def test_keys_tell_types_and_signed_zeros_apart() -> None:
    assert constant_key((2.0,)) != constant_key((2,))
    assert constant_key([True]) != constant_key([1])
    assert constant_key(-0.0) != constant_key(0.0)
    assert constant_key([1, (2.0, "a")]) == constant_key([1, (2.0, "a")])
    assert exact_facts([-0.0]) != exact_facts([0.0])
    assert exact_facts([(2.0,)]) != exact_facts([(2,)])
    assert exact_facts([True]) != exact_facts([1])


def test_no_memo_holds_a_tuple_of_tensors() -> None:
    tensors = (torch.ones(3), torch.ones(3))
    assert exact_facts([tensors]) is None  # the keyed path serves it; nothing remembers the tensors
    assert constant_key(tensors) is None


@tessera.kernel
def add_tuple(xs) -> torch.Tensor:
    a, b = xs
    out = torch.empty_like(a)
    for tile in hl.tile(a.size(0)):
        out[tile] = a[tile] + b[tile]
    return out


def test_a_tuple_argument_of_tensors_is_not_kept_alive(device) -> None:
    a, b = torch.ones(16, device=device), torch.ones(16, device=device)
    add_tuple((a, b))
    add_tuple((a, b))
    reference = weakref.ref(a)
    del a, b
    gc.collect()
    assert reference() is None


@tessera.kernel
def shift_2d(x: torch.Tensor, n: int) -> torch.Tensor:
    if n > 5:
        raise ValueError("n must be at most 5")
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] + n
    return out


def test_a_call_that_raised_in_host_code_leaves_no_state(device) -> None:
    shift_2d.reset()
    x = torch.ones(8, 8, device=device)
    with pytest.raises(ValueError):
        shift_2d(x, 7)
    torch.testing.assert_close(shift_2d(x, 2), x + 2)


def test_a_call_with_meta_tensors_is_refused_and_leaves_no_state(device) -> None:
    shift_2d.reset()
    with pytest.raises(exc.KernelArgumentError, match="meta") as raised:
        shift_2d(torch.ones(8, 8, device="meta"), 2)
    assert raised.value.hint
    x = torch.ones(8, 8, device=device)
    torch.testing.assert_close(shift_2d(x, 2), x + 2)


def test_reset_forgets_the_config_choices(device) -> None:
    shift_2d(torch.ones(8, 8, device=device), 1)
    assert len(shift_2d.config_choices) > 0
    shift_2d.reset()
    assert len(shift_2d.config_choices) == 0


@pytest.mark.parametrize("make, what", [
    (lambda: torch.eye(4).to_sparse(), "sparse"),
    (lambda: torch.eye(4).to_sparse_csr(), "sparse"),
    (lambda: torch.eye(4).to_mkldnn(), "mkldnn"),
    (lambda: torch.nested.nested_tensor([torch.ones(2, 4), torch.ones(3, 4)]), "nested"),
])
@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_tensors_without_a_strided_layout_are_refused(make, what, mode) -> None:
    kernel = tessera.kernel(shift_2d.fn, mode=mode)
    with pytest.raises(exc.KernelArgumentError, match=what) as raised:
        kernel(make(), 1)
    assert "argument 0" in str(raised.value) and raised.value.hint
    assert raised.value.location is not None and raised.value.location.filename == __file__


@tessera.kernel
def double_into(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


def test_storing_into_a_tensor_that_overlaps_itself_is_refused(device) -> None:
    x = torch.arange(12.0, device=device).reshape(3, 4)
    with pytest.raises(exc.KernelArgumentError, match="share memory") as raised:
        double_into(torch.zeros(1, 4, device=device).expand(3, 4), x)
    assert raised.value.hint and "clone" in raised.value.hint


def test_reading_an_expanded_tensor_is_fine(device) -> None:
    row = torch.arange(4.0, device=device).reshape(1, 4)
    out = double_into(torch.empty(3, 4, device=device), row.expand(3, 4))
    torch.testing.assert_close(out, (row * 2).expand(3, 4))


def test_an_output_that_is_its_input_updates_in_place(device) -> None:
    """The supported aliasing: each element read and written at the same index by one program."""
    x = torch.arange(12.0, device=device).reshape(3, 4)
    y = x.clone()
    double_into(y, y)
    torch.testing.assert_close(y, x * 2)
    t = x.clone().t()  # a transposed view, written through itself
    double_into(t, t)
    torch.testing.assert_close(t, x.t() * 2)


@pytest.mark.parametrize("sizes, strides, overlaps", [
    ((4, 8), (8, 1), False), ((4, 8), (1, 4), False), ((4, 8), (0, 1), True), ((1, 8), (0, 1), False),
    ((3, 4), (2, 1), True), ((2, 3), (4, 3), False), ((3, 3), (1, 1), True), ((), (), False),
])
def test_internal_overlap_from_sizes_and_strides(sizes, strides, overlaps) -> None:
    assert internal_overlap(sizes, strides) is overlaps
    offsets = [sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, sizes))]
    assert (len(set(offsets)) != len(offsets)) is overlaps  # the definition, element by element


@pytest.mark.parametrize("value", ["abc", "1.5"])
def test_a_malformed_int_setting_is_a_config_error(value, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_AUTOTUNE_SEED", value)
    with pytest.raises(exc.ConfigError, match="TESSERA_AUTOTUNE_SEED") as raised:
        settings.get("autotune_seed")
    assert raised.value.hint


@pytest.mark.parametrize("values, wording", [
    ({"loop_orders": [0, 1]}, "loop_orders"),
    ({"loop_orders": [[0, "1"]]}, "loop_orders"),
    ({"block_sizes": [2 ** 21]}, "larger than"),
    ({"num_stages": True}, "num_stages"),
])
def test_a_malformed_config_is_a_located_config_error(values, wording) -> None:
    with pytest.raises(exc.ConfigError, match=wording) as raised:
        tessera.Config(**values)
    assert raised.value.hint
    assert raised.value.location is not None and raised.value.location.filename == __file__


# -- module-global tensors read inside a tile loop: kernel arguments of their own ------------------

TABLE = torch.zeros(1)  # set by each test on its device
SINK = torch.zeros(1)


def _generated_mode(device: torch.device) -> str:
    return "compiled" if device.type == "cuda" else "interpret"


@tessera.kernel
def add_table_row(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for rows, cols in hl.tile(x.size()):
        out[rows, cols] = x[rows, cols] + TABLE[None, cols]
    return out


def add_table(v: torch.Tensor, tile: Any) -> torch.Tensor:
    return v + TABLE[tile]


@tessera.kernel
def apply_helper(x: torch.Tensor, helper: Any) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = helper(x[tile], tile)
    return out


@tessera.kernel
def double_into_sink(x: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        SINK[tile] = x[tile] * 2.0
    return x


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (33, 3)])
def test_a_global_tensor_indexed_in_a_tile_loop_is_read_like_an_argument(shape, device) -> None:
    x = torch.randn(shape, device=device)
    previous = _set_global("TABLE", torch.randn(shape[1], device=device))
    try:
        for mode in ("eager", _generated_mode(device)):
            with settings.override(mode=mode):
                torch.testing.assert_close(add_table_row(x), x + TABLE[None, :], msg=mode)
    finally:
        _set_global("TABLE", previous)


@pytest.mark.parametrize("size", [1, 10])
def test_a_helper_reading_a_global_tensor_and_a_store_into_one(size, device) -> None:
    x = torch.randn(size, device=device)
    previous = _set_global("TABLE", torch.randn(size, device=device)), _set_global("SINK", torch.zeros(size, device=device))
    try:
        for mode in ("eager", _generated_mode(device)):
            with settings.override(mode=mode):
                torch.testing.assert_close(apply_helper(x, add_table), x + TABLE, msg=mode)
                SINK.zero_()
                double_into_sink(x)
                torch.testing.assert_close(SINK, x * 2.0, msg=mode)
    finally:
        _set_global("TABLE", previous[0])
        _set_global("SINK", previous[1])


def test_a_global_tensor_changed_in_place_rebound_or_resized_is_never_read_stale(device) -> None:
    x = torch.randn(4, 6, device=device)
    previous = _set_global("TABLE", torch.randn(6, device=device))
    try:
        with settings.override(mode=_generated_mode(device)):
            torch.testing.assert_close(add_table_row(x), x + TABLE[None, :])
            TABLE.add_(1.0)  # same tensor, same memory: the compiled variant reads the new values
            torch.testing.assert_close(add_table_row(x), x + TABLE[None, :])
            _set_global("TABLE", torch.randn(6, device=device))  # another tensor
            torch.testing.assert_close(add_table_row(x), x + TABLE[None, :])
            TABLE.set_(torch.randn(12, device=device)[::2])  # same tensor object, strided other memory
            torch.testing.assert_close(add_table_row(x), x + TABLE[None, :])
    finally:
        _set_global("TABLE", previous)
