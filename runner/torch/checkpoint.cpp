#include "runner/torch/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "runner/data/hash.h"
#include "runner/io/safetensors.h"
#include "runner/torch/io_dtype.h"
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

std::string checkpoint_shard_name(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "rank-%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

namespace {

// The one-rank layout's tensors "<prefix>.0" .. "<prefix>.<count-1>" from
// every rank's pieces: each whole tensor allocated once and filled from the
// memory-mapped files. A tensor no rank holds is undefined (an optimizer
// slot without that state); pieces that leave part of a tensor unwritten,
// overlap or disagree about its shape or dtype make the checkpoint corrupt.
Result<std::vector<torch::Tensor>> assemble(const std::vector<io::SafetensorsFile>& files, const std::string& prefix,
                                            std::int64_t count, const std::string& folder) {
  std::vector<torch::Tensor> out(static_cast<std::size_t>(count));
  std::vector<std::int64_t> filled(static_cast<std::size_t>(count), 0);
  for (const io::SafetensorsFile& f : files) {
    for (const io::TensorView& v : f.tensors()) {
      if (v.name.rfind(prefix + ".", 0) != 0) continue;
      const std::string where = "checkpoint " + folder + ": " + v.name + " in " + fs::path(f.path()).filename().string();
      char* end = nullptr;
      const long long index = std::strtoll(v.name.c_str() + prefix.size() + 1, &end, 10);
      const auto meta = f.metadata().find(v.name);
      if (*end != '\0' || index < 0 || index >= count || meta == f.metadata().end()) {
        return Status::data_loss(where + ": not a tensor of this checkpoint");
      }
      const auto j = nlohmann::json::parse(meta->second, nullptr, false);
      std::vector<std::int64_t> shape;
      std::int64_t begin = 0;
      try {
        shape = j.at("shape").get<std::vector<std::int64_t>>();
        begin = j.at("begin").get<std::int64_t>();
      } catch (const std::exception&) {
        return Status::data_loss(where + ": unreadable placement " + meta->second);
      }
      const auto dtype = torch_dtype_of(v.dtype);
      if (!dtype) return Status::data_loss(where + ": unsupported dtype " + io::to_string(v.dtype));
      torch::Tensor& whole = out[static_cast<std::size_t>(index)];
      if (!whole.defined()) {
        for (std::int64_t d : shape) {
          if (d < 0) return Status::data_loss(where + ": a negative dimension");
        }
        whole = torch::empty(shape, torch::TensorOptions().dtype(*dtype));
      } else if (whole.sizes() != c10::IntArrayRef(shape) || whole.scalar_type() != *dtype) {
        return Status::data_loss(where + ": its ranks disagree about its shape or dtype");
      }
      const auto n = static_cast<std::int64_t>(v.data.size() / io::dtype_size(v.dtype));
      if (begin < 0 || begin + n > whole.numel()) {
        return Status::data_loss(where + ": elements [" + std::to_string(begin) + ", " +
                                        std::to_string(begin + n) + ") outside its " + std::to_string(whole.numel()));
      }
      std::memcpy(static_cast<char*>(whole.data_ptr()) + static_cast<std::size_t>(begin) * whole.element_size(),
                  v.data.data(), v.data.size());
      filled[static_cast<std::size_t>(index)] += n;
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].defined() && filled[i] != out[i].numel()) {
      return Status::data_loss("checkpoint " + folder + ": " + prefix + "." + std::to_string(i) + " has " +
                                      std::to_string(filled[i]) + " of its " + std::to_string(out[i].numel()) +
                                      " elements");
    }
  }
  return out;
}

Result<std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>> load_shards(const std::string& folder,
                                                                                      const ShardLayout& layout) {
  std::vector<io::SafetensorsFile> files;
  for (int r = 0; r < layout.ranks; ++r) {
    const std::string path = (fs::path(folder) / checkpoint_shard_name(r, layout.ranks)).string();
    auto f = io::SafetensorsFile::open(path);
    if (!f.is_ok()) return Status::data_loss("checkpoint " + folder + ": " + f.status().message());
    files.push_back(std::move(f).value());
  }
  auto model = assemble(files, "model", layout.model_tensors, folder);
  if (!model.is_ok()) return model.status();
  for (std::size_t i = 0; i < model->size(); ++i) {
    if (!(*model)[i].defined()) {
      return Status::data_loss("checkpoint " + folder + ": no rank holds model." + std::to_string(i));
    }
  }
  auto optimizer = assemble(files, "optimizer", layout.optimizer_tensors, folder);
  if (!optimizer.is_ok()) return optimizer.status();
  return std::make_pair(std::move(model).value(), std::move(optimizer).value());
}

}  // namespace

namespace {

// Each file state.json lists, as it was written.
Status verify_files(const std::string& folder, const nlohmann::json& files) {
  if (!files.is_array()) return Status::data_loss("checkpoint " + folder + ": corrupt state.json (files)");
  for (const nlohmann::json& f : files) {
    std::string name, checksum;
    std::int64_t bytes = 0;
    try {
      name = f.at("name").get<std::string>();
      bytes = f.at("bytes").get<std::int64_t>();
      checksum = f.at("checksum").get<std::string>();
    } catch (const std::exception& e) {
      return Status::data_loss("checkpoint " + folder + ": corrupt state.json (" + e.what() + ")");
    }
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      return Status::data_loss("checkpoint " + folder + ": corrupt state.json (file name \"" + name + "\")");
    }
    auto sum = sum_file(folder, name);
    if (!sum.is_ok()) return Status::data_loss("checkpoint " + folder + ": " + sum.status().message());
    if (sum->bytes != bytes || data::hex64(sum->checksum) != checksum) {
      return Status::data_loss("checkpoint " + folder + ": " + name + " is damaged (" + std::to_string(sum->bytes) +
                               " bytes, checksum " + data::hex64(sum->checksum) + "; written as " +
                               std::to_string(bytes) + " bytes, checksum " + checksum + ")");
    }
  }
  return Status::ok();
}

}  // namespace

Result<FileSum> sum_file(const std::string& folder, const std::string& name) {
  const std::string path = (fs::path(folder) / name).string();
  // POSIX reads, retried when a signal interrupts them, so a failure names
  // its cause (a file listed a moment ago that cannot be opened once read
  // "missing" through an ifstream, on a GPU machine's sandboxed file system).
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "cannot open " + path + ": " + std::strerror(err);
    return err == ENOENT ? Status::not_found(path + " is missing") : Status::io_error(msg);
  }
  data::Checksum64 sum;
  std::vector<char> buf(std::size_t{1} << 20);
  FileSum f{name, 0, 0};
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return Status::io_error("cannot read " + path + ": " + std::strerror(err));
    }
    if (got == 0) break;
    sum.update(buf.data(), static_cast<std::size_t>(got));
    f.bytes += got;
  }
  ::close(fd);
  f.checksum = sum.finish();
  return f;
}

Result<std::string> begin_checkpoint(const std::string& dir, std::int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::io_error("cannot create " + dir + ": " + ec.message());
  const fs::path tmp = checkpoint_tmp_path(dir, step);
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::io_error("cannot create " + tmp.string() + ": " + ec.message());
  return tmp.string();
}

std::string checkpoint_tmp_path(const std::string& dir, std::int64_t step) {
  return (fs::path(dir) / (step_name(step) + ".tmp")).string();
}

void abandon_checkpoint(const std::string& tmp) {
  std::error_code ec;
  fs::remove_all(tmp, ec);
}

Result<FileSum> write_checkpoint_shard(const std::string& tmp, int rank, int ranks,
                                       const std::vector<ShardPiece>& pieces) {
  const std::string path = (fs::path(tmp) / checkpoint_shard_name(rank, ranks)).string();
  std::vector<torch::Tensor> keep;  // contiguous CPU copies where needed, alive until written
  std::vector<io::TensorToWrite> out;
  std::map<std::string, std::string> metadata{{"format", "tailor-checkpoint-shard"}};
  for (const ShardPiece& p : pieces) {
    keep.push_back(p.data.detach().to(torch::kCPU).contiguous().reshape({-1}));
    const torch::Tensor& t = keep.back();
    const auto dtype = io_dtype_of(t.scalar_type());
    if (!dtype) return Status::internal(p.name + ": dtype " + std::string(c10::toString(t.scalar_type())) + " cannot be saved");
    out.push_back({p.name, *dtype, {t.numel()},
                   std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
    metadata[p.name] = nlohmann::json{{"begin", p.begin}, {"shape", p.shape}}.dump();
  }
  const Status s = io::write_safetensors(path, out, metadata);
  if (!s.is_ok()) return Status::io_error("writing checkpoint " + path + ": " + s.message());
  keep.clear();
  return sum_file(tmp, checkpoint_shard_name(rank, ranks));
}

Status commit_checkpoint(const std::string& dir, const std::string& tmp, const CheckpointState& state,
                         const CheckpointTensors& rng, const ShardLayout* layout, const std::vector<FileSum>& shards,
                         std::int64_t keep) {
  std::error_code ec;
  Status written = save_tensor_file(rng.rng_state, (fs::path(tmp) / "rng.pt").string());
  if (written.is_ok() && rng.device_rng_state.defined()) {
    written = save_tensor_file(rng.device_rng_state, (fs::path(tmp) / "device_rng.pt").string());
  }
  if (!written.is_ok()) {
    abandon_checkpoint(tmp);
    return Status::io_error("writing checkpoint " + tmp + ": " + written.message());
  }
  nlohmann::json j{{"step", state.step},         {"data_epoch", state.data_epoch}, {"data_index", state.data_index},
                   {"loss_scale", state.loss_scale}, {"good_steps", state.good_steps}, {"tokens_seen", state.tokens_seen}};
  if (!state.data_identity.empty()) {
    j["data"] = {{"identity", state.data_identity},
                 {"dataset", state.data_dataset},
                 {"example", state.data_example},
                 {"token", state.data_token}};
  }
  if (!state.base_fingerprint.empty()) {
    j["params"] = "trainable";
    j["base_fingerprint"] = state.base_fingerprint;
  }
  if (layout != nullptr) {
    j["shards"] = {{"ranks", layout->ranks},
                   {"model_tensors", layout->model_tensors},
                   {"optimizer_tensors", layout->optimizer_tensors}};
  }
  // Every file of the folder with its size and checksum: the ranks' files
  // as they summed them, the rest (this rank's) summed here.
  std::vector<FileSum> sums = shards;
  for (const auto& e : fs::directory_iterator(tmp, ec)) {
    const std::string name = e.path().filename().string();
    if (std::any_of(shards.begin(), shards.end(), [&](const FileSum& f) { return f.name == name; })) continue;
    auto sum = sum_file(tmp, name);
    if (!sum.is_ok()) {
      abandon_checkpoint(tmp);
      return Status::io_error("writing checkpoint " + tmp + ": " + sum.status().message());
    }
    sums.push_back(*sum);
  }
  if (ec) {
    abandon_checkpoint(tmp);
    return Status::io_error("cannot list " + tmp + ": " + ec.message());
  }
  std::sort(sums.begin(), sums.end(), [](const FileSum& a, const FileSum& b) { return a.name < b.name; });
  nlohmann::json files = nlohmann::json::array();
  for (const FileSum& f : sums) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"checksum", data::hex64(f.checksum)}});
  }
  j["files"] = std::move(files);
  {
    std::ofstream out(fs::path(tmp) / "state.json");
    out << j.dump(2) << "\n";
    out.flush();
    if (!out) {
      abandon_checkpoint(tmp);
      return Status::io_error("cannot write " + (fs::path(tmp) / "state.json").string());
    }
  }
  const fs::path final_path = fs::path(dir) / step_name(state.step);
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return Status::io_error("cannot rename " + tmp + ": " + ec.message());
  auto all = complete_checkpoints(dir);
  while (static_cast<std::int64_t>(all.size()) > std::max<std::int64_t>(1, keep)) {
    fs::remove_all(all.front(), ec);
    all.erase(all.begin());
  }
  return Status::ok();
}

Status save_checkpoint(const std::string& dir, const CheckpointState& state, const CheckpointTensors& tensors,
                       std::int64_t keep) {
  auto tmp = begin_checkpoint(dir, state.step);
  if (!tmp.is_ok()) return tmp.status();
  Status written = save_tensor_file(encode(tensors.params), (fs::path(*tmp) / "model.pt").string());
  if (written.is_ok()) written = save_tensor_file(encode(tensors.optimizer), (fs::path(*tmp) / "optimizer.pt").string());
  if (!written.is_ok()) {
    abandon_checkpoint(*tmp);
    return Status::io_error("writing checkpoint " + *tmp + ": " + written.message());
  }
  return commit_checkpoint(dir, *tmp, state, tensors, nullptr, {}, keep);
}

std::vector<double> weights_fingerprint(const std::vector<torch::Tensor>& tensors) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 20;
  torch::NoGradGuard ng;
  std::vector<double> out;
  out.reserve(2 * tensors.size());
  for (const torch::Tensor& t : tensors) {
    double sum = 0, squares = 0;
    if (t.defined() && t.numel() > 0) {
      const torch::Tensor flat = t.detach().reshape({-1});
      for (std::int64_t at = 0; at < flat.numel(); at += kChunk) {
        const torch::Tensor part = flat.narrow(0, at, std::min(kChunk, flat.numel() - at)).to(torch::kFloat64);
        sum += part.sum().item<double>();
        squares += part.square().sum().item<double>();
      }
    }
    out.push_back(sum);
    out.push_back(squares);
  }
  return out;
}

Status check_fingerprint(const std::vector<double>& expected, const std::vector<double>& found,
                         const std::vector<std::string>& names, const std::string& folder) {
  if (expected.size() != found.size()) {
    return Status::failed_precondition("checkpoint " + folder + " was trained over a base of " +
                                       std::to_string(expected.size() / 2) + " tensors; this job's has " +
                                       std::to_string(found.size() / 2) + ": resume it with the model it trained");
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double a = expected[i], b = found[i];
    if (std::abs(a - b) <= 1e-9 * std::max({1.0, std::abs(a), std::abs(b)})) continue;
    const std::size_t tensor = i / 2;
    const std::string name = tensor < names.size() ? names[tensor] : "tensor " + std::to_string(tensor);
    return Status::failed_precondition(
        "checkpoint " + folder + " was trained over other base weights (" + name +
        " differs): the model folder or the precision changed since; resume it with the base it trained");
  }
  return Status::ok();
}

std::vector<std::string> checkpoints_newest_first(const std::string& dir) {
  std::vector<std::string> out;
  for (const fs::path& p : complete_checkpoints(dir)) out.insert(out.begin(), p.string());
  return out;
}

Result<std::string> set_aside_checkpoint(const std::string& folder) {
  const fs::path from(folder);
  fs::path to = from.parent_path() / ("damaged-" + from.filename().string());
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::rename(from, to, ec);
  if (ec) return Status::io_error("cannot move " + folder + " aside: " + ec.message());
  return to.string();
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = complete_checkpoints(dir);
  if (all.empty()) return std::nullopt;
  return all.back().string();
}

Result<std::pair<CheckpointState, CheckpointTensors>> load_checkpoint(const std::string& folder) {
  std::ifstream in(fs::path(folder) / "state.json");
  if (!in) return Status::data_loss("checkpoint " + folder + ": no state.json");
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
    if (j.contains("data")) {
      const auto& data = j.at("data");
      st.data_identity = data.at("identity").get<std::string>();
      st.data_dataset = data.at("dataset").get<std::int64_t>();
      st.data_example = data.at("example").get<std::int64_t>();
      st.data_token = data.at("token").get<std::int64_t>();
    }
    if (j.value("params", std::string("all")) == "trainable") {
      st.base_fingerprint = j.at("base_fingerprint").get<std::vector<double>>();
      if (st.base_fingerprint.empty()) throw std::runtime_error("an adapter checkpoint without its base_fingerprint");
    }
  } catch (const std::exception& e) {
    return Status::data_loss("checkpoint " + folder + ": corrupt state.json (" + e.what() + ")");
  }
  if (j.contains("files")) TAILOR_RETURN_IF_ERROR(verify_files(folder, j.at("files")));
  ShardLayout layout;
  const bool sharded = j.contains("shards");
  if (sharded) {
    try {
      layout.ranks = j.at("shards").at("ranks").get<int>();
      layout.model_tensors = j.at("shards").at("model_tensors").get<std::int64_t>();
      layout.optimizer_tensors = j.at("shards").at("optimizer_tensors").get<std::int64_t>();
    } catch (const std::exception& e) {
      return Status::data_loss("checkpoint " + folder + ": corrupt state.json shards (" + e.what() + ")");
    }
    constexpr std::int64_t kMost = std::int64_t{1} << 24;  // tensors of one model: far fewer
    if (layout.ranks < 1 || layout.ranks > 65536 || layout.model_tensors < 0 || layout.model_tensors > kMost ||
        layout.optimizer_tensors < 0 || layout.optimizer_tensors > kMost) {
      return Status::data_loss("checkpoint " + folder + ": corrupt state.json shards");
    }
  }
  CheckpointTensors t;
  try {
    if (sharded) {
      auto shards = load_shards(folder, layout);
      if (!shards.is_ok()) return shards.status();
      t.params = std::move(shards->first);
      t.optimizer = std::move(shards->second);
    } else {
      std::vector<torch::Tensor> params, opt;
      torch::load(params, (fs::path(folder) / "model.pt").string());
      torch::load(opt, (fs::path(folder) / "optimizer.pt").string());
      t.params = decode(std::move(params));
      t.optimizer = decode(std::move(opt));
    }
    torch::load(t.rng_state, (fs::path(folder) / "rng.pt").string());
    if (fs::exists(fs::path(folder) / "device_rng.pt")) {
      torch::load(t.device_rng_state, (fs::path(folder) / "device_rng.pt").string());
    }
  } catch (const c10::Error& e) {
    return Status::data_loss("checkpoint " + folder + ": cannot read tensors: " + e.what_without_backtrace());
  }
  return std::make_pair(st, t);
}

}  // namespace tailor::runner
