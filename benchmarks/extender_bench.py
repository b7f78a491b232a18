"""Extender benchmarks (also ``qosmos bench extender`` / ``qosmos bench scheduling``).

    python benchmarks/extender_bench.py extender --nodes 1523 --requests 1000
    python benchmarks/extender_bench.py scheduling --pods 1000

Prints one JSON object; the numbers go in reports, not in timed tests.
"""

from __future__ import annotations

import argparse
import json

from qosmos.extender.bench import bench_extender, bench_scheduling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    ext = sub.add_parser("extender", help="HTTP /filter + /prioritize latency vs a JSON echo floor")
    ext.add_argument("--nodes", type=int, default=1523)
    ext.add_argument("--requests", type=int, default=1000)
    sched = sub.add_parser("scheduling", help="pods/s with and without the extender on a real control plane")
    sched.add_argument("--pods", type=int, default=1000)
    sched.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    if args.what == "extender":
        result = bench_extender(nodes=args.nodes, requests=args.requests)
    else:
        result = bench_scheduling(pods=args.pods, timeout=args.timeout)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
