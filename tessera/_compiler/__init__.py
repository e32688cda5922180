"""Helion's private module path `helion._compiler`, for the reference helpers its tests import
(`rng_utils`); Tessera's compiler is `tessera.compiler` and `tessera.backends`."""
