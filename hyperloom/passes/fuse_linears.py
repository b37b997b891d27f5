"""Projection fusions: merge the linears that read one value into one GEMM, fold RMSNorm
weights into the projections that consume the normed value, fold hc_head_mean into the
LM head's prologue, and move an mHC site's (weightless, once folded) norm into hc_pre."""

from __future__ import annotations

import dataclasses

from hyperloom.ir.graph import Derived, Graph, Node
from hyperloom.ir.ops import NormLinearAttrs, Op
from hyperloom.passes.rewrite import PassResult, make_node, producers, rebuild, sole_user

_PLAIN = (Op.LINEAR, Op.LM_HEAD)


def _merged_name(weights: list[str]) -> str:
    first = weights[0][1:]
    stem = first.rsplit(".", 2)[0] + "."  # layers.0.self_attn.
    leaves = [w[1:][len(stem):].removesuffix(".weight") if w[1:].startswith(stem) else w[1:]
              for w in weights]
    return stem + "+".join(leaves) + ".weight"


def merge_sibling_linears(graph: Graph) -> PassResult:
    """Linears reading the same value become one GEMM over concatenated weights."""
    types, users = graph.value_types(), graph.users()
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replace, drop, derived, declined = {}, set(), [], []
    for value, us in users.items():
        group = [n for n in us if n.op is Op.LINEAR]
        if len(group) < 2:
            continue
        dtypes = {types[n.args[1]].dtype for n in group}
        if len(dtypes) > 1:
            declined.append(f"cannot merge the linears reading {value}: weight dtypes differ "
                            f"({', '.join(sorted(d.value for d in dtypes))})")
            continue
        ws = [n.args[1] for n in group]
        d = Derived(_merged_name(ws), _concat_type(types, ws), "concat", tuple(ws))
        splits = tuple(int(types[w].shape[0]) for w in ws)
        outs = tuple(o for n in group for o in n.outs)
        first = min(index[id(n)] for n in group)
        replace[first] = make_node(graph, outs, Op.NORM_LINEAR, (value, "@" + d.name),
                                   NormLinearAttrs(None, splits), group, [d])
        drop |= {index[id(n)] for n in group} - {first}
        derived.append(d)
    return rebuild(graph, replace, drop, derived), tuple(declined)


def _concat_type(types: dict, ws: list[str]):
    from hyperloom.ir.derive import derived_type

    return derived_type("concat", [types[w] for w in ws])


def _as_norm_linear(graph: Graph, user: Node, x: str, norm: Node) -> tuple[Node, Derived]:
    w = user.args[1]
    wt = graph.value_types()[w]
    d = Derived(f"{w[1:]}~{norm.args[1][1:].rsplit('.', 2)[-2]}", wt, "scale_cols",
                (w, norm.args[1]))
    eps = norm.attrs.eps
    if user.op is Op.NORM_LINEAR:
        attrs = NormLinearAttrs(eps, user.attrs.splits, user.attrs.out_dtype)
    else:
        attrs = NormLinearAttrs(eps, (int(wt.shape[0]),), "f32" if user.op is Op.LM_HEAD else "")
    node = make_node(graph, user.outs, Op.NORM_LINEAR, (x, "@" + d.name), attrs, [norm, user], [d])
    return node, d


def _fold_refusal(graph: Graph, norm: Node, users: list[Node]) -> str | None:
    out = norm.outs[0]
    if any(v == out for _, v in graph.outputs):
        return f"cannot fold {out} rmsnorm into its projections: {out} is a graph output"
    for u in users:
        plain = u.op in _PLAIN or (u.op is Op.NORM_LINEAR and u.attrs.eps is None)
        if not plain or u.args[0] != out:
            return f"cannot fold {out} rmsnorm into its projections: {out} also feeds " \
                   f"{u.op.value} {u.outs[0]}"
    return None


def fold_norm_into_linear(graph: Graph) -> PassResult:
    """rmsnorm(x, g) -> W x  becomes  norm_linear(x, W diag(g)): one kernel streams x once."""
    users, index = graph.users(), {id(n): i for i, n in enumerate(graph.nodes)}
    replace, drop, derived, declined = {}, set(), [], []
    for i, norm in enumerate(graph.nodes):
        if norm.op is not Op.RMSNORM:
            continue
        us = users.get(norm.outs[0], [])
        why = _fold_refusal(graph, norm, us) if us else None
        if why or not us:
            declined += [why] if why else []
            continue
        for u in us:
            replace[index[id(u)]], d = _as_norm_linear(graph, u, norm.args[0], norm)
            derived.append(d)
        drop.add(i)
    return rebuild(graph, replace, drop, derived), tuple(declined)


def fuse_head_mean(graph: Graph) -> PassResult:
    """hc_head_mean feeding a normed projection becomes that projection's prologue."""
    users, index = graph.users(), {id(n): i for i, n in enumerate(graph.nodes)}
    replace, drop, declined = {}, set(), []
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.HC_HEAD_MEAN:
            continue
        u = sole_user(graph, node.outs[0], users)
        if u is None or u.op is not Op.NORM_LINEAR or u.attrs.eps is None:
            declined.append(f"cannot fuse {node.outs[0]} hc_head_mean into its consumer: it is "
                            "not the sole input of one normed projection")
            continue
        replace[index[id(u)]] = make_node(graph, u.outs, Op.NORM_LINEAR,
                                          (node.args[0], u.args[1]), u.attrs, [node, u])
        drop.add(i)
    return rebuild(graph, replace, drop), tuple(declined)


_NORMED = (Op.NORM_LINEAR, Op.SWIGLU_LINEAR)  # projections that may carry the norm prologue


def _site_norm_refusal(graph: Graph, node: Node, us: list[Node], types: dict) -> str | None:
    """Why hc_pre's y cannot take its consumers' norm (None: it can)."""
    y = node.outs[0]
    if not us:
        return f"cannot move the site norm into {y} hc_pre: y has no readers"
    if any(v == y for _, v in graph.outputs):
        return f"cannot move the site norm into {y} hc_pre: y is a graph output"
    epss = {u.attrs.eps if u.op in _NORMED and u.args[0] == y and u.args.count(y) == 1
            else None for u in us}
    if None in epss or len(epss) != 1:
        return (f"cannot move the site norm into {y} hc_pre: not every reader is a normed "
                f"projection with one eps ({', '.join(u.op.value for u in us)})")
    if len({types[u.args[1]].dtype for u in us}) != 1:
        return f"cannot move the site norm into {y} hc_pre: its readers' weight dtypes differ"
    return None


def fuse_site_norm(graph: Graph) -> PassResult:
    """hc_pre's y read only by normed projections: hc_pre writes rms(y) in the weights' dtype
    and the projections lose their norm prologue (one sum-of-squares where y is made, half the
    bytes read by every projection, and plain GEMM mainloops). The rmsnorm moves, in the nodes'
    origins too, from the projections to hc_pre. A y read only by a standalone rmsnorm: hc_pre
    takes the norm and its weight, and the norm's kernel goes."""
    users, types = graph.users(), graph.value_types()
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    replace, declined, drop = {}, [], set()
    for i, node in enumerate(graph.nodes):
        if node.op is not Op.HC_PRE:
            continue
        norm = sole_user(graph, node.outs[0], users)
        if norm is not None and norm.op is Op.RMSNORM:  # y's only reader: a norm kept apart
            replace[i] = _absorb_norm(graph, node, norm, types)
            drop.add(index[id(norm)])
            continue
        us = users.get(node.outs[0], [])
        why = _site_norm_refusal(graph, node, us, types)
        if why:
            declined.append(why)
            continue
        eps, dt = us[0].attrs.eps, types[us[0].args[1]].dtype.value
        norms = tuple(o for u in us for o in u.sources if o.endswith(" rmsnorm"))
        replace[i] = _with(graph, node, dataclasses.replace(node.attrs, out_eps=eps,
                                                              out_dtype=dt),
                           tuple(dict.fromkeys(node.sources + norms)))
        for u in us:
            replace[index[id(u)]] = _with(graph, u, dataclasses.replace(u.attrs, eps=None),
                                          tuple(o for o in u.sources if o not in norms))
    return rebuild(graph, replace, drop), tuple(declined)


def _absorb_norm(graph: Graph, site: Node, norm: Node, types: dict) -> Node:
    """hc_pre writing rmsnorm(y) * w itself (w its fifth argument) under the norm's output
    name and dtype, for a y read only by that rmsnorm (a MoE block's input: the router, the
    experts and the shared expert read the normed rows)."""
    attrs = dataclasses.replace(site.attrs, out_eps=norm.attrs.eps,
                                out_dtype=types[norm.outs[0]].dtype.value)
    return make_node(graph, (norm.outs[0], *site.outs[1:]), Op.HC_PRE,
                     site.args + norm.args[1:], attrs, [site, norm])


def _with(graph: Graph, node: Node, attrs, origin: tuple[str, ...]) -> Node:
    """`node` with new attrs (its types inferred again) and the given origin."""
    new = make_node(graph, node.outs, node.op, node.args, attrs, [node])
    return dataclasses.replace(new, origin=origin)


__all__ = ["fold_norm_into_linear", "fuse_head_mean", "fuse_site_norm", "merge_sibling_linears",
           "producers"]
