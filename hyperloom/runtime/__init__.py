"""Compiled engine, paged caches, state pools, arena and graph replay (lands with the compiler
core; the reference engine in hyperloom.ir.engine defines the API it will implement)."""
