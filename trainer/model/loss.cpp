#include "trainer/model/loss.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <stdexcept>
#include <string>

#include "kernels/cross_entropy.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/device_copy.h"

namespace kubetune::model {
namespace {

constexpr int64_t kIgnoreIndex = -100;

// loss = sum_i logsumexp(rows_i W^T) - (rows_i W^T)[target_i], with a backward that
// recomputes the logits chunk by chunk instead of storing them.
struct ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
  // The matmuls run in the dtype autocast gives them in forward (bf16 on GPU), and backward, which
  // runs outside the autocast region, uses the same one. Without this, full fine-tuning (fp32
  // hidden states and master weights) would run the three [rows, vocab] backward products in fp32,
  // several times slower than the rest of the step. Softmax is always fp32.
  static at::ScalarType matmul_dtype(const at::Tensor& rows) {
    const auto device = rows.device().type();
    if (at::autocast::is_autocast_enabled(device) && rows.scalar_type() == at::kFloat)
      return at::autocast::get_autocast_dtype(device);
    return rows.scalar_type();
  }
  static at::Tensor chunk_logits(const at::Tensor& rows, const at::Tensor& weight) {
    return at::mm(rows, weight.t());
  }

  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& weight, const at::Tensor& targets, int64_t chunk) {
    at::Tensor total = at::zeros({}, rows.options().dtype(at::kFloat));
    const at::ScalarType dtype = matmul_dtype(rows);
    const at::Tensor w = weight.to(dtype), r_all = rows.to(dtype);
    std::vector<at::Tensor> lse_parts;
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t len = std::min(chunk, rows.size(0) - start);
      at::Tensor logits = chunk_logits(r_all.narrow(0, start, len), w);
      auto [lse, picked] = kernels::logsumexp_target(logits, targets.narrow(0, start, len));
      total += (lse - picked).sum();
      lse_parts.push_back(lse);
    }
    ctx->save_for_backward({rows, weight, targets, at::cat(lse_parts)});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const bool need_rows = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    const at::Tensor g = grad_out[0].to(at::kFloat);
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const at::Tensor w = weight.to(dtype), r_all = rows.to(dtype);
    at::Tensor d_rows = need_rows ? at::empty_like(rows) : at::Tensor();
    // Accumulate the weight gradient in fp32 even for bf16 weights.
    at::Tensor d_weight =
        need_weight ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t len = std::min(chunk, rows.size(0) - start);
      at::Tensor r = r_all.narrow(0, start, len);
      // d loss / d logits = softmax - one_hot(target), scaled by the incoming gradient, written
      // over the recomputed logits.
      at::Tensor d_logits = chunk_logits(r, w);
      kernels::cross_entropy_backward_(d_logits, lse.narrow(0, start, len),
                                       targets.narrow(0, start, len), g);
      if (need_rows) d_rows.narrow(0, start, len).copy_(at::mm(d_logits, w));
      if (need_weight) d_weight.add_(at::mm(d_logits.t(), r));
    }
    if (need_weight) d_weight = d_weight.to(weight.scalar_type());
    return {d_rows, d_weight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, int64_t> next_token_loss_sum(CausalLMImpl& model, const at::Tensor& hidden,
                                                   const at::Tensor& labels, int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 3 && labels.dim() == 2 && hidden.size(0) == labels.size(0) &&
                  hidden.size(1) == labels.size(1),
              "next_token_loss_sum: hidden must be [B,T,H] and labels [B,T]");
  TORCH_CHECK(chunk_rows > 0, "next_token_loss_sum: chunk_rows must be positive");
  TORCH_CHECK(!model.lm_head || !model.lm_head->has_lora(),
              "next_token_loss_sum: LoRA on lm_head is not supported");
  const int64_t T = hidden.size(1), H = hidden.size(2);
  if (T < 2) return {hidden.sum().to(at::kFloat) * 0, 0};

  // Target selection happens on the host: labels come from the data loader there, and doing it on
  // the device would stall the GPU queue on `nonzero` and the range check.
  at::Tensor targets = labels.narrow(1, 1, T - 1).reshape(-1).cpu();
  at::Tensor keep = (targets != kIgnoreIndex).nonzero().squeeze(1);
  const int64_t n = keep.numel();
  // Keep the result connected to the graph so that backward() works on an all-masked batch.
  if (n == 0) return {hidden.sum().to(at::kFloat) * 0, 0};

  at::Tensor tgt = targets.index_select(0, keep);
  const int64_t vocab = model.output_weight().size(0);
  const int64_t lo = tgt.min().item<int64_t>(), hi = tgt.max().item<int64_t>();
  if (lo < 0 || hi >= vocab)
    throw std::runtime_error("next_token_loss_sum: label " + std::to_string(lo < 0 ? lo : hi) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  keep = to_device_async(keep, hidden.device());
  tgt = to_device_async(tgt, hidden.device());
  at::Tensor rows = hidden.narrow(1, 0, T - 1).reshape({-1, H}).index_select(0, keep);
  at::Tensor loss = ChunkedLinearCrossEntropy::apply(rows, model.output_weight(), tgt, chunk_rows);
  return {loss, n};
}

}  // namespace kubetune::model
