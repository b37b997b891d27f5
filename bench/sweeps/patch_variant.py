"""A pytest plugin (`-p patch_variant`, this folder on the path) that puts the variant file named
by $KDA_CHUNK_VARIANT in place of kda_chunk's source and launch for the session ("committed"
leaves the module as it is); `kda_chunk.py --tests` runs it."""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    path = os.environ.get("KDA_CHUNK_VARIANT", "committed")
    if path == "committed":
        return
    from kda_chunk import load_variant

    from hyperloom.codegen.emitters import kda_chunk
    variant = load_variant(path, "patched")
    config._kda_chunk_saved = kda_chunk.source, kda_chunk.launch
    kda_chunk.source, kda_chunk.launch = variant.source, variant.launch


def pytest_unconfigure(config) -> None:
    saved = getattr(config, "_kda_chunk_saved", None)
    if saved:
        from hyperloom.codegen.emitters import kda_chunk
        kda_chunk.source, kda_chunk.launch = saved
