"""The epilogues of `emitters.matmul`'s GEMM kernel, as source lines: what a tile does with its
fp32 accumulator (`acc`; swiglu's `acc_g`, `acc_u`) once its K loop ends. The names they use
(rm64, rn, m_ok, n_ok, pid_m, pid_n, num_n and the kernel's parameters) are the kernel's; the
contract of each epilogue is in `emitters.matmul`'s docstring."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperloom.codegen.emitters import hc_pre, kda_gate
from hyperloom.codegen.emitters.text import indented, wrap
from hyperloom.config import CONFIG

if TYPE_CHECKING:
    from hyperloom.codegen.emitters.matmul_spec import MatmulSpec


def epilogue(spec: MatmulSpec) -> list[str]:
    lines = ["o_ok = m_ok[:, None] & n_ok[None, :]", "o_rows = out_ptr + rm64[:, None] * so_t"]
    store = "tl.store(o_rows + rn[None, :], {}.to(out_ptr.dtype.element_ty), mask=o_ok)"
    if spec.epilogue == "store":
        return lines + [store.format("acc")]
    if spec.epilogue == "swiglu":
        g, u, lim = "acc_g", "acc_u", spec.limit
        if lim is not None:
            lines += [f"acc_g = tl.minimum(acc_g, {float(lim)!r})",
                      f"acc_u = tl.minimum(tl.maximum(acc_u, {-float(lim)!r}), {float(lim)!r})"]
        return lines + [f"h = {g} * tl.sigmoid({g}) * {u}", store.format("h")]
    if spec.epilogue == "kda_gate":
        return lines + kda_gate.gate_lines(spec.gate, "acc", "rn", "n_ok") + [store.format("g")]
    if spec.epilogue == "gated_norm":
        return lines + _gated_norm(spec) + [store.format("y")]
    lines.append("s_rows = stream_ptr + rm64[:, None] * sst_t")
    if spec.addend:
        lines.append("acc += tl.load(add_ptr + rm64[:, None] * sa_t + rn[None, :], mask=o_ok, "
                     "other=0.0).to(tl.float32)")
    if spec.epilogue == "residual":
        return lines + ["r = tl.load(s_rows + rn[None, :], mask=o_ok, other=0.0)",
                        store.format("(r + acc)")]
    return lines + _hc_post(spec)


def _gated_norm(spec: MatmulSpec) -> list[str]:
    """The tile's columns are one group (BLOCK_N == group): its rows of `normed` load whole."""
    return ["v = tl.load(normed_ptr + rm64[:, None] * sn_t + rn[None, :], mask=o_ok, "
            "other=0.0).to(tl.float32)",
            f"r = tl.rsqrt(tl.sum(v * v, axis=1) / {spec.group} + {float(spec.eps)!r})",
            f"nw = tl.load(nw_ptr + rn % {spec.group}).to(tl.float32)",
            "y = v * r[:, None] * nw[None, :] * tl.sigmoid(acc)"]


EPI_LEVELS = 3  # tensor-core tiles: the hc_post epilogue walks 2**EPI_LEVELS column chunks


def _hc_post(spec: MatmulSpec) -> list[str]:
    """hc_post over column chunks of the tile: one chunk's hc stream tiles live at a time (all
    of them at once took 255 registers and kilobytes of spills at every tile size)."""
    lines = ["p_rows = post_ptr + rm64 * sp_t", "c_rows = comb_ptr + rm64 * sc_t"]
    args = "s_rows, o_rows, p_rows, c_rows, sst_h, so_h, sc_i"
    if spec.mean_out:
        lines.append("m_rows = mean_ptr + rm64[:, None] * sm_t")
        args += ", m_rows"
    lines += ["if GEMV:", f"    _hc_post_cols(acc, rn, m_ok, {spec.n_out}, {args})"]
    if spec.site:
        lines += ["    if SITE:"] + indented(indented(_site(spec)))
    lines.append("else:")
    chunks = [("acc", "")]
    for level in range(1, EPI_LEVELS + 1):
        halves = []
        for name, bits in chunks:
            lines.append(f"    {name}0, {name}1 = _halves({name}, BLOCK_M, BLOCK_N // "
                         f"{2 ** level})")
            halves += [(f"{name}0", bits + "0"), (f"{name}1", bits + "1")]
        chunks = halves
    width = f"BLOCK_N // {2 ** EPI_LEVELS}"
    for name, bits in chunks:
        lines += [f"    cn = pid_n * BLOCK_N + {int(bits, 2)} * ({width}) + tl.arange(0, {width})",
                  f"    _hc_post_cols({name}, cn, m_ok, {spec.n_out}, {args})"]
    return lines


def _site(spec: MatmulSpec) -> list[str]:
    """One-row GEMV of a site-feeding GEMM: this program's columns of X' @ fn^T (X' the new
    streams it just stored) to the site's partials; the last program by ticket finishes the
    row as hc_pre would (post, comb, y). With spec.site_parts the GEMV after the site forms y
    and its gates itself: this program writes what `hc_pre.parts_lines` says, nothing
    finishes."""
    barrier = "tl.debug_barrier()  # this program's new stream columns are stored"
    if spec.site_parts:
        return [barrier] + hc_pre.parts_lines(spec.site, "out_ptr", "so_h", CONFIG.site_lo_parts)
    j, jp = hc_pre.projections(spec.site)
    consts = ", ".join(hc_pre.finish_args(spec.site))
    return [
        barrier,
        f"jj = tl.arange(0, {jp})",
        f"pj = tl.zeros(({jp},), tl.float32)",
        f"for i in tl.static_range({spec.hc}):",
        "    xs = tl.load(out_ptr + i * so_h + rn, mask=n_ok, other=0.0)",
        f"    wf = tl.load(fn_ptr + jj[:, None] * s_fn + i * {spec.n_out} + rn[None, :],",
        f"                 mask=(jj < {j})[:, None] & n_ok[None, :], other=0.0)",
        "    pj += tl.sum(wf.to(tl.float32) * xs[None, :], axis=1)",
        f"tl.store(part_ptr + pid_n * {jp} + jj, pj)",
        "tl.debug_barrier()  # every thread's partials are stored before the ticket",
        "ticket = tl.atomic_add(count_ptr, 1, sem=\"acq_rel\")",
        "if ticket == num_n - 1:",
        "    tl.debug_barrier()",
        "    tl.store(count_ptr, 0)",
        *wrap("    _finish_row(", ["pid_m", "out_ptr", "base_ptr", "scale_ptr", "y_ptr",
                                   "spost_ptr", "scomb_ptr", "part_ptr", "1", "num_n", "so_t",
                                   "so_h", "s_y", "s_post", "s_comb", "s_comb_i"]
              + ["ow_ptr"] * spec.site.out_weight + [consts], ")",
              16).splitlines(),
    ]


def hc_post_helpers(spec: MatmulSpec) -> list[str]:
    """`_halves` (a tile's left and right column halves) and `_hc_post_cols` (hc_post of one
    column chunk; every stream tile is loaded before any store, so out may alias X; with
    spec.mean_out also the new streams' mean into m_rows)."""
    n = spec.hc
    body = [f"x{i} = tl.load(s_rows + {i} * sst_h + cn[None, :], mask=ok, other=0.0)"
            for i in range(n)]
    for j in range(n):
        body.append(f"o = tl.load(p_rows + {j}, mask=m_ok, other=0.0)[:, None] * acc")
        body += [f"o += tl.load(c_rows + {i} * sc_i + {j}, mask=m_ok, other=0.0)"
                 f"[:, None] * x{i}" for i in range(n)]
        body.append(f"tl.store(o_rows + {j} * so_h + cn[None, :], o, mask=ok)")
        if spec.mean_out:
            body.append("mean = o" if j == 0 else "mean += o")
    params = "sc_i"
    if spec.mean_out:
        body.append(f"tl.store(m_rows + cn[None, :], (mean / {n}).to(m_rows.dtype.element_ty), "
                    "mask=ok)")
        params += ", m_rows"
    return ["@triton.jit", "def _halves(t, BM: tl.constexpr, W: tl.constexpr):",
            "    return tl.split(tl.permute(tl.reshape(t, [BM, 2, W]), (0, 2, 1)))", "", "",
            "@triton.jit",
            "def _hc_post_cols(acc, cn, m_ok, n_out, s_rows, o_rows, p_rows, c_rows, sst_h, so_h,",
            f"                  {params}):",
            "    ok = m_ok[:, None] & (cn < n_out)[None, :]"] + indented(body)
