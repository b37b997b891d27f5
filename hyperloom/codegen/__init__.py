"""Triton emitters, one per fused-kernel kind (lands with the compiler core)."""
