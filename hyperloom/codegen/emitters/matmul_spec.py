"""The GEMM kernel's contract (`MatmulSpec`): its size, prologue, epilogue and fused extras;
`matmul` emits and launches it, `matmul_tiles`, `matmul_epilogues` and `matmul_checks` read it."""

from __future__ import annotations

from dataclasses import dataclass

from hyperloom.codegen.emitters import hc_pre, kda_gate

PROLOGUES = ("none", "rmsnorm", "mean_rmsnorm", "gated_rmsnorm")
NORM_KERNEL = ("mean_rmsnorm", "gated_rmsnorm")  # prologues run as a norm kernel into h first
EPILOGUES = ("store", "swiglu", "residual", "hc_post", "kda_gate", "gated_norm")


@dataclass(frozen=True)
class MatmulSpec:
    k: int  # reduction size (hidden size)
    n: int  # output columns of the GEMM (swiglu: 2*I weight rows, I output columns)
    prologue: str = "none"  # one of PROLOGUES
    eps: float = 1e-6  # norm prologues
    streams: int = 1  # mean_rmsnorm: x is [T, streams, K]
    group: int = 0  # gated_rmsnorm, gated_norm: columns normed together (a head)
    epilogue: str = "store"  # "store" | "swiglu" | "residual" | "hc_post"
    limit: float | None = None  # swiglu clamp (None: plain SwiGLU)
    hc: int = 1  # hc_post: number of streams
    # hc_post: the mHC site that reads the new streams next; a one-row step finishes it in the
    # GEMM's last program (projection partials, then Sinkhorn and y: hc_pre.finish_source)
    site: hc_pre.HCPreSpec | None = None
    # with site: the GEMV after the site forms its y itself (site_in), so a one-row step writes
    # the partials with the new streams' sum(x^2) in column J and the streams' hi/lo parts in
    # w's dtype ([2 * hc, N]: `Site.parts`), and finishes nothing
    site_parts: bool = False
    # a store or swiglu GEMV whose x is the normed y of this site (its norm weight folded into
    # w): a one-row step forms y from the site's stream parts by linearity, W y = sum_i pre_i
    # W X_i over the parts as A rows, rms(y) from their Gram, the gates from the partials, and
    # one more program writes the site's post and comb (`emitters.matmul`)
    site_in: hc_pre.HCPreSpec | None = None
    gate: kda_gate.KDAGateSpec | None = None  # the kda_gate epilogue's heads and bound
    addend: bool = False  # residual, hc_post: a [rows, N] value added to the result first
    # hc_post with the epilogue in the GEMM (at most SPLIT_ROWS rows): also store the new
    # streams' mean [rows, N], in mean's dtype, for the stream-mean norm GEMM after it
    mean_out: bool = False
    # mean_rmsnorm: up to MEAN_ROWS rows, the rmsnorm GEMM on that stored mean replaces the
    # norm kernel and the GEMM on its h (`emitters.matmul`'s `{name}_mean` kernel)
    mean_in: bool = False

    def __post_init__(self) -> None:
        if self.prologue not in PROLOGUES or self.epilogue not in EPILOGUES:
            raise ValueError(f"unknown prologue/epilogue {self.prologue!r}/{self.epilogue!r}")
        if self.site is not None and (self.epilogue != "hc_post" or self.site.n != self.hc
                                      or self.site.d != self.n_out):
            raise ValueError(f"a site of {self.site.n} x {self.site.d} needs the hc_post "
                             f"epilogue of {self.hc} x {self.n_out} streams")
        if self.site_parts and self.site is None:
            raise ValueError("site_parts needs the site it writes the parts of")
        if self.site_in is not None and (
                self.epilogue not in ("store", "swiglu") or self.prologue != "none"
                or self.site_in.d != self.k or self.site_in.out_eps is None
                or self.site_in.out_weight or 2 * self.site_in.n > 16):
            raise ValueError(f"a GEMV that forms a site's y needs no prologue, the store or "
                             f"swiglu epilogue, k = the site's width ({self.k} vs "
                             f"{self.site_in.d}), the site norm without its weight and at most "
                             f"8 streams (2n A rows of 16)")
        if (self.mean_out and self.epilogue != "hc_post") \
                or (self.mean_in and self.prologue != "mean_rmsnorm"):
            raise ValueError(f"a stored stream mean needs the hc_post epilogue, reading it the "
                             f"mean_rmsnorm prologue; got {self.prologue!r}/{self.epilogue!r}")
        if self.addend and self.epilogue not in ("residual", "hc_post"):
            raise ValueError(f"an addend needs the residual or hc_post epilogue, not "
                             f"{self.epilogue!r}")
        if (self.epilogue == "kda_gate") != (self.gate is not None) \
                or (self.gate is not None and self.gate.width != self.n):
            raise ValueError(f"the kda_gate epilogue needs a gate of {self.n} columns, got "
                             f"{self.gate} with epilogue {self.epilogue!r}")
        if self.k < 1 or self.n < 1 or (self.epilogue == "swiglu" and self.n % 2):
            raise ValueError(f"bad GEMM size k={self.k} n={self.n} for {self.epilogue}")
        if self.streams < 1 or self.hc < 1:
            raise ValueError(f"streams={self.streams} and hc={self.hc} must be >= 1")
        gated = self.prologue == "gated_rmsnorm"
        grouped = gated or self.epilogue == "gated_norm"
        if grouped != (self.group > 0) or (gated and (self.k % self.group
                                                      or self.group & (self.group - 1))):
            raise ValueError(f"gated_rmsnorm needs a power-of-two group dividing k={self.k}, "
                             f"got group={self.group} with prologue {self.prologue!r}")
        if self.epilogue == "gated_norm" and (self.n % self.group or self.group & (self.group - 1)
                                              or gated):
            raise ValueError(f"the gated_norm epilogue needs a power-of-two group dividing "
                             f"n={self.n} and no gated prologue, got group={self.group}")

    @property
    def n_out(self) -> int:
        """Output columns: swiglu halves the GEMM width."""
        return self.n // 2 if self.epilogue == "swiglu" else self.n

    @property
    def norm_kernel(self) -> bool:
        """Whether the prologue runs as a norm kernel into h first (NORM_KERNEL)."""
        return self.prologue in NORM_KERNEL
