"""The JAX Pallas backend: KernelIR + Config -> a `pl.pallas_call` (run by Pallas's interpreter on CPU).

Only this package imports jax (tests/test_layers.py checks it), and only `runner.py` (loaded at a
kernel's first launch) and `tpu_export.py` (imported by whoever lowers kernels for TPU) do so at
import time; the lowering, the blocked-form plan, the TPU layout checks and the pre-broadcast
pass are jax-free.
"""
