import sys, torch, triton
from triton.testing import do_bench
from hyperloom.codegen.cache import load
from hyperloom.codegen.emitters import matmul as mm

K, N, HC, S = 4096, 6144, 4, 4
ORIG = mm.tiles
T = mm.Tiles
torch.manual_seed(0)
R = 4096
w = (torch.randn(N, K, device="cuda") / 64).bfloat16()
xb = torch.randn(R, K, device="cuda").bfloat16()
xm = torch.randn(R, S, K, device="cuda")
ob = torch.empty(R, N, device="cuda", dtype=torch.bfloat16)
of = torch.empty(R, N, device="cuda")
st = torch.randn(R, N, device="cuda")
oh = torch.empty(R, HC, N, device="cuda")
sh = torch.randn(R, HC, N, device="cuda")
post = torch.rand(R, HC, device="cuda"); comb = torch.rand(R, HC, HC, device="cuda")

def args(spec):
    x = xm if spec.prologue == "mean_rmsnorm" else xb
    e = spec.epilogue
    if e == "store": return dict(x=x, w=w, out=ob)
    if e == "swiglu": return dict(x=x, w=w, out=ob[:, : N // 2])
    if e == "residual": return dict(x=x, w=w, out=of, stream=st)
    return dict(x=x, w=w, out=oh, stream=sh, post=post, comb=comb)

def bench(spec, rows, t):
    a = args(spec)
    kernel = load(mm.source("b", spec), "b", "cuda")
    mm.tiles = (lambda s, r, xb=2, wb=2: t) if t is not None else ORIG
    tt = t or ORIG(spec, rows, a["x"].element_size(), 2)
    fn = lambda: mm.launch(kernel, spec, rows=rows, **a)
    try:
        fn(); torch.cuda.synchronize()
        ms = do_bench(fn, warmup=20, rep=80, return_mode="median")
    except Exception as e:
        return f"  {str(tt):80s} FAIL {type(e).__name__} {str(e)[:100]}"
    finally:
        mm.tiles = ORIG
    mark = "*" if t is None else " "
    return f"{mark} {str(tt)[6:]:80s} {ms*1e3:8.1f}us {2*rows*N*K/ms/1e9:6.0f}TF {N*K*2/ms/1e6:5.2f}TB/s(w)"

def torch_t(rows):
    return do_bench(lambda: xb[:rows] @ w.T, warmup=20, rep=80, return_mode="median") * 1e3

def spec(pro, epi):
    return mm.MatmulSpec(K, N, pro, 1e-6, S, epi, 7.0, HC)

sect = sys.argv[1]
if sect == "diag":
    for k, n in [(1000, 1500), (1024, 1500), (4096, 6144)]:
        for pro in ("rmsnorm", "mean_rmsnorm"):
            sp = mm.MatmulSpec(k, n, pro, 1e-5, 4, "residual", None, 1)
            kern = load(mm.source("d", sp), "d", "cuda")
            for rows in (13, 100, 300):
                errs = []
                for rep in range(6):
                    x = torch.randn(rows, 4, k, device="cuda") if pro == "mean_rmsnorm" else torch.randn(rows, k, device="cuda").bfloat16()
                    ww = (torch.randn(n, k, device="cuda") / 30).bfloat16()
                    s0 = torch.randn(rows, n, device="cuda")
                    xd = x.double().mean(1) if pro == "mean_rmsnorm" else x.double()
                    ref = xd @ ww.double().T / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-5)
                    o = torch.full_like(s0, float("nan"))
                    mm.launch(kern, sp, x=x, w=ww, out=o, rows=rows, stream=s0); torch.cuda.synchronize()
                    y = (o - s0).double()
                    errs.append(((y - ref).norm() / ref.norm()).item())
                print(f"k={k} n={n} {pro:12s} rows={rows:4d} {str(mm.tiles(sp, rows, x.element_size()))[6:]:95s} max err {max(errs):.2e}")
else:
    for pro, epi, rowss in [("rmsnorm", "store", (1, 16, 64, 512, 4096)), ("rmsnorm", "swiglu", (16, 512, 4096)),
                            ("mean_rmsnorm", "store", (1, 16)), ("none", "hc_post", (16, 512, 4096)), ("none", "residual", (16, 512))]:
        for rows in rowss:
            print(f"{pro}+{epi} rows {rows} torch {torch_t(rows):.1f}us"); print(bench(spec(pro, epi), rows, None))
