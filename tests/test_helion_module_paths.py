"""Helion module paths its tests import beyond `hl` (issue 15): `runtime.config`, `runtime.ref_mode`,
`_compiler.rng_utils` (reference random numbers), and the bound-kernel and config-space calls
they make (`compile_config`, `unsupported_config_keys`, `Config.config`)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera._compiler.rng_utils import philox_rand4x_ref, philox_rand_ref, philox_randint_ref
from tessera.runtime.config import Config
from tessera.runtime.ref_mode import is_ref_mode_enabled
from tessera.runtime.settings import RefMode, Settings

MODES = ("eager", "interpret")


def random_rows(out: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    whole = torch.empty(out.shape, dtype=torch.int32, device=out.device)
    for tile_m, tile_n in hl.tile(out.size()):
        out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=seed)
        whole[tile_m, tile_n] = hl.randint([tile_m, tile_n], low=-3, high=40, seed=seed)
    return out, whole


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (13, 37)])
def test_reference_philox_matches_hl_rand_and_randint_at_row_major_offsets(mode, shape):
    kernel = tessera.kernel(random_rows, mode=mode, config=tessera.Config(block_sizes=[8, 16]))
    uniform, integers = kernel(torch.empty(shape), 1234)
    offsets = torch.arange(shape[0] * shape[1]).reshape(shape)
    torch.testing.assert_close(uniform, philox_rand_ref(1234, offsets))
    torch.testing.assert_close(integers, philox_randint_ref(1234, offsets, -3, 40))


def test_reference_rand4x_gives_four_uniform_streams():
    words = philox_rand4x_ref(torch.tensor(7), torch.arange(100))
    assert len(words) == 4 and all(((w >= 0) & (w < 1)).all() for w in words)
    torch.testing.assert_close(words[0], philox_rand_ref(7, torch.arange(100)))
    with pytest.raises(ValueError):
        philox_randint_ref(7, torch.arange(3), 5, 5)


def test_ref_mode_follows_the_settings_and_tessera_mode(monkeypatch):
    monkeypatch.delenv("TESSERA_MODE", raising=False)
    assert is_ref_mode_enabled(Settings(ref_mode=RefMode.EAGER))
    assert not is_ref_mode_enabled(Settings())
    monkeypatch.setenv("TESSERA_MODE", "eager")
    assert is_ref_mode_enabled(Settings())
    assert not is_ref_mode_enabled(Settings(ref_mode=RefMode.OFF))  # OFF beats the environment's eager


def add_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + 1
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 37])
def test_compile_config_returns_a_runner_under_that_config(mode, size):
    x = torch.randn(size)
    bound = tessera.kernel(add_one, mode=mode).bind(x)
    # an ignored Helion key (a dict: a Config would spend the once-per-process warning about it)
    assert bound.config_spec.unsupported_config_keys({"block_sizes": [16], "num_sm_multiplier": 2}) == \
        ["num_sm_multiplier"]
    config = Config(block_sizes=[16], num_warps=2)
    config.config.pop("num_warps")
    assert "num_warps" not in config.to_dict()
    run = bound.compile_config(config)
    torch.testing.assert_close(run(x), x + 1)
    torch.testing.assert_close(run(x * 2), x * 2 + 1)


def test_compiler_backend_path_names_tesseras_pallas_backend():
    from tessera._compiler.backend import PallasBackend
    from tessera.backends.pallas.backend import PallasBackend as Own
    assert PallasBackend is Own


def int_noise(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x, dtype=torch.float32)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.rand_like(x[tile]).float()
    return out


def test_implicit_rng_of_an_integer_dtype_says_helions_words():
    with pytest.raises(tessera.exc.DtypeError, match="implicit RNG only supports floating-point dtypes"):
        tessera.kernel(int_noise, mode="interpret")(torch.ones(5, dtype=torch.int32))


def test_helions_runtime_names_are_in_tessera_runtime():
    import tessera
    import tessera.runtime as runtime
    assert runtime.Config is tessera.Config and runtime.exc is tessera.exc
    assert isinstance(tessera.kernel(lambda x: x), runtime.Kernel)
    assert runtime.get_num_xcd() == 1  # xcd_remap (AMD) is ignored: one die
