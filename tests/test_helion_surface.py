"""Helion's public surface outside `hl` (issue 15): kernel settings, Config keys, host helpers,
`hl.register_tunable`, the `_testing` harness and the examples runner's rewrite."""
from __future__ import annotations

import ast
import warnings
from typing import Any

import pytest
import torch

import tessera
import tessera.language as hl
from benchmarks.helion_examples import rewrite_import_line, shrink_sizes
from tessera import _testing, exc, settings
from tessera.autotune.reference import baseline_tolerance, bind_on_copies, tuning_reference
from tessera.autotune.bench_worker import accuracy_error
from tessera.autotuner import EnumFragment, PowerOfTwoFragment
from tessera.runtime.tuning import config_for_call, config_space_for, heuristic_for, kernel_facts

MODES = ("eager", "interpret")


def add_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + 1
    return out


def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


# A Config printed by Helion's autotuner (its docs' matmul example), keys and values as printed.
HELION_PRINTED = dict(block_sizes=[64, 32, 64], loop_orders=[[1, 0]], l2_groupings=[8], range_unroll_factors=[3, 1],
                      range_warp_specializes=[True, False], range_num_stages=[1, 0], range_multi_buffers=[True, True],
                      range_flattens=[None, False], num_warps=4, num_stages=7, indexing="block_ptr",
                      pid_type="persistent_blocked")


# -- Config keys ---------------------------------------------------------------------------------

def test_a_config_printed_by_helions_autotuner_is_accepted():
    assert tessera.Config(**HELION_PRINTED)["l2_groupings"] == [8]


def test_block_size_is_shorthand_for_a_single_block_sizes_entry():
    assert tessera.Config(block_size=64)["block_sizes"] == [64]


def test_an_unhonoured_helion_config_key_is_accepted_with_one_warning_naming_it(capfd):
    tessera.Config(block_sizes=[16], num_sm_multiplier=2)
    tessera.Config(block_sizes=[32], num_sm_multiplier=4)
    assert capfd.readouterr().err.count("Config key 'num_sm_multiplier' is accepted but ignored") == 1


@pytest.mark.parametrize("key, value", [("range_num_stages", [9]), ("load_eviction_policies", ["lru"]),
                                        ("l2_groupings", [3]), ("range_flattens", [1])])
def test_malformed_helion_list_keys_are_refused_by_name(key, value):
    with pytest.raises(exc.ConfigError, match=key):
        tessera.Config(**{key: value})


def test_range_and_eviction_keys_become_tl_range_and_tl_load_keywords():
    config = tessera.Config(block_sizes=[16, 16, 16], range_num_stages=[0, 3], range_unroll_factors=[0, 2],
                            range_multi_buffers=[None, False], range_warp_specializes=[None, False],
                            load_eviction_policies=["first", ""])
    x, y = torch.randn(20, 40), torch.randn(40, 24)
    code = tessera.kernel(matmul, mode="interpret").bind(x, y).to_triton_code(config)
    assert ("tl.range(0, k, 16, num_stages=3, loop_unroll_factor=2, warp_specialize=False, "
            "disallow_acc_multi_buffer=True)") in code
    assert code.count("eviction_policy='evict_first'") == 1 and "evict_last" not in code


def test_l2_groupings_groups_the_program_ids_of_its_tile_loop():
    x, y = torch.randn(20, 40), torch.randn(40, 24)
    code = tessera.kernel(matmul, mode="interpret").bind(x, y).to_triton_code(
        tessera.Config(block_sizes=[16, 16, 16], l2_groupings=[4]))
    assert "in_group = 4 *" in code


@pytest.mark.parametrize("mode", MODES)
def test_a_helion_printed_config_runs_and_matches_torch(mode):
    config = tessera.Config(**{**HELION_PRINTED, "block_sizes": [16, 16, 16]})
    kernel = tessera.kernel(matmul, mode=mode, config=config)
    x, y = torch.randn(33, 40), torch.randn(40, 17)
    torch.testing.assert_close(kernel(x, y), x @ y, rtol=1e-4, atol=1e-4)


# -- kernel settings -----------------------------------------------------------------------------

def test_settings_can_change_after_decoration_and_the_kernel_compiles_afresh():
    kernel = tessera.kernel(add_one, mode="interpret")
    x = torch.randn(10)
    kernel(x)
    assert kernel.cache_info().variants == 1
    kernel.settings.static_shapes = True
    assert kernel.settings.static_shapes is True and kernel.cache_info().variants == 0
    torch.testing.assert_close(kernel(x), x + 1)


def test_a_bad_setting_assigned_after_decoration_is_refused():
    kernel = tessera.kernel(add_one)
    with pytest.raises(exc.ConfigError, match="unknown autotune_effort"):
        kernel.settings.autotune_effort = "max"


def test_ref_mode_eager_runs_the_kernel_in_eager_mode():
    kernel = tessera.kernel(add_one, ref_mode=tessera.RefMode.EAGER)
    assert kernel.mode_for(torch.device("cpu")) == "eager"


def test_printing_code_in_ref_eager_mode_is_refused_as_helion_refuses_it():
    with pytest.raises(exc.RefEagerModeCodePrintError, match="no code to print"):
        tessera.kernel(add_one, ref_mode=tessera.RefMode.EAGER, print_output_code=True)
    assert issubclass(exc.BackendCompileError, exc.InternalError)


def test_bound_config_spec_gives_a_default_config_to_generate_code_with():
    bound = tessera.kernel(add_one, mode="interpret").bind(torch.randn(10))
    config = bound.config_spec.default_config()
    assert isinstance(config, tessera.Config) and "tl.store" in bound.to_triton_code(config)


def test_jit_is_kernel():
    assert tessera.jit is tessera.kernel and "jit" in tessera.__all__


def test_an_explicit_ref_mode_off_overrides_tessera_mode_eager_as_it_overrides_helion_interpret():
    off = tessera.kernel(add_one, ref_mode=tessera.RefMode.OFF)
    default = tessera.kernel(add_one)
    with settings.override(mode="eager"):
        assert off.mode_for(torch.device("cpu")) == "interpret"
        assert default.mode_for(torch.device("cpu")) == "eager"
        torch.testing.assert_close(off(torch.arange(5.0)), torch.arange(5.0) + 1)
    with settings.override(mode="interpret"):  # not a reference mode: OFF leaves it
        assert off.mode_for(torch.device("cpu")) == "interpret"
    eager_then_off = tessera.kernel(add_one, ref_mode=tessera.RefMode.EAGER)
    eager_then_off.settings.ref_mode = tessera.RefMode.OFF
    assert eager_then_off.mode_for(torch.device("cpu")) == "interpret"


def test_an_unhonoured_helion_setting_is_accepted_with_one_warning_naming_it(capfd):
    tessera.kernel(add_one, autotune_progress_bar=False)
    tessera.kernel(add_one, autotune_progress_bar=False)
    assert capfd.readouterr().err.count("kernel setting autotune_progress_bar=False is accepted but ignored") == 1


def test_an_unhonoured_helion_setting_reads_back_as_given_else_none():
    kernel = tessera.kernel(add_one, index_dtype=torch.int64)
    assert kernel.settings.index_dtype is torch.int64 and kernel.settings.fast_math is None
    kernel.settings.fast_math = True
    assert kernel.settings.fast_math is True
    with pytest.raises(AttributeError):
        kernel.settings.no_such_setting


def test_ignore_warnings_silences_the_named_warning_classes_during_calls():
    def warns(x: torch.Tensor) -> torch.Tensor:
        warnings.warn("host op", exc.TensorOperationInWrapper)
        return add_one(x)

    quiet = tessera.kernel(warns, mode="eager", ignore_warnings=[exc.TensorOperationInWrapper])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet(torch.zeros(3))
        tessera.kernel(warns, mode="eager")(torch.zeros(3))
    assert [type(w.message) for w in seen] == [exc.TensorOperationInWrapper]


def test_ignore_warnings_must_name_tessera_warning_classes():
    with pytest.raises(exc.ConfigError, match="ignore_warnings"):
        tessera.kernel(add_one, ignore_warnings=["TensorOperationInWrapper"])


def test_print_output_code_prints_the_generated_source(capfd):
    tessera.kernel(add_one, mode="interpret", print_output_code=True)(torch.zeros(5))
    assert "@triton.jit" in capfd.readouterr().err


def test_config_overrides_pin_keys_on_the_chosen_config():
    kernel = tessera.kernel(add_one, mode="interpret", autotune_config_overrides={"num_warps": 2})
    assert config_for_call(kernel, "interpret", (torch.zeros(9),), {})["num_warps"] == 2


def test_config_overrides_must_make_a_valid_config():
    with pytest.raises(exc.ConfigError, match="num_warps"):
        tessera.kernel(add_one, autotune_config_overrides={"num_warps": 3})


def test_the_baseline_function_is_the_tuning_reference():
    kernel = tessera.kernel(add_one, mode="interpret", autotune_baseline_fn=lambda x: x * 0 + 7)
    working = bind_on_copies(kernel.bind(torch.randn(6)))
    (reference,), source = tuning_reference(working, tessera.Config(block_sizes=[8]), None)
    assert source == "autotune_baseline_fn" and torch.equal(reference, torch.full((6,), 7.0))


def test_baseline_tolerances_replace_the_gates_tolerance_by_dtype():
    kernel = tessera.kernel(add_one, autotune_baseline_atol=0.1, autotune_baseline_rtol=0.0)
    tolerance = baseline_tolerance(kernel.settings)
    assert tolerance == (0.1, 0.0)
    want = torch.zeros(4)
    assert accuracy_error([want + 0.05], [want], tolerance)[0] <= 1.0
    assert accuracy_error([want + 0.2], [want], tolerance)[0] > 1.0
    assert baseline_tolerance(tessera.kernel(add_one).settings) is None


# -- host helpers and module paths ----------------------------------------------------------------

def test_host_helpers_at_helions_module_paths():
    from tessera._compat import use_tileir_tunables
    from tessera.runtime.settings import RefMode, Settings, _get_backend
    assert (tessera.cdiv(10, 4), tessera.next_power_of_2(10), tessera.next_power_of_2(1)) == (3, 16, 1)
    assert tessera.runtime.get_num_sm(torch.device("cpu")) >= 1
    assert _get_backend() == "triton" and use_tileir_tunables() is False
    assert Settings is tessera.Settings and RefMode is tessera.RefMode


def test_get_num_sm_leaves_reserved_sms_out_and_counts_one_for_other_devices():
    import types
    threads = torch.get_num_threads()
    assert tessera.runtime.get_num_sm(torch.device("cpu"), reserved_sms=1) == max(threads - 1, 1)
    assert tessera.runtime.get_num_sm(torch.device("cpu"), reserved_sms=threads + 5) == 1
    tpu = types.SimpleNamespace(type="tpu", index=None)  # what Helion passes where torch has no "tpu"
    assert tessera.runtime.get_num_sm(tpu) == 1 and tessera.runtime.get_num_sm(tpu, reserved_sms=8) == 1


def test_num_sm_multiplier_needs_a_persistent_pid_type():
    with pytest.raises(tessera.exc.InvalidConfig, match="num_sm_multiplier=2.*persistent"):
        tessera.Config(block_sizes=[32], pid_type="flat", num_sm_multiplier=2)
    with pytest.raises(tessera.exc.ConfigError, match="num_sm_multiplier=4"):
        tessera.Config(block_sizes=[32], pid_type="xyz", num_sm_multiplier=4)
    tessera.Config(block_sizes=[32], pid_type="flat", num_sm_multiplier=1)
    tessera.Config(block_sizes=[32], pid_type="persistent_blocked", num_sm_multiplier=2)


def test_a_list_given_as_l2_grouping_is_one_entry_per_tile_loop():
    assert tessera.Config(l2_grouping=[2, 4, 2]) == tessera.Config(l2_groupings=[2, 4, 2])
    assert tessera.Config(l2_grouping=4)["l2_grouping"] == 4


def test_kernel_configs_lists_the_given_configs():
    configs = [tessera.Config(block_sizes=[16]), tessera.Config(block_sizes=[32])]
    assert tessera.kernel(add_one, configs=configs).configs == configs


# -- hl.register_tunable -------------------------------------------------------------------------

def scaled(x: torch.Tensor, name: str = "factor", fragment: Any = PowerOfTwoFragment(1, 8, 2)) -> torch.Tensor:
    out = torch.empty_like(x)
    factor = hl.register_tunable(name, fragment)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] * factor
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 37])
def test_register_tunable_takes_its_default_without_a_config_entry(mode, size):
    x = torch.randn(size)
    torch.testing.assert_close(tessera.kernel(scaled, mode=mode)(x), x * 2)


@pytest.mark.parametrize("mode", MODES)
def test_register_tunable_takes_the_configs_entry(mode):
    x = torch.randn(37)
    kernel = tessera.kernel(scaled, mode=mode, config=tessera.Config(block_sizes=[16], factor=8))
    torch.testing.assert_close(kernel(x), x * 8)


def test_register_tunable_joins_the_tuners_search_space():
    axis = next(a for a in config_space_for(tessera.kernel(scaled).bind(torch.randn(9)).plan()).axes
                if a.key == "factor")
    assert axis.choices == (1, 2, 4, 8) and axis.default == 2


def test_register_tunable_refuses_a_config_value_outside_its_fragment():
    kernel = tessera.kernel(scaled, mode="eager", config=tessera.Config(factor=3))
    with pytest.raises(exc.ConfigError, match="'factor'=3"):
        kernel(torch.randn(4))


def test_enum_fragment_offers_its_choices_in_order_with_the_first_as_default():
    fragment = EnumFragment(choices=(152, 192))
    assert fragment.choices() == (152, 192) and fragment.default() == 152


# -- the examples harness and runner -------------------------------------------------------------

def test_run_example_passes_a_matching_kernel_and_fails_a_wrong_one():
    x = torch.randn(5)
    _testing.run_example(tessera.kernel(add_one, mode="eager"), lambda t: t + 1, (x,))
    with pytest.raises(AssertionError):
        _testing.run_example(tessera.kernel(add_one, mode="eager"), lambda t: t + 2, (x,))


def add_pair(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile] + y[tile]
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_bind_takes_helions_one_tuple_of_arguments(mode):
    x, y = torch.randn(7), torch.randn(7)
    kernel = tessera.kernel(add_pair, mode=mode)
    torch.testing.assert_close(kernel.bind((x, y)).run(), x + y)
    torch.testing.assert_close(kernel.bind(x, y).run(), x + y)
    with pytest.raises(exc.KernelArgumentError):
        kernel.bind((x, y, x))
    one = tessera.kernel(add_one, mode=mode)
    torch.testing.assert_close(one.bind((x,)).run(), x + 1)  # Helion unpacks a one-tuple too


def _sum_rounding_each_step(rows: torch.Tensor) -> torch.Tensor:
    """A sloppy reference: in bf16 it rounds after every addition; in float64 it is exact enough."""
    total = rows[:, 0]
    for column in range(1, rows.shape[1]):
        total = total + rows[:, column]
    return total


@pytest.mark.parametrize("grad", [False, True])
def test_run_example_arbitrates_a_low_precision_mismatch_with_float64(grad):
    torch.manual_seed(0)
    rows = (torch.randn(64, 300) * 8).to(torch.bfloat16).requires_grad_(grad)
    accurate = lambda r: r.float().sum(1).to(r.dtype)  # noqa: E731 (rounds once)
    assert not torch.allclose(accurate(rows), _sum_rounding_each_step(rows), rtol=1e-2, atol=1e-1)
    _testing.run_example(accurate, _sum_rounding_each_step, (rows,), bwd=grad)
    off_by_far = lambda r: (r.float().sum(1) + 40).to(r.dtype)  # noqa: E731 (worse than the reference)
    with pytest.raises(AssertionError):
        _testing.run_example(off_by_far, _sum_rounding_each_step, (rows,))


def test_run_example_does_not_arbitrate_float32():
    rows = torch.randn(4, 3)
    with pytest.raises(AssertionError):
        _testing.run_example(lambda r: r.sum(1) + 1, lambda r: r.sum(1), (rows,))


@pytest.mark.parametrize("line, rewritten", [
    ("import helion", "import tessera as helion"),
    ("import helion.language as hl", "import tessera.language as hl"),
    ("from helion._testing import DEVICE", "from tessera._testing import DEVICE"),
    ("    from helion.autotuner import PowerOfTwoFragment", "    from tessera.autotuner import PowerOfTwoFragment"),
    ("import helion.exc", "import tessera.exc; import tessera as helion"),
    ("x = helion.cdiv(a, b)", "x = helion.cdiv(a, b)"),
])
def test_the_runner_rewrites_only_helion_import_lines(line, rewritten):
    assert rewrite_import_line(line) == rewritten


def test_the_runner_shrinks_literal_sizes_of_main_and_shape_tables_only():
    tree = shrink_sizes(ast.parse("shapes = [(1024, 8)]\nscale = 4096\ndef main():\n    check(4096, 64, 2560)\n"
                                  "def kernel():\n    return 4096\n"))
    assert ast.unparse(tree) == ("shapes = [(64, 8)]\nscale = 4096\n\ndef main():\n    check(256, 64, 160)\n\n"
                                 "def kernel():\n    return 4096")


def test_the_runner_shrinks_the_sizes_of_benchmark_functions_too():
    # aot_example's benchmark_* functions hold its shape tables
    tree = shrink_sizes(ast.parse("def benchmark_add():\n    for n in [1024, 8]:\n        f(n)\n"))
    assert ast.unparse(tree) == "def benchmark_add():\n    for n in [64, 8]:\n        f(n)"


# -- heuristic Configs (issue 15 item 4) ----------------------------------------------------------

def matmul_layernorm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    n = hl.specialize(y.size(1))
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m in hl.tile(m):
        acc = hl.zeros([tile_m, n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, :])
        centered = acc - acc.sum(dim=-1, keepdim=True) / n
        out[tile_m, :] = (centered * torch.rsqrt((centered * centered).sum(dim=-1, keepdim=True) / n + 1e-5)).to(out.dtype)
    return out


def test_the_heuristic_config_of_a_matmul_layernorm_fits_the_h100s_shared_memory():
    from tessera.backends.triton import heuristics
    x, y = torch.randn(256, 256, dtype=torch.float16), torch.randn(256, 400, dtype=torch.float16)
    bound = tessera.kernel(matmul_layernorm, static_shapes=True).bind(x, y)
    config = heuristic_for(bound)
    facts = kernel_facts(bound.plan(tessera.Config()), tessera.backends.get("triton"))
    wanted = {f"block_sizes[{i}]": b for i, b in enumerate(config["block_sizes"])}
    wanted["num_stages"] = config["num_stages"]
    assert facts.whole_elements == 512
    assert max(heuristics.dot_shared_memory(facts, wanted)) <= heuristics.H100_SHARED_MEMORY
    assert config["block_sizes"][0] >= 16 and config["block_sizes"][1] >= 16


@pytest.mark.parametrize("mode", MODES)
def test_the_matmul_layernorm_runs_with_its_heuristic_config(mode):
    x, y = torch.randn(40, 48), torch.randn(48, 24)
    out = tessera.kernel(matmul_layernorm, mode=mode)(x, y)
    reference = torch.nn.functional.layer_norm(x @ y, [24], eps=1e-5)
    torch.testing.assert_close(out, reference, rtol=1e-3, atol=1e-3)


def blocked_row_sums(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    block = hl.register_block_size(m)
    out = torch.zeros([m], dtype=torch.float32, device=x.device)
    for rows in hl.tile(m, block_size=block):
        out[rows] = x[rows, :].sum(-1)
    return out


def test_the_heuristic_gives_a_register_block_size_dim_more_than_one_row():
    x = torch.randn(200, 64)
    config = heuristic_for(tessera.kernel(blocked_row_sums).bind(x))
    assert config["block_sizes"][0] >= 16
    torch.testing.assert_close(tessera.kernel(blocked_row_sums, mode="interpret", config=config)(x), x.sum(-1),
                               rtol=1e-4, atol=1e-4)


# -- hl.load / hl.store with several tile indices: one output dim each (Helion's outer indexing) ---

def outer_copy(x: torch.Tensor) -> torch.Tensor:
    m, n = x.size()
    out = torch.zeros([m, n], dtype=x.dtype, device=x.device)
    for t0, t1 in hl.tile([m, n]):
        hl.store(out, [t0.index, t1.index], hl.load(x, [t0.index, t1.index]) * 2)
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (33, 17)])
def test_load_and_store_give_each_tile_index_its_own_dim(mode, shape):
    x = torch.randn(shape)
    out = tessera.kernel(outer_copy, mode=mode, config=tessera.Config(block_sizes=[4, 8]))(x)
    torch.testing.assert_close(out, x * 2)


def branchy(x: torch.Tensor, wide: bool) -> torch.Tensor:
    out = torch.empty_like(x)
    if wide:
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + 1
    else:
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] + 2
    return out


def test_a_tile_loop_the_chosen_config_does_not_reach_takes_the_default_block_not_an_error():
    kernel = tessera.kernel(branchy, mode="interpret")
    x = torch.randn(9)
    chosen = config_for_call(kernel, "interpret", (x, True), {})
    assert chosen.fills_missing_blocks
    narrowed = tessera.Config(block_sizes=chosen["block_sizes"][:1]).chosen()
    torch.testing.assert_close(tessera.kernel(branchy, mode="interpret", config=narrowed)(x, False), x + 2)


def test_a_users_config_with_too_few_block_sizes_is_still_refused():
    with pytest.raises(exc.InvalidConfig, match="expected 2 block sizes, got 1"):
        tessera.kernel(branchy, mode="interpret", config=tessera.Config(block_sizes=[16]))(torch.randn(9), False)


def test_another_helion_backend_is_accepted_and_runs_through_triton(capfd):
    kernel = tessera.kernel(add_one, mode="interpret", backend="cute")
    assert kernel.settings.backend == "triton"
    torch.testing.assert_close(kernel(torch.zeros(3)), torch.ones(3))
    assert "backend='cute' is accepted but ignored" in capfd.readouterr().err


def test_an_unknown_backend_is_refused():
    with pytest.raises(exc.ConfigError, match="unknown backend 'cuda'"):
        tessera.kernel(add_one, backend="cuda")


def concat_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0), x.size(1) + y.size(1)], dtype=x.dtype, device=x.device)
    n1 = x.size(1)
    for tile_m in hl.tile(x.size(0)):
        out[tile_m, :n1] = x[tile_m, :]
        out[tile_m, n1:] = y[tile_m, :]
    return out


def test_the_heuristic_counts_whole_dims_against_a_programs_elements():
    x, y = torch.randn(1500, 400), torch.randn(1500, 600)
    config = heuristic_for(tessera.kernel(concat_rows).bind(x, y))
    assert 1 < config["block_sizes"][0] * 1024 <= 8192  # rows x the padded whole row: 8 KB of fp32
    out = tessera.kernel(concat_rows, mode="interpret", config=config)(x[:37], y[:37])
    torch.testing.assert_close(out, torch.cat([x[:37], y[:37]], dim=1))


MULTIPLIER = tessera.autotuner.IntegerFragment(1, 10, 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 37])
def test_a_tunable_named_near_an_ignored_helion_key_is_a_tunable(mode, size):
    # `multiplier` resembles Helion's num_sm_multiplier (ignored by Tessera): it is the user's own key
    x = torch.randn(size)
    kernel = tessera.kernel(scaled, mode=mode, config=tessera.Config(block_sizes=[16], multiplier=4))
    torch.testing.assert_close(kernel(x, "multiplier", MULTIPLIER), x * 4)
    with pytest.raises(exc.ConfigError, match="did you mean 'num_warps'"):
        tessera.Config(warps=4)  # near a key Tessera honours: a misspelling


def test_config_spec_lists_block_sizes_and_user_tunables():
    x = torch.randn(20)
    spec = tessera.kernel(scaled).bind(x, "multiplier", MULTIPLIER).config_spec
    assert [axis.name for axis in spec.block_sizes] == ["block_sizes[0]"]
    assert isinstance(spec.user_defined_tunables["multiplier"], tessera.autotuner.IntegerFragment)
    assert "multiplier=3" in repr(spec.default_config())


@pytest.mark.parametrize("size", [1, 50])
def test_bound_set_config_runs_later_calls_under_that_config(size):
    kernel = tessera.kernel(matmul, dot_precision="ieee")
    big = (torch.randn(64, 32), torch.randn(32, 48))
    config = kernel.bind(big).config_spec.default_config()
    small = (torch.randn(size, 32), torch.randn(32, 48))
    bound = kernel.bind(small)
    bound.set_config(config)
    torch.testing.assert_close(bound(*small), small[0] @ small[1], atol=1e-4, rtol=1e-4)


def test_helions_loops_module_path_has_its_warp_specialize_probe():
    from tessera.language import loops
    assert loops._supports_warp_specialize() in (True, False)


def test_config_reads_its_keys_as_attributes_with_helions_defaults():
    config = tessera.Config(block_sizes=[8, 16], num_warps=8, indexing="block_ptr", l2_groupings=[4])
    assert (config.block_sizes, config.num_warps, config.indexing, config.l2_groupings) == ([8, 16], 8, "block_ptr", [4])
    assert (config.num_stages, config.pid_type, config.reduction_loops, config.range_num_stages) == (1, "flat", [], [])
    config.block_sizes.append(32)  # a copy: the Config stays as written
    assert config["block_sizes"] == [8, 16]
    with pytest.raises(AttributeError):
        config.not_a_key


def test_config_round_trips_through_json_and_a_file(tmp_path):
    config = tessera.Config(block_sizes=[8, 16], num_warps=2, reduction_loops=[None], pid_type="xyz")
    assert tessera.Config.from_json(config.to_json()) == config
    assert tessera.Config.from_dict(dict(config)) == config
    path = tmp_path / "configs" / "kernel.json"
    config.save(path)
    assert tessera.Config.load(path) == config and [p.name for p in path.parent.iterdir()] == ["kernel.json"]


def _grouped_matmul(x, y):
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n])
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
@pytest.mark.parametrize("size", [1, 37])
def test_block_sizes_grouped_per_tile_loop_as_helion_writes_them(mode, size):
    config = tessera.Config(block_sizes=[[16, 32], 16])
    assert config["block_sizes"] == [16, 32, 16]
    x, y = torch.randn(size, 20), torch.randn(20, size)
    got = tessera.kernel(_grouped_matmul, mode=mode, config={"block_sizes": [[16, 32], 16]}, dot_precision="ieee")(x, y)
    torch.testing.assert_close(got, x @ y, rtol=1e-4, atol=1e-4)
