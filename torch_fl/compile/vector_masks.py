"""Loading and storing vectors of booleans (dropout masks, causal masks, comparisons)
in a device's fused C++ kernels.

Inductor's C++ kernels move a bool vector through memory with ATen's
`VecMask<float, 1>::from(bool*, count)` and `::store(bool*, count)`, which go lane
by lane. Measured on AVX-512 with Inductor's compile flags: the store costs
~6-8 ns per element (more than drawing a dropout mask's random numbers: it was
the whole cost of a compiled dropout's forward in training, where the mask is
saved for the backward), the load ~0.6 ns (a masked softmax loads its mask
twice per element). Here both take a few vector instructions (~0.05 ns per
element), with the same bytes and the same mask lanes: a true lane is all ones,
a false lane and every lane past `count` are zero.
"""

from __future__ import annotations

# Per instruction set: C++ turning the 0/1 float vector `ones` into 16 bytes `bytes`
# whose first (float lanes) bytes are the mask.
_TO_BYTES = {
    512: "__m128i bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(ones));",
    # AVX2 has no 32->8 narrowing: saturating packs (the values are 0 or 1) to 16, then 8 bits.
    256: ("__m256i words = _mm256_cvttps_epi32(ones);"
          " __m128i halves = _mm_packs_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1));"
          " __m128i bytes = _mm_packs_epi16(halves, halves);"),
}


def _applies(tiling_factor: int, float_lanes: int, bit_width: int) -> bool:
    # A kernel tiled wider than one float vector (bf16 loads: VectorizedN) keeps Inductor's code.
    return bit_width in _TO_BYTES and tiling_factor == float_lanes


def mask_store_line(value: str, pointer: str, count: str, *, tiling_factor: int, float_lanes: int,
                    bit_width: int) -> str | None:
    """One C++ statement storing the first `count` lanes of the bool vector `value` to the
    `bool*` expression `pointer`; None where this does not apply (so the caller keeps
    Inductor's code)."""
    if not _applies(tiling_factor, float_lanes, bit_width):
        return None
    return ("{ at::vec::Vectorized<float> ones = " + f"{value}.to<float,1>(); {_TO_BYTES[bit_width]}"
            " alignas(16) unsigned char staged[16];"
            " _mm_store_si128(reinterpret_cast<__m128i*>(staged), bytes);"
            f" std::memcpy({pointer}, staged, {count}); }}")


def mask_load_expr(pointer: str, count: str, *, full: bool, tiling_factor: int, float_lanes: int,
                   bit_width: int) -> str | None:
    """A C++ expression: the `VecMask<float,1>` of the first `count` bools at `pointer`
    (lanes past `count` false, nothing past them read; `full`: count is the vector's
    width); None where this does not apply."""
    if not _applies(tiling_factor, float_lanes, bit_width):
        return None
    if bit_width == 512:
        # A masked byte load (no fault past count), then byte != 0 widened to 32-bit lanes.
        lanes = (f"_mm512_castsi512_ps(_mm512_movm_epi32(_mm_cmpneq_epi8_mask(_mm_maskz_loadu_epi8("
                 f"static_cast<__mmask16>((1u << ({count})) - 1u), {pointer}), _mm_setzero_si128())))")
    else:
        if full:
            raw = f"_mm_loadl_epi64(reinterpret_cast<const __m128i*>({pointer}))"
        else:  # a tail: copy only count bytes
            raw = ("[&]() { alignas(16) unsigned char staged[16] = {}; "
                   f"std::memcpy(staged, {pointer}, {count}); "
                   "return _mm_load_si128(reinterpret_cast<const __m128i*>(staged)); }()")
        lanes = f"_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_cvtepu8_epi32({raw}), _mm256_setzero_si256()))"
    return f"at::vec::VecMask<float,1>(at::vec::Vectorized<float>({lanes}))"
