"""A variant of an emitter module (by default the chunked KDA prefill,
`hyperloom.codegen.emitters.kda_chunk`; `host=` another, e.g. moe_experts) as patches over its
generated source and its launch, for the sweeps in this folder. A variant file holds

    from variant import make
    globals().update(make(text=[(old, new)], consts={"ROWS_WARPS": 8}))

text: (old, new) pairs replaced in the module source (each must occur) or functions of (source,
kernel-name prefix); consts: the host module's constants while a launch runs; opts / grids: {kernel
index in kernel_names order: extra launch options / a function of the launch's grid}; launch_kw:
keyword arguments of the host's launch that the variant sets whatever its caller passes."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from hyperloom.codegen.emitters import kda_chunk

Text = tuple[str, str] | Callable[[str, str], str]


class _Launch:
    """A loaded kernel whose launches take extra options and a rewritten grid."""

    def __init__(self, kernel, opts: dict, grid: Callable | None) -> None:
        self.kernel, self.opts, self.grid = kernel, opts, grid

    def __getitem__(self, grid: tuple):
        run = self.kernel[self.grid(grid) if self.grid else grid]
        return lambda *a, **kw: run(*a, **(kw | self.opts))  # the variant's options win


def _patched(source: str, name: str, text: list[Text]) -> str:
    for fix in text:
        if callable(fix):
            source = fix(source, name)
            continue
        old, new = fix
        if old not in source:
            raise ValueError(f"variant text not in the source: {old[:60]!r}")
        source = source.replace(old, new)
    return source


def make(text: list[Text] = (), consts: dict | None = None, opts: dict | None = None,
         grids: dict | None = None, host: ModuleType = kda_chunk,
         launch_kw: dict | None = None) -> dict:
    """The host module's public API (specs, scratch, kernel names, constants) with the variant's
    source and launch."""
    consts, opts, grids = consts or {}, opts or {}, grids or {}
    base_source, base_launch = host.source, host.launch

    def source(name, spec, header=""):
        return _patched(base_source(name, spec, header), name, list(text))

    def launch(kernels, *args, **kwargs):
        one = not isinstance(kernels, (tuple, list))  # a module of one kernel (kda_conv)
        kernels = tuple(_Launch(k, opts.get(i, {}), grids.get(i)) if i in opts or i in grids
                        else k for i, k in enumerate((kernels,) if one else kernels))
        kernels = kernels[0] if one else kernels
        saved = {k: getattr(host, k) for k in consts}
        for k, v in consts.items():
            setattr(host, k, v)
        try:
            base_launch(kernels, *args, **(kwargs | (launch_kw or {})))
        finally:
            for k, v in saved.items():
                setattr(host, k, v)

    api = {k: getattr(host, k) for k in dir(host) if not k.startswith("_")}
    return api | consts | {"source": source, "launch": launch}
