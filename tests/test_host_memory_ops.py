"""hl.load / hl.store / hl.atomic_* in a kernel's host code (outside tile loops), as Helion's
reference mode runs them: an eager access of the host tensors, in every mode, with the same
checks as inside a loop (a store writing different values to one element is refused)."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl

MODES = ("eager", "interpret")


def scatter_on_the_host(out: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    hl.store(out, [index], values, extra_mask=index >= 0)
    stored = hl.load(out, [index.clamp(min=0)])  # a gather: a copy
    hl.atomic_add(out, [index.clamp(min=0)], torch.ones_like(values))
    return stored


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [1, 3, 7])
def test_memory_ops_in_host_code_act_on_the_host_tensors(mode, size):
    out = torch.zeros(8)
    index = torch.randperm(8)[:size]
    index[0] = -1  # masked out of the store
    values = torch.randn(size)
    stored = tessera.kernel(scatter_on_the_host, mode=mode)(out, index, values)
    expected = torch.zeros(8)
    expected[index[1:]] = values[1:]
    torch.testing.assert_close(stored, expected[index.clamp(min=0)])
    expected.index_add_(0, index.clamp(min=0), torch.ones(size))
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("mode", MODES)
def test_a_host_store_writing_two_values_to_one_element_is_refused(mode):
    def duplicate(out: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
        hl.store(out, [index], values)

    with pytest.raises(tessera.exc.DuplicateStoreIndicesError) as caught:
        tessera.kernel(duplicate, mode=mode)(torch.zeros(4), torch.tensor([0, 0, 1]), torch.tensor([1.0, 2.0, 3.0]))
    assert "test_host_memory_ops.py" in str(caught.value)
