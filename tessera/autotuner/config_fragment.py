"""The config fragments at Helion's module path `helion.autotuner.config_fragment`.

>>> from tessera.autotuner.config_fragment import EnumFragment
"""
from __future__ import annotations

from tessera.ir.tunables import BooleanFragment, ConfigFragment, EnumFragment, IntegerFragment, PowerOfTwoFragment

__all__ = ["BooleanFragment", "ConfigFragment", "EnumFragment", "IntegerFragment", "PowerOfTwoFragment"]
