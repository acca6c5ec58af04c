// The run's checkpoints (run.h): written at the plan's steps and when a
// signal stops the run, read back by --resume.
#include <filesystem>

#include "runner/protocol/events.h"
#include "runner/torch/data_parallel.h"
#include "runner/torch/lora.h"
#include "runner/torch/run.h"

namespace tailor::runner {
namespace fs = std::filesystem;
namespace {

CheckpointTensors generator_states(bool cuda, const torch::Device& dev) {
  CheckpointTensors t;
  t.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  if (cuda) t.device_rng_state = at::globalContext().defaultGenerator(dev).get_state();
  return t;
}

}  // namespace

Status Run::checkpoint(std::int64_t step) {
  const auto s = data_.train->state();
  state_.step = step;
  state_.data_epoch = s.epoch;
  state_.data_index = s.index;
  state_.data_identity = data_.identity;
  const data::Batcher::Position at = data_.train->position();
  const std::size_t example = dsl::is_paired(spec_.data) ? at.document / 2 : at.document;
  state_.data_dataset = data_.example_dataset.empty() ? 0 : data_.example_dataset[example];
  state_.data_example =
      data_.example_index.empty() ? static_cast<std::int64_t>(example) : data_.example_index[example];
  state_.data_token = at.token;
  const std::string dir = (fs::path(o_.out_dir) / spec_.checkpoint.dir).string();
  Status saved;
  if (sync_->writes_shards()) {
    saved = sharded_checkpoint(step, dir);
  } else if (leader()) {
    CheckpointTensors t = generator_states(device_.cuda, dev_);
    for (const auto& p : tensors_.checkpointed) t.params.push_back(p.detach());
    t.optimizer = opt_->state_tensors();
    saved = save_checkpoint(dir, state_, t, spec_.checkpoint.keep);
  }
  if (!leader()) return saved;
  if (saved.is_ok()) {
    ++checkpoints_written_;
    event(events::kCheckpoint, [&](JsonWriter& w) { w.field("step", step).field("dir", dir); });
  } else {
    ++checkpoints_failed_;
    checkpoint_failure_ = saved.message();
    event(events::kCheckpointError, [&](JsonWriter& w) { w.field("step", step).field("message", saved.message()); });
  }
  return Status::ok();
}

// Every rank writes what it keeps, nothing is gathered; rank 0 commits the
// folder when all have written, or abandons it when any could not (the
// same outcome on every rank, decided by one all-reduce).
Status Run::sharded_checkpoint(std::int64_t step, const std::string& dir) {
  std::vector<double> failed = {0.0};
  Status begun;
  if (leader()) {
    auto folder = begin_checkpoint(dir, step);
    if (!folder.is_ok()) begun = folder.status();
  }
  failed[0] = begun.is_ok() ? 0.0 : 1.0;
  // The folder exists before anyone writes into it.
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, failed));
  if (failed[0] > 0) return begun;
  const std::string path = checkpoint_tmp_path(dir, step);
  const auto per = static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer));
  const auto written = write_checkpoint_shard(
      path, rank_, world_, sync_->checkpoint_pieces(tensors_.checkpointed, opt_->state_tensors(), per));
  failed[0] = written.is_ok() ? 0.0 : 1.0;
  TAILOR_RETURN_IF_ERROR(all_reduce_values(*comm_, failed));
  // Every rank's file size and checksum, for rank 0's state.json.
  std::vector<std::uint64_t> sums(2 * static_cast<std::size_t>(world_), 0);
  if (written.is_ok()) {
    sums[2 * static_cast<std::size_t>(rank_)] = static_cast<std::uint64_t>(written->bytes);
    sums[2 * static_cast<std::size_t>(rank_) + 1] = written->checksum;
  }
  TAILOR_RETURN_IF_ERROR(comm_->all_gather(sums.data(), sums.size(), sizeof(std::uint64_t), 2));
  if (!leader()) return Status::ok();
  if (failed[0] > 0) {
    abandon_checkpoint(path);
    return written.is_ok() ? Status::io_error("a rank could not write its part of checkpoint " + path)
                           : written.status();
  }
  std::vector<FileSum> files;
  for (int r = 0; r < world_; ++r) {
    files.push_back({checkpoint_shard_name(r, world_), static_cast<std::int64_t>(sums[2 * static_cast<std::size_t>(r)]),
                     sums[2 * static_cast<std::size_t>(r) + 1]});
  }
  const ShardLayout layout{world_, static_cast<std::int64_t>(tensors_.checkpointed.size()),
                           static_cast<std::int64_t>(tensors_.trainable.size() * per)};
  return commit_checkpoint(dir, path, state_, generator_states(device_.cuda, dev_), &layout, files,
                           spec_.checkpoint.keep);
}

Status Run::load_parameters(const std::vector<torch::Tensor>& values, const std::vector<double>& base_fingerprint,
                            const std::string& where) {
  std::vector<torch::Tensor> params;
  if (!base_fingerprint.empty()) {
    // An adapter checkpoint: only over the base it was trained on.
    if (!has_lora(*model_)) {
      return Status::invalid_argument(where + " holds adapters; this job trains without them (strategy.adapter)");
    }
    TAILOR_RETURN_IF_ERROR(
        as_bad_input(check_fingerprint(base_fingerprint, tensors_.base_fingerprint, tensors_.base_names, where)));
    params = tensors_.trainable;
  } else {
    params = model_->parameters();  // every parameter (adapter runs wrote these before adapter checkpoints too)
  }
  if (values.size() != params.size()) return Status::invalid_argument(where + ": model does not match the job");
  torch::NoGradGuard ng;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!values[i].defined() || values[i].sizes() != params[i].sizes()) {
      return Status::invalid_argument(where + ": parameter " + std::to_string(i) + " has the wrong shape");
    }
    params[i].copy_(values[i]);
  }
  return Status::ok();
}

// The newest checkpoint that is whole: a damaged one (a file truncated,
// overwritten or gone since it was written) is reported, set aside by rank 0
// and passed over for the one before. Nullopt when there is none (a first
// attempt); DataLoss when every one is damaged.
Result<std::optional<Run::LoadedCheckpoint>> Run::newest_whole_checkpoint() {
  Result<std::pair<CheckpointState, CheckpointTensors>> loaded = Status::not_found("no checkpoint");
  const std::string dir = (fs::path(o_.out_dir) / spec_.checkpoint.dir).string();
  int skipped = 0;
  for (const std::string& folder : checkpoints_newest_first(dir)) {
    loaded = load_checkpoint(folder);
    if (loaded.is_ok())
      return std::optional<LoadedCheckpoint>({folder, std::move(loaded->first), std::move(loaded->second)});
    if (loaded.status().code() != StatusCode::kDataLoss) return as_bad_input(loaded.status());
    std::string moved;
    if (leader()) {
      auto aside = set_aside_checkpoint(folder);
      moved = aside.is_ok() ? *aside : aside.status().message();
    }
    event(events::kCheckpointSkipped, [&](JsonWriter& w) {
      w.field("checkpoint", folder).field("message", loaded.status().message());
      if (!moved.empty()) w.field("moved_to", moved);
    });
    ++skipped;
  }
  if (skipped == 0) return std::optional<LoadedCheckpoint>();
  // Not silently from step 1: the next attempt does that, the damaged
  // checkpoints being set aside.
  return Status::data_loss("every checkpoint in " + dir +
                           " is damaged (set aside as damaged-step-*): " + loaded.status().message());
}

Status Run::resume() {
  if (!o_.resume) return Status::ok();
  TAILOR_ASSIGN_OR_RETURN(std::optional<LoadedCheckpoint> newest, newest_whole_checkpoint());
  if (!newest) return Status::ok();  // a first attempt: nothing to resume
  const std::string& latest = newest->folder;
  CheckpointState& st = newest->state;
  CheckpointTensors& t = newest->tensors;
  TAILOR_RETURN_IF_ERROR(load_parameters(t.params, st.base_fingerprint, latest));
  // Written by the other AdamW (an out-of-memory re-plan switches between
  // them): its states converted rather than the checkpoint refused.
  const auto per = static_cast<std::size_t>(optimizer_tensors_per_slot(st_.optimizer));
  std::string converted;
  if (t.optimizer.size() != tensors_.trainable.size() * per) {
    if (auto c = convert_adamw_states(t.optimizer, tensors_.trainable, st_.optimizer, st_.precision)) {
      t.optimizer = std::move(*c);
      converted = st_.optimizer == dsl::Optimizer::kAdamw8bit ? "adamw -> adamw_8bit" : "adamw_8bit -> adamw";
    }
  }
  // A checkpoint holds every tensor's states, whatever the rank count it
  // was written with: this rank keeps its share.
  if (sync_->writes_shards() && t.optimizer.size() != tensors_.trainable.size() * per) {
    return Status::invalid_argument(latest + ": optimizer state does not match the job");
  }
  if (!opt_->load_state_tensors(sync_->states_of_rank(std::move(t.optimizer), per), st.step)) {
    return Status::invalid_argument(latest + ": optimizer state does not match the job");
  }
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  gen.set_state(t.rng_state);
  if (device_.cuda && t.device_rng_state.defined()) {
    at::Generator device_gen = at::globalContext().defaultGenerator(dev_);
    device_gen.set_state(t.device_rng_state);
  }
  if (!st.data_identity.empty() && st.data_identity != data_.identity) {
    return Status::invalid_argument(latest + ": written over other data (" + st.data_identity + "; now " +
                                    data_.identity + "): its data position (epoch " + std::to_string(st.data_epoch) +
                                    ", row " + std::to_string(st.data_index) +
                                    ") would read other examples; resume over the data it was written with, or "
                                    "train anew");
  }
  data_.train->restore({st.data_epoch, st.data_index});
  state_ = st;
  first_step_ = st.step + 1;
  event(events::kResume, [&](JsonWriter& w) {
    w.field("step", st.step).field("checkpoint", latest);
    if (!st.data_identity.empty()) {
      const auto sources = dsl::train_sources(spec_.data);
      const auto d = static_cast<std::size_t>(st.data_dataset);
      w.field("data_dataset", st.data_dataset)
          .field("data_file", d < sources.size() ? sources[d].path : std::string())
          .field("data_example", st.data_example)
          .field("data_token", st.data_token);
    }
    if (!converted.empty()) w.field("optimizer_converted", converted);
  });
  return Status::ok();
}

}  // namespace tailor::runner
