#!/usr/bin/env python3
"""The GPU results file: OUTDIR/<device>-<date>.json from one bench phase (scripts/gpu-check.sh).

    gpu-results.py --out-dir OUTDIR --tests TEST_SUMMARY --bench CUDA_BENCH_JSON
                   [--reshard CUDA_BENCH_RESHARD_JSON] [--torch MLP_TORCH_JSON] [--device NAME]

Every ratio is dax's speed over the raw library's in the same run (1.0 = as fast; above the
target is good): gemm_vs_cublas per dtype/precision and shape (TFLOP/s), elementwise_vs_copy and
reduction_vs_copy (effective bandwidth against a device-to-device copy), reshard_vs_raw (the raw
call's time over dax's), and host_overhead_us (host time per eager op, lower is better). The
session copies the file into benchmarks/results/gpu/ and commits it (docs/gpu.md).
Python's standard library only. Prints the file's name last.
"""
import argparse
import datetime
import json
import os
import re
import sys


def load(path):
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"gpu-results: cannot read {path}: {e}", file=sys.stderr)
        return None


def test_counts(path):
    """{passed, failed, skipped} from the `counts:` line of a test summary; None without one."""
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, TypeError):
        return None
    m = re.search(r"counts: passed=(\d+) failed=(\d+) skipped=(\d+)", text)
    if not m:
        return None
    first = text.splitlines()[0] if text else ""
    return {"passed": int(m.group(1)), "failed": int(m.group(2)), "skipped": int(m.group(3)),
            "summary": first, "overall": "PASS" if "overall: PASS" in text else "FAIL"}


def file_name(device, date):
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "unknown-gpu"
    return f"{slug}-{date}.json"


def results(bench, reshard, torch, tests, date, device=None):
    bench = bench or {}
    out = {"device": bench.get("device") or device or "unknown", "date": date,
           "tests": tests or {"passed": None, "failed": None, "skipped": None, "summary": "no test summary"}}
    for key in ("cuda_runtime", "cuda_driver", "cublas"):
        if key in bench:
            out[key] = bench[key]
    if "skipped" in bench:
        out["bench_skipped"] = bench["skipped"]
    gemm = {}
    for row in bench.get("gemm", []):
        kind = row["dtype"] + ("" if row["precision"] == "highest" else "/" + row["precision"])
        gemm.setdefault(kind, {})[f"{row['m']}x{row['n']}x{row['k']}"] = row["ratio"]
    out["gemm_vs_cublas"] = gemm or None
    out["elementwise_vs_copy"] = bench.get("elementwise", {}).get("ratio")  # the add's
    ops = bench.get("elementwise", {}).get("ops")
    if ops:
        out["elementwise_ops_vs_copy"] = {name: row["ratio"] for name, row in ops.items()}
    red = bench.get("reduction")
    out["reduction_vs_copy"] = {"sum_all": red["sum_all_ratio"], "sum_rows": red["sum_rows_ratio"]} if red else None
    if red and "sum_columns_ratio" in red:
        out["reduction_vs_copy"]["sum_columns"] = red["sum_columns_ratio"]
    if bench.get("argmax"):  # argmax along the last dimension, per (lines, len)
        out["argmax_vs_copy"] = {f"{row['lines']}x{row['len']}": row["ratio"] for row in bench["argmax"]}
    out["host_overhead_us"] = bench.get("host_overhead", {}).get("dax_add_us")
    rs = (reshard or {}).get("reshard")
    out["reshard_vs_raw"] = ({"all_gather": rs["all_gather_ratio"], "all_to_all": rs["all_to_all_ratio"],
                              "ranks": rs["ranks"], "transport": rs["transport"]} if rs else None)
    if rs and "all_gather_mpi_ratio" in rs:  # raw MPI on pinned host buffers
        out["reshard_vs_raw"]["all_gather_mpi"] = rs["all_gather_mpi_ratio"]
        out["reshard_vs_raw"]["all_to_all_mpi"] = rs["all_to_all_mpi_ratio"]
    if "allocator" in bench:
        out["steady_state_cudamalloc"] = bench["allocator"].get("steady_state_system_allocations")
    if "mlp" in bench:
        out["mlp"] = bench["mlp"]
    if "one_member_group" in bench:  # NCCL's figures over dax's (above 1: dax's is cheaper)
        g = bench["one_member_group"]
        out["one_member_group_nccl_vs_dax"] = {
            "setup": g["nccl_setup_ms"] / g["dax_setup_ms"] if g["dax_setup_ms"] > 0 else None,
            "all_reduce": g["nccl_all_reduce_us"] / g["dax_all_reduce_us"] if g["dax_all_reduce_us"] > 0 else None,
            "nccl_device_mib": g["nccl_device_mib"], "dax_device_mib": g["dax_device_mib"]}
    if torch and "rows" in torch:
        out["mlp_torch"] = torch["rows"]
        # The same MLP step, the same timing (synchronized host clock per step): PyTorch's time
        # over dax's per precision (above 1: dax is faster).
        ours = {r["precision"]: r for r in bench.get("mlp", {}).get("rows", [])}
        vs = {}
        for r in torch["rows"]:
            d = ours.get(r.get("precision"))
            if d and d.get("dax_wall_ms") and r.get("ms_per_step"):
                vs[r["precision"]] = r["ms_per_step"] / d["dax_wall_ms"]
                print(f"MLP step, {r['precision']} float32 matmuls: dax {d['dax_wall_ms']:.3f} ms, "
                      f"PyTorch {r['ms_per_step']:.3f} ms (torch/dax {vs[r['precision']]:.3f})")
        out["mlp_torch_vs_dax"] = vs or None
    out["cuda_bench"] = bench  # everything it measured, for the record
    if reshard:
        out["cuda_bench_reshard"] = reshard
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--tests")
    ap.add_argument("--bench")
    ap.add_argument("--reshard")
    ap.add_argument("--torch")
    ap.add_argument("--device", help="the GPU's name when the benchmark did not run (nvidia-smi's)")
    ap.add_argument("--date", default=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    a = ap.parse_args()
    bench = load(a.bench)
    data = results(bench, load(a.reshard), load(a.torch), test_counts(a.tests), a.date, a.device)
    path = os.path.join(a.out_dir, file_name(data["device"], a.date))
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    missing = [k for k in ("gemm_vs_cublas", "elementwise_vs_copy", "reduction_vs_copy", "host_overhead_us",
                           "reshard_vs_raw") if data[k] is None]
    if data["tests"].get("passed") is None:
        missing.append("tests")
    for key in ("elementwise_vs_copy", "elementwise_ops_vs_copy", "reduction_vs_copy", "host_overhead_us",
                "reshard_vs_raw", "gemm_vs_cublas"):
        if key not in data:
            continue
        print(f"{key}: {json.dumps(data[key])}")
    print(f"wrote {os.path.basename(path)}" + (f" (missing: {', '.join(missing)})" if missing else ""))
    return 1 if bench is None or missing else 0


if __name__ == "__main__":
    sys.exit(main())
