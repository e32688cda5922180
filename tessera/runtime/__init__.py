"""Kernel objects, argument binding, caches and the modes (eager / interpret / compiled)."""
