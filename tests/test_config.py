"""`tessera.Config` and kernel settings: what is accepted, what each means, and how bad values fail.

A bad Config or kernel setting is a `ConfigError` (a `TesseraError`) that says which value is
wrong and what would be right, never a raw ValueError or TypeError from deep inside Tessera.
"""
from __future__ import annotations

import os

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc, settings
from tessera.config import DEFAULT_BLOCK_SIZE, Config, default_block_size
from marked_lines import marked_line

THIS_FILE = os.path.basename(__file__)


def line_of(name: str) -> int:
    """Line number in this file of the line marked `# line: <name>`."""
    return marked_line(__file__, name)[0]


# ---------------------------------------------------------------------------------------------
# Config as a value
# ---------------------------------------------------------------------------------------------

def test_config_reads_like_a_mapping_of_the_keys_it_was_given():
    config = Config(block_sizes=[64, 32], num_warps=4)
    assert config["block_sizes"] == [64, 32]
    assert config["num_warps"] == 4
    assert dict(config) == {"block_sizes": [64, 32], "num_warps": 4}


def test_config_omits_keys_that_were_not_given():
    config = Config(num_warps=8)
    assert "block_sizes" not in config
    assert config.get("block_sizes") is None
    assert len(config) == 1


def test_config_repr_shows_the_given_keys():
    assert repr(Config(block_sizes=[64, 32], num_warps=4)) == "Config(block_sizes=[64, 32], num_warps=4)"


def test_config_stores_block_sizes_as_a_list_of_ints():
    assert Config(block_sizes=(16, 8))["block_sizes"] == [16, 8]


def test_configs_with_the_same_values_are_equal_and_hash_alike():
    first = Config(block_sizes=[64], num_warps=4)
    second = Config(num_warps=4, block_sizes=[64])
    assert first == second
    assert hash(first) == hash(second)


def test_equal_configs_hash_alike_whatever_the_keyword_order():
    first = Config(l2_grouping=4, pid_type="flat")
    second = Config(pid_type="flat", l2_grouping=4)
    assert first == second
    assert hash(first) == hash(second)


def test_configs_with_different_values_are_not_equal():
    assert Config(block_sizes=[64]) != Config(block_sizes=[32])
    assert Config(block_sizes=[64]) != {"block_sizes": [64]}


def test_merged_replaces_some_keys_and_keeps_the_rest():
    config = Config(block_sizes=[64, 32], num_warps=4)
    assert config.merged(num_warps=8) == Config(block_sizes=[64, 32], num_warps=8)
    assert config["num_warps"] == 4


def test_to_dict_returns_a_copy():
    config = Config(num_warps=4)
    copy = config.to_dict()
    copy["num_warps"] = 8
    assert config["num_warps"] == 4


@pytest.mark.parametrize("key, value", [
    ("num_stages", 3),
    ("loop_orders", [[1, 0]]),
    ("l2_grouping", 8),
    ("indexing", "block_ptr"),
    ("reduction_loops", [None]),
    ("pid_type", "persistent_blocked"),
])
def test_config_accepts_every_documented_key(key, value):
    assert Config(**{key: value})[key] == value


# ---------------------------------------------------------------------------------------------
# Config validation
# ---------------------------------------------------------------------------------------------

def test_config_error_is_a_tessera_error():
    assert issubclass(exc.ConfigError, exc.TesseraError)


def test_misspelt_config_key_raises_config_error_naming_the_known_one():
    with pytest.raises(exc.ConfigError, match="unknown Config key 'block_size_s'") as info:
        Config(block_size_s=[64])
    assert "did you mean 'block_sizes'" in info.value.hint


def test_unknown_config_key_error_lists_the_known_keys():
    with pytest.raises(exc.ConfigError) as info:
        Config(warps=4)
    assert "block_sizes" in info.value.hint and "num_warps" in info.value.hint


@pytest.mark.parametrize("block", [3, 48, 100])
def test_block_size_that_is_not_a_power_of_two_raises_config_error(block):
    with pytest.raises(exc.ConfigError, match=f"block size {block} is not a power of two"):
        Config(block_sizes=[16, block])


def test_block_size_error_suggests_the_next_power_of_two():
    with pytest.raises(exc.ConfigError) as info:
        Config(block_sizes=[48])
    assert "64" in info.value.hint


@pytest.mark.parametrize("block", [0, -16])
def test_block_size_that_is_not_positive_raises_config_error(block):
    with pytest.raises(exc.ConfigError):
        Config(block_sizes=[block])


def test_block_sizes_given_as_a_bare_int_raise_config_error():
    with pytest.raises(exc.ConfigError):
        Config(block_sizes=64)


def test_block_size_that_is_not_a_number_raises_config_error():
    with pytest.raises(exc.ConfigError):
        Config(block_sizes=["sixteen"])


def test_fractional_block_size_raises_config_error():
    with pytest.raises(exc.ConfigError):
        Config(block_sizes=[16.5])


@pytest.mark.parametrize("warps", [0, 3, 64, 4.0, "4"])
def test_bad_num_warps_raises_config_error(warps):
    with pytest.raises(exc.ConfigError, match="num_warps"):
        Config(num_warps=warps)


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16, 32])
def test_num_warps_accepts_powers_of_two_up_to_32(warps):
    assert Config(num_warps=warps)["num_warps"] == warps


@pytest.mark.parametrize("stages", [0, 9, 2.0])
def test_bad_num_stages_raises_config_error(stages):
    with pytest.raises(exc.ConfigError, match="num_stages"):
        Config(num_stages=stages)


def test_merged_validates_the_new_values():
    with pytest.raises(exc.ConfigError):
        Config(num_warps=4).merged(num_warps=5)


# ---------------------------------------------------------------------------------------------
# Default block size
# ---------------------------------------------------------------------------------------------

def test_default_block_size_is_the_documented_constant():
    assert default_block_size() == DEFAULT_BLOCK_SIZE


def test_default_block_size_rises_to_the_minimum_rounded_up_to_a_power_of_two():
    assert default_block_size(DEFAULT_BLOCK_SIZE + 1) == 2 * DEFAULT_BLOCK_SIZE
    assert default_block_size(200) == 256


def test_default_block_size_never_drops_below_the_constant():
    assert default_block_size(2) == DEFAULT_BLOCK_SIZE


# ---------------------------------------------------------------------------------------------
# Configs given to a kernel
# ---------------------------------------------------------------------------------------------

def test_kernel_config_sets_the_block_sizes_of_its_tile_loops():
    seen = []

    @tessera.kernel(mode="eager", config=Config(block_sizes=[4, 8]))
    def record(m: int, n: int) -> None:
        for tile in hl.tile(m):
            seen.append(tile.block_size)
        for tile in hl.tile(n):
            seen.append(tile.block_size)

    record(4, 8)
    assert seen == [4, 8]


def test_eager_mode_uses_the_first_of_several_configs():
    seen = []

    @tessera.kernel(mode="eager", configs=[Config(block_sizes=[4]), Config(block_sizes=[8])])
    def record(n: int) -> None:
        for tile in hl.tile(n):
            seen.append(tile.block_size)

    record(8)
    assert seen == [4, 4]


def test_config_with_too_few_block_sizes_raises_config_error_at_the_loop_that_lacks_one():
    @tessera.kernel(mode="eager", config=Config(block_sizes=[8]))
    def two_loops(m: int, n: int) -> None:
        for _ in hl.tile(m):
            pass
        for _ in hl.tile(n):  # line: loop-without-block-size
            pass

    with pytest.raises(exc.ConfigError) as info:
        two_loops(4, 4)
    assert info.value.location.lineno == line_of("loop-without-block-size")
    assert "block_sizes[1:2]" in str(info.value)


def test_too_few_block_sizes_error_says_how_many_the_kernel_needs():
    @tessera.kernel(mode="eager", config=Config(block_sizes=[8]))
    def three_dims(x: torch.Tensor) -> None:
        for _ in hl.tile([x.size(0), x.size(1), x.size(2)]):
            pass

    with pytest.raises(exc.ConfigError) as info:
        three_dims(torch.zeros(2, 2, 2))
    assert "at least 3" in info.value.hint


# ---------------------------------------------------------------------------------------------
# Kernel settings
# ---------------------------------------------------------------------------------------------

def test_unknown_kernel_setting_raises_config_error():
    with pytest.raises(exc.ConfigError, match="unknown kernel setting"):
        tessera.kernel(block_size=64)


def test_unknown_kernel_setting_error_names_the_setting_and_lists_the_known_ones():
    with pytest.raises(exc.ConfigError) as info:
        tessera.kernel(num_warp=4)
    assert "num_warp" in info.value.message
    assert "static_shapes" in info.value.hint and "mode" in info.value.hint


def test_unknown_kernel_setting_error_names_the_decorator_line():
    with pytest.raises(exc.ConfigError) as info:
        @tessera.kernel(mode="eager", bogus=1)  # line: bogus-setting
        def add(x: torch.Tensor) -> torch.Tensor:
            return x
    assert info.value.location.lineno == line_of("bogus-setting")
    assert f"{THIS_FILE}:{line_of('bogus-setting')}" in str(info.value)


@pytest.mark.parametrize("setting, value", [
    ("mode", "fast"),
    ("autotune_effort", "maximum"),
    ("dot_precision", "fp8"),
])
def test_bad_kernel_setting_value_raises_config_error(setting, value):
    with pytest.raises(exc.ConfigError, match=f"unknown {setting} '{value}'"):
        tessera.kernel(**{setting: value})


def test_bad_kernel_setting_value_error_names_the_decorator_line():
    with pytest.raises(exc.ConfigError) as info:
        tessera.kernel(mode="fast")  # line: bad-mode
    assert info.value.location is not None
    assert info.value.location.lineno == line_of("bad-mode")


def test_unknown_tessera_mode_setting_raises_config_error_at_the_call():
    @tessera.kernel
    def identity(x: torch.Tensor) -> torch.Tensor:
        return x

    with settings.override(mode="fastest"):
        with pytest.raises(exc.ConfigError, match="TESSERA_MODE='fastest'"):
            identity(torch.zeros(2))


def test_kernel_mode_setting_beats_tessera_mode():
    @tessera.kernel(mode="eager")
    def identity(x: torch.Tensor) -> torch.Tensor:
        return x

    with settings.override(mode="fastest"):
        x = torch.zeros(2)
        assert identity(x) is x


def test_kernel_decorator_works_bare_and_with_settings():
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    bare = tessera.kernel(double)
    configured = tessera.kernel(mode="eager")(double)
    assert isinstance(bare, tessera.Kernel) and isinstance(configured, tessera.Kernel)
    assert bare.__name__ == configured.__name__ == "double"


@pytest.mark.parametrize("value", ["default", "high", "highest", "tf32", "tf32x3", "ieee"])
def test_dot_precision_default_follows_triton_f32_default(monkeypatch, value):
    monkeypatch.setenv("TRITON_F32_DEFAULT", value)
    assert tessera.Settings().dot_precision == value
    assert tessera.Settings(dot_precision="ieee").dot_precision == "ieee"  # the kernel's own setting wins


def test_dot_precision_without_triton_f32_default_is_tf32(monkeypatch):
    monkeypatch.delenv("TRITON_F32_DEFAULT", raising=False)
    assert tessera.Settings().dot_precision == "tf32"


def test_bad_triton_f32_default_is_a_value_error(monkeypatch):
    monkeypatch.setenv("TRITON_F32_DEFAULT", "fp8")
    with pytest.raises(ValueError, match="TRITON_F32_DEFAULT='fp8'") as info:
        tessera.Settings()
    assert isinstance(info.value, exc.ConfigError)


@pytest.mark.parametrize("setting, triton", [("default", "tf32"), ("high", "tf32x3"), ("highest", "ieee"),
                                             ("tf32", "tf32"), ("tf32x3", "tf32x3"), ("ieee", "ieee")])
def test_helion_dot_precisions_lower_to_triton_input_precisions(setting, triton):
    from tessera.backends.triton.emitter import triton_input_precision
    assert triton_input_precision(setting) == triton


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("precision", ["default", "high", "highest"])
def test_matmul_with_a_helion_dot_precision(mode, precision):
    import tessera.language as hl

    def product(x, y):
        out = torch.empty([x.size(0), y.size(1)], device=x.device)
        for tile_m, tile_n in hl.tile([x.size(0), y.size(1)]):
            acc = hl.zeros([tile_m, tile_n])
            for tile_k in hl.tile(x.size(1)):
                acc = hl.dot(x[tile_m, tile_k], y[tile_k, tile_n], acc=acc)
            out[tile_m, tile_n] = acc
        return out
    x, y = torch.randn(17, 33), torch.randn(33, 1)
    kernel = tessera.kernel(product, mode=mode, dot_precision=precision, config=tessera.Config(block_sizes=[16, 16, 16]))
    torch.testing.assert_close(kernel(x, y), x @ y, atol=1e-4, rtol=1e-4)
