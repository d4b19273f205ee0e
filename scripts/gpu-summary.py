#!/usr/bin/env python3
"""The verdict of a GPU test run, from its ctest log (scripts/gpu-check.sh test calls it).

    gpu-summary.py CTEST_LOG [--gpu-visible yes|no|auto|EVIDENCE] [--out SUMMARY] [--title TEXT]

Counts passed, failed and skipped tests separately (Timeout, Not Run and crashes count as failed)
and fails the run (exit 1) when
  - no GPU test ran at all (none found, or every one skipped): a run that tested nothing;
  - any test failed;
  - any test skipped while a GPU is visible (`nvidia-smi -L` lists one, or /dev/nvidia0 exists):
    the GPU tests skip only where there is no GPU, so a skip there means a broken setup.
The summary (stdout, and SUMMARY when given) holds one line `counts: passed=P failed=F skipped=S`
that the bench phase reads back. Python's standard library only.
"""
import argparse
import os
import re
import subprocess
import sys

# " 3/20 Test  #3: cuda.kernels ..........***Failed    2.01 sec", also in ctest -V output.
RESULT = re.compile(r"^\s*\d+/\d+\s+Test\s+#\s*\d+:\s+(\S+)\s+\.*\s*(?:\*\*\*)?(.*?)\s+([\d.]+)\s+sec\s*$")


def gpu_visible():
    """How this machine shows a GPU, or '' when it shows none."""
    if os.path.exists("/dev/nvidia0"):
        return "/dev/nvidia0 exists"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in out.splitlines():
        if line.startswith("GPU "):
            return "nvidia-smi -L lists " + line.strip()
    return ""


HEAD = re.compile(r"^\s*\d+/\d+\s+Test\s+#\s*\d+:")


def result_lines(text):
    """ctest's result lines, each joined with the lines it spills onto: a failed regular-expression
    test prints "***Failed  Required regular expression not found. Regex=[verified: " and the
    rest ("]  1.65 sec") on the next line, since the expression ends in a newline."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not HEAD.match(line):
            continue
        joined = line
        for extra in lines[i + 1:i + 4]:
            if re.search(r"\ssec\s*$", joined):
                break
            joined += " " + extra
        yield joined


def parse(text):
    """{test name: (status, seconds)}, the last result of each name."""
    results = {}
    for line in result_lines(text):
        m = RESULT.match(line)
        if m:
            results[m.group(1)] = (m.group(2).strip(), float(m.group(3)))
    return results


def kind(status):
    if status.startswith("Passed"):
        return "passed"
    if status.startswith("Skipped"):
        return "skipped"
    return "failed"


def summarize(text, visible, title="dax gpu-check test"):
    """(summary text, ok)."""
    results = parse(text)
    groups = {"passed": [], "failed": [], "skipped": []}
    for name, (status, secs) in results.items():
        groups[kind(status)].append((name, status, secs))
    p, f, s = (len(groups[k]) for k in ("passed", "failed", "skipped"))
    problems = []
    if p + f == 0:
        found = "no tests were found" if not results else f"all {s} skipped"
        problems.append(f"no GPU test ran ({found})")
    if f:
        problems.append(f"{f} test{'s' if f != 1 else ''} failed")
    if s and visible:
        problems.append(f"{s} test{'s' if s != 1 else ''} skipped while a GPU is visible ({visible})")
    ok = not problems
    lines = [f"{title}: {'PASS' if ok else 'FAIL'}" + ("" if ok else ": " + "; ".join(problems)),
             f"counts: passed={p} failed={f} skipped={s}",
             f"GPU visible: {visible or 'no'}"]
    for key in ("failed", "skipped", "passed"):
        for name, status, secs in sorted(groups[key]):
            lines.append(f"  {key:7s} {name} ({status}, {secs:.2f} s)")
    return "\n".join(lines) + "\n", ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--gpu-visible", default="auto",
                    help="yes, no, auto (nvidia-smi -L, /dev/nvidia0), or how the GPU was seen (counts as yes)")
    ap.add_argument("--out")
    ap.add_argument("--title", default="dax gpu-check test")
    a = ap.parse_args()
    try:
        with open(a.log, errors="replace") as f:
            text = f.read()
    except OSError as e:
        text = ""
        print(f"gpu-summary: cannot read {a.log}: {e}", file=sys.stderr)
    if a.gpu_visible == "auto":
        visible = gpu_visible()
    else:  # no, yes, or the evidence itself ("nvidia-smi -L lists GPU 0: ...")
        visible = {"yes": "given as --gpu-visible yes", "no": ""}.get(a.gpu_visible, a.gpu_visible)
    summary, ok = summarize(text, visible, a.title)
    sys.stdout.write(summary)
    if a.out:
        with open(a.out, "w") as f:
            f.write(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
