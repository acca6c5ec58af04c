#include "runner/torch/checkpoint.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runner/torch/tensor_file.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

// torch::save cannot hold undefined tensors: an empty int8 tensor stands in.
std::vector<torch::Tensor> encode(const std::vector<torch::Tensor>& in) {
  std::vector<torch::Tensor> out;
  for (const auto& t : in) out.push_back(t.defined() ? t.to(torch::kCPU) : torch::empty({0}, torch::kInt8));
  return out;
}

std::vector<torch::Tensor> decode(std::vector<torch::Tensor> in) {
  for (auto& t : in) {
    if (t.numel() == 0 && t.scalar_type() == torch::kInt8) t = torch::Tensor();
  }
  return in;
}

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", static_cast<long long>(step));
  return buf;
}

std::vector<fs::path> complete_checkpoints(const std::string& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos &&
        fs::exists(e.path() / "state.json")) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Status save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointTensors& tensors,
                       std::int64_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::io_error("cannot create " + dir + ": " + ec.message());
  const fs::path final_path = fs::path(dir) / step_name(state.step);
  const fs::path tmp = fs::path(dir) / (step_name(state.step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error("cannot create " + tmp.string() + ": " + ec.message());
  Status written = save_tensor_file(encode(tensors.params), (tmp / "model.pt").string());
  if (written.is_ok()) written = save_tensor_file(encode(tensors.optimizer), (tmp / "optimizer.pt").string());
  if (written.is_ok()) written = save_tensor_file(tensors.rng_state, (tmp / "rng.pt").string());
  if (written.is_ok() && tensors.device_rng_state.defined()) {
    written = save_tensor_file(tensors.device_rng_state, (tmp / "device_rng.pt").string());
  }
  if (!written.is_ok()) {
    fs::remove_all(tmp, ec);
    return Status::io_error("writing checkpoint " + tmp.string() + ": " + written.message());
  }
  nlohmann::json j{{"step", state.step},         {"data_epoch", state.data_epoch}, {"data_index", state.data_index},
                   {"loss_scale", state.loss_scale}, {"good_steps", state.good_steps}, {"tokens_seen", state.tokens_seen}};
  {
    std::ofstream out(tmp / "state.json");
    out << j.dump(2) << "\n";
    out.flush();
    if (!out) {
      fs::remove_all(tmp, ec);
      return Status::io_error("cannot write " + (tmp / "state.json").string());
    }
  }
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return Status::io_error("cannot rename " + tmp.string() + ": " + ec.message());
  auto all = complete_checkpoints(dir);
  while (static_cast<std::int64_t>(all.size()) > std::max<std::int64_t>(1, keep)) {
    fs::remove_all(all.front(), ec);
    all.erase(all.begin());
  }
  return Status::ok();
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = complete_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().string();
}

Result<std::pair<CheckpointState, CheckpointTensors>> load_checkpoint(const std::string& folder) {
  std::ifstream in(fs::path(folder) / "state.json");
  if (!in) return Status::not_found("checkpoint " + folder + ": no state.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  CheckpointState st;
  try {
    if (j.is_discarded()) throw std::runtime_error("not JSON");
    st.step = j.at("step").get<std::int64_t>();
    st.data_epoch = j.at("data_epoch").get<std::int64_t>();
    st.data_index = j.at("data_index").get<std::int64_t>();
    st.loss_scale = j.at("loss_scale").get<double>();
    st.good_steps = j.at("good_steps").get<std::int64_t>();
    st.tokens_seen = j.at("tokens_seen").get<std::int64_t>();
  } catch (const std::exception& e) {
    return Status::invalid_argument("checkpoint " + folder + ": corrupt state.json (" + e.what() + ")");
  }
  CheckpointTensors t;
  try {
    std::vector<torch::Tensor> params, opt;
    torch::load(params, (fs::path(folder) / "model.pt").string());
    torch::load(opt, (fs::path(folder) / "optimizer.pt").string());
    torch::load(t.rng_state, (fs::path(folder) / "rng.pt").string());
    if (fs::exists(fs::path(folder) / "device_rng.pt")) {
      torch::load(t.device_rng_state, (fs::path(folder) / "device_rng.pt").string());
    }
    t.params = decode(std::move(params));
    t.optimizer = decode(std::move(opt));
  } catch (const c10::Error& e) {
    return Status::invalid_argument("checkpoint " + folder + ": cannot read tensors: " + e.what_without_backtrace());
  }
  return std::make_pair(st, t);
}

}  // namespace tailor::runner
