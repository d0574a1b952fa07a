#include "trainer/model/sink_attention.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <limits>

namespace kubetune::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The bool mask as the additive bias the memory-efficient kernel takes: [B,H,T,T] float in q's
// dtype, 0 where a key may be attended and -inf where not, its rows padded to a multiple of 16
// elements (the kernel's alignment) and broadcast over the heads without a copy.
Tensor additive_bias(const Tensor& mask, const Tensor& q) {
  const int64_t B = mask.size(0), T = mask.size(-1), padded = (T + 15) / 16 * 16;
  Tensor bias = at::full({B, 1, T, padded}, -std::numeric_limits<double>::infinity(), q.options());
  bias.narrow(-1, 0, T).masked_fill_(mask.expand({B, 1, T, T}), 0.0);
  return bias.narrow(-1, 0, T).expand({B, q.size(1), T, T});
}

// k or v [B,Hkv,T,D] with each head repeated for its group of q's heads (transformers' repeat_kv).
Tensor repeat_heads(const Tensor& t, int64_t heads) {
  return heads == t.size(1) ? t : t.repeat_interleave(heads / t.size(1), 1);
}

// The sink's part, for a kernel's output and log-sum-exp over the real keys (lse [B,H,T] fp32):
// the rows' share kept by the real keys, and the log-sum-exp with the sink in it.
std::pair<Tensor, Tensor> sink_shares(const Tensor& lse, const Tensor& sinks) {
  const Tensor with_sink = at::logaddexp(lse, sinks.to(at::kFloat).view({1, -1, 1}));
  return {at::exp(lse - with_sink), with_sink};
}

// d(loss)/d(sink) = sum over rows of -p_sink * rowsum(dO * out), p_sink = 1 - kept; `row` is
// rowsum(dO * out) [B,H,T] and `kept` the real keys' share [B,H,T].
Tensor sink_gradient(const Tensor& kept, const Tensor& row, at::ScalarType dtype) {
  return ((kept - 1) * row).sum(at::IntArrayRef{0, 2}).to(dtype);
}

// HF's window (query - key < window) as the flash kernel's left window of window - 1 keys; -1 is
// none.
int64_t flash_left_window(int64_t window) { return window > 0 ? window - 1 : -1; }

// Unpacked rows on the flash kernel: q [B,H,T,D], k and v [B,Hkv,T,D], causal, keys within
// `window` of the query (0: all earlier ones).
class FlashSinkAttention : public torch::autograd::Function<FlashSinkAttention> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& sinks, int64_t window, double scale) {
    const int64_t T = q.size(2);
    // The kernel's layout is [B,T,heads,D].
    const Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
    auto [out, lse, rng, unused, debug] = at::_flash_attention_forward(
        qt, kt, vt, std::nullopt, std::nullopt, T, T, /*dropout_p=*/0.0, /*is_causal=*/true,
        /*return_debug_mask=*/false, scale, flash_left_window(window), int64_t{0});
    auto [kept, with_sink] = sink_shares(lse.narrow(-1, 0, T), sinks);
    // out [B,T,H,D], kept [B,H,T]
    const Tensor scaled =
        (out.to(at::kFloat) * kept.transpose(1, 2).unsqueeze(-1)).to(out.scalar_type());
    ctx->save_for_backward({qt, kt, vt, scaled, with_sink.contiguous(), rng, unused, kept});
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["sinks_dtype"] = static_cast<int64_t>(sinks.scalar_type());
    return scaled.transpose(1, 2);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &qt = saved[0], &kt = saved[1], &vt = saved[2], &out = saved[3], &lse = saved[4],
                 &rng = saved[5], &unused = saved[6], &kept = saved[7];
    const int64_t T = qt.size(1), window = ctx->saved_data["window"].toInt();
    const Tensor grad = grads[0].transpose(1, 2).contiguous();  // [B,T,H,D]
    auto [dq, dk, dv] = at::_flash_attention_backward(
        grad, qt, kt, vt, out, lse, Tensor(), Tensor(), T, T, /*dropout_p=*/0.0,
        /*is_causal=*/true, rng, unused, ctx->saved_data["scale"].toDouble(),
        flash_left_window(window), int64_t{0});
    const Tensor row = (grad.to(at::kFloat) * out.to(at::kFloat)).sum(-1).transpose(1, 2);
    const Tensor dsink = sink_gradient(
        kept, row, static_cast<at::ScalarType>(ctx->saved_data["sinks_dtype"].toInt()));
    return {dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2), dsink, {}, {}};
  }
};

// Packed rows (or fp32) on the memory-efficient kernel, k and v with their heads repeated.
class FusedSinkAttention : public torch::autograd::Function<FusedSinkAttention> {
 public:
  // `bias` is passed by pointer (null: causal): a custom Function takes no undefined tensor.
  static Tensor forward(AutogradContext* ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& sinks, const Tensor* bias_or_null, double scale) {
    const Tensor bias = bias_or_null ? *bias_or_null : Tensor();
    const bool causal = !bias.defined();
    std::optional<Tensor> b = causal ? std::nullopt : std::optional<Tensor>(bias);
    auto [out, lse, seed, offset] = at::_scaled_dot_product_efficient_attention(
        q, k, v, b, /*compute_log_sumexp=*/true, /*dropout_p=*/0.0, causal, scale);
    // lse [B,H,T rounded up to 32] fp32, natural log; rows past T are padding.
    const int64_t T = q.size(2);
    auto [kept, with_sink] = sink_shares(lse.narrow(-1, 0, T), sinks);
    const Tensor scaled = (out.to(at::kFloat) * kept.unsqueeze(-1)).to(out.scalar_type());
    Tensor lse_with_sink = lse.clone();
    lse_with_sink.narrow(-1, 0, T).copy_(with_sink);
    ctx->save_for_backward({q, k, v, scaled, lse_with_sink, seed, offset, kept});
    ctx->saved_data["bias"] = bias;  // no gradient: kept aside from the saved variables
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["sinks_dtype"] = static_cast<int64_t>(sinks.scalar_type());
    return scaled;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4],
                 &seed = saved[5], &offset = saved[6], &kept = saved[7];
    const Tensor bias =
        ctx->saved_data["bias"].isTensor() ? ctx->saved_data["bias"].toTensor() : Tensor();
    const Tensor grad = grads[0].contiguous();
    // With the sink's log-sum-exp the kernel's probabilities are the sink-inclusive ones, and
    // with the rescaled output its row terms rowsum(dO * out) are too: the gradient of q, k and
    // v of attention over the real keys and the sink's (whose value is 0).
    auto [dq, dk, dv, unused] = at::_scaled_dot_product_efficient_attention_backward(
        grad, q, k, v, bias, out, lse, seed, offset, /*dropout_p=*/0.0, {true, true, true, false},
        /*is_causal=*/!bias.defined(), ctx->saved_data["scale"].toDouble());
    const Tensor row = (grad.to(at::kFloat) * out.to(at::kFloat)).sum(-1);
    const Tensor dsink = sink_gradient(
        kept, row, static_cast<at::ScalarType>(ctx->saved_data["sinks_dtype"].toInt()));
    return {dq, dk, dv, dsink, {}, {}};
  }
};

}  // namespace

Tensor attention_with_sinks_reference(const Tensor& q, const Tensor& k_grouped,
                                      const Tensor& v_grouped, const Tensor& mask,
                                      const Tensor& sinks, double scale, double dropout,
                                      bool training) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  const Tensor k = repeat_heads(k_grouped, H), v = repeat_heads(v_grouped, H);
  const Tensor allowed =
      mask.defined() ? mask : at::ones({T, T}, q.options().dtype(at::kBool)).tril();
  Tensor scores = at::matmul(q, k.transpose(2, 3)) * scale;
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  const Tensor sink = sinks.to(scores.scalar_type()).reshape({1, H, 1, 1}).expand({B, H, T, 1});
  Tensor logits = at::cat({scores, sink}, -1);
  logits = logits - std::get<0>(logits.max(-1, /*keepdim=*/true));
  Tensor probs = at::softmax(logits, -1).narrow(-1, 0, T);
  probs = at::dropout(probs, dropout, training).to(v.scalar_type());
  return at::matmul(probs, v);
}

Tensor attention_with_sinks(const Tensor& q, const Tensor& k, const Tensor& v,
                            const SinkAttentionMask& mask, const Tensor& sinks, double scale,
                            double dropout, bool training) {
  if (!q.is_cuda() || (training && dropout > 0))
    return attention_with_sinks_reference(q, k, v, mask.mask, sinks, scale, dropout, training);
  const bool half = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  if (half && !mask.segmented) return FlashSinkAttention::apply(q, k, v, sinks, mask.window, scale);
  const Tensor bias = mask.mask.defined() ? additive_bias(mask.mask, q) : Tensor();
  const int64_t H = q.size(1);
  return FusedSinkAttention::apply(q, repeat_heads(k, H), repeat_heads(v, H), sinks,
                                   bias.defined() ? &bias : nullptr, scale);
}

}  // namespace kubetune::model
