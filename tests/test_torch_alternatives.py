"""The language reference's "instead" column is true: each alternative written for an unsupported
torch op, applied to a tile of rows inside a kernel, equals the torch op on the whole tensor (in
eager mode and in the generated code), and a traced kernel that calls one of those ops is refused
at the user's line with that advice."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from tessera.ir.torch_alternatives import ALTERNATIVES, ALTERNATIVES_BY_FUNCTION, Alternative
from tests.marked_lines import marked_line

F = torch.nn.functional
CHECKED = [alternative for alternative in ALTERNATIVES if alternative.instead]
CONFIG = tessera.Config(block_sizes=[4])


def _modes(device: torch.device) -> list[str]:
    return ["eager", "compiled" if device.type == "cuda" else "interpret"]


@pytest.mark.parametrize("alternative", CHECKED, ids=[a.spelling for a in CHECKED])
@pytest.mark.parametrize("shape", [(5, 37), (1, 1)])
def test_the_written_alternative_equals_the_torch_op(alternative: Alternative, shape: tuple[int, int],
                                                     device: torch.device) -> None:
    x = torch.randn(shape, device=device) * 0.5  # keeps tan away from its poles (sin/cos there lose digits)
    expected = eval(alternative.call, {"torch": torch, "F": F, "x": x})

    def rows(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            value = eval(alternative.instead, {"torch": torch, "x": x[tile, :]})
            if out.dim() == 2:
                out[tile, :] = value
            else:
                out[tile] = value
        return out

    for mode in _modes(device):
        out = tessera.kernel(config=CONFIG, mode=mode)(rows)(torch.zeros_like(expected), x)
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5, msg=f"{alternative.instead} in {mode}")


def test_every_alternative_covers_torch_callables_or_says_why_not() -> None:
    for alternative in ALTERNATIVES:
        assert alternative.advice
        assert bool(alternative.call) == bool(alternative.instead), alternative.spelling


def test_an_unsupported_torch_op_is_refused_with_the_written_alternative(device: torch.device) -> None:
    if device.type == "cuda":
        pytest.skip("checked on CPU (the error comes from tracing)")

    @tessera.kernel(config=CONFIG, mode="interpret")
    def reverse(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        for tile in hl.tile(x.size(0)):
            out[tile] = x[tile] * torch.nonzero(x[tile]).size(0)  # line: call
        return out

    x = torch.randn(5)
    with pytest.raises(exc.UnsupportedOperationError) as raised:
        reverse(torch.empty(5), x)
    text = str(raised.value)
    assert "torch.nonzero is not supported" in text
    assert ALTERNATIVES_BY_FUNCTION[torch.nonzero].advice in text
    assert "out[tile] = x[tile] * torch.nonzero(x[tile]).size(0)  # line: call" in text
    number, _ = marked_line(__file__, "call")
    assert f"{__file__}:{number}:" in text


def test_no_alternative_is_listed_for_an_op_that_has_a_primitive() -> None:
    from tessera.ir.primitive import TORCH_FUNCTIONS
    supported = [spelling for spelling, alternative in ((a.spelling, a) for a in ALTERNATIVES)
                 if any(function in TORCH_FUNCTIONS for function in alternative.functions)]
    assert supported == [], "these now have primitives: drop them from tessera/ir/torch_alternatives.py"
