"""torch_fl.compile.vector_math: when a fused kernel calls Sleef's 3.5-ULP function."""

from torch_fl.compile.vector_math import sleef_call


def test_native_float_vectors_call_sleef_u35():
    assert sleef_call("tanh", "tmp0", float_lanes=16, tiling_factor=16, bit_width=512) == \
        "at::vec::Vectorized<float>(Sleef_tanhf16_u35(tmp0))"
    assert sleef_call("log", "tmp3", float_lanes=8, tiling_factor=8, bit_width=256) == \
        "at::vec::Vectorized<float>(Sleef_logf8_u35(tmp3))"


def test_wider_tiles_and_other_instruction_sets_keep_inductors_code():
    # bf16 kernels tile 32 wide on AVX-512: floats are two registers (VectorizedN)
    assert sleef_call("tanh", "tmp0", float_lanes=16, tiling_factor=32, bit_width=512) is None
    assert sleef_call("tanh", "tmp0", float_lanes=4, tiling_factor=4, bit_width=128) is None  # NEON
