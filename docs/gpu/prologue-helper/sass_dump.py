"""On the CPU: the SASS instructions (addresses and encodings stripped) of 13 sm_90
Gluon stage 1 builds (``tests.test_gluon_build.compile_sm90``: the seesaw on 16-bit and
fp8 caches at 4, 2 (a cluster) and 1 splits, the fp8-MMA kernel, both 16-head kernels,
the 32-head tile), one file each into the folder given, to compare two trees' builds.

    PYTHONPATH=$PWD TRITON_CACHE_DIR=$(mktemp -d) scripts/dev python \\
        docs/gpu/prologue-helper/sass_dump.py /tmp/sass/after
"""

import os
import re
import sys

from tests import test_gluon_build as tb

CASES = [(128, "bf16", "same", s, None) for s in (4, 1, 2)]
CASES += [(128, "fp16", "fp8", 4, None), (128, "bf16", "fp8", 1, None)]
CASES += [(128, "bf16", "fp8mma", s, None) for s in (4, 1)]
CASES += [(16, "bf16", "same", 4, None), (16, "fp16", "same", 1, None)]
CASES += [(16, "bf16", "fp8", s, None) for s in (4, 1)]
CASES += [(32, "bf16", "same", s, 65536) for s in (4, 1)]


def main(out):
    os.makedirs(out, exist_ok=True)
    for heads, dtype, kv, splits, tokens in CASES:
        code = tb.sass(tb.compile_sm90(heads, dtype, kv, splits, batch_tokens=tokens))
        lines = [m.group(1) for m in re.finditer(r"/\*[0-9a-f]+\*/\s*(.*?)\s*;", code)]
        name = f"{heads}-{dtype}-{kv}-{splits}-{tokens}.sass"
        with open(os.path.join(out, name), "w") as f:
            f.write("\n".join(lines))
        print(name, len(lines), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
