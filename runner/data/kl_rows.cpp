#include "runner/data/kl_rows.h"

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tailor::runner::data {
namespace {

struct Split {
  std::vector<std::int32_t> prompt, completion;
};

Split split_row(const Batch& b, std::int64_t r) {
  const std::int64_t len = b.row_length(r);
  const std::size_t row = static_cast<std::size_t>(r * b.seq_len);
  std::int64_t first = -1, last = -1;
  for (std::int64_t t = 0; t < len; ++t) {
    if (b.targets[row + static_cast<std::size_t>(t)] == -100) continue;
    if (first < 0) first = t;
    last = t;
  }
  Split out;
  if (first < 0) {  // nothing trained: all prompt (the batcher drops such rows)
    out.prompt.assign(b.inputs.begin() + static_cast<std::ptrdiff_t>(row),
                      b.inputs.begin() + static_cast<std::ptrdiff_t>(row + static_cast<std::size_t>(len)));
    return out;
  }
  out.prompt.assign(b.inputs.begin() + static_cast<std::ptrdiff_t>(row),
                    b.inputs.begin() + static_cast<std::ptrdiff_t>(row + static_cast<std::size_t>(first) + 1));
  for (std::int64_t t = first; t <= last; ++t) {
    const std::int32_t target = b.targets[row + static_cast<std::size_t>(t)];
    // An untrained cell inside the completion still names its token as the
    // next cell's input.
    out.completion.push_back(target != -100 ? target : b.inputs[row + static_cast<std::size_t>(t) + 1]);
  }
  return out;
}

}  // namespace

Batch kl_rows(const Batch& b, std::int64_t max_inputs, std::int32_t pad) {
  std::vector<Split> rows;
  rows.reserve(static_cast<std::size_t>(b.rows));
  for (std::int64_t r = 0; r < b.rows; ++r)
    rows.push_back(split_row(b, r));
  // Each row as one sequence: its prompt, then the previous row's completion.
  std::vector<std::vector<std::int32_t>> seqs(rows.size());
  std::vector<std::size_t> prompt_len(rows.size());
  std::int64_t width = 1;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const Split& from = rows[(r + rows.size() - 1) % rows.size()];
    std::vector<std::int32_t>& s = seqs[r];
    s = rows[r].prompt;
    s.insert(s.end(), from.completion.begin(), from.completion.end());
    if (static_cast<std::int64_t>(s.size()) > max_inputs + 1) s.resize(static_cast<std::size_t>(max_inputs + 1));
    prompt_len[r] = std::min(rows[r].prompt.size(), s.size());
    width = std::max<std::int64_t>(width, static_cast<std::int64_t>(s.size()) - 1);
  }
  Batch out;
  out.rows = b.rows;
  out.seq_len = width;
  const std::size_t cells = static_cast<std::size_t>(out.rows * width);
  out.inputs.assign(cells, pad);
  out.targets.assign(cells, -100);
  out.positions.assign(cells, 0);
  out.segment_ids.assign(cells, -1);
  for (std::size_t r = 0; r < seqs.size(); ++r) {
    const std::vector<std::int32_t>& s = seqs[r];
    const std::size_t row = r * static_cast<std::size_t>(width);
    for (std::size_t t = 0; t + 1 < s.size(); ++t) {
      out.inputs[row + t] = s[t];
      out.positions[row + t] = static_cast<std::int32_t>(t);
      out.segment_ids[row + t] = 0;
      // Cell t predicts token t + 1: trained where that token is the
      // completion's.
      if (t + 1 >= prompt_len[r]) {
        out.targets[row + t] = s[t + 1];
        ++out.target_tokens;
      }
    }
  }
  return out;
}

}  // namespace tailor::runner::data
