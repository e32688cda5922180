"""The autotuner names Helion's examples import (`helion.autotuner`): the config fragments that
`hl.register_tunable` takes. The search itself is `tessera.autotune`.

>>> from tessera.autotuner import PowerOfTwoFragment
"""
from __future__ import annotations

from tessera.ir.tunables import BooleanFragment, ConfigFragment, EnumFragment, IntegerFragment, PowerOfTwoFragment

__all__ = ["BooleanFragment", "ConfigFragment", "EnumFragment", "IntegerFragment", "PowerOfTwoFragment"]
