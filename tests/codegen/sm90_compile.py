"""Compiles one generated kernel for sm_90 and prints its resources as JSON (run by
test_sm90_resources in a process of its own: Triton's standard library must be JIT functions,
which a process started under TRITON_INTERPRET=1 does not have).

usage: python -m tests.codegen.sm90_compile JOB.json, the job holding the module's path, the
kernel's name, its runtime arguments' types, constexprs without defaults, warps, stages and
the integer arguments the launch specialises as 16-divisible; it prints shared memory, the
pipelined copies, and ptxas' registers and spill bytes a thread."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget


def compile_job(job: dict) -> dict:
    spec = importlib.util.spec_from_file_location("sm90_probe", job["path"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, job["name"])
    types = {a: t for a, t in job["types"].items() if a in fn.arg_names}  # this kernel's own
    sig, const = {}, {}
    for arg, param in zip(fn.arg_names, fn.params):
        sig[arg] = types.get(arg, "constexpr")
        if arg not in types:
            const[arg] = job["consts"].get(arg, param.default)
    attrs = {(i,): [["tt.divisibility", 16]] for i, arg in enumerate(fn.arg_names)
             if arg in types and (types[arg].startswith("*") or arg in job["divisible"])}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": job["warps"], "num_stages": job["stages"]})
    return {"shared": kernel.metadata.shared,
            "async_copies": kernel.asm["ttgir"].count("async_copy_global_to_local"),
            **_registers(kernel.asm["ptx"])}


def _registers(ptx: str) -> dict:
    """{registers, spill_bytes} a thread, from ptxas -v on the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas
    ptxas = get_ptxas(90)
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/k.ptx"
        with open(src, "w") as f:
            f.write(ptx)
        run = subprocess.run([getattr(ptxas, "path", ptxas), "-v", "--gpu-name=sm_90a", src,
                              "-o", f"{tmp}/k.o"], capture_output=True, text=True, check=True)
    regs = re.search(r"Used (\d+) registers", run.stderr)
    spills = re.search(r"(\d+) bytes spill stores", run.stderr)
    return {"registers": int(regs.group(1)), "spill_bytes": int(spills.group(1)) if spills else 0}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(compile_job(json.load(f))))
