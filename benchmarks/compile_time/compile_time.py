#!/usr/bin/env python3
"""How long a user's program takes to compile against dax, in both modes (docs/building.md).

Programs: empty.cpp (the include alone), small.cpp (ones, matmul, +, sum), small_array.cpp (the same
including only <dax/array.hpp>), examples/transformer_lm.cpp.
Modes: through CMake's dax::dax (the compiled mode: dax's library and the build tree's precompiled
<dax/dax.hpp> are built once per build tree and not counted, their time printed apart; each
program's own compile command is timed exactly as CMake wrote it, which finds that header), and
header-only (`mpicxx -std=c++20 -I include`, no CMake). Reference: reference_small.cpp, small.cpp
written with Eigen + MPI directly, compiled in the same run. Each cell is one compiler process
(wall seconds, the best of --repeat runs, and its peak memory); ratios are against the reference
at the same optimisation level. Results go to a JSON file and to stdout as a Markdown table.
Run it on a quiet machine: one compile at a time.
"""
import argparse, json, os, shlex, shutil, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PROGRAMS = {"empty": os.path.join(HERE, "empty.cpp"), "small": os.path.join(HERE, "small.cpp"),
            "small_array": os.path.join(HERE, "small_array.cpp"),
            "transformer_lm": os.path.join(ROOT, "examples", "transformer_lm.cpp")}
EIGEN = "/usr/include/eigen3"


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"compile_time: failed ({r.returncode}): {cmd if isinstance(cmd, str) else shlex.join(cmd)}\n"
                 f"{r.stdout}\n{r.stderr}")
    return r


def timed(cmd, cwd, repeat):
    """Best wall seconds and the peak resident memory (MB) of one compiler process, over `repeat` runs."""
    best = None
    for _ in range(repeat):
        out = tempfile.NamedTemporaryFile(suffix=".time", delete=False).name
        run(["/usr/bin/time", "-f", "%e %M", "-o", out] + cmd, cwd=cwd)
        wall, kb = open(out).read().split()[-2:]
        os.unlink(out)
        cell = (float(wall), int(kb) / 1024.0)
        if best is None or cell[0] < best[0]:
            best = cell
    return best


def cmake_commands(scratch, opt, env):
    """Configures the user project at -O<opt>, builds dax's library (timed apart), and returns each
    program's compile command from compile_commands.json."""
    build = os.path.join(scratch, f"cmake-O{opt}")
    run(["cmake", "-S", HERE, "-B", build, f"-DDAX_SOURCE={ROOT}", "-DCMAKE_BUILD_TYPE=",
         f"-DCMAKE_CXX_FLAGS=-O{opt}", "-DDAX_ENABLE_CUDA=OFF"], env=env)
    jobs = str(os.cpu_count() or 2)
    start = time.time()
    run(["cmake", "--build", build, "-j", jobs, "--target", "dax"], env=env)
    library_s = time.time() - start
    commands = {}
    for entry in json.load(open(os.path.join(build, "compile_commands.json"))):
        for name, src in PROGRAMS.items():
            if os.path.realpath(entry["file"]) == os.path.realpath(src):
                commands[name] = (shlex.split(entry["command"]), entry["directory"])
    return build, commands, library_s


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scratch", default=os.path.join(ROOT, "build-compile-time"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results", "compile_time.json"))
    ap.add_argument("--programs", default="empty,small,small_array,transformer_lm")
    args = ap.parse_args()
    names = args.programs.split(",")
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_CXX_COMPILER_LAUNCHER", "CCACHE_DIR")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    os.makedirs(args.scratch, exist_ok=True)
    obj = os.path.join(args.scratch, "program.o")
    rows, library = [], {}
    for opt in (0, 2):
        build, commands, library[f"O{opt}"] = cmake_commands(args.scratch, opt, env)
        ref = timed(["mpicxx", "-std=c++20", f"-O{opt}", f"-I{EIGEN}", "-c", os.path.join(HERE, "reference_small.cpp"),
                     "-o", obj], args.scratch, args.repeat)
        rows.append(dict(program="reference (Eigen + MPI)", mode="-", opt=f"O{opt}", seconds=ref[0], peak_mb=ref[1]))
        for name in names:
            cmd, cwd = commands[name]
            o = cmd.index("-o")
            cmd = cmd[:o + 1] + [obj] + cmd[o + 2:]
            s, mb = timed(cmd, cwd, args.repeat)
            rows.append(dict(program=name, mode="cmake", opt=f"O{opt}", seconds=s, peak_mb=mb, ratio=s / ref[0]))
            s, mb = timed(["mpicxx", "-std=c++20", f"-O{opt}", f"-I{os.path.join(ROOT, 'include')}", f"-I{EIGEN}",
                           "-c", PROGRAMS[name], "-o", obj], args.scratch, args.repeat)
            rows.append(dict(program=name, mode="header-only", opt=f"O{opt}", seconds=s, peak_mb=mb, ratio=s / ref[0]))
        if opt == 2:  # both modes build programs that run: small, linked each way, on 2 ranks
            run(["cmake", "--build", build, "--target", "small"], env=env)
            run(["mpiexec", "-n", "2", "--oversubscribe", os.path.join(build, "small")], env=env)
            exe = os.path.join(args.scratch, "small_header_only")
            run(["mpicxx", "-std=c++20", "-O2", f"-I{os.path.join(ROOT, 'include')}", f"-I{EIGEN}", PROGRAMS["small"],
                 "-o", exe])
            run(["mpiexec", "-n", "2", "--oversubscribe", exe], env=env)
    cxx = run(["mpicxx", "--version"]).stdout.splitlines()[0]
    print(f"compile_time: {cxx}, {os.cpu_count()} cores; dax's library and precompiled header (once per build tree, not counted): "
          + ", ".join(f"{k} {v:.0f} s" for k, v in library.items()))
    print("\n| program | mode | opt | seconds | peak MB | vs reference |\n|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "1.00"
        print(f"| {r['program']} | {r['mode']} | -{r['opt']} | {r['seconds']:.1f} | {r['peak_mb']:.0f} | {ratio} |")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(dict(compiler=cxx, cores=os.cpu_count(), date=time.strftime("%Y-%m-%d"), repeat=args.repeat,
                       library_seconds=library, rows=rows), f, indent=1)
    print(f"\ncompile_time: results in {args.json}")


if __name__ == "__main__":
    main()
