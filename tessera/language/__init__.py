"""What kernels call, as `hl`: the names and meaning of Helion's `helion.language`.

>>> import tessera.language as hl
"""
from __future__ import annotations

from tessera.language.constexpr import constexpr, specialize
from tessera.language.creation import arange, full, zeros
from tessera.language.debug import breakpoint, device_print
from tessera.language.distributed import (AsyncCopyDescriptor, ProcessGroupName, make_async_remote_copy,
                                          remote_barrier)
from tessera.language.math import dot
from tessera.language.scaled_dot import dot_scaled
from tessera.language.inline_asm import inline_asm_elementwise
from tessera.language.inline_triton import inline_triton, triton_kernel
from tessera.language.joins import join, split
from tessera.language.memory import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
                                     atomic_xchg, atomic_xor, load, store)
from tessera.language.quantized import (float4_e2m1fn_x2_to_float32, load_bfloat16_x16_to_float16,
                                        load_float4_e2m1fn_x16_to_float16)
from tessera.language.rng import rand, rand4x, randint
from tessera.language.stack import StackTensor, stacktensor_like
from tessera.language.scans import associative_scan, cumprod, cumsum, reduce
from tessera.language.tile import (Tile, barrier, grid, jagged_tile, register_block_size, register_tunable,
                                   static_range, tile, tile_begin, tile_block_size, tile_end, tile_id, tile_index)
from tessera.language.view import subscript

__all__ = [
    "AsyncCopyDescriptor", "ProcessGroupName", "Tile", "arange", "associative_scan", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
    "atomic_or", "atomic_xchg", "atomic_xor", "barrier", "breakpoint", "constexpr", "cumprod",
    "cumsum", "device_print", "dot", "dot_scaled", "float4_e2m1fn_x2_to_float32", "full", "grid", "inline_asm_elementwise", "inline_triton", "jagged_tile", "join", "load", "load_bfloat16_x16_to_float16", "load_float4_e2m1fn_x16_to_float16", "make_async_remote_copy", "rand", "rand4x", "randint",
    "reduce", "register_block_size", "remote_barrier", "register_tunable", "specialize",
    "StackTensor", "split", "stacktensor_like", "static_range", "store", "subscript", "tile", "tile_begin", "tile_block_size", "tile_end", "tile_id",
    "tile_index", "triton_kernel", "zeros",
]

# Op families that only define primitives for torch calls (no new `hl.` names).
from tessera.language import elementwise as _elementwise  # noqa: E402,F401
from tessera.language import sorting as _sorting  # noqa: E402,F401
from tessera.language import reductions as _reductions  # noqa: E402,F401
from tessera.language import statistics as _statistics  # noqa: E402,F401
from tessera.language import composites as _composites  # noqa: E402,F401
from tessera.language import activations as _activations  # noqa: E402,F401
from tessera.language import arithmetic as _arithmetic  # noqa: E402,F401
from tessera.language import transcendentals as _transcendentals  # noqa: E402,F401
from tessera.language import copies as _copies  # noqa: E402,F401
from tessera.language import gather as _gather  # noqa: E402,F401
from tessera.language import view as _view  # noqa: E402,F401
from tessera.language import rearrange as _rearrange  # noqa: E402,F401
from tessera.language import contractions as _contractions  # noqa: E402,F401
from tessera.language import order_statistics as _order_statistics  # noqa: E402,F401
from tessera.language import pointwise_extras as _pointwise_extras  # noqa: E402,F401
from tessera.language import special as _special  # noqa: E402,F401
from tessera.language import gamma as _gamma  # noqa: E402,F401
from tessera.language import layer_functions as _layer_functions  # noqa: E402,F401
from tessera.language import losses as _losses  # noqa: E402,F401
