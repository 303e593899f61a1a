"""torch_fl.compile.vector_random and vector_masks: the C++ they generate, compiled
with g++ against torch's headers and run on this CPU, must give exactly what
Inductor's own code gives (ATen's Philox engine; ATen's VecMask load and store),
for both offset types, both instruction sets the CPU has, full vectors and tails."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from torch_fl.compile.vector_masks import mask_load_expr, mask_store_line
from torch_fl.compile.vector_random import philox_uniform_lines

CXX = os.environ.get("CXX", "g++")
INCLUDE = Path(torch.__file__).parent / "include"
# As Inductor compiles its kernels: no GCC loop vectorization, so what is vector is ours.
FLAGS = ["-std=c++17", "-O3", "-fno-tree-loop-vectorize", "-ffp-contract=off", f"-I{INCLUDE}"]
ISA_FLAGS = {512: ["-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma", "-DCPU_CAPABILITY_AVX512"],
             256: ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"]}
# The instruction sets torch's own CPU kernels can use here (AVX512 means F, BW, VL, DQ).
CAPABLE = {"AVX512": {512, 256}, "AVX2": {256}}


def _run_cpp(tmp_path, name: str, source: str, bit_width: int) -> str:
    if shutil.which(CXX) is None:
        pytest.skip(f"{CXX} not on PATH")
    capability = torch.backends.cpu.get_cpu_capability()
    if bit_width not in CAPABLE.get(capability, set()):
        pytest.skip(f"this CPU's capability is {capability}: no {bit_width}-bit vectors")
    cpp, exe = tmp_path / f"{name}.cpp", tmp_path / name
    cpp.write_text(source)
    build = subprocess.run([CXX, *FLAGS, *ISA_FLAGS[bit_width], str(cpp), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.parametrize("bit_width", [512, 256])
@pytest.mark.parametrize("offset_type", ["int64_t", "int32_t"])
def test_vector_philox_equals_atens_engine_lane_for_lane(tmp_path, bit_width, offset_type):
    lanes = 16 if bit_width == 512 else 8
    tiling = 2 * lanes  # a kernel tiled over two float vectors (bf16 loads) too
    lines = philox_uniform_lines("seed", "offsets", offset_type, tiling_factor=tiling,
                                 bit_width=bit_width,
                                 result_load="(std::copy(result, result + TILE, got), 0)")
    assert lines is not None
    lambda_expr = textwrap.indent("\n".join(lines), "        ")
    # int64 offsets also start past 32 bits, int32 ones just below their limit
    wide_starts = "0xFFFFFFF8LL, 0x1234567890LL" if offset_type == "int64_t" else "0x7FFFFFE0LL"
    source = f"""
#include <ATen/core/PhiloxRNGEngine.h>
#include <immintrin.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#define TILE {tiling}
struct Offsets {{  // stands in for the kernel's integer vector
    {offset_type} v[TILE];
    void store({offset_type}* out) const {{ std::copy(v, v + TILE, out); }}
}};
static float reference(uint32_t seed, uint32_t offset) {{  // Inductor's normalized_rand_cpu
    return static_cast<float>(at::Philox4_32(seed, 0, offset)() & 0x7FFFFFFF) * 4.6566127342e-10f;
}}
int main() {{
    const int64_t seeds[] = {{0, 1, 0x7FFFFFFFFFFFFFFFLL, -5, 123456789}};
    const int64_t starts[] = {{0, 1000, 0x7FFFFFF0LL, {wide_starts}}};
    long checked = 0, wrong = 0;
    for (int64_t seed : seeds) {{
        for (int64_t start : starts) {{
            for (int64_t block = 0; block < 64; block++) {{
                Offsets offsets;
                for (int j = 0; j < TILE; j++)
                    offsets.v[j] = static_cast<{offset_type}>(start + block * TILE * 3 + j * 3);
                float got[TILE];
                int unused =
{lambda_expr};
                (void)unused;
                for (int j = 0; j < TILE; j++) {{
                    float want = reference(static_cast<uint32_t>(seed), static_cast<uint32_t>(offsets.v[j]));
                    checked++;
                    if (got[j] != want && wrong++ < 5)
                        std::printf("seed %lld offset %lld: got %.9g want %.9g\\n", (long long)seed,
                                    (long long)offsets.v[j], got[j], want);
                }}
            }}
        }}
    }}
    std::printf("checked %ld wrong %ld\\n", checked, wrong);
    return wrong != 0;
}}
"""
    out = _run_cpp(tmp_path, "philox", source, bit_width)
    assert "wrong 0" in out and "checked 0" not in out, out


@pytest.mark.parametrize("bit_width", [512, 256])
def test_vector_mask_load_and_store_equal_atens_vecmask(tmp_path, bit_width):
    lanes = 16 if bit_width == 512 else 8
    isa = dict(tiling_factor=lanes, float_lanes=lanes, bit_width=bit_width)
    store = mask_store_line("mask", "out + 1", "count", **isa)
    load_full = mask_load_expr("in + 1", str(lanes), full=True, **isa)
    load_tail = mask_load_expr("in + 1", "count", full=False, **isa)
    assert None not in (store, load_full, load_tail)
    source = f"""
#include <ATen/cpu/vec/vec.h>
#include <cstdio>
#include <cstring>
using Vec = at::vec::Vectorized<float>;
using Mask = at::vec::VecMask<float, 1>;
static bool same(const Mask& a, const Mask& b) {{  // bit for bit, every lane
    float x[{lanes}], y[{lanes}];
    Vec(a).store(x);
    Vec(b).store(y);
    return std::memcmp(x, y, sizeof(x)) == 0;
}}
int main() {{
    long wrong = 0;
    for (int pattern = 0; pattern < 300; pattern++) {{
        float x[{lanes}];
        for (int j = 0; j < {lanes}; j++) x[j] = ((pattern * 7 + j * 13) % 11) - 5.0f;
        auto mask = Mask(Vec::loadu(x) > Vec(0.5f));
        unsigned char bytes[{lanes} + 2];
        for (int j = 0; j < {lanes} + 2; j++) bytes[j] = (j >= 1 && j <= {lanes}) ? (x[j - 1] > 0.5f) : 1;
        const bool* in = reinterpret_cast<const bool*>(bytes);
        if (!same({load_full}, Mask::from(in + 1, {lanes})) && wrong++ < 5)
            std::printf("pattern %d: full load differs from VecMask::from\\n", pattern);
        for (int count = 1; count <= {lanes}; count++) {{
            if (!same({load_tail}, Mask::from(in + 1, count)) && wrong++ < 5)
                std::printf("pattern %d count %d: load differs from VecMask::from\\n", pattern, count);
            unsigned char raw[{lanes} + 2];
            std::memset(raw, 7, sizeof(raw));
            bool* out = reinterpret_cast<bool*>(raw);
            {store}
            for (int j = 0; j < {lanes} + 2; j++) {{
                int want = (j >= 1 && j <= count) ? (x[j - 1] > 0.5f) : 7;  // untouched outside
                if (raw[j] != want && wrong++ < 5)
                    std::printf("pattern %d count %d byte %d: %d, want %d\\n", pattern, count, j, raw[j], want);
            }}
        }}
    }}
    std::printf("wrong %ld\\n", wrong);
    return wrong != 0;
}}
"""
    out = _run_cpp(tmp_path, "masks", source, bit_width)
    assert "wrong 0" in out, out


def test_other_instruction_sets_and_wider_tiles_keep_inductors_code():
    assert philox_uniform_lines("s", "o", "int64_t", tiling_factor=4, bit_width=128,
                                result_load="r") is None                       # NEON
    assert philox_uniform_lines("s", "o", "int16_t", tiling_factor=16, bit_width=512,
                                result_load="r") is None                       # no such offsets
    assert mask_store_line("m", "p", "16", tiling_factor=32, float_lanes=16, bit_width=512) is None
    assert mask_store_line("m", "p", "4", tiling_factor=4, float_lanes=4, bit_width=128) is None
    assert mask_load_expr("p", "16", full=True, tiling_factor=32, float_lanes=16, bit_width=512) is None
