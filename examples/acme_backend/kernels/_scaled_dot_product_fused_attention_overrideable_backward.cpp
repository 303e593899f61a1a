// Kernel of aten::_scaled_dot_product_fused_attention_overrideable_backward on the acme device. Created once by `flsdk gen`; this file
// is yours and flsdk never rewrites it. Until you delete the marker line below,
// the file is not compiled and _scaled_dot_product_fused_attention_overrideable_backward runs on the CPU fallback.
// flsdk:stub k__scaled_dot_product_fused_attention_overrideable_backward
#include "kernels.h"

#include <c10/util/Exception.h>

namespace acme::kernels {

// _scaled_dot_product_fused_attention_overrideable_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor attn_bias, bool[4] grad_input_mask, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_attn_bias)
::std::tuple<at::Tensor,at::Tensor,at::Tensor,at::Tensor> k__scaled_dot_product_fused_attention_overrideable_backward(const at::Tensor & grad_out, const at::Tensor & query, const at::Tensor & key, const at::Tensor & value, const at::Tensor & attn_bias, ::std::array<bool,4> grad_input_mask, const at::Tensor & out, const at::Tensor & logsumexp, const at::Tensor & cum_seq_q, const at::Tensor & cum_seq_k, int64_t max_q, int64_t max_k, double dropout_p, bool is_causal, const at::Tensor & philox_seed, const at::Tensor & philox_offset, ::std::optional<double> scale) {
  TORCH_CHECK(false, "acme: _scaled_dot_product_fused_attention_overrideable_backward: kernel body not written yet");
}

}  // namespace acme::kernels
