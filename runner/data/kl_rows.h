// KTO's KL rows (training.method: kto): each row of a pair batch with its
// prompt kept and its completion replaced by the previous row's (the first
// row takes the last row's), so every completion of the batch is scored once
// after a prompt it does not answer. The trained model's and the
// reference's log-probabilities of these rows give KTO's estimate of
// KL(policy || reference) (Ethayarajh et al. 2024, Sec. 4.1); the rotation
// is TRL's KTOTrainer's (its KL_completion_ids). Torch-free.
#pragma once

#include <cstdint>

#include "runner/data/batcher.h"

namespace tailor::runner::data {

// `b`'s rows rotated as above. A row's prompt is its cells before the first
// trained target, its completion the tokens its trained targets name, from
// that first one to the last. A KL row longer than `max_inputs` + 1 tokens
// keeps its first ones (TRL truncates from the right), so its completion
// may be cut short or, after a long prompt, lost: such a row then scores 0.
// The batch is padded with `pad` to its longest row; positions start at 0.
Batch kl_rows(const Batch& b, std::int64_t max_inputs, std::int32_t pad);

}  // namespace tailor::runner::data
