"""One module per fused-kernel kind: `source(name, spec, header)` returns Triton source text,
`launch(kernel, spec, ...)` runs it."""
