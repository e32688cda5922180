"""Products over a whole dimension too wide for shared memory (`x[t, :] @ w[:, :]`, Helion's
se_block and squeeze_and_excitation_net) run as a loop over that dimension in the generated code:
same results in every mode, and the code Triton compiles for an H100 fits its shared memory."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from sm90_compile import H100_SHARED_MEMORY, sm90_shared_memory

T = torch.Tensor


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def excite(x: T, w: T) -> T:
    """2 * x * sigmoid(x @ w): x read whole once, used by the product and after it."""
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        x_tile = x[tile_m, :]
        gate = torch.sigmoid(x_tile @ w[:, :])
        out[tile_m, :] = (2.0 * x_tile.to(torch.float32) * gate).to(x.dtype)
    return out


def scaled_rows_product(x: T, scale: T, w: T, bias: T) -> T:
    """Operands computed lane by lane from loads (a row scale without K, a cast, a transpose),
    inside an inner tile loop, with an accumulator."""
    out = torch.empty([x.size(0), w.size(0)], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        for tile_n in hl.tile(w.size(0)):
            acc = bias[tile_n][None, :].to(torch.float32) + hl.zeros([tile_m, tile_n])
            left = (x[tile_m, :].to(torch.float32) * scale[tile_m][:, None]).relu()
            acc = hl.dot(left, w[tile_n, :].to(torch.float32).T, acc=acc)
            out[tile_m, tile_n] = acc
    return out


@pytest.mark.parametrize(("m", "n"), [(1, 300), (37, 600), (64, 1024)])
def test_a_whole_weight_too_big_for_shared_memory_is_multiplied_in_chunks(m: int, n: int,
                                                                             device: torch.device) -> None:
    x = torch.randn(m, n, device=device)
    w = torch.randn(n, n, device=device) / n ** 0.5
    expected = 2.0 * x * torch.sigmoid(x @ w)
    for mode in _modes(device):
        kernel = tessera.kernel(excite, mode=mode, static_shapes=True, dot_precision="ieee")
        torch.testing.assert_close(kernel(x, w), expected, atol=1e-4, rtol=1e-4, msg=mode)
    code = tessera.kernel(excite, mode="interpret" if device.type == "cpu" else "compiled",
                          static_shapes=True).bind(x, w).to_triton_code()
    assert "tl.range(0, " in code and "tl.dot(" in code and "acc=" in code  # the K loop


@pytest.mark.parametrize(("m", "n", "k"), [(1, 17, 513), (45, 40, 1000)])
def test_chunked_operands_may_be_computed_cast_and_transposed(m: int, n: int, k: int, device: torch.device) -> None:
    x = torch.randn(m, k, device=device, dtype=torch.float16)
    scale = torch.rand(m, device=device) + 0.5
    w = (torch.randn(n, k, device=device) / k ** 0.5).to(torch.float16)
    bias = torch.randn(n, device=device)
    expected = bias[None, :] + (x.float() * scale[:, None]).relu() @ w.float().T
    for mode in _modes(device):
        kernel = tessera.kernel(scaled_rows_product, mode=mode, dot_precision="ieee",
                                config=tessera.Config(block_sizes=[64, 128], num_stages=3))
        torch.testing.assert_close(kernel(x, scale, w, bias), expected, atol=1e-3, rtol=1e-3, msg=mode)


def test_the_heuristic_config_of_a_whole_weight_product_fits_an_h100() -> None:
    """Compiled for sm_90 on this machine (Triton ships ptxas): Triton's own figure of the shared
    memory a program needs is within the H100's 227 KB (it was 1 MB: the whole w)."""
    x = torch.randn(1024, 300)
    w = torch.randn(300, 300)
    (shared,) = sm90_shared_memory(tessera.kernel(excite, static_shapes=True), (x, w))
    assert 0 < shared <= H100_SHARED_MEMORY


def test_running_out_of_shared_memory_names_the_config_keys_to_change() -> None:
    """Triton's OutOfResources (a Config too big for the GPU) is reported as such, naming
    block_sizes and num_stages, not as a Tessera bug."""
    from tessera import exc
    from tessera.backends.triton.modules import compile_error

    class OutOfResources(Exception):  # Triton's class, by name
        pass

    error = compile_error(OutOfResources("out of resource: shared memory, Required: 296968, Hardware limit: 232448"),
                          "/tmp/k.py", "def k_kernel(x):\n    pass\n", "k_kernel", {}, None)
    assert isinstance(error, exc.OutOfResourcesError) and not isinstance(error, exc.InternalError)
    text = str(error)
    assert "Required: 296968" in text and "block_sizes" in text and "num_stages" in text
    assert "Tessera bug" not in text and "internal error" not in text


def test_ptxas_refusing_inline_assembly_is_the_users_assembly_not_a_tessera_bug() -> None:
    """Helion's blackwell_attention on the H100: its inline PTX holds Blackwell instructions."""
    from tessera import exc
    from tessera.backends.triton.modules import compile_error

    class PTXASError(Exception):  # Triton's class, by name
        pass

    source = "def k_kernel(x):\n    v = tl.inline_asm_elementwise('tcgen05.ld ...', '=r,r', [x], dtype=tl.int32, is_pure=True, pack=1)\n"
    log = ("Repro command: ptxas -lineinfo ...\n"
           "ptxas /tmp/k.ptx, line 120; error   : Instruction 'tcgen05.ld' not supported on .target 'sm_90a'\n"
           "ptxas fatal   : Ptx assembly aborted due to errors")
    error = compile_error(PTXASError(log), "/tmp/k.py", source, "k_kernel", {}, None)
    assert isinstance(error, exc.InlineAsmError) and not isinstance(error, exc.InternalError)
    assert "tcgen05.ld" in str(error) and "Tessera bug" not in str(error) and "hl.inline_asm_elementwise" in str(error)
    plain = compile_error(PTXASError(log), "/tmp/k.py", "def k_kernel(x):\n    pass\n", "k_kernel", {}, None)
    assert isinstance(plain, exc.BackendCompileError)  # without inline assembly: ours
