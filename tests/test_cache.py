"""The variant cache: how many compiled variants a kernel keeps, and when it builds another.

Sizes are runtime arguments by default, so one variant serves every size; `static_shapes=True`
and `tessera.mark_static` make sizes part of the key; a change of layout (which dims have unit
stride) is part of the key too. `max_variants` caps the count with a clear error, and
`TESSERA_LOG=recompiles` says why each variant was built. The mode follows the device
(interpret on CPU, compiled on CUDA); a fresh kernel per test keeps the counts independent.
"""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc


def doubled(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile([x.size(0), x.size(1)]):
        out[tile_m, tile_n] = x[tile_m, tile_n] * 2
    return out


def row_sums(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        out[tile_m] = x[tile_m, :].to(torch.float32).sum(dim=1)
    return out


def test_dynamic_sizes_of_one_magnitude_share_one_variant(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    rows = [129, 130, 200, 255, 256, 129]  # all in the size bucket (128, 256]
    for m in rows:
        x = torch.randn(m, 8, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    info = kernel.cache_info()
    assert (info.variants, info.misses, info.hits) == (1, 1, len(rows) - 1)
    assert len(kernel.config_choices) == 1


def test_each_size_magnitude_chooses_its_own_config(device: torch.device) -> None:
    # Buckets 0, 1, (1, 2], (2, 4], (4, 8], ...: a Config chosen for 2 rows is not reused for 100.
    kernel = tessera.kernel(doubled)
    for m in (2, 7, 6, 100, 2, 100, 5):
        x = torch.randn(m, 8, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    assert len(kernel.config_choices) == 3
    assert kernel.cache_info().variants <= 3  # buckets whose Configs agree share compiled code


def test_size_one_gets_its_own_config_and_variant(device: torch.device) -> None:
    # Sizes 0 and 1 are buckets of their own (as in Helion).
    kernel = tessera.kernel(doubled)
    for m in (5, 1, 7, 1):
        x = torch.randn(m, 8, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info().variants == 2


def test_static_shapes_compiles_one_variant_per_shape(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, static_shapes=True)
    shapes = [(3, 8), (5, 8), (3, 9), (5, 8), (3, 8)]
    for shape in shapes:
        x = torch.randn(shape, device=device)
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info().variants == len(set(shapes))
    assert kernel.cache_info().hits == len(shapes) - len(set(shapes))


def test_mark_static_compiles_one_variant_per_value_of_the_marked_dim(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    shapes = [(5, 8), (6, 8), (7, 8), (5, 16), (8, 16), (8, 8)]  # rows in one size bucket
    for shape in shapes:
        x = tessera.mark_static(torch.randn(shape, device=device), [1])
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info().variants == len({cols for _, cols in shapes})


def test_a_stride_change_builds_a_new_variant_with_correct_results(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    x = torch.randn(7, 13, device=device)
    torch.testing.assert_close(kernel(x), x * 2)
    transposed = torch.randn(13, 7, device=device).t()
    assert not transposed.is_contiguous()
    torch.testing.assert_close(kernel(transposed), transposed * 2)
    assert kernel.cache_info().variants == 2
    # both variants stay: going back to a contiguous input is a hit
    torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (1, 2, 2)


def test_a_dtype_change_builds_a_new_variant(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    for dtype in (torch.float32, torch.float16, torch.float32):
        x = torch.randn(4, 5, device=device).to(dtype)
        torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (1, 2, 2)


def test_max_variants_caps_recompiles_with_a_clear_error(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, static_shapes=True, max_variants=2)
    kernel(torch.randn(2, 3, device=device))
    kernel(torch.randn(3, 3, device=device))
    with pytest.raises(exc.RecompileLimitError) as info:
        kernel(torch.randn(4, 3, device=device))
    message = str(info.value)
    assert "doubled compiled 2 variants, its max_variants limit" in message
    assert "max_variants=" in message  # the hint says how to raise it
    assert kernel.cache_info().variants == 2


def test_the_cache_limit_error_keeps_earlier_variants_usable(device: torch.device) -> None:
    kernel = tessera.kernel(doubled, static_shapes=True, max_variants=1)
    x = torch.randn(2, 3, device=device)
    kernel(x)
    with pytest.raises(exc.RecompileLimitError):
        kernel(torch.randn(4, 3, device=device))
    torch.testing.assert_close(kernel(x), x * 2)


def test_recompiles_log_says_why_each_variant_is_built(device: torch.device, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_LOG", "recompiles")
    kernel = tessera.kernel(row_sums)
    for cols in (13, 14, 40):  # 13 and 14 fit one whole-row block (16); 40 does not (one size bucket)
        x = torch.randn(5, cols, device=device)
        torch.testing.assert_close(kernel(x), x.sum(dim=1))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("[tessera]")]
    assert len(lines) == 2
    assert "compiling row_sums variant 1 (first compile)" in lines[0]
    assert "compiling row_sums variant 2 (guards failed:" in lines[1]
    assert "fits block 16" in lines[1]


def test_no_recompile_log_without_the_topic(device: torch.device, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_LOG", raising=False)
    kernel = tessera.kernel(row_sums)
    kernel(torch.randn(5, 3, device=device))
    assert "[tessera]" not in capsys.readouterr().err


def test_reset_forgets_variants_and_counts(device: torch.device) -> None:
    kernel = tessera.kernel(doubled)
    kernel(torch.randn(2, 3, device=device))
    kernel.reset()
    assert kernel.cache_info() == (0, 0, 0)
    x = torch.randn(2, 3, device=device)
    torch.testing.assert_close(kernel(x), x * 2)
    assert kernel.cache_info() == (0, 1, 1)
