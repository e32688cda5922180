"""Tile IR: primitives, symbolic shapes, the graph, and passes."""
