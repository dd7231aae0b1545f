"""Warp-state samples of an Nsight Compute SASS source page (ncu-ws-sass.csv.gz unless
given) by partition (the SASS ranges between a warp-specialised kernel's setmaxnreg
points: the worker's code first, then the default partition's; the whole kernel
otherwise) and the instructions with the most samples."""

import csv
import gzip
import sys

with gzip.open(sys.argv[1] if len(sys.argv) > 1 else "ncu-ws-sass.csv.gz", "rt") as f:
    rows = list(csv.reader(f))
hdr, data = rows[1], rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]


def samples(r):
    return int(r[ix["Warp Stall Sampling (All Samples)"]] or 0)


def region(a, b, name):
    tot = sum(samples(r) for r in data[a:b])
    agg = {k: sum(int(r[ix[k]] or 0) for r in data[a:b]) for k in reasons}
    print(f"== {name}: SASS [{a}, {b}), {tot} samples")
    for k, v in sorted(agg.items(), key=lambda x: -x[1])[:7]:
        print(f"   {k:18s} {v:6d} {100 * v / max(tot, 1):5.1f}%")
    for i in sorted(sorted(range(a, b), key=lambda i: -samples(data[i]))[:12]):
        r = data[i]
        top = sorted(((int(r[ix[k]] or 0), k) for k in reasons), reverse=True)[:2]
        src = r[ix["Source"]].strip()[:62]
        print(f"   {i:5d} {samples(r):5d} {r[ix['Instructions Executed']]:>8s} {src:62s} {top}")


marks = [i for i, r in enumerate(data) if "USETMAXREG" in r[ix["Source"]]]
if marks:
    print("setmaxnreg at", marks)
    region(0, marks[2], "worker (loads, widening, stores)")
    region(marks[2], marks[4], "default partition start (barrier init, Q)")
    region(marks[4], marks[5], "default partition (MMAs, softmax)")
else:
    region(0, len(data), "the kernel (one warpgroup)")
print("== mbarrier waits (first tries in the loops, retries in the out-of-line loops at the end)")
for i, r in enumerate(data):
    if "TRYWAIT" in r[ix["Source"]]:
        executed = r[ix["Instructions Executed"]]
        print(f"   {i:5d} executed {executed:>8s} {r[ix['Source']].strip()[:70]}")
