"""The operands of a `matmul` launch checked against its spec before any kernel runs: each by
name, with the shape wanted (rows: at least the rows launched) and the one given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperloom.errors import require, require_shape

if TYPE_CHECKING:
    from hyperloom.codegen.emitters.matmul_spec import MatmulSpec


def _shape(t) -> str:
    return "None" if t is None else str(tuple(t.shape))


def _present(what: str, t) -> None:
    require(t is not None, f"{what}: needed by this spec, got None")


def check_operands(spec: MatmulSpec, rows: int, *, x, w, out, stream, post, comb, h, gate, nw,
                   dt, alog, addend, normed=None) -> None:
    """Shapes, rows and contiguous last dims of every operand the spec reads or writes."""
    _check_io(spec, rows, x, w, out)
    if spec.norm_kernel:
        _present("matmul h (scratch)", h)
        require_shape("matmul h (scratch)", h, (spec.k,), rows)
    if spec.epilogue in ("residual", "hc_post"):
        require(stream is not None and stream.shape[1:] == out.shape[1:]
                and stream.shape[0] >= rows and stream.stride(-1) == 1,
                lambda: f"matmul stream: [>= {rows}, {', '.join(map(str, out.shape[1:]))}], got "
                        f"{_shape(stream)} (a contiguous last dim)")
    if spec.epilogue == "hc_post":
        n = spec.hc
        require(out.shape[1] == n, lambda: f"matmul out: {n} streams, got {_shape(out)}")
        for name, t, shape in (("post", post, (n,)), ("comb", comb, (n, n))):
            _present(f"matmul {name}", t)
            require_shape(f"matmul {name}", t, shape, rows)
    if spec.addend:
        require(addend is not None and tuple(addend.shape[1:]) == (spec.n_out,)
                and addend.shape[0] >= rows and addend.stride(-1) == 1,
                lambda: f"matmul addend: [>= {rows}, {spec.n_out}], got {_shape(addend)} (a "
                        "contiguous last dim)")
    if spec.prologue == "gated_rmsnorm":
        require(gate is not None and gate.shape == x.shape and gate.stride(-1) == 1,
                lambda: f"gated norm gate: {tuple(x.shape)} as x, contiguous last dim, got "
                        f"{_shape(gate)}")
        require(nw is not None and tuple(nw.shape) == (spec.group,) and nw.is_contiguous(),
                lambda: f"gated norm weight: contiguous [{spec.group}], got {_shape(nw)}")
    if spec.epilogue == "gated_norm":
        require(normed is not None and tuple(normed.shape[1:]) == (spec.n,)
                and normed.shape[0] >= rows and normed.stride(-1) == 1,
                lambda: f"gated norm epilogue normed: [>= {rows}, {spec.n}], got "
                        f"{_shape(normed)} (a contiguous last dim)")
        require(nw is not None and tuple(nw.shape) == (spec.group,) and nw.is_contiguous(),
                lambda: f"gated norm weight: contiguous [{spec.group}], got {_shape(nw)}")
    if spec.gate is not None:
        for name, t, n in (("dt_bias", dt, spec.n), ("A_log", alog, spec.gate.heads)):
            require(t is not None and tuple(t.shape) == (n,) and t.is_contiguous(),
                    lambda: f"kda_gate epilogue {name}: contiguous [{n}], got {_shape(t)}")


def _check_io(spec: MatmulSpec, rows: int, x, w, out) -> None:
    x_dims = 3 if spec.prologue == "mean_rmsnorm" else 2
    o_dims = 3 if spec.epilogue == "hc_post" else 2
    require(x.dim() == x_dims and x.shape[-1] == spec.k and x.shape[0] >= rows,
            lambda: f"matmul x: {x_dims} dims, [>= {rows}, ..., {spec.k}], got {_shape(x)}")
    require(tuple(w.shape) == (spec.n, spec.k) and w.is_contiguous(),
            lambda: f"matmul w: contiguous [{spec.n}, {spec.k}], got {_shape(w)}")
    require(out.dim() == o_dims and out.shape[-1] == spec.n_out and out.shape[0] >= rows,
            lambda: f"matmul out: {o_dims} dims, [>= {rows}, ..., {spec.n_out}], got {_shape(out)}")
    if spec.prologue == "mean_rmsnorm":
        require(x.shape[1] == spec.streams,
                lambda: f"matmul x: {spec.streams} streams, got {_shape(x)}")
    for name, t in (("x", x), ("out", out)):
        require(t.stride(-1) == 1,
                lambda: f"matmul {name}: a contiguous last dim, got strides {t.stride()}")
