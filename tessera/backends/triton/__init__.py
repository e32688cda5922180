"""The Triton backend: generated source, its host launcher, and Triton's CPU interpreter."""
