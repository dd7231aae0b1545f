"""The 16-bit 16-head Gluon kernel at 32-head tiles (``ab_tile``'s launch: two tiles a
row at 64 heads, four at 128) at the occupancy count, a half and a quarter of it,
against the stage 1 ``mla_decode`` routes each problem to (the seesaw, or the tl
kernel under 128 tokens a split), both stages under CUDA graphs, µs, each output's
max abs distance from float64 in brackets. Lengths up to the pool's capacity (16384
tokens a row). The questions: whether at 64 heads the tiles win in every step of at
most 16384 tokens (``ab_tile --h64`` found them faster at the six sweep shapes there,
slower at four of the five above) and lose above, at shapes off the sweep's grid; and
whether four tiles a row win in small steps at 128 heads.

    PYTHONPATH="$PWD:$PWD/scripts:$PWD/docs/gpu/h16-bf16:$PWD/docs/gpu/h32-tile" \\
        python3 docs/gpu/h64-tile/ab_wide.py
"""

import ab_tile

H64 = [(2, 64, 1024), (2, 64, 2048), (4, 64, 2048), (8, 64, 1024), (8, 64, 2048)]
H64 += [(1, 64, 8192), (2, 64, 8192), (16, 64, 512), (32, 64, 512)]
# Above 16384 tokens.
H64 += [(2, 64, 16384), (8, 64, 4096), (32, 64, 1024), (128, 64, 256)]
H128 = [(1, 128, 1024), (1, 128, 4096), (1, 128, 16384), (4, 128, 1024), (4, 128, 4096)]
H128 += [(16, 128, 1024), (2, 128, 2048), (8, 128, 2048)]

if __name__ == "__main__":
    ab_tile.main(H64 + H128, divisors=(1, 2, 4))
