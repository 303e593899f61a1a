// Kernel of aten::_scaled_dot_product_fused_attention_overrideable on the acme device. Created once by `flsdk gen`; this file
// is yours and flsdk never rewrites it. Until you delete the marker line below,
// the file is not compiled and _scaled_dot_product_fused_attention_overrideable runs on the CPU fallback.
// flsdk:stub k__scaled_dot_product_fused_attention_overrideable
#include "kernels.h"

#include <c10/util/Exception.h>

namespace acme::kernels {

// _scaled_dot_product_fused_attention_overrideable(Tensor query, Tensor key, Tensor value, Tensor? attn_bias=None, float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)
::std::tuple<at::Tensor,at::Tensor,at::Tensor,at::Tensor,c10::SymInt,c10::SymInt,at::Tensor,at::Tensor,at::Tensor> k__scaled_dot_product_fused_attention_overrideable(const at::Tensor & query, const at::Tensor & key, const at::Tensor & value, const ::std::optional<at::Tensor> & attn_bias, double dropout_p, bool is_causal, bool return_debug_mask, ::std::optional<double> scale) {
  TORCH_CHECK(false, "acme: _scaled_dot_product_fused_attention_overrideable: kernel body not written yet");
}

}  // namespace acme::kernels
