#!/usr/bin/env python3
"""Where a dax::profile trace's time went: self time per op (an op's time less the ops inside it),
grouped by name and by name with the inputs' shapes, largest first.

    python3 benchmarks/trace_summary.py TRACE.json [--top 30] [--rank 0]
"""
import argparse
import collections
import json


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == args.rank]
    events.sort(key=lambda e: (e["ts"], -e["dur"]))
    # Self time: each event's duration less its direct children's (events nest by time on one thread).
    self_us = [e["dur"] for e in events]
    stack = []
    for i, e in enumerate(events):
        while stack and events[stack[-1]]["ts"] + events[stack[-1]]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            self_us[stack[-1]] -= e["dur"]
        stack.append(i)
    total = sum(self_us)
    span = max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events) if events else 0
    by_name, by_shape, counts, shape_counts = (collections.Counter(), collections.Counter(),
                                               collections.Counter(), collections.Counter())
    for e, t in zip(events, self_us):
        a = e.get("args", {})
        key = f"{e['name']} [{a.get('inputs', a.get('result', ''))}]"
        by_name[e["name"]] += t
        counts[e["name"]] += 1
        by_shape[key] += t
        shape_counts[key] += 1
    print(f"{len(events)} events, self time {total / 1e3:.2f} ms over a span of {span / 1e3:.2f} ms")
    print(f"\n{'op':<28} {'calls':>6} {'ms':>9} {'share':>6}")
    for name, t in by_name.most_common(args.top):
        print(f"{name:<28} {counts[name]:>6} {t / 1e3:>9.2f} {100 * t / total:>5.1f}%")
    print(f"\n{'ms':>9} {'calls':>6}  op [inputs]")
    for key, t in by_shape.most_common(args.top):
        print(f"{t / 1e3:>9.2f} {shape_counts[key]:>6}  {key[:150]}")


if __name__ == "__main__":
    main()
