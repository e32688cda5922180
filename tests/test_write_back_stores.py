"""`x[i] = torch.where(keep, new, x[i])`: lanes that write back what they read do not write
(trace/write_back.py, language/eager_write_back.py). Helion's moe_matmul_ogs pads a gather's
index with a real row and masks its store this way; its padded lanes raced with the lane that
owns that row (DuplicateStoreIndicesError in eager and interpret modes, undefined on a GPU)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import Config, exc

MODES = ["eager", "interpret"]
CONFIG = Config(block_sizes=[4, 8])


def scatter_kept_rows(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    for tile_t, tile_n in hl.tile([x.size(0), out.size(1)]):
        where_to = rows[tile_t]
        keep = valid[tile_t]
        new = x[tile_t, tile_n] * 2
        out[where_to, tile_n] = torch.where(keep[:, None], new, out[where_to, tile_n])
    return out


def scatter_kept_rows_reversed(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
                               valid: torch.Tensor) -> torch.Tensor:
    for tile_t, tile_n in hl.tile([x.size(0), out.size(1)]):
        where_to = rows[tile_t]
        old = out[where_to, tile_n]
        out[where_to, tile_n] = torch.where(~valid[tile_t][:, None], old, x[tile_t, tile_n] * 2)
    return out


def scatter_kept_rows_under_a_device_if(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
                                       valid: torch.Tensor) -> torch.Tensor:
    for tile_t, tile_n in hl.tile([x.size(0), out.size(1)]):
        count = valid.size(0) - rows[0]  # a value loaded on the device: the `if` decides per program
        if count != 0:
            where_to = rows[tile_t]
            existing = out[where_to, tile_n]
            keep = valid[tile_t][:, None].expand_as(existing)
            out[where_to, tile_n] = torch.where(keep, (x[tile_t, tile_n] * 2).to(out.dtype), existing)
    return out


def scatter_kept_rows_or_zero(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
                              valid: torch.Tensor) -> torch.Tensor:
    for tile_t, tile_n in hl.tile([x.size(0), out.size(1)]):
        where_to = rows[tile_t]
        zeros = torch.zeros_like(x[tile_t, tile_n])
        out[where_to, tile_n] = torch.where(valid[tile_t][:, None], x[tile_t, tile_n] * 2, zeros)
    return out


def scatter_after_another_store(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor,
                                valid: torch.Tensor) -> torch.Tensor:
    for tile_t, tile_n in hl.tile([x.size(0), out.size(1)]):
        where_to = rows[tile_t]
        old = out[where_to, tile_n]
        out[where_to, tile_n] = old + 1  # the read is stale after this: writing it back is a real write
        out[where_to, tile_n] = torch.where(valid[tile_t][:, None], x[tile_t, tile_n] * 2, old)
    return out


def _padded_rows(tokens: int, width: int) -> tuple[torch.Tensor, ...]:
    """Rows 0..tokens-1 are written by valid lanes; invalid lanes point at row 0 (a padded gather)."""
    generator = torch.Generator().manual_seed(tokens * 31 + width)
    x = torch.randn(tokens, width, generator=generator)
    valid = torch.rand(tokens, generator=generator) < 0.6
    valid[0] = True
    rows = torch.where(valid, torch.arange(tokens), 0)
    out = torch.randn(tokens, width, generator=generator)
    return out, x, rows, valid


def _expected(out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    expected = out.clone()
    expected[rows[valid]] = x[valid] * 2
    return expected


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", [scatter_kept_rows, scatter_kept_rows_reversed,
                                    scatter_kept_rows_under_a_device_if])
@pytest.mark.parametrize("shape", [(1, 1), (6, 5), (13, 17)])
def test_a_store_writing_back_its_read_writes_only_the_kept_lanes(kernel, mode: str, shape: tuple[int, int]) -> None:
    out, x, rows, valid = _padded_rows(*shape)
    expected = _expected(out, x, rows, valid)
    result = tessera.kernel(kernel, mode=mode, config=CONFIG)(out.clone(), x, rows, valid)
    torch.testing.assert_close(result, expected)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kernel", [scatter_kept_rows_or_zero, scatter_after_another_store])
def test_other_lanes_writing_a_different_value_to_one_element_are_still_refused(kernel, mode: str) -> None:
    out, x, rows, valid = _padded_rows(13, 17)
    assert not bool(valid.all())
    with pytest.raises(exc.DuplicateStoreIndicesError):
        tessera.kernel(kernel, mode=mode, config=CONFIG)(out.clone(), x, rows, valid)
