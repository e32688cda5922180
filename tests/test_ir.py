"""The traced kernel as a value: its text form, the passes one by one, and immutability.

The expected texts below are literal: a change to tracing or to a pass that changes them must
change them here too, on purpose.
"""
from __future__ import annotations

import dataclasses

import pytest
import sympy
import torch

import tessera
import tessera.language as hl
from tessera import backends, exc
from tessera.backends.base import LoweringOptions
from tessera.ir.graph import AxisKind, KernelIR, Op
from tessera.ir.passes import PIPELINE, decide_masks, schedule_row_passes, settle_row_loop


@tessera.kernel
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size(0)):
        out[tile] = x[tile] + y[tile]
    return out


@tessera.kernel
def softmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        row = x[tile, :]
        exps = torch.exp(row - row.amax(-1, keepdim=True))
        out[tile, :] = exps / exps.sum(-1, keepdim=True)
    return out


@tessera.kernel
def row_argmax(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty([x.size(0)], dtype=torch.int64, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = x[tile, :].argmax(-1)
    return out


ADD_IR = """\
kernel add(out, out_size0, x, x_size0, y, y_size0, end_0)
  grid: (0, end_0, step 64)
  axis t0: launch [offset_0 + 64) < end_0, masked
  guard: end_0 <= x_size0  # tile of x dim 0 stays in bounds
  guard: end_0 <= y_size0  # tile of y dim 0 stays in bounds
  guard: end_0 <= out_size0  # tile of out dim 0 stays in bounds
  v0: f32[t0] = load(None) tensor=x accesses=(t0) eviction_policy=None
  v1: f32[t0] = load(None) tensor=y accesses=(t0) eviction_policy=None
  v2: f32[t0] = elementwise(v0, v1) fn='add' compute=f32
  v3: none = store(v2, None) tensor=out accesses=(t0) atomic=None sem=None"""


def test_the_ir_of_a_kernel_prints_as_fixed_text() -> None:
    x = torch.randn(100)
    assert str(add.bind(x, x).to_ir(tessera.Config(block_sizes=[64]))) == ADD_IR


def test_tracing_twice_prints_the_same_text() -> None:
    x = torch.randn(10, 100)
    config = tessera.Config(block_sizes=[4], reduction_loops=[32])
    assert str(softmax.bind(x).to_ir(config)) == str(softmax.bind(x).to_ir(config))


def test_a_chunked_row_is_scheduled_into_passes() -> None:
    ir = softmax.bind(torch.randn(10, 100)).to_ir(tessera.Config(block_sizes=[4], reduction_loops=[32]))
    # the sum of exp(x - max) shares the pass of the max (an online sum), then the normalized store
    assert str(ir).split("row schedule:\n")[1] == (
        "    pass 0: v0 -> v1, v4 (online sum of exp)\n"
        "    pass 1: v0, v2, v3, v5, v6")


def test_the_pipeline_lists_its_passes_in_order() -> None:
    assert [step.name for step in PIPELINE] == ["settle_row_loop", "fold_scales_out_of_extrema", "peel_tails",
                                                "decide_masks", "schedule_row_passes"]
    assert all(step.why for step in PIPELINE)


def _traced(kernel: tessera.Kernel, config: tessera.Config, *args: torch.Tensor) -> KernelIR:
    """The IR straight from the tracer, before any pass."""
    from tessera.compiler import trace
    from tessera.runtime.compiled import CompiledRunner
    bound = kernel.bind(*args)
    captured = []
    original = CompiledRunner.request

    def record(self, *request_args):  # type: ignore[no-untyped-def]
        request = original(self, *request_args)
        captured.append(request)
        return request
    CompiledRunner.request = record  # type: ignore[method-assign]  (IRRecorder inherits it)
    try:
        bound.to_ir(config)
    except exc.ConfigError:
        pass  # a pass refused it: the traced IR is what the test wants
    finally:
        CompiledRunner.request = original  # type: ignore[method-assign]
    return trace(captured[0])[0]


def test_decide_masks_drops_the_mask_of_a_tile_that_divides_its_extent() -> None:
    traced = _traced(add, tessera.Config(block_sizes=[64]), torch.randn(128), torch.randn(128))
    assert all(axis.needs_mask for axis in traced.launch_axes)  # the tracer assumes nothing
    static = dataclasses.replace(traced.launch_axes[0], range_end=sympy.Integer(128))
    decided = decide_masks(traced.replace(launch_axes=(static,)))
    assert not decided.launch_axes[0].needs_mask
    assert decide_masks(traced).launch_axes[0].needs_mask  # a runtime extent may leave a tail


def test_settle_row_loop_puts_an_unsplittable_long_row_back_into_one_block() -> None:
    long = torch.randn(2, 40000)  # longer than ONE_BLOCK_ROW_LIMIT: looped unless the body forbids it
    traced = _traced(row_argmax, tessera.Config(block_sizes=[1]), long)
    assert traced.row_loop is not None and not traced.row_loop.requested
    settled = settle_row_loop(traced)
    assert settled.row_loop is None
    assert settled.whole_axes[0].block == 65536 and settled.whole_axes[0].kind is AxisKind.WHOLE
    assert any("fits block 65536" in reason for _, reason in settled.guards)
    assert traced.row_loop.axis.block == 4096  # the input IR is unchanged


def test_schedule_row_passes_refuses_a_requested_chunking_it_cannot_do() -> None:
    traced = _traced(row_argmax, tessera.Config(block_sizes=[1], reduction_loops=[64]), torch.randn(2, 100))
    with pytest.raises(exc.ConfigError, match="reduction_loops\\[0\\]"):
        schedule_row_passes(traced)


def test_lowering_does_not_change_the_ir() -> None:
    ir = softmax.bind(torch.randn(10, 100)).to_ir(tessera.Config(block_sizes=[4], reduction_loops=[32]))
    before = str(ir)
    backend = backends.get("triton")
    first = backend.lower(ir, tessera.Config(block_sizes=[4], reduction_loops=[32]), LoweringOptions(interpret=True))
    second = backend.lower(ir, tessera.Config(block_sizes=[4], reduction_loops=[32]), LoweringOptions(interpret=True))
    assert str(ir) == before and first.source == second.source


def test_ir_nodes_are_frozen() -> None:
    ir = add.bind(torch.randn(8), torch.randn(8)).to_ir(tessera.Config(block_sizes=[8]))
    node = ir.body.nodes[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.name = "renamed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        node.params["tensor"] = None  # type: ignore[index]
    assert node.op is Op.LOAD


def test_tessera_log_ir_prints_the_ir_after_tracing_and_each_changing_pass(monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture,
                                                                            device: torch.device) -> None:
    monkeypatch.setenv("TESSERA_LOG", "ir")
    kernel = tessera.kernel(softmax.fn, config=tessera.Config(block_sizes=[4], reduction_loops=[32]))
    kernel(torch.randn(6, 50, device=device))
    printed = capsys.readouterr().err
    assert "IR of softmax after tracing:\nkernel softmax(" in printed
    assert "IR of softmax after schedule_row_passes:" in printed and "row schedule:" in printed


def test_verify_names_a_node_that_reads_a_value_defined_nowhere() -> None:
    from tessera.ir.graph import Block
    from tessera.ir.verify import IRVerificationError, verify
    ir = add.bind(torch.randn(8), torch.randn(8)).to_ir(tessera.Config(block_sizes=[8]))
    without_loads = Block(tuple(node for node in ir.body.nodes if node.op is not Op.LOAD))
    with pytest.raises(IRVerificationError, match="v2 reads v0 before it is defined"):
        verify(ir.replace(body=without_loads), after="a broken pass")


def test_verify_names_an_axis_no_loop_defines() -> None:
    from tessera.ir.verify import IRVerificationError, verify
    ir = add.bind(torch.randn(8), torch.randn(8)).to_ir(tessera.Config(block_sizes=[8]))
    with pytest.raises(IRVerificationError, match="axis t0, which no loop or launch defines"):
        verify(ir.replace(launch_axes=()))


def test_a_rebuilder_hook_replaces_each_node_once_and_every_use_reads_the_replacement() -> None:
    from tessera.ir.graph import Node, Rebuilder, walk
    from tessera.ir.verify import verify
    ir = add.bind(torch.randn(8), torch.randn(8)).to_ir(tessera.Config(block_sizes=[8]))
    finished: list[Node] = []

    class Renamed(Rebuilder):
        def finish(self, original: Node, rebuilt: Node) -> Node:
            finished.append(original)
            return dataclasses.replace(rebuilt, name=f"{rebuilt.name}_renamed")

    body = Renamed({}).block(ir.body)
    nodes = list(walk(body))
    assert finished == list(walk(ir.body))  # once each, in order
    assert all(node.name.endswith("_renamed") for node in nodes)
    assert all(value in nodes for node in nodes for value in node.inputs if isinstance(value, Node))
    verify(ir.replace(body=body), after="a renaming rebuild")


def test_a_rebuilder_places_new_nodes_right_before_the_node_being_rebuilt() -> None:
    from tessera.ir.graph import Node, Rebuilder
    ir = add.bind(torch.randn(8), torch.randn(8)).to_ir(tessera.Config(block_sizes=[8]))
    load = next(node for node in ir.body.nodes if node.op is Op.LOAD)
    marker = dataclasses.replace(load, name="marker")

    class Marking(Rebuilder):
        def finish(self, original: Node, rebuilt: Node) -> Node:
            if original.op is Op.STORE:
                self.place_before(marker)
            return rebuilt

    before = list(ir.body.nodes)
    after = list(Marking({}).block(ir.body).nodes)
    store = next(index for index, node in enumerate(before) if node.op is Op.STORE)
    assert after == before[:store] + [marker] + before[store:]
