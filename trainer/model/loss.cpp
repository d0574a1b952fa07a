#include "trainer/model/loss.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cross_entropy.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/device_copy.h"

namespace kubetune::model {
namespace {

constexpr int64_t kIgnoreIndex = -100;

// loss = sum_i logsumexp(rows_i W^T) - (rows_i W^T)[target_i]. When gradients are wanted, forward
// computes them too, chunk by chunk, while each chunk's logits are still there (as Liger's fused
// linear cross-entropy does): d logits = softmax - one_hot(target) overwrites the logits and two
// products give d rows and d W. Backward then only scales them by the incoming gradient. Keeping
// the logits instead would cost rows x vocab values (2 GiB for 8k tokens of Llama 3); recomputing
// them in backward, a third [rows, vocab] product.
struct ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
  // The matmuls run in the dtype autocast gives them (bf16 on GPU). Without this, full
  // fine-tuning (fp32 hidden states and master weights) would run the [rows, vocab] products in
  // fp32, several times slower than the rest of the step. Softmax is always fp32.
  static at::ScalarType matmul_dtype(const at::Tensor& rows) {
    const auto device = rows.device().type();
    if (at::autocast::is_autocast_enabled(device) && rows.scalar_type() == at::kFloat)
      return at::autocast::get_autocast_dtype(device);
    return rows.scalar_type();
  }

  // d_weight += d_logits^T r, accumulated in fp32 even when the product's inputs are bf16. On CUDA
  // cuBLAS writes the fp32 sum directly; elsewhere the product is made, then added.
  static void add_weight_gradient(at::Tensor& d_weight, const at::Tensor& d_logits,
                                  const at::Tensor& r) {
    if (d_weight.is_cuda() && d_logits.scalar_type() != at::kFloat)
      at::addmm_out(d_weight, d_weight, d_logits.t(), r, at::kFloat);
    else
      d_weight.add_(at::mm(d_logits.t(), r));
  }

  // need_grads = {rows, weight}: whether the caller will want each gradient (forward runs with
  // autograd off, so it cannot ask rows.requires_grad() under the caller's grad mode itself).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& weight, const at::Tensor& targets, int64_t chunk,
                            bool need_rows, bool need_weight) {
    at::Tensor total = at::zeros({}, rows.options().dtype(at::kFloat));
    const at::ScalarType dtype = matmul_dtype(rows);
    const at::Tensor w = weight.to(dtype), r_all = rows.to(dtype);
    const at::Tensor unit = at::ones({}, total.options());
    at::Tensor d_rows = need_rows ? at::empty_like(rows) : at::Tensor();
    at::Tensor d_weight =
        need_weight ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t len = std::min(chunk, rows.size(0) - start);
      const at::Tensor r = r_all.narrow(0, start, len), t = targets.narrow(0, start, len);
      at::Tensor logits = at::mm(r, w.t());
      auto [lse, picked] = kernels::logsumexp_target(logits, t);
      total += (lse - picked).sum();
      if (!need_rows && !need_weight) continue;
      kernels::cross_entropy_backward_(logits, lse, t, unit);  // logits now hold d logits
      if (need_rows) d_rows.narrow(0, start, len).copy_(at::mm(logits, w));
      if (need_weight) add_weight_gradient(d_weight, logits, r);
    }
    ctx->save_for_backward({d_rows, d_weight});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return total;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor g = grad_out[0].to(at::kFloat);
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    at::Tensor d_rows = saved[0].defined() ? saved[0] * g : at::Tensor();
    at::Tensor d_weight = saved[1].defined() ? (saved[1] * g).to(weight_dtype) : at::Tensor();
    return {d_rows, d_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// out[s] = sum over the rows i of segment s of log softmax(rows_i W^T)[target_i]. Forward keeps
// only each row's logsumexp; backward recomputes the logits chunk by chunk and weights each row's
// d logits = (one_hot - softmax) by its segment's incoming gradient.
struct ChunkedSegmentLogProbs : public torch::autograd::Function<ChunkedSegmentLogProbs> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& rows,
                            const at::Tensor& weight, const at::Tensor& targets,
                            const at::Tensor& segments, int64_t n_segments, int64_t chunk) {
    const at::ScalarType dtype = ChunkedLinearCrossEntropy::matmul_dtype(rows);
    const at::Tensor w = weight.to(dtype), r_all = rows.to(dtype);
    at::Tensor out = at::zeros({n_segments}, rows.options().dtype(at::kFloat));
    at::Tensor lse_all = at::empty({rows.size(0)}, out.options());
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t len = std::min(chunk, rows.size(0) - start);
      const at::Tensor logits = at::mm(r_all.narrow(0, start, len), w.t());
      auto [lse, picked] = kernels::logsumexp_target(logits, targets.narrow(0, start, len));
      lse_all.narrow(0, start, len).copy_(lse);
      out.index_add_(0, segments.narrow(0, start, len), picked - lse);
    }
    ctx->save_for_backward({rows, weight, targets, segments, lse_all});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1], &targets = saved[2],
                     &segments = saved[3], &lse_all = saved[4];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    const bool need_rows = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    // d out[s] / d (lse_i - picked_i) = -1 for the rows of s: each row's weight is -g[s].
    const at::Tensor row_weight = -grad_out[0].to(at::kFloat).index_select(0, segments);
    const at::Tensor w = weight.to(dtype), r_all = rows.to(dtype);
    const at::Tensor unit = at::ones({}, row_weight.options());
    at::Tensor d_rows = need_rows ? at::empty_like(rows) : at::Tensor();
    at::Tensor d_weight =
        need_weight ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t start = 0; start < rows.size(0); start += chunk) {
      const int64_t len = std::min(chunk, rows.size(0) - start);
      const at::Tensor r = r_all.narrow(0, start, len);
      at::Tensor logits = at::mm(r, w.t());
      kernels::cross_entropy_backward_(logits, lse_all.narrow(0, start, len),
                                       targets.narrow(0, start, len), unit);
      logits.mul_(row_weight.narrow(0, start, len).unsqueeze(1).to(logits.scalar_type()));
      if (need_rows) d_rows.narrow(0, start, len).copy_(at::mm(logits, w));
      if (need_weight) ChunkedLinearCrossEntropy::add_weight_gradient(d_weight, logits, r);
    }
    if (need_weight) d_weight = d_weight.to(weight.scalar_type());
    return {d_rows, d_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_inputs(CausalLMImpl& model, const at::Tensor& hidden, const at::Tensor& labels,
                  const char* who) {
  TORCH_CHECK(hidden.dim() == 3 && labels.dim() == 2 && hidden.size(0) == labels.size(0) &&
                  hidden.size(1) == labels.size(1),
              who, ": hidden must be [B,T,H] and labels [B,T]");
  TORCH_CHECK(!model.lm_head || !model.lm_head->has_lora(), who,
              ": LoRA on lm_head is not supported");
}

// The shifted positions (into a [B * (T-1)] view of the rows) whose label is a target, and those
// labels, on the host. Selection happens there: labels come from the data loader there, and doing
// it on the device would stall the GPU queue on `nonzero` and the range check. Throws naming `who`
// for a label outside the vocabulary.
struct TargetRows {
  at::Tensor positions, labels;
};
TargetRows target_rows(CausalLMImpl& model, const at::Tensor& labels, const char* who) {
  const int64_t T = labels.size(1);
  const at::Tensor targets = labels.narrow(1, 1, T - 1).reshape(-1).cpu();
  TargetRows t;
  t.positions = (targets != kIgnoreIndex).nonzero().squeeze(1);
  t.labels = targets.index_select(0, t.positions);
  if (t.positions.numel() == 0) return t;
  const int64_t vocab = model.output_weight().size(0);
  const int64_t lo = t.labels.min().item<int64_t>(), hi = t.labels.max().item<int64_t>();
  if (lo < 0 || hi >= vocab)
    throw std::runtime_error(std::string(who) + ": label " + std::to_string(lo < 0 ? lo : hi) +
                             " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  return t;
}

// The hidden states that predict the targets at `positions` (on hidden's device): [n, H].
at::Tensor rows_at(const at::Tensor& hidden, const at::Tensor& positions) {
  const int64_t T = hidden.size(1), H = hidden.size(2);
  return hidden.narrow(1, 0, T - 1).reshape({-1, H}).index_select(0, positions);
}

}  // namespace

int64_t loss_chunk_rows(int64_t vocab, int64_t budget_bytes) {
  const int64_t rows = budget_bytes / (2 * std::max<int64_t>(vocab, 1)) / 256 * 256;
  return std::clamp<int64_t>(rows, 256, 4096);
}

std::pair<at::Tensor, int64_t> next_token_loss_sum(CausalLMImpl& model, const at::Tensor& hidden,
                                                   const at::Tensor& labels, int64_t chunk_rows) {
  check_inputs(model, hidden, labels, "next_token_loss_sum");
  TORCH_CHECK(chunk_rows > 0, "next_token_loss_sum: chunk_rows must be positive");
  const int64_t T = hidden.size(1);
  if (T < 2) return {hidden.sum().to(at::kFloat) * 0, 0};
  TargetRows t = target_rows(model, labels, "next_token_loss_sum");
  const int64_t n = t.positions.numel();
  // Keep the result connected to the graph so that backward() works on an all-masked batch.
  if (n == 0) return {hidden.sum().to(at::kFloat) * 0, 0};
  const at::Tensor tgt = to_device_async(t.labels, hidden.device());
  const at::Tensor rows = rows_at(hidden, to_device_async(t.positions, hidden.device()));
  at::Tensor& weight = model.output_weight();
  const bool grad_mode = torch::GradMode::is_enabled();
  at::Tensor loss = ChunkedLinearCrossEntropy::apply(rows, weight, tgt, chunk_rows,
                                                     grad_mode && rows.requires_grad(),
                                                     grad_mode && weight.requires_grad());
  return {loss, n};
}

std::pair<at::Tensor, at::Tensor> sequence_log_probs(CausalLMImpl& model, const at::Tensor& hidden,
                                                     const at::Tensor& labels, int64_t chunk_rows) {
  check_inputs(model, hidden, labels, "sequence_log_probs");
  const int64_t B = hidden.size(0), T = hidden.size(1);
  at::Tensor counts = at::zeros({B}, at::kLong);
  if (T < 2) return {hidden.sum({1, 2}).to(at::kFloat) * 0, counts};
  TargetRows t = target_rows(model, labels, "sequence_log_probs");
  if (t.positions.numel() == 0) return {hidden.sum({1, 2}).to(at::kFloat) * 0, counts};
  at::Tensor segments = at::floor_divide(t.positions, T - 1);  // the row of each target
  counts.index_add_(0, segments, at::ones_like(segments));
  const at::Tensor tgt = to_device_async(t.labels, hidden.device());
  segments = to_device_async(segments, hidden.device());
  const at::Tensor rows = rows_at(hidden, to_device_async(t.positions, hidden.device()));
  at::Tensor log_probs =
      ChunkedSegmentLogProbs::apply(rows, model.output_weight(), tgt, segments, B, chunk_rows);
  return {log_probs, counts};
}

}  // namespace kubetune::model
