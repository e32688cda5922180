"""Attention backward (issue 17 item 2): where Tessera's `attention_bwd` loses to SDPA's backward.

    # CPU, no GPU needed: sm_90 code of each launch (registers, stack, shared memory, SASS size,
    # the TTGIR's products / async copies / layout conversions), Tessera and the hand-written probe
    python3 benchmarks/attention_bwd_profile.py offline --configs "[{...}, ...]" --out DIR
    # H100: one implementation per process, run 3 times, the last one profiled
    ncu --profile-from-start off --set full python3 benchmarks/attention_bwd_profile.py one "tessera heuristic"
    # H100: Tessera under Configs, the probe under block choices, SDPA; gradients checked
    python3 benchmarks/attention_bwd_profile.py time --configs "[...]" --probes "[...]" --out $OUT

Shapes: B4 H32 S4096 bf16 (`--head-dim`, `--causal`, `--seq`). Tessera's Configs are
keys replacing the heuristic Config's; probes are `(BM1, BN1, BM2, BN2, num_warps, num_stages)`
(`benchmarks/_triton_attention_bwd.py`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

# compiled in a fresh process (this one may run Triton's interpreter): the cubin's resource
# usage and SASS through the cuobjdump that Triton ships, and the TTGIR after pipelining
_COMPILE = r"""
import json, os, subprocess, sys, importlib.util
import triton
from triton.backends.compiler import GPUTarget
request = json.loads(sys.stdin.read())
spec = importlib.util.spec_from_file_location("offline_kernel", request["path"])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
function = getattr(module, request["function"])
signature, constexprs, attrs = {}, {}, {}
for position, name in enumerate(function.arg_names):
    kind, value, divisible = request["arguments"][name]
    if kind == "constexpr" or function.params[position].is_constexpr:
        signature[name], constexprs[(position,)] = "constexpr", value
    else:
        signature[name] = kind
        if divisible:
            attrs[(position,)] = [["tt.divisibility", 16]]
source = triton.compiler.ASTSource(fn=function, signature=signature, constexprs=constexprs, attrs=attrs)
compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": request["num_warps"], "num_stages": request["num_stages"]})
stem = request["stem"]
open(stem + ".ttgir", "w").write(compiled.asm["ttgir"])
open(stem + ".cubin", "wb").write(compiled.asm["cubin"])
tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
usage = subprocess.run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", stem + ".cubin"],
                       capture_output=True, text=True).stdout
sass = subprocess.run([os.path.join(tools, "cuobjdump"), "-sass", stem + ".cubin"], capture_output=True, text=True).stdout
open(stem + ".sass", "w").write(sass)
print(json.dumps({"shared": compiled.metadata.shared, "usage": usage}))
"""


def _kind(argument: Any) -> tuple[str, Any, bool]:
    from tessera.backends.triton.shared_memory import _argument_type
    return _argument_type(argument)


def compile_sm90(path: str, function: str, arguments: dict[str, tuple[str, Any, bool]], num_warps: int,
                 num_stages: int, stem: str) -> dict[str, Any]:
    """sm_90 facts of one kernel: registers, stack bytes, shared memory, SASS instructions (all and
    in loops), and TTGIR counts of products, async copies, TMA and layout conversions."""
    request = {"path": path, "function": function, "arguments": arguments, "num_warps": num_warps,
               "num_stages": num_stages, "stem": stem}
    environment = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _COMPILE], input=json.dumps(request), capture_output=True, text=True,
                          env=environment, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    usage = result.pop("usage")
    registers = re.search(r"REG:(\d+)", usage)
    stack = re.search(r"STACK:(\d+)", usage)
    ttgir = open(stem + ".ttgir").read()
    sass = open(stem + ".sass").read().splitlines()
    instructions = [line for line in sass if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)]
    return {
        "registers": int(registers.group(1)) if registers else None,
        "stack_bytes": int(stack.group(1)) if stack else None,
        "shared_bytes": result["shared"],
        "sass_instructions": len(instructions),
        "HGMMA": sum("HGMMA" in line for line in instructions),
        "spill_stores_STL": sum(" STL" in line for line in instructions),
        "spill_loads_LDL": sum(" LDL" in line for line in instructions),
        "LDGSTS (cp.async)": sum("LDGSTS" in line for line in instructions),
        "UTMALDG (TMA)": sum("UTMALDG" in line for line in instructions),
        "BAR.SYNC": sum("BAR.SYNC" in line for line in instructions),
        "MUFU.EX2": sum("MUFU.EX2" in line for line in instructions),
        "ttgir warp_group_dot": ttgir.count("ttng.warp_group_dot "),
        "ttgir warp_group_dot_wait": ttgir.count("ttng.warp_group_dot_wait"),
        "ttgir async_copy": ttgir.count("ttg.async_copy_global_to_local"),
        "ttgir convert_layout": ttgir.count("ttg.convert_layout"),
        "ttgir local_alloc": ttgir.count("ttg.local_alloc"),
    }


def inputs(args: argparse.Namespace, device: str, real: bool = False) -> tuple[torch.Tensor, ...]:
    """grad_out, q, k, v, out, lse (the forward's) at the benchmark shape."""
    from examples import attention as at
    generator = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    dtype = getattr(torch, args.dtype)
    q, k, v, grad_out = (torch.randn(shape, generator=generator).to(dtype).to(device) for _ in range(4))
    if not real:  # offline compile: only shapes and dtypes matter
        return grad_out, q, k, v, q.clone(), torch.zeros(args.batch * args.heads, args.seq)
    out, lse = at.attention(q, k, v, args.causal, True)
    return grad_out, q, k, v, out, lse


def offline(args: argparse.Namespace) -> None:
    """Compile every Tessera launch (heuristic and `--configs`) and the probe for sm_90."""
    from tessera.backends.base import LoweringOptions
    from tessera.backends.triton.backend import TritonBackend
    from tessera.runtime.tuning import heuristic_for as heuristic

    from examples import attention as at
    os.makedirs(args.out, exist_ok=True)
    grad_out, q, k, v, out, lse = inputs(args, "cpu")
    report: dict[str, Any] = {}
    arguments = (grad_out, q, k, v, out, lse, args.causal)
    configs = [heuristic(at.attention_bwd.bind(*arguments))]
    configs += [configured(at.attention_bwd, options, arguments) for options in (eval(args.configs) if args.configs else [])]  # noqa: S307
    for number, config in enumerate(configs):
        bound = at.attention_bwd.bind(*arguments)
        plan = bound.plan(config)
        irs = bound.to_ir(plan.config)
        irs = irs if isinstance(irs, tuple) else (irs,)
        for launch_number, (ir, launch) in enumerate(zip(irs, plan.launches)):
            lowered = TritonBackend().lower(ir, plan.config, LoweringOptions(interpret=False))
            stem = os.path.join(args.out, f"tessera_c{number}_l{launch_number}")
            with open(stem + ".py", "w") as handle:
                handle.write(lowered.source)
            names = _arg_names(stem + ".py", lowered.name)
            kinds = {name: _kind(value) for name, value in zip(names, launch.arguments)}
            facts = compile_sm90(stem + ".py", lowered.name, kinds, lowered.launch_options["num_warps"],
                                 lowered.launch_options["num_stages"], stem)
            key = f"tessera {plan.config!r} launch {launch_number}"
            report[key] = facts
            print(key, json.dumps(facts), flush=True)
    probe_path = os.path.join(HERE, "_triton_attention_bwd.py")
    for probe in eval(args.probes) if args.probes else [(64, 128, 128, 64, 8, 3)]:  # noqa: S307
        bm1, bn1, bm2, bn2, warps, stages = probe
        pointer = ("*bf16", None, True)
        arguments = {name: pointer for name in ("Q", "K", "V", "DO", "DQ", "DK", "DV")}
        arguments.update({"Lse": ("*fp32", None, True), "Delta": ("*fp32", None, True),
                          "seq": ("i32", args.seq, True), "qk_scale": ("fp32", None, False),
                          "sm_scale": ("fp32", None, False), "D": ("constexpr", args.head_dim, False),
                          "BM1": ("constexpr", bm1, False), "BN1": ("constexpr", bn1, False),
                          "BM2": ("constexpr", bm2, False), "BN2": ("constexpr", bn2, False),
                          "CAUSAL": ("constexpr", args.causal, False), "STAGES": ("constexpr", stages, False)})
        stem = os.path.join(args.out, "probe_" + "_".join(map(str, probe)))
        facts = compile_sm90(probe_path, "attention_bwd_fused", arguments, warps, stages, stem)
        report[f"probe {probe}"] = facts
        print(f"probe {probe}", json.dumps(facts), flush=True)
    with open(os.path.join(args.out, "offline_sm90.json"), "w") as handle:
        json.dump(report, handle, indent=1)


def _arg_names(path: str, function: str) -> list[str]:
    """The parameter names of `function` in a generated source (without importing Triton's JIT)."""
    text = open(path).read()
    header = re.search(rf"def {function}\((.*?)\):", text, re.S)
    return [name.strip() for name in header.group(1).split(",") if name.strip()]


def implementations(args: argparse.Namespace, tensors: tuple[torch.Tensor, ...]) -> dict[str, Callable[[], Any]]:
    """name -> a call returning (dq, dk, dv): Tessera (heuristic and each Config), the probes, SDPA."""
    import tessera
    from _triton_attention_bwd import attention_bwd_reference
    from examples import attention as at
    grad_out, q, k, v, out, lse = tensors
    runs: dict[str, Callable[[], Any]] = {"tessera heuristic": lambda: at.attention_bwd(grad_out, q, k, v, out, lse,
                                                                                         args.causal)}
    for options in eval(args.configs) if args.configs else []:  # noqa: S307 - the developer's own
        config = configured(at.attention_bwd, options, (grad_out, q, k, v, out, lse, args.causal))
        kernel = tessera.kernel(at.attention_bwd.fn, config=config)
        runs[f"tessera {options}"] = (lambda kernel=kernel: kernel(grad_out, q, k, v, out, lse, args.causal))
    for probe in eval(args.probes) if args.probes else []:  # noqa: S307
        *blocks, warps, stages = probe
        runs[f"probe {tuple(probe)}"] = (lambda blocks=tuple(blocks), warps=warps, stages=stages: attention_bwd_reference(
            grad_out, q, k, v, out, lse, args.causal, blocks=blocks, num_warps=warps, num_stages=stages))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    sdpa_out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=args.causal)
    runs["SDPA autograd backward"] = lambda: torch.autograd.grad(sdpa_out, leaves, grad_out, retain_graph=True)
    return runs


def configured(kernel: Any, options: dict[str, Any], arguments: tuple) -> Any:
    """The heuristic Config of the call with the keys of `options` replaced (`{'l2_grouping': 1}`:
    the heuristic but for its L2 grouping)."""
    from tessera.runtime.tuning import heuristic_for
    return heuristic_for(kernel.bind(*arguments)).merged(**options)


def forward(args: argparse.Namespace) -> None:
    """The forward (`examples/attention.py`) under its heuristic and `--configs`, against SDPA."""
    import tessera
    from examples import attention as at
    device = "cpu" if args.smoke else "cuda"
    generator = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch, args.heads, args.seq, args.head_dim)
    q, k, v = (torch.randn(shape, generator=generator).to(getattr(torch, args.dtype)).to(device) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=args.causal)
    runs: dict[str, Callable[[], Any]] = {"tessera heuristic": lambda: at.attention(q, k, v, args.causal)}
    for options in eval(args.configs) if args.configs else []:  # noqa: S307
        kernel = tessera.kernel(at.attention.fn, config=configured(at.attention, options, (q, k, v, args.causal)))
        runs[f"tessera {options}"] = lambda kernel=kernel: kernel(q, k, v, args.causal)
    runs["SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)
    flops = 4.0 * args.batch * args.heads * args.seq ** 2 * args.head_dim / (2 if args.causal else 1)
    measure_all(args, "fwd", runs, lambda result: [((result.float() - ref).norm() / ref.norm()).item()], flops)


def measure_all(args: argparse.Namespace, what: str, runs: dict[str, Callable[[], Any]],
                errors_of: Callable[[Any], list[float]], flops: float) -> None:
    """Each run's relative errors (`errors_of` its result), median ms and TFLOP/s: printed, and
    written to `<what>_time_d<D>[_causal]<label>.json`."""
    rows = []
    case = f"{what} S{args.seq} D{args.head_dim}{' causal' if args.causal else ''} {args.dtype}"
    for round_number, (name, run) in ((r, item) for r in range(args.repeat) for item in runs.items()):
        row: dict[str, Any] = {"case": case, "impl": name, "round": round_number}
        try:
            errors = errors_of(run())
            row["rel_err"] = [round(e, 5) for e in errors]
            row["ms"] = bench(args, run)
            row["tflops"] = round(flops / row["ms"] / 1e9, 1)
            if max(errors) > 2e-2:
                row["WRONG"] = True
        except Exception as error:  # noqa: BLE001 - one failing variant must not hide the others
            row["error"] = f"{type(error).__name__}: {str(error)[:300]}"
        print(json.dumps(row), flush=True)
        rows.append(row)
    os.makedirs(args.out, exist_ok=True)
    suffix = f"d{args.head_dim}{'_causal' if args.causal else ''}{args.label}"
    with open(os.path.join(args.out, f"{what}_time_{suffix}.json"), "w") as handle:
        json.dump({"device": "cpu" if args.smoke else torch.cuda.get_device_name(), "rows": rows}, handle, indent=1)


def bench(args: argparse.Namespace, run: Callable[[], Any]) -> float:
    """Median ms of `run` (do_bench, L2 flushed); one timed call under `--smoke` (CPU interpreter)."""
    import time

    import triton
    if args.smoke:
        start = time.perf_counter()
        run()
        return (time.perf_counter() - start) * 1e3
    return triton.testing.do_bench(run, warmup=10, rep=60, return_mode="median")


def time_all(args: argparse.Namespace) -> None:
    tensors = inputs(args, "cpu" if args.smoke else "cuda", real=True)
    grad_out, q, k, v = tensors[:4]
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=args.causal),
                                   leaves, grad_out.float())
    del leaves
    flops = 2.5 * 4.0 * args.batch * args.heads * args.seq ** 2 * args.head_dim / (2 if args.causal else 1)
    measure_all(args, "bwd", implementations(args, tensors),
                lambda grads: [((g.float() - e).norm() / e.norm()).item() for g, e in zip(grads, expected)], flops)


def one(args: argparse.Namespace) -> None:
    """Run one implementation three times; the third inside cudaProfilerStart/Stop (ncu's
    `--profile-from-start off` profiles its kernels only)."""
    tensors = inputs(args, "cuda", real=True)
    runs = implementations(args, tensors)
    run = runs[args.which]
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()  # ncu --profile-from-start off: only this call's kernels
    run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=("offline", "time", "one", "forward"))
    parser.add_argument("which", nargs="?", default="tessera heuristic", help="one: the implementation's name")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="bfloat16", help="bfloat16 | float16 (--smoke: Triton's interpreter "
                        "gets bf16 products wrong outside Tessera's launches, so the probe needs float16)")
    parser.add_argument("--configs", default="", help="a Python list of tessera.Config kwargs dicts")
    parser.add_argument("--probes", default="", help="a Python list of (BM1, BN1, BM2, BN2, warps, stages)")
    parser.add_argument("--label", default="")
    parser.add_argument("--cases", default="", help="time/forward: `D:causal,...` (e.g. 128:0,64:1) instead of one case")
    parser.add_argument("--repeat", type=int, default=1, help="time/forward: rounds over all implementations")
    parser.add_argument("--out", default=".")
    parser.add_argument("--smoke", action="store_true", help="time: CPU interpreter (checks the script and probe)")
    args = parser.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        os.environ["TESSERA_MODE"] = "interpret"
    os.environ.setdefault("TESSERA_AUTOTUNE_EFFORT", "none")
    command = {"offline": offline, "time": time_all, "one": one, "forward": forward}[args.what]
    for case in args.cases.split(",") if args.cases else [""]:
        if case:
            head_dim, causal = case.split(":")
            args.head_dim, args.causal = int(head_dim), causal in ("1", "causal", "True")
        command(args)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
