"""In-place tensor methods on tile values (rebinding, nothing written through), the located
errors of slicing tile values, and the inplace= keyword of F.* activations."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc

F = torch.nn.functional
MODES = ("eager", "interpret")


def in_place_methods(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :]
        v.mul_(2)
        v.add_(w[tile, :])
        before = v.clone()
        v.exp_()
        u = v.clamp_(0.5, 3.0) * 2  # (a name bound to v itself would not follow v: README limits)
        if tile.begin == 0:  # a device branch: the first tile only
            v.sub_(1)
        out[tile, :] = v + u + before.abs_()
    return out


def in_place_reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    v = (x * 2 + w).clone()
    before = v.clone()
    v = v.exp().clamp(0.5, 3.0)
    u = v * 2
    v = torch.where(torch.arange(v.size(0))[:, None] < 4, v - 1, v)
    return v + u + before.abs()


@pytest.mark.parametrize("shape", [(5, 7), (1, 1)])
@pytest.mark.parametrize("mode", MODES)
def test_in_place_methods_rebind_and_leave_inputs_alone(mode: str, shape: tuple[int, int]) -> None:
    x, w = torch.randn(shape), torch.randn(shape)
    kept_x, kept_w = x.clone(), w.clone()
    got = tessera.kernel(in_place_methods, mode=mode, config=tessera.Config(block_sizes=[4]))(x, w, torch.empty(shape))
    torch.testing.assert_close(got, in_place_reference(kept_x, kept_w), rtol=1e-5, atol=1e-5)
    assert torch.equal(x, kept_x) and torch.equal(w, kept_w)


def zeroed(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        v = x[tile, :].to(torch.int32)
        v.zero_()
        v.add_(3)
        v.mul_(2)
        w = v.clone()
        w.fill_(1)
        out[tile, :] = v + w
    return out


@pytest.mark.parametrize("mode", MODES)
def test_in_place_methods_keep_the_dtype(mode: str) -> None:
    x = torch.randn(3, 5)
    got = tessera.kernel(zeroed, mode=mode)(x, torch.empty(3, 5, dtype=torch.int32))
    assert torch.equal(got, torch.full((3, 5), 7, dtype=torch.int32))


def sliced_tile_dim(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile, :] = x[tile, :][0:2, :].sum(0)
    return out


def test_a_slice_of_a_tile_dim_is_a_located_error() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="which is a tile") as error:
        tessera.kernel(sliced_tile_dim, mode="interpret")(torch.randn(4, 8), torch.empty(4, 8))
    assert "test_tile_value_methods.py" in str(error.value)


def out_of_range(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :][:, 9]
    return out


def test_an_int_index_past_a_whole_dim_is_a_located_error() -> None:
    with pytest.raises(exc.IndexingError, match="out of bounds"):
        tessera.kernel(out_of_range, mode="interpret")(torch.randn(4, 8), torch.empty(4))


def activation_in_place(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        v = x[tile]
        F.elu(v, inplace=True)
        out[tile] = v
    return out


def test_activation_inplace_keyword_is_a_located_error() -> None:
    with pytest.raises(exc.UnsupportedOperationError, match="rebind the name|inplace=True"):
        tessera.kernel(activation_in_place, mode="interpret")(torch.randn(4), torch.empty(4))


def acosh_of(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.acosh(x[tile])
    return out


def test_acosh_of_large_negative_values_is_nan() -> None:
    """The log1p form cancels to a number for x << -1; torch gives NaN below 1 (a silent wrong answer before)."""
    x = torch.tensor([-5e3, -3e9, -1.5, 0.5, 1.0, 2.0, 3e38, float("inf")])
    got = tessera.kernel(acosh_of, mode="interpret")(x, torch.empty_like(x))
    torch.testing.assert_close(got, torch.acosh(x), equal_nan=True)
