"""Instructions per malloc + free pair of the MallocFreePair workload, counted by callgrind.

    python asv_bench/pair_profile.py [PAIRS] [--annotate out.txt] [--quick-depth N]

Re-runs itself under `valgrind --tool=callgrind --dump-instr=yes` and sums the instruction
counts that fall inside the jitted `churn_run` loop (every allocator call is inlined into it),
then divides by the pairs run. `--annotate` writes the loop's disassembly with per-instruction
execution counts per pair, to attribute the cost to source regions by hand. Valgrind's CPU
differs from the host's, so Numba compiles a separate copy under it (minutes, once per cache).
`--quick-depth 0` profiles the allocator without quick lists (default: the default config).
Needs valgrind and objdump.
"""

import argparse
import collections
import ctypes
import os
import subprocess
import sys
import tempfile

CODE_WINDOW = 0x4000  # bytes of machine code read from the loop's entry point
WARM_PAIRS = 1000


def run_workload(pairs, prefix, quick_depth):
    import numpy as np

    from rtsoa.device import AllocatorConfig, Device
    from rtsoa.testing.workloads import churn_fill, churn_run, churn_workload

    initial, victims, sizes = churn_workload(0, pairs)
    config = AllocatorConfig() if quick_depth is None else AllocatorConfig(quick_depth=quick_depth)
    device = Device(hbm_bytes=4 << 30, allocator=config)
    handles = np.zeros(initial.size, dtype=np.int64)
    assert churn_fill(device.state, 0, initial, handles, 0) == 0
    # compile (or load) the loop and reach the steady state; these pairs are counted too
    assert churn_run(device.state, 0, victims[:WARM_PAIRS], sizes[:WARM_PAIRS], handles, 0) == 0
    result = churn_run.overloads[churn_run.signatures[0]]
    address = result.library.get_pointer_to_function(result.fndesc.llvm_func_name)
    with open(prefix + ".addr", "w") as handle:
        handle.write(hex(address))
    with open(prefix + ".bin", "wb") as handle:
        handle.write(ctypes.string_at(address, CODE_WINDOW))
    assert churn_run(device.state, 0, victims, sizes, handles, 0) == 0


def instruction_counts(prefix):
    """Per-offset instruction counts inside the code window, from the callgrind output."""
    base = int(open(prefix + ".addr").read(), 16)
    counts = collections.Counter()
    positions, previous, skip = 1, [0, 0], False
    with open(prefix + ".cg") as handle:
        for line in handle:
            if line.startswith("positions:"):
                positions = len(line.split()) - 1
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                for i in range(positions):
                    token = parts[i]
                    if token[0] in "+-":  # relative to the previous line
                        previous[i] += int(token, 0)
                    elif token != "*":
                        previous[i] = int(token, 0)
                if skip:  # the inclusive cost line of a call
                    skip = False
                elif len(parts) > positions and 0 <= previous[0] - base < CODE_WINDOW:
                    counts[previous[0] - base] += int(parts[positions])
            elif line.startswith("calls="):
                skip = True
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pairs", nargs="?", type=int, default=200_000)
    parser.add_argument("--annotate", help="write per-instruction counts per pair here")
    parser.add_argument("--quick-depth", type=int, help="AllocatorConfig.quick_depth")
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        run_workload(args.pairs, args.inner, args.quick_depth)
        return
    with tempfile.TemporaryDirectory() as scratch:
        prefix = os.path.join(scratch, "pairs")
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-instr=yes",
                f"--callgrind-out-file={prefix}.cg",
                sys.executable,
                os.path.abspath(__file__),
                str(args.pairs),
                "--inner",
                prefix,
            ]
            + ([] if args.quick_depth is None else ["--quick-depth", str(args.quick_depth)]),
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            sys.exit(f"the run under valgrind failed:\n{done.stderr[-3000:]}")
        counts = instruction_counts(prefix)
        pairs = args.pairs + WARM_PAIRS
        print(f"{sum(counts.values()) / pairs:.1f} instructions per malloc + free pair")
        if args.annotate:
            listing = subprocess.run(
                ["objdump", "-D", "-b", "binary", "-m", "i386:x86-64", prefix + ".bin"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            with open(args.annotate, "w") as out:
                for line in listing.splitlines():
                    try:
                        offset = int(line.split(":")[0], 16)
                    except ValueError:
                        continue
                    out.write(f"{counts.get(offset, 0) / pairs:6.2f} {line}\n")


if __name__ == "__main__":
    main()
