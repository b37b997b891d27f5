"""DSA indexer variants for `dsa_indexer.py`: each row's top-bits histogram in n copies
(`dsa_select.COPIES`), so that the score kernel's atomics spread over n addresses a bin.
`dsa_copies4.py` and `dsa_copies8.py` are the variant files."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager

from hyperloom.codegen.emitters import dsa, dsa_select


@contextmanager
def _copies(n: int):
    saved, dsa_select.COPIES = dsa_select.COPIES, n
    try:
        yield
    finally:
        dsa_select.COPIES = saved


def make(n: int) -> dict:
    """dsa's API with its sources and launches at COPIES n, on a scratch of its own that
    shares the bench's scores."""
    base_source, base_launch, works = dsa.source, dsa.launch, {}

    def source(name, spec, header=""):
        with _copies(n):
            return base_source(name, spec, header)

    def launch(kernels, spec, *, work, pooled, **kw):
        if id(work) not in works:
            with _copies(n):
                mine = dsa_select.scratch(work.scores.shape[0], pooled)
            works[id(work)] = dataclasses.replace(mine, scores=work.scores)
        with _copies(n):
            base_launch(kernels, spec, work=works[id(work)], pooled=pooled, **kw)

    api = {k: getattr(dsa, k) for k in dir(dsa) if not k.startswith("_")}
    return api | {"source": source, "launch": launch}
