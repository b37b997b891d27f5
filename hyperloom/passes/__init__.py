"""Pure Graph -> Graph rewrites and analyses. PIPELINE lists them in the order they run; the
fusion passes land with the compiler core, so for now the pipeline is empty."""

PIPELINE: tuple = ()
