"""The layer IR: ops, graph, builder, printer and parser, verifier, reference interpreter."""

from hyperloom.ir.graph import Graph, Node, Param
from hyperloom.ir.ops import Op
from hyperloom.ir.parser import parse_graph
from hyperloom.ir.printer import print_graph
from hyperloom.ir.types import DType, StateDecl, StateKind, TensorType
from hyperloom.ir.verifier import verify

__all__ = ["DType", "Graph", "Node", "Op", "Param", "StateDecl", "StateKind", "TensorType",
           "parse_graph", "print_graph", "verify"]
