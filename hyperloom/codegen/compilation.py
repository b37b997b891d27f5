"""A compiled graph, before any device: the PIPELINE's stages, the arena plan, the kernel plan
and every kernel's source; and the dump directory that shows them all."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hyperloom.codegen import kernel_source
from hyperloom.ir.graph import Graph
from hyperloom.ir.printer import print_graph
from hyperloom.passes import Stage, run_pipeline
from hyperloom.passes.arena import ArenaPlan, plan_arena
from hyperloom.passes.highway import HighwayPlan, plan_highway
from hyperloom.passes.kernel_plan import KernelPlan, plan_kernels


@dataclass(frozen=True)
class Compilation:
    stages: tuple[Stage, ...]
    arena: ArenaPlan
    plan: KernelPlan
    highway: HighwayPlan
    sources: dict[str, str]

    @property
    def graph(self) -> Graph:
        return self.stages[-1].graph

    def declined(self) -> str:
        return "".join(f"{s.name}: {d}\n" for s in self.stages for d in s.declined)


def compile_graph(graph: Graph, max_rows: int) -> Compilation:
    stages = run_pipeline(graph)
    final = stages[-1].graph
    arena = plan_arena(final, max_rows)
    plan = plan_kernels(final, arena)
    types = final.value_types()
    sources = {k.name: src for k in plan.kernels if (src := kernel_source(k, types))}
    return Compilation(stages, arena, plan, plan_highway(final, arena), sources)


def write_dump(c: Compilation, folder: Path, prefix: str = "") -> list[Path]:
    """`00_input.ir`, `NN_after_<pass>.ir`, `declined_fusions.txt`, `arena_plan.txt`,
    `kernel_plan.txt` and `kernels/<name>.py`, each name led by `prefix`."""
    files = {f"{i:02d}_{'input' if i == 0 else 'after_' + s.name}.ir": print_graph(s.graph)
             for i, s in enumerate(c.stages)}
    files |= {"declined_fusions.txt": c.declined(), "arena_plan.txt": c.arena.text(),
              "highway_plan.txt": c.highway.text(), "kernel_plan.txt": c.plan.text(detail=True)}
    files |= {f"kernels/{name}.py": src for name, src in c.sources.items()}
    written = []
    for name, text in files.items():
        path = folder / (f"{prefix}{name}" if "/" not in name else
                         name.replace("kernels/", f"{prefix}kernels/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written
