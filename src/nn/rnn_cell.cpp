// The recurrent cells: PyTorch's parameters and initialisation, input checks that name the cell,
// and one step each through the shared gate arithmetic (rnn_gates.h).
#include "adjoint/nn/rnn_cell.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/nn/init.h"
#include "adjoint/ops.h"
#include "nn/rnn_gates.h"

namespace adjoint::nn {

RNNCellBase::RNNCellBase(const char* type_name, int64_t input_size, int64_t hidden_size, bool bias,
                         int64_t gates, Generator* gen)
    : Module(type_name), input_size_(input_size), hidden_size_(hidden_size) {
  const std::string op = op_name();
  ADJOINT_CHECK(input_size >= 0 && hidden_size > 0, Value, op,
                "input_size must be non-negative and hidden_size positive, got input_size ",
                input_size, ", hidden_size ", hidden_size);
  Generator& g = gen ? *gen : default_generator();
  // PyTorch's reset_parameters: every parameter from U(-1/sqrt(H), 1/sqrt(H)).
  const double k = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = register_parameter("weight_ih", empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden_size}));
  }
  for (const Tensor& p : {weight_ih, weight_hh, bias_ih, bias_hh})
    if (p.defined()) init::uniform_(p, g, -k, k);
}

void RNNCellBase::check_input(const Tensor& x) const {
  const std::string op = op_name();
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() == 1 || x.dim() == 2, Shape, op,
                "expected an input [batch, input_size] or unbatched [input_size], got ",
                describe(x));
  ADJOINT_CHECK(x.shape().back() == input_size_, Shape, op, "input has ", x.shape().back(),
                " features, expected input_size ", input_size_, ": ", describe(x));
  ADJOINT_CHECK(x.dtype() == weight_ih.dtype(), DType, op, "input ", describe(x),
                " does not have the parameters' dtype ", to_string(weight_ih.dtype()));
}

void RNNCellBase::check_state(const Tensor& x, const Tensor& h, const char* what) const {
  const std::string op = op_name();
  Shape want = x.dim() == 2 ? Shape{x.size(0), hidden_size_} : Shape{hidden_size_};
  ADJOINT_CHECK(h.shape() == want, Shape, op, what, " ", describe(h), " does not fit input ",
                describe(x), ": expected ", want);
  ADJOINT_CHECK(h.dtype() == x.dtype(), DType, op, what, " ", describe(h),
                " does not have the input's dtype: input ", describe(x));
}

Tensor RNNCellBase::zero_state(const Tensor& x) const {
  const Shape shape = x.dim() == 2 ? Shape{x.size(0), hidden_size_} : Shape{hidden_size_};
  return zeros(shape, x.dtype());
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, RNNNonlinearity nonlinearity,
                 Generator* gen)
    : RNNCellBase("RNNCell", input_size, hidden_size, bias, 1, gen), nonlinearity_(nonlinearity) {}

Tensor RNNCell::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor RNNCell::forward(const Tensor& x, const Tensor& h) {
  check_input(x);
  if (h.defined()) check_state(x, h, "hidden state");
  const Tensor h0 = h.defined() ? h : zero_state(x);
  return detail::rnn_gates(linear(x, weight_ih, bias_ih), linear(h0, weight_hh, bias_hh),
                           nonlinearity_);
}

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, Generator* gen)
    : RNNCellBase("LSTMCell", input_size, hidden_size, bias, 4, gen) {}

Tensor LSTMCell::forward(const Tensor& x) { return forward(x, LSTMState{}).h; }

LSTMState LSTMCell::forward(const Tensor& x, const LSTMState& state) {
  check_input(x);
  ADJOINT_CHECK(state.h.defined() == state.c.defined(), Value, op_name(),
                "give both states h and c, or neither (zeros)");
  if (state.h.defined()) {
    check_state(x, state.h, "hidden state h");
    check_state(x, state.c, "cell state c");
  }
  const Tensor h = state.h.defined() ? state.h : zero_state(x);
  const Tensor c = state.c.defined() ? state.c : zero_state(x);
  return detail::lstm_gates(linear(x, weight_ih, bias_ih), linear(h, weight_hh, bias_hh), c);
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias, Generator* gen)
    : RNNCellBase("GRUCell", input_size, hidden_size, bias, 3, gen) {}

Tensor GRUCell::forward(const Tensor& x) { return forward(x, Tensor()); }

Tensor GRUCell::forward(const Tensor& x, const Tensor& h) {
  check_input(x);
  if (h.defined()) check_state(x, h, "hidden state");
  const Tensor h0 = h.defined() ? h : zero_state(x);
  return detail::gru_gates(linear(x, weight_ih, bias_ih), linear(h0, weight_hh, bias_hh), h0);
}

}  // namespace adjoint::nn
