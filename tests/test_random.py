"""`hl.rand` / `hl.randint` (issue 15): Philox 4x32-10 keyed by the seed and each element's number
in the loops' full extents, so the same seed gives the same numbers in every mode and under any
block sizes; checked against the Random123 known answer and against each other."""
from __future__ import annotations

import pytest
import torch

import tessera
import tessera.language as hl
from tessera import exc
from tessera.language.rng import draw_seeds, philox_first_word

T = torch.Tensor
BLOCKS = ([4, 16], [2, 2], [8, 64])


def _modes(device: torch.device) -> tuple[str, ...]:
    return ("eager", "compiled") if device.type == "cuda" else ("eager", "interpret")


def uniform_tiles(x: T, seed: int) -> T:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile_m, tile_n in hl.tile(x.size()):
        out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=seed)
    return out


def integer_rows(x: T, seed: int) -> T:
    out = torch.empty(x.size(0), 6, dtype=torch.int32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        out[tile_m, :] = hl.randint([tile_m, 6], low=-3, high=17, seed=seed)
    return out


def test_philox_matches_the_random123_known_answer() -> None:
    # Philox4x32-10 with key (0, 0) and counter (0, 0, 0, 0): first word 0x6627e8d5
    assert int(philox_first_word(0, torch.tensor(0))) == 0x6627E8D5


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (17, 3)], ids=str)
def test_rand_is_the_same_in_every_mode_and_under_any_block_sizes(shape: tuple[int, int],
                                                                   device: torch.device) -> None:
    x = torch.zeros(shape, device=device)
    results = [tessera.kernel(uniform_tiles, mode=mode, config=tessera.Config(block_sizes=blocks))(x, 123).cpu()
               for mode in _modes(device) for blocks in BLOCKS]
    for result in results[1:]:
        assert torch.equal(result, results[0])
    assert results[0].min() >= 0 and results[0].max() < 1


def test_rand_is_uniform_and_depends_on_the_seed(device: torch.device) -> None:
    x = torch.zeros(100, 100, device=device)
    kernel = tessera.kernel(uniform_tiles, mode=_modes(device)[1], config=tessera.Config(block_sizes=[16, 32]))
    first, second = kernel(x, 1).cpu(), kernel(x, 2).cpu()
    assert abs(first.mean().item() - 0.5) < 0.01 and abs(first.std().item() - (1 / 12) ** 0.5) < 0.01
    assert (first == second).float().mean() < 0.001


@pytest.mark.parametrize("shape", [(5, 37), (1, 1)], ids=str)
def test_randint_covers_its_range_the_same_in_every_mode(shape: tuple[int, int], device: torch.device) -> None:
    x = torch.zeros(shape, device=device)
    results = [tessera.kernel(integer_rows, mode=mode, config=tessera.Config(block_sizes=[blocks[0]]))(x, 9).cpu()
               for mode in _modes(device) for blocks in BLOCKS]
    for result in results[1:]:
        assert torch.equal(result, results[0])
    assert results[0].dtype == torch.int32 and results[0].min() >= -3 and results[0].max() < 17
    many = tessera.kernel(integer_rows, mode=_modes(device)[1])(torch.zeros(64, 1, device=device), 9)
    assert set(many.flatten().tolist()) == set(range(-3, 17))


def spaced_offsets(x: T, seed: int) -> T:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.rand([], seed=seed, offsets=tile.index.to(torch.int64) * 3)
    return out


def test_a_one_element_tensor_seed_and_explicit_offsets(device: torch.device) -> None:
    x = torch.zeros(7, 5, device=device)
    plain = tessera.kernel(uniform_tiles, mode="eager", config=tessera.Config(block_sizes=[4, 4]))(x, 77).cpu()
    flat = tessera.kernel(uniform_tiles, mode="eager", config=tessera.Config(block_sizes=[4, 4]))(
        torch.zeros(1, 30, device=device), 77).cpu().flatten()
    for mode in _modes(device):
        config = tessera.Config(block_sizes=[4, 2])
        seeded = tessera.kernel(uniform_tiles, mode=mode, config=config)(x, torch.tensor([77], device=device))
        assert torch.equal(seeded.cpu(), plain), mode
        spaced = tessera.kernel(spaced_offsets, mode=mode, config=tessera.Config(block_sizes=[4]))(
            torch.zeros(10, device=device), 77)
        assert torch.equal(spaced.cpu(), flat[::3][:10]), mode


def rand_in_inner_loop(x: T, seed: int) -> T:
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(x.size(0)):
        for tile_n in hl.tile(2, x.size(1)):
            out[tile_m, tile_n] = hl.rand([tile_m, tile_n], seed=seed)
    return out


def test_rand_in_an_inner_loop_numbers_elements_by_the_loop_extent(device: torch.device) -> None:
    x = torch.zeros(5, 9, device=device)
    results = [tessera.kernel(rand_in_inner_loop, mode=mode, config=tessera.Config(block_sizes=blocks))(x, 5).cpu()
               for mode in _modes(device) for blocks in ([4, 2], [8, 4])]
    for result in results[1:]:
        assert torch.equal(result[:, 2:], results[0][:, 2:])
    expected = philox_first_word(5, torch.arange(5)[:, None] * 7 + torch.arange(2, 9)[None, :])
    signed = torch.where(expected >= 2 ** 31, expected - 2 ** 32, expected)
    assert torch.equal(results[0][:, 2:], torch.where(signed < 0, -signed - 1, signed).float() * 4.6566127342e-10)


def bad_range(x: T) -> T:
    out = torch.empty(x.shape, dtype=torch.int32)
    for tile in hl.tile(x.size(0)):
        out[tile] = hl.randint([tile], low=5, high=5, seed=1)
    return out


def test_an_empty_randint_range_is_refused_in_every_mode() -> None:
    for mode in ("eager", "interpret"):
        with pytest.raises(exc.TesseraError, match=r"the range \[5, 5\) is empty"):
            tessera.kernel(bad_range, mode=mode)(torch.zeros(3))


def four_streams(x: T, seed: int) -> tuple[T, T, T, T, T]:
    w0, w1, w2, w3, single = (torch.empty_like(x) for _ in range(5))
    for tile in hl.tile(x.size(0)):
        numbers = tile.index.to(torch.int64) * 3 + 1
        r0, r1, r2, r3 = hl.rand4x(seed, numbers)
        w0[tile], w1[tile], w2[tile], w3[tile] = r0, r1, r2, r3
        single[tile] = hl.rand([tile], seed=seed, offsets=numbers)
    return w0, w1, w2, w3, single


@pytest.mark.parametrize("size", [1, 37, 64])
def test_rand4x_gives_the_four_philox_words_the_same_in_every_mode(size: int, device: torch.device) -> None:
    x = torch.zeros(size, device=device)
    results = [[r.cpu() for r in tessera.kernel(four_streams, mode=mode, config=tessera.Config(block_sizes=[b]))(x, 9)]
               for mode in _modes(device) for b in (4, 16)]
    for result in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(result, results[0]))
    first, *others, single = results[0]
    assert torch.equal(first, single)  # word 0 is hl.rand's number
    assert all(0 <= r.min() and r.max() < 1 for r in results[0])
    assert all(not torch.equal(first, other) for other in others) or size == 1


def no_offsets(x: T) -> T:
    for tile in hl.tile(x.size(0)):
        x[tile] = hl.rand4x(1, None)[0]
    return x


def test_rand4x_without_offsets_is_refused() -> None:
    with pytest.raises(exc.TesseraError, match="offsets"):
        tessera.kernel(no_offsets, mode="interpret")(torch.zeros(3))


# -- torch.rand_like & co. inside tile loops: seeded from torch's generator at each launch ------
def noisy(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m, tile_n in hl.tile(x.size()):
        v = x[tile_m, tile_n]
        out[tile_m, tile_n] = torch.where(torch.rand_like(v) > 0.5, v, 0.0) + torch.randn_like(v)
    return out


def _add_noise(v: T) -> T:
    return v + torch.rand_like(v)


def noisy_rows(x: T) -> T:
    out = torch.empty_like(x)
    for tile_m in hl.tile(x.size(0)):
        total = hl.zeros([tile_m], dtype=torch.float32)
        for tile_n in hl.tile(x.size(1)):  # one call site in an inner loop: one seed, numbered by position
            v = x[tile_m, tile_n]
            total += (v + torch.rand_like(v)).sum(1)
        out[tile_m, 0] = total + _add_noise(total)  # a helper called twice: two call sites, two seeds
    return out


@pytest.mark.parametrize("shape", [(5, 37), (1, 1), (17, 3)], ids=str)
def test_torch_random_functions_are_the_same_in_every_mode_and_block_size_after_manual_seed(
        shape: tuple[int, int], device: torch.device) -> None:
    x = torch.randn(shape, device=device)
    runs = []
    for mode in _modes(device):
        for blocks in BLOCKS:
            torch.manual_seed(7)
            kernel = tessera.kernel(noisy, mode=mode, config=tessera.Config(block_sizes=blocks))
            first, second = kernel(x).cpu(), kernel(x).cpu()
            runs.append((first, second, torch.rand(3, device=device).cpu()))  # the generator ends in one place
    for first, second, after in runs[1:]:
        torch.testing.assert_close(first, runs[0][0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(second, runs[0][1], atol=1e-5, rtol=1e-5)
        assert torch.equal(after, runs[0][2])
    if x.numel() > 1:
        assert not torch.equal(runs[0][0], runs[0][1])  # each launch draws new seeds


def test_torch_rand_like_follows_the_philox_stream_of_a_seed_drawn_at_launch(device: torch.device) -> None:
    x = torch.zeros(9, 21, device=device)
    torch.manual_seed(3)
    seed = int(torch.randint(2 ** 63 - 1, [2], device=device)[0])
    word = philox_first_word(seed, torch.arange(x.numel()).reshape(x.shape))
    signed = torch.where(word >= 2 ** 31, word - 2 ** 32, word)
    uniform = torch.where(signed < 0, -signed - 1, signed).float() * 4.6566127342e-10
    for mode in _modes(device):
        torch.manual_seed(3)
        out = tessera.kernel(noisy, mode=mode, config=tessera.Config(block_sizes=[4, 8]))(x).cpu()
        normal = out - torch.where(uniform > 0.5, x.cpu(), 0.0)  # x is 0: only the normal part remains
        assert abs(normal.mean().item()) < 0.5 and torch.isfinite(normal).all()


def test_random_calls_in_inner_loops_and_helpers_match_across_modes(device: torch.device) -> None:
    x = torch.randn(7, 45, device=device)
    results = []
    for mode in _modes(device):
        for blocks in ([2, 16], [8, 4]):
            torch.manual_seed(11)
            results.append(tessera.kernel(noisy_rows, mode=mode, config=tessera.Config(block_sizes=blocks))(x).cpu())
    for result in results[1:]:
        torch.testing.assert_close(result[:, 0], results[0][:, 0], atol=1e-4, rtol=1e-4)


def torch_rand_rows(x: T) -> T:
    out = torch.empty(x.size(0), 8, device=x.device, dtype=torch.float16)
    for tile_m in hl.tile(x.size(0)):
        out[tile_m, :] = torch.rand([tile_m, 8], dtype=torch.float16) + torch.randint_like(x[tile_m, :8], 4)
    return out


def test_torch_rand_with_tile_sizes_and_randint_like(device: torch.device) -> None:
    x = torch.zeros(13, 8, device=device)
    results = []
    for mode in _modes(device):
        torch.manual_seed(2)
        results.append(tessera.kernel(torch_rand_rows, mode=mode, config=tessera.Config(block_sizes=[4]))(x).cpu())
    assert torch.equal(results[0], results[1])
    assert results[0].min() >= 0 and results[0].max() < 4 and len(results[0].floor().unique()) == 4


def random_ints(x: T) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.rand_like(x[tile], dtype=torch.int32)
    return out


def random_with_generator(x: T, generator: torch.Generator) -> T:
    out = torch.empty_like(x)
    for tile in hl.tile(x.size(0)):
        out[tile] = torch.rand_like(x[tile], generator=generator)
    return out


@pytest.mark.parametrize("mode", ["eager", "interpret"])
def test_torch_random_functions_refuse_integer_dtypes_and_generators(mode: str) -> None:
    with pytest.raises(exc.DtypeError, match="makes floats"):
        tessera.kernel(random_ints, mode=mode)(torch.zeros(4))
    with pytest.raises(exc.UnsupportedOperationError, match="generator"):
        tessera.kernel(random_with_generator, mode=mode)(torch.zeros(4), torch.Generator())


def test_the_tuners_plans_and_eager_reference_draw_the_same_seeds_and_leave_the_generator_alone() -> None:
    x = torch.randn(9, 21)
    bound = tessera.kernel(noisy, mode="interpret").bind(x)
    torch.manual_seed(4)
    before = torch.random.get_rng_state()
    first, second = bound.plan().launches[0].arguments[-2:], bound.plan().launches[0].arguments[-2:]
    reference = bound.reference()
    assert torch.equal(torch.random.get_rng_state(), before)
    assert [int(s) for s in first] == [int(s) for s in second] == draw_seeds(2, torch.device("cpu")).tolist()
    torch.manual_seed(4)
    torch.testing.assert_close(reference, tessera.kernel(noisy, mode="interpret")(x), atol=1e-5, rtol=1e-5)
