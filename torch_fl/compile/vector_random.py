"""Uniform random numbers in a device's fused C++ kernels, computed a vector at a time.

Inductor's C++ kernels draw `rand` (dropout's mask, `rand_like`, ...) with
`normalized_rand_cpu(seed, offset)`: one Philox-4x32-10 evaluation per element,
keeping 1 of its 4 outputs, in a scalar loop over the vector's lanes (Inductor
compiles with `-fno-tree-loop-vectorize`, so the loop stays scalar). That costs
~7 ns per element on this machine: in a GPT train step with dropout 0.1 it made
the compiled step slower than eager.

Here the same Philox rounds run on all lanes at once with AVX-512 / AVX2
integer instructions (the 32x32->64 multiply is `mul_epu32`). Each lane computes
exactly what `normalized_rand_cpu` computes, bit for bit: the same counter
(the offset, truncated to 32 bits, as the scalar function's parameter type does),
key (the seed, truncated likewise), 10 rounds and float conversion. So a compiled
dropout mask is the one Inductor draws for CPU, only faster.
"""

from __future__ import annotations

from typing import TypedDict

# Philox-4x32 round constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
_MULTIPLIER_A, _MULTIPLIER_B = 0xD2511F53, 0xCD9E8D57
_KEY_BUMP_A, _KEY_BUMP_B = 0x9E3779B9, 0xBB67AE85
_ROUNDS = 10
# The largest float with (2**31 - 1) * scale < 1: what normalized_rand_cpu multiplies by.
_UNIFORM_SCALE = "4.6566127342e-10f"



class _Isa(TypedDict):
    lanes: int
    p: str
    reg: str
    load: dict[str, str]
    store: str
    set1: str
    zero: str


# Per instruction set: (64-bit lanes per register, intrinsic prefix, register type,
# how to load `n` offsets of a given C++ type as 64-bit lanes, how to store the floats).
_ISAS: dict[int, _Isa] = {
    512: {
        "lanes": 8,
        "p": "_mm512",
        "reg": "__m512i",
        "load": {
            "int64_t": "_mm512_loadu_si512(offset + lane)",
            "int32_t": "_mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset + lane)))",
        },
        "store": ("_mm256_storeu_ps(result + lane, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256("
                  "_mm512_cvtepi64_epi32(c0), _mm256_set1_epi32(0x7FFFFFFF))), _mm256_set1_ps({scale})));"),
        "set1": "_mm512_set1_epi64",
        "zero": "_mm512_setzero_si512()",
    },
    256: {
        "lanes": 4,
        "p": "_mm256",
        "reg": "__m256i",
        "load": {
            "int64_t": "_mm256_loadu_si256(reinterpret_cast<const __m256i*>(offset + lane))",
            "int32_t": "_mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(offset + lane)))",
        },
        # AVX2 has no 64->32 narrowing: gather the even 32-bit halves into the low 128 bits.
        "store": ("_mm_storeu_ps(result + lane, _mm_mul_ps(_mm_cvtepi32_ps(_mm_and_si128("
                  "_mm256_castsi256_si128(_mm256_permutevar8x32_epi32(c0, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6))), "
                  "_mm_set1_epi32(0x7FFFFFFF))), _mm_set1_ps({scale})));"),
        "set1": "_mm256_set1_epi64x",
        "zero": "_mm256_setzero_si256()",
    },
}


def philox_uniform_lines(seed: str, offset: str, offset_type: str, *, tiling_factor: int,
                         bit_width: int, result_load: str) -> list[str] | None:
    """C++ lines of a lambda expression returning `tiling_factor` uniform floats for the
    integer vector `offset` (C++ element type `offset_type`) and the scalar `seed`, as
    `normalized_rand_cpu` would, one lane each; `result_load` turns the float array
    `result` into the kernel's vector. None where this does not apply (other
    instruction sets, other offset types), so the caller keeps Inductor's code."""
    isa = _ISAS.get(bit_width)
    if isa is None or offset_type not in isa["load"] or tiling_factor % isa["lanes"]:
        return None
    p, reg, set1 = isa["p"], isa["reg"], isa["set1"]

    def xor(a: str, b: str) -> str:
        return f"{p}_xor_si{bit_width}({a}, {b})"

    return [
        "[&]()",
        "{",
        f"    {offset_type} offset[{tiling_factor}];",
        f"    float result[{tiling_factor}];",
        f"    {offset}.store(offset);",
        f"    for (int64_t lane = 0; lane < {tiling_factor}; lane += {isa['lanes']})",
        "    {",
        "        // Philox-4x32 counter (offset, 0, 0, 0) and key (seed, 0), all lanes at once;",
        "        // only the low 32 bits of each 64-bit lane matter (mul_epu32 reads only those).",
        f"        {reg} c0 = {isa['load'][offset_type]};",
        f"        {reg} c1 = {isa['zero']}, c2 = c1, c3 = c1;",
        f"        uint32_t k0 = static_cast<uint32_t>({seed}), k1 = 0;",
        f"        for (int round = 0; round < {_ROUNDS}; round++)",
        "        {",
        f"            {reg} p0 = {p}_mul_epu32(c0, {set1}({_MULTIPLIER_A:#x}));",
        f"            {reg} p1 = {p}_mul_epu32(c2, {set1}({_MULTIPLIER_B:#x}));",
        f"            c0 = {xor(xor(f'{p}_srli_epi64(p1, 32)', 'c1'), f'{set1}(k0)')};",
        f"            c2 = {xor(xor(f'{p}_srli_epi64(p0, 32)', 'c3'), f'{set1}(k1)')};",
        "            c1 = p1;",
        "            c3 = p0;",
        f"            k0 += {_KEY_BUMP_A:#x}u;",
        f"            k1 += {_KEY_BUMP_B:#x}u;",
        "        }",
        "        // the first of the 4 outputs, as a float in [0, 1)",
        f"        {isa['store'].format(scale=_UNIFORM_SCALE)}",
        "    }",
        f"    return {result_load};",
        "}",
        "()",
    ]
