// The nn umbrella header: modules, initialisers and the GPT and Llama models (namespace
// adjoint::nn). See docs/nn.md for a guide.
#pragma once

#include "adjoint/nn/activation.h"
#include "adjoint/nn/attention.h"
#include "adjoint/nn/batchnorm.h"
#include "adjoint/nn/container.h"
#include "adjoint/nn/conv.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/embedding.h"
#include "adjoint/nn/gpt.h"
#include "adjoint/nn/init.h"
#include "adjoint/nn/language_model.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/llama.h"
#include "adjoint/nn/llama_block.h"
#include "adjoint/nn/module.h"
#include "adjoint/nn/normalization.h"
#include "adjoint/nn/pooling.h"
#include "adjoint/nn/rnn.h"
#include "adjoint/nn/rnn_cell.h"
#include "adjoint/nn/transformer.h"
