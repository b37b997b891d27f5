"""GraphBuilder: what model specs use to declare a graph. Every emit infers and checks types, so a
spec error surfaces where the spec makes it. `Residual` turns a stack into its residual plan.
"""

from __future__ import annotations

from collections.abc import Callable

from hyperloom.errors import IRError
from hyperloom.ir import ops
from hyperloom.ir.graph import Graph, Node, Param
from hyperloom.ir.ops import Op
from hyperloom.ir.signatures import infer
from hyperloom.ir.types import DType, T, TensorType
from hyperloom.ir.verifier import verify

ROW_INPUTS = ("%ids", "%pos", "%slot")


class GraphBuilder:
    def __init__(self, name: str, param_dtype: DType):
        self.name = name
        self.param_dtype = param_dtype
        self._inputs: list[tuple[str, TensorType]] = []
        self._params: dict[str, Param] = {}
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}

    # -- declarations ------------------------------------------------------------------------
    def input(self, name: str, ty: TensorType) -> str:
        ref = "%" + name
        self._inputs.append((ref, ty))
        self._types[ref] = ty
        return ref

    def rows(self) -> tuple[str, str, str]:
        """The per-row inputs of a step: token id, position in its sequence, sequence slot."""
        return tuple(self.input(r[1:], TensorType.make(DType.I64, T)) for r in ROW_INPUTS)

    def param(self, name: str, *shape: int, dtype: DType | None = None) -> str:
        ty = TensorType.make(dtype or self.param_dtype, *shape)
        old = self._params.get(name)
        if old is not None and old.type != ty:
            raise IRError(f"parameter @{name} declared as {old.type} and as {ty}")
        self._params[name] = Param(name, ty)
        self._types["@" + name] = ty
        return "@" + name

    def type_of(self, value: str) -> TensorType:
        return self._types[value]

    # -- nodes -------------------------------------------------------------------------------
    def emit(self, op: Op, args: tuple[str, ...], attrs: object = ops.NoAttrs()) -> tuple[str, ...]:
        types = infer(op, attrs, [self._types[a] for a in args])
        outs = tuple(f"%{len(self._nodes)}" if i == 0 else f"%{len(self._nodes)}.{i}"
                     for i in range(len(types)))
        self._nodes.append(Node(outs, op, args, attrs, types))
        self._types.update(zip(outs, types))
        return outs

    def one(self, op: Op, *args: str, attrs: object = ops.NoAttrs()) -> str:
        return self.emit(op, args, attrs)[0]

    def linear(self, x: str, weight: str, out_features: int, dtype: DType | None = None) -> str:
        k = self._types[x].shape[-1]
        return self.one(Op.LINEAR, x, self.param(weight, out_features, k, dtype=dtype))

    def rmsnorm(self, x: str, weight: str, eps: float) -> str:
        size = self._types[x].shape[-1]
        return self.one(Op.RMSNORM, x, self.param(weight, size), attrs=ops.NormAttrs(eps))

    def finish(self, **outputs: str) -> Graph:
        graph = Graph(self.name, tuple(self._inputs), tuple(self._params.values()),
                      tuple(self._nodes), tuple(outputs.items()))
        return verify(graph)


Block = Callable[[str], str]


class Residual:
    """The residual plan of a stack. hc_mult > 1: mHC sites `hc_pre -> norm -> block -> hc_post`
    on an fp32 highway [T, n, D]; hc_mult == 1: plain `norm -> block -> residual_add` on [T, D]."""

    def __init__(self, b: GraphBuilder, hc_mult: int, eps: float, hc_eps: float = 1e-6,
                 sinkhorn_iters: int = 20):
        self.b, self.n, self.eps = b, hc_mult, eps
        self.hc = ops.HCPreAttrs(n=hc_mult, norm_eps=eps, hc_eps=hc_eps, iters=sinkhorn_iters)
        self.stream = ""

    def start(self, x: str) -> None:
        if self.n > 1:
            self.stream = self.b.one(Op.HC_EXPAND, x, attrs=ops.HCExpandAttrs(self.n))
        else:
            self.stream = self.b.one(Op.CAST, x, attrs=ops.CastAttrs("f32"))

    def site(self, hc_name: str, norm_weight: str, block: Block) -> None:
        """One residual site; hc_name names its mHC parameters (`{hc_name}_fn`, ...)."""
        if self.n == 1:
            y = block(self.b.rmsnorm(self.stream, norm_weight, self.eps))
            self.stream = self.b.one(Op.RESIDUAL_ADD, self.stream, y)
            return
        b, n = self.b, self.n
        d = b.type_of(self.stream).shape[2]
        fn = b.param(f"{hc_name}_fn", (2 + n) * n, n * d)
        base = b.param(f"{hc_name}_base", (2 + n) * n, dtype=DType.F32)
        scale = b.param(f"{hc_name}_scale", 3, dtype=DType.F32)
        x, post, comb = b.emit(Op.HC_PRE, (self.stream, fn, base, scale), self.hc)
        y = block(b.rmsnorm(x, norm_weight, self.eps))
        self.stream = b.one(Op.HC_POST, y, self.stream, post, comb)

    def finish(self) -> str:
        if self.n > 1:
            return self.b.one(Op.HC_HEAD_MEAN, self.stream)
        return self.stream
