"""The JAX Pallas backend: KernelIR + Config -> a `pl.pallas_call` (run by Pallas's interpreter on CPU).

Only this package imports jax (tests/test_layers.py checks it), and only `runner.py` does so at
import time; the lowering, the TPU layout checks and the pre-broadcast pass are jax-free.
"""
