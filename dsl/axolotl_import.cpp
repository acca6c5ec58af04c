// Axolotl config -> Tailor TrainingJob document. Mapped keys become spec
// fields; every other key set in the file is one warning at its own position.
// It downloads nothing and reads no file except a DeepSpeed JSON config.
#include "dsl/axolotl_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/text.h"
#include "dsl/catalog.h"
#include "dsl/model_family.h"
#include "dsl/spec_loader.h"
#include "dsl/yaml_tree.h"

namespace tailor::dsl {
namespace {

namespace fs = std::filesystem;

// Axolotl options (docs/config.qmd) that Tailor reads. Also the candidates
// for "did you mean" on keys it does not know.
const std::vector<std::string>& mapped_keys() {
  static const std::vector<std::string> k = split(
      "base_model adapter load_in_4bit load_in_8bit lora_r lora_alpha lora_dropout lora_target_modules "
      "lora_target_linear lora_modules_to_save sequence_len sample_packing micro_batch_size "
      "gradient_accumulation_steps batch_size "
      "num_epochs max_steps learning_rate lr_scheduler warmup_steps warmup_ratio weight_decay max_grad_norm seed "
      "eval_steps save_steps save_total_limit optimizer bf16 fp16 bfloat16 float16 gradient_checkpointing deepspeed "
      "fsdp fsdp_config datasets test_datasets train_on_inputs val_set_size",
      ' ');
  return k;
}

struct IgnoredKey {
  const char* key;
  const char* why;
};

// Axolotl options with no Tailor counterpart, and what Tailor does instead.
// Keys not listed here get the same warning without the reason.
const std::vector<IgnoredKey>& ignored_keys() {
  static const std::vector<IgnoredKey> k = {
      {"model_type", "the architecture comes from the preset or the model folder's config.json"},
      {"model_config_type", "the architecture comes from the preset or the model folder's config.json"},
      {"base_model_config", "the architecture comes from the preset or the model folder's config.json"},
      {"is_llama_derived_model", "the architecture comes from the preset or the model folder's config.json"},
      {"is_mistral_derived_model", "the architecture comes from the preset or the model folder's config.json"},
      {"is_qwen_derived_model", "the architecture comes from the preset or the model folder's config.json"},
      {"is_falcon_derived_model", "the architecture comes from the preset or the model folder's config.json"},
      {"tokenizer_type", "Tailor uses the model's own tokenizer"},
      {"tokenizer_config", "Tailor uses the model's own tokenizer"},
      {"tokenizer_use_fast", "Tailor uses the model's own tokenizer"},
      {"tokenizer_legacy", "Tailor uses the model's own tokenizer"},
      {"special_tokens", "Tailor uses the tokenizer's special tokens"},
      {"tokens", "Tailor does not add tokens to the vocabulary"},
      {"trust_remote_code", "Tailor runs no model code from the hub"},
      {"strict", "Tailor validates the converted spec itself"},
      {"output_dir", "tailord chooses each job's output folder"},
      {"dataset_prepared_path", "Tailor tokenizes the data when the job starts"},
      {"pad_to_sequence_len", "Tailor pads or packs to data.seq_len itself"},
      {"eval_sample_packing", "evaluation uses data.packing"},
      {"group_by_length", "Tailor does not reorder samples by length"},
      {"flash_attention", "the runner picks its attention kernel"},
      {"xformers_attention", "the runner picks its attention kernel"},
      {"sdp_attention", "the runner picks its attention kernel"},
      {"s2_attention", "the runner picks its attention kernel"},
      {"flash_attn_cross_entropy", "the runner picks its kernels"},
      {"flash_attn_rms_norm", "the runner picks its kernels"},
      {"flash_attn_fuse_qkv", "the runner picks its kernels"},
      {"flash_attn_fuse_mlp", "the runner picks its kernels"},
      {"tf32", "TF32 matmuls are the runner's choice"},
      {"logging_steps", "tailord records every step's metrics"},
      {"evals_per_epoch", "Tailor evaluates every training.eval_every steps; set it by hand"},
      {"saves_per_epoch", "Tailor saves every checkpoint.every_steps steps; set it by hand"},
      {"eval_strategy", "Tailor evaluates every training.eval_every steps"},
      {"save_strategy", "Tailor saves every checkpoint.every_steps steps"},
      {"eval_batch_size", "evaluation uses training.micro_batch_size"},
      {"eval_table_size", "Tailor logs no sample predictions"},
      {"eval_max_new_tokens", "Tailor logs no sample predictions"},
      {"eval_table_max_new_tokens", "Tailor logs no sample predictions"},
      {"early_stopping_patience", "Tailor trains for the configured epochs or steps"},
      {"resume_from_checkpoint", "tailord resumes a job from its own checkpoints"},
      {"auto_resume_from_checkpoints", "tailord resumes a job from its own checkpoints"},
      {"lora_model_dir", "Tailor starts LoRA adapters from scratch"},
      {"lora_fan_in_fan_out", "Tailor knows each architecture's weight layout"},
      {"lr_scheduler_kwargs", "training.scheduler takes no arguments"},
      {"cosine_min_lr_ratio", "the cosine schedule decays to zero"},
      {"adam_beta1", "Tailor uses the optimizer's standard betas"},
      {"adam_beta2", "Tailor uses the optimizer's standard betas"},
      {"adam_epsilon", "Tailor uses the optimizer's standard epsilon"},
      {"gradient_checkpointing_kwargs", "see strategy.gradient_checkpointing"},
      {"fsdp_version", "Tailor shards with ZeRO stages; see fsdp"},
      {"local_rank", "tailord launches the processes"},
      {"ddp_timeout", "tailord launches the processes"},
      {"debug", "see the job's logs"},
      {"hub_model_id", "Tailor does not upload models"},
      {"hub_strategy", "Tailor does not upload models"},
      {"chat_template",
       "Tailor renders conversations with the model folder's own template, or the file data.chat_template names"},
      {"chat_template_jinja", "save the template as a file and name it in data.chat_template"},
      {"pretraining_dataset", "Tailor trains on a local data.train file"},
      {"torch_compile", "the runner decides on compilation"},
      {"bnb_config_kwargs", "see strategy.quantization: nf4-double-quant (the default) or nf4"},
      {"neftune_noise_alpha", "Tailor adds no embedding noise"},
      {"use_tensorboard", "tailord records every step's metrics"},
  };
  return k;
}

// Experiment trackers: Tailor records metrics itself.
bool is_tracker_key(std::string_view key) {
  return starts_with(key, "wandb_") || starts_with(key, "mlflow_") || starts_with(key, "comet_") ||
         key == "use_wandb" || key == "use_mlflow" || key == "use_comet";
}

// Organisations whose repository names are trusted to mean the published
// architecture; a fine-tune elsewhere may have resized the vocabulary.
bool is_known_org(std::string_view org) {
  static const char* kOrgs[] = {"",          "meta-llama", "nousresearch",     "mistralai",
                                "tinyllama", "qwen",       "openai-community", "unsloth", "google"};
  for (const char* o : kOrgs) {
    if (org == o) return true;
  }
  return false;
}

// The preset for a Hugging Face id, or empty.
std::string preset_for_hub_id(std::string_view id) {
  const std::string lower = to_lower(id);
  const auto slash = lower.find('/');
  if (slash != std::string::npos && lower.find('/', slash + 1) != std::string::npos) return {};
  const std::string org = slash == std::string::npos ? std::string() : lower.substr(0, slash);
  const std::string repo = slash == std::string::npos ? lower : lower.substr(slash + 1);
  if (!is_known_org(org)) return {};
  // The catalog lists the repositories each preset describes exactly
  // (configs/catalog/models.yaml, hub_repos).
  if (const ModelPreset* p = Catalog::builtin().find_by_hub_repo(repo)) return p->name;
  // Every TinyLlama 1.1B checkpoint and chat release keeps the architecture.
  if (org == "tinyllama" && starts_with(repo, "tinyllama-1.1b")) return "tinyllama-1.1b";
  return {};
}

bool contains(const std::vector<std::string>& v, std::string_view s) {
  for (const std::string& x : v) {
    if (x == s) return true;
  }
  return false;
}

// Axolotl (PyYAML) reads an empty value, `null` and `~` as "not set".
bool is_unset(const Node& n) {
  if (n.is_null()) return true;
  if (!n.is_scalar() || !n.plain) return false;
  const std::string v = to_lower(n.scalar);
  return v.empty() || v == "null" || v == "~";
}

std::string describe(const Node& n) { return n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name()); }

std::string format_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

Node text_node(std::string s) { return Node::make_scalar(std::move(s), {}, /*plain=*/false); }
Node word_node(std::string s) { return Node::make_scalar(std::move(s)); }
Node int_node(std::int64_t v) { return Node::make_scalar(std::to_string(v)); }
Node number_node(double v) { return Node::make_scalar(format_number(v)); }
Node bool_node(bool v) { return Node::make_scalar(v ? "true" : "false"); }

// A job name the loader accepts ([a-z0-9][a-z0-9._-]*, at most 63).
std::string sanitize_job_name(std::string_view wanted) {
  std::string out = to_lower(wanted);
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.front()))) out.erase(out.begin());
  if (out.size() > 63) out.resize(63);
  return out;
}

// What the Axolotl file says, in Tailor's terms; empty = not set (the
// loader's default, or auto for strategy knobs).
struct Converted {
  std::string preset;
  std::string model_path;

  std::string train;
  // Further local datasets read as `train` is (the same prompt format and
  // file format): data.train becomes a list, concatenated as Axolotl does.
  std::vector<std::string> more_train;
  std::string eval;
  std::string format = "jsonl";
  std::string field;
  std::string prompt_field;
  std::string completion_field;
  std::string chat;                           // data.chat; empty: not chat data
  std::map<std::string, std::string> fields;  // data.fields
  std::string train_on_eos;                   // data.train_on_eos; empty: the default
  std::optional<std::int64_t> seq_len;
  bool packing = false;  // Axolotl's default: no sample packing

  std::optional<std::int64_t> global_batch_size;
  std::optional<std::int64_t> micro_batch_size;
  std::optional<double> epochs;
  std::optional<std::int64_t> max_steps;
  std::optional<double> lr;
  std::string scheduler;
  std::optional<std::int64_t> warmup_steps;
  std::optional<double> weight_decay;
  std::optional<double> grad_clip;
  std::optional<std::int64_t> seed;
  std::optional<std::int64_t> eval_every;

  std::string precision;
  std::optional<bool> gradient_checkpointing;
  std::string adapter;
  std::optional<std::int64_t> lora_r;
  std::optional<double> lora_alpha;
  std::optional<double> lora_dropout;
  std::vector<std::string> lora_targets;
  std::vector<std::string> lora_modules_to_save;
  std::string optimizer;
  std::optional<std::int64_t> zero_stage;
  std::string offload;

  std::optional<std::int64_t> checkpoint_every;
  std::optional<std::int64_t> checkpoint_keep;
};

// Integers larger than this are nonsense in any training config; bounding
// them keeps products such as micro x accumulation from overflowing.
constexpr double kMaxInt = 1e12;

class Importer {
 public:
  Importer(const Node& root, std::string file_name, Diagnostics& d) : root_(root), file_(std::move(file_name)), d_(d) {
    dir_ = fs::path(file_).parent_path();
  }

  Converted convert() {
    map_model();
    map_data();
    map_training();
    map_adapter();
    map_precision();
    map_optimizer();
    map_sharding();
    map_checkpoint();
    warn_unmapped();
    return c_;
  }

 private:
  // The entry for `key` when the file sets it; marks the key as read either way.
  const MapEntry* take(std::string_view key) {
    taken_.insert(std::string(key));
    const MapEntry* e = root_.find_entry(key);
    return e != nullptr && !is_unset(e->value) ? e : nullptr;
  }

  void warn(const MapEntry& e, const std::string& message) { d_.warning(e.key_location, e.key, message); }

  void warn_bad(const MapEntry& e, const std::string& expected) {
    d_.warning(e.value.location, e.key, "expected " + expected + ", got " + describe(e.value) + "; ignored");
  }

  std::optional<bool> get_bool(const MapEntry& e) {
    if (e.value.is_scalar()) {
      const std::string v = to_lower(trim(e.value.scalar));
      if (v == "true" || v == "yes" || v == "on") return true;
      if (v == "false" || v == "no" || v == "off") return false;
    }
    warn_bad(e, "true or false");
    return std::nullopt;
  }

  static std::optional<double> parse_number(const Node& n) {
    if (!n.is_scalar()) return std::nullopt;
    const std::string s(trim(n.scalar));
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end == nullptr || *end != '\0' || !std::isfinite(v)) return std::nullopt;
    return v;
  }

  std::optional<double> get_number(const MapEntry& e, double min, bool min_inclusive, const std::string& expected) {
    auto v = parse_number(e.value);
    if (!v || (min_inclusive ? *v < min : *v <= min)) {
      warn_bad(e, expected);
      return std::nullopt;
    }
    return v;
  }

  std::optional<std::int64_t> get_int(const MapEntry& e, std::int64_t min, const std::string& expected) {
    auto v = parse_number(e.value);
    if (!v || *v != std::floor(*v) || *v < static_cast<double>(min) || *v > kMaxInt) {
      warn_bad(e, expected);
      return std::nullopt;
    }
    return static_cast<std::int64_t>(*v);
  }

  // A relative path as Axolotl wrote it, checked next to the Axolotl file.
  bool exists_near_file(const std::string& p) const {
    std::error_code ec;
    const fs::path path(p);
    return fs::exists(path.is_absolute() ? path : dir_ / path, ec);
  }

  static bool explicit_local(std::string_view p) {
    return starts_with(p, "/") || starts_with(p, "./") || starts_with(p, "../") || starts_with(p, "~") || p == ".";
  }

  // ---- model ---------------------------------------------------------------

  void map_model() {
    const MapEntry* e = take("base_model");
    const bool usable = e != nullptr && e->value.is_scalar() && !e->value.scalar.empty();
    if (!usable) {
      c_.model_path = "model";
      const std::string placeholder = "model.path is the placeholder \"model\": set model.preset or model.path";
      if (e == nullptr) {
        d_.warning(root_.location, "base_model", "no base model is set; " + placeholder);
      } else {
        d_.warning(e->value.location, e->key,
                   "expected a model id or folder, got " + describe(e->value) + "; " + placeholder);
      }
      return;
    }
    const std::string& id = e->value.scalar;
    if (!explicit_local(id)) {
      const std::string preset = preset_for_hub_id(id);
      if (!preset.empty() && (preset_ = Catalog::builtin().find_model(preset)) != nullptr) {
        c_.preset = preset;
        return;
      }
    }
    c_.model_path = id;
    const bool hub_shaped = !explicit_local(id) && std::count(id.begin(), id.end(), '/') <= 1;
    if (hub_shaped && !exists_near_file(id)) {
      warn(*e, quote(id) +
                   " is a Hugging Face model id with no Tailor preset; Tailor cannot download models, so "
                   "model.path is set to it and that folder (with config.json and weights) must exist locally, "
                   "relative to the spec; e.g. `huggingface-cli download " +
                   id + " --local-dir " + id + "`");
    }
  }

  // ---- data ----------------------------------------------------------------

  struct DatasetRef {
    std::string file;  // local file or hub id
    bool local = false;
    const Node* entry = nullptr;
    std::string path;   // key path of the entry, e.g. "datasets[0]"
    SourceLocation at;  // where its path is written
  };

  static bool remote_url(std::string_view p) {
    return starts_with(p, "s3://") || starts_with(p, "gs://") || starts_with(p, "gcs://") ||
           starts_with(p, "http://") || starts_with(p, "https://") || starts_with(p, "hf://");
  }

  static std::string extension_of(const std::string& p) { return to_lower(fs::path(p).extension().string()); }

  static bool data_extension(const std::string& ext) {
    static const char* kExts[] = {".jsonl", ".json", ".txt", ".md", ".text", ".parquet", ".csv", ".arrow"};
    for (const char* x : kExts) {
      if (ext == x) return true;
    }
    return false;
  }

  // One `datasets` item: where its data lives, or nullopt when it names none.
  std::optional<DatasetRef> read_dataset(const Node& item, const std::string& path) {
    if (!item.is_map()) return std::nullopt;
    const Node* p = item.find("path");
    if (p == nullptr || !p->is_scalar() || p->scalar.empty()) return std::nullopt;
    DatasetRef ref{p->scalar, false, &item, path, p->location};
    // `path: json` (a `datasets` builder name) with data_files names local files.
    if (const Node* files = item.find("data_files"); files != nullptr && !is_unset(*files)) {
      const Node* first = files->is_sequence() && !files->items.empty() ? &files->items.front() : files;
      if (first->is_scalar() && !first->scalar.empty() && !remote_url(first->scalar)) {
        static const char* kBuilders[] = {"json", "csv", "parquet", "text", "arrow"};
        bool builder = false;
        for (const char* b : kBuilders) builder = builder || p->scalar == b;
        if (builder || explicit_local(first->scalar) || data_extension(extension_of(first->scalar))) {
          ref.file = first->scalar;
          ref.at = first->location;
          ref.local = true;
          if (files->is_sequence() && files->items.size() > 1) {
            d_.warning(files->location, path + ".data_files",
                       std::to_string(files->items.size()) + " files are listed; Tailor trains on one: using " +
                           quote(ref.file));
          }
          return ref;
        }
      }
    }
    if (remote_url(ref.file)) return ref;
    const Node* ds_type = item.find("ds_type");
    ref.local = explicit_local(ref.file) || data_extension(extension_of(ref.file)) || exists_near_file(ref.file) ||
                (ds_type != nullptr && !is_unset(*ds_type));
    return ref;
  }

  // The file format Tailor reads a local dataset file in, by extension.
  static std::string format_for(const std::string& file) {
    const std::string ext = extension_of(file);
    if (ext == ".txt" || ext == ".md" || ext == ".text") return "text";
    if (ext == ".json") return "json";
    if (ext == ".parquet") return "parquet";
    if (ext == ".arrow") return "arrow";
    return "jsonl";
  }

  static bool same_node(const Node& a, const Node& b) {
    if (a.kind != b.kind || a.scalar != b.scalar || a.items.size() != b.items.size() ||
        a.entries.size() != b.entries.size()) {
      return false;
    }
    for (std::size_t k = 0; k < a.items.size(); ++k) {
      if (!same_node(a.items[k], b.items[k])) return false;
    }
    for (std::size_t k = 0; k < a.entries.size(); ++k) {
      if (a.entries[k].key != b.entries[k].key || !same_node(a.entries[k].value, b.entries[k].value)) return false;
    }
    return true;
  }

  // Two datasets that one data section reads alike: the same file format,
  // and the same entry but for where the data lives.
  static bool read_alike(const DatasetRef& a, const DatasetRef& b) {
    if (format_for(a.file) != format_for(b.file)) return false;
    auto settings = [](const Node& item) {
      std::vector<const MapEntry*> out;
      for (const MapEntry& e : item.entries) {
        if (e.key != "path" && e.key != "data_files" && e.key != "name" && e.key != "split") out.push_back(&e);
      }
      return out;
    };
    const auto sa = settings(*a.entry), sb = settings(*b.entry);
    if (sa.size() != sb.size()) return false;
    for (std::size_t k = 0; k < sa.size(); ++k) {
      if (sa[k]->key != sb[k]->key || !same_node(sa[k]->value, sb[k]->value)) return false;
    }
    return true;
  }

  // Index of the dataset to use: the first local one, else the first usable.
  std::optional<std::size_t> pick_dataset(const std::vector<std::optional<DatasetRef>>& refs) {
    std::optional<std::size_t> first;
    for (std::size_t i = 0; i < refs.size(); ++i) {
      if (!refs[i]) continue;
      if (refs[i]->local) return i;
      if (!first) first = i;
    }
    return first;
  }

  std::vector<std::optional<DatasetRef>> read_datasets(const MapEntry& e) {
    std::vector<std::optional<DatasetRef>> refs;
    for (std::size_t i = 0; i < e.value.items.size(); ++i) {
      const std::string path = e.key + "[" + std::to_string(i) + "]";
      refs.push_back(read_dataset(e.value.items[i], path));
      if (!refs.back()) {
        d_.warning(e.value.items[i].location, path, "expected a map with a `path`; ignored");
      }
    }
    return refs;
  }

  // Sets `file` (train or eval) from a chosen dataset; the hub and format
  // warnings go at the dataset's path.
  void use_dataset_file(const DatasetRef& ref, std::string& file, const std::string& target) {
    file = ref.file;
    if (!ref.local) {
      d_.warning(ref.at, ref.path + ".path",
                 quote(ref.file) + (remote_url(ref.file) ? " is a remote dataset" : " is a Hugging Face Hub dataset") +
                     "; Tailor reads local files only: export it to a JSONL file and point " + target +
                     " at it (set to the id as a placeholder)");
    }
  }

  void map_data() {
    map_sequence();
    if (const MapEntry* e = take("sample_packing")) {
      if (auto v = get_bool(*e)) c_.packing = *v;
    }

    const MapEntry* e = take("datasets");
    std::optional<DatasetRef> chosen;
    const std::string placeholder = "data.train is the placeholder \"train.jsonl\": point it at a local JSONL file";
    if (e != nullptr && !e->value.is_sequence()) {
      d_.warning(e->value.location, e->key,
                 "expected a list of datasets, got " + describe(e->value) + "; " + placeholder);
      c_.train = "train.jsonl";
      map_eval_and_inputs();
      return;
    }
    if (e != nullptr) {
      const auto refs = read_datasets(*e);
      if (auto i = pick_dataset(refs)) {
        chosen = refs[*i];
        // Axolotl concatenates its datasets: the local ones read as the
        // chosen one is read become data.train's list (mix concat).
        std::vector<std::string> left_out;
        for (std::size_t j = 0; j < refs.size(); ++j) {
          if (j == *i || !refs[j]) continue;
          if (chosen->local && refs[j]->local && read_alike(*refs[j], *chosen)) {
            c_.more_train.push_back(refs[j]->file);
          } else {
            left_out.push_back(refs[j]->path + " (" + quote(refs[j]->file) + ")");
          }
        }
        if (!left_out.empty()) {
          warn(*e, std::to_string(refs.size()) + " datasets are listed; Tailor trains on local files read alike: " +
                       "using " + chosen->path + " (" + quote(chosen->file) + ")" +
                       (c_.more_train.empty() ? std::string()
                                              : " and " + std::to_string(c_.more_train.size()) + " more like it") +
                       "; left out: " + join(left_out, ", ") +
                       " (another prompt or file format, or not local: export them to files like it)");
        }
      }
    }
    if (!chosen) {
      c_.train = "train.jsonl";
      d_.warning(e ? e->key_location : root_.location, "datasets", "no usable dataset; " + placeholder);
    } else {
      use_dataset_file(*chosen, c_.train, "data.train");
      map_format(*chosen);
    }
    map_eval_and_inputs();
  }

  void map_eval_and_inputs() {
    map_eval_datasets();
    if (const MapEntry* v = take("val_set_size")) {
      // 0 means "no evaluation split", which is what Tailor does without data.eval.
      if (parse_number(v->value) != 0.0) {
        warn(*v,
             "no Tailor equivalent; ignored (Tailor evaluates on a separate data.eval file: split one off and "
             "set it)");
      }
    }
    if (const MapEntry* t = take("train_on_inputs")) {
      auto v = get_bool(*t);
      if (v && *v && !c_.prompt_field.empty()) {
        warn(*t, "Tailor always masks the loss on the prompt of prompt/completion data; ignored");
      }
    }
  }

  void map_sequence() {
    const MapEntry* e = take("sequence_len");
    if (e == nullptr) return;
    auto v = get_int(*e, 1, "a positive integer");
    if (!v) return;
    c_.seq_len = v;
    if (preset_ != nullptr && preset_->arch.max_seq_len > 0 && *v > preset_->arch.max_seq_len) {
      c_.seq_len = preset_->arch.max_seq_len;
      warn(*e, std::to_string(*v) + " tokens exceeds " + preset_->name + "'s context of " +
                   std::to_string(preset_->arch.max_seq_len) + "; data.seq_len is set to " +
                   std::to_string(preset_->arch.max_seq_len) + " (Tailor does not scale RoPE)");
    }
  }

  // data.format and the record fields, from the file's extension and the
  // Axolotl prompt format (`type`).
  void map_format(const DatasetRef& ref) {
    const std::string ext = ref.local ? extension_of(ref.file) : ".jsonl";
    if (ext == ".txt" || ext == ".md" || ext == ".text") {
      c_.format = "text";
      return;
    }
    // Axolotl reads local .json files with Hugging Face's json loader: an
    // array or JSON Lines, as Tailor's json format does.
    c_.format = ext == ".json" ? "json" : ext == ".parquet" ? "parquet" : ext == ".arrow" ? "arrow" : "jsonl";
    if (ext != ".jsonl" && ext != ".json" && ext != ".parquet" && ext != ".arrow") {
      d_.warning(ref.at, ref.path + ".path",
                 quote(ref.file) +
                     ": Tailor reads JSON, JSONL, plain text, token, Parquet or Arrow files; convert it to JSONL "
                     "(data.format is jsonl)");
    }
    const Node& item = *ref.entry;
    const Node* type = item.find("type");
    if (type == nullptr || is_unset(*type)) return;  // Axolotl's default reads a `text` field
    const std::string type_path = ref.path + ".type";
    if (type->is_map()) {
      // A custom instruction format: its fields, without the template.
      auto name_of = [&](const char* key, const char* fallback) {
        const Node* f = type->find(key);
        return f && f->is_scalar() && !f->scalar.empty() ? f->scalar : std::string(fallback);
      };
      c_.prompt_field = name_of("field_instruction", "instruction");
      c_.completion_field = name_of("field_output", "output");
      d_.warning(type->location, type_path,
                 "custom prompt format: the prompt is the " + quote(c_.prompt_field) +
                     " field and the completion the " + quote(c_.completion_field) +
                     " field; its template, system prompt and input field are not applied");
      return;
    }
    if (!type->is_scalar()) {
      d_.warning(type->location, type_path,
                 "expected a prompt format name or map, got " + describe(*type) + "; ignored");
      return;
    }
    const std::string name = to_lower(split(type->scalar, ':').front());
    if (name == "chat_template" || name == "sharegpt") {
      map_chat(item, name, type_path);
    } else if (name == "completion") {
      const Node* f = item.find("field");
      c_.field = f && f->is_scalar() && !f->scalar.empty() ? f->scalar : "text";
    } else if (name == "alpaca" || starts_with(name, "alpaca_")) {
      c_.prompt_field = "instruction";
      c_.completion_field = "output";
      d_.warning(type->location, type_path,
                 "alpaca records: the prompt is the \"instruction\" field and the completion the \"output\" field; "
                 "the \"input\" field and the Alpaca template are not applied (merge them into the prompt first)");
    } else {
      d_.warning(type->location, type_path,
                 "prompt format " + quote(type->scalar) +
                     " has no Tailor equivalent; Tailor trains on a \"text\" field (or prompt_field/completion_field): "
                     "render the records to text first");
    }
  }

  // Axolotl's chat_template datasets (and the older sharegpt type): Tailor's
  // data.chat, rendered with the model's own template.
  void map_chat(const Node& item, const std::string& name, const std::string& type_path) {
    auto scalar = [&](const char* key) -> std::string {
      const Node* f = item.find(key);
      return f && f->is_scalar() ? f->scalar : std::string();
    };
    c_.chat = name == "sharegpt" ? "sharegpt" : "messages";
    if (const std::string messages = scalar("field_messages"); !messages.empty()) {
      const std::string key = c_.chat == "sharegpt" ? "conversations" : "messages";
      if (messages != key) c_.fields[key] = messages;
    }
    std::string role = scalar("message_field_role"), content = scalar("message_field_content");
    if (const Node* m = item.find("message_property_mappings"); m && m->is_map()) {
      if (const Node* r = m->find("role"); r && r->is_scalar()) role = r->scalar;
      if (const Node* c = m->find("content"); c && c->is_scalar()) content = c->scalar;
    }
    const bool sharegpt = c_.chat == "sharegpt";
    if (!role.empty() && role != (sharegpt ? "from" : "role")) c_.fields[sharegpt ? "from" : "role"] = role;
    if (!content.empty() && content != (sharegpt ? "value" : "content")) c_.fields[sharegpt ? "value" : "content"] = content;
    if (const Node* roles = item.find("roles_to_train"); roles && roles->is_sequence()) {
      const bool assistant_only = roles->items.size() == 1 && roles->items[0].is_scalar() &&
                                  (roles->items[0].scalar == "assistant" || roles->items[0].scalar == "gpt");
      if (!assistant_only) {
        d_.warning(roles->location, type_path.substr(0, type_path.size() - 5) + ".roles_to_train",
                   "Tailor trains the assistant's turns (data.train_on: assistant, last_assistant or all); set "
                   "data.train_on: all to train every turn");
      }
    }
    if (const std::string eos = scalar("train_on_eos"); !eos.empty()) {
      if (eos == "turn" || eos == "last" || eos == "none") {
        c_.train_on_eos = eos;
      } else {
        d_.warning(item.find("train_on_eos")->location, type_path.substr(0, type_path.size() - 5) + ".train_on_eos",
                   quote(eos) + ": Tailor trains the end-of-turn token after each trained turn (turn), the last (last) "
                                "or none; turn is used");
      }
    }
    if (name == "sharegpt") {
      d_.warning(item.find("type")->location, type_path,
                 "sharegpt conversations are rendered with the model's own chat template (data.chat: sharegpt), not "
                 "a conversation template of Axolotl's");
    }
  }

  void map_eval_datasets() {
    const MapEntry* e = take("test_datasets");
    if (e == nullptr) return;
    if (!e->value.is_sequence()) {
      warn_bad(*e, "a list of datasets");
      return;
    }
    const auto refs = read_datasets(*e);
    auto i = pick_dataset(refs);
    if (!i) return;
    if (refs.size() > 1) {
      warn(*e, std::to_string(refs.size()) + " evaluation datasets are listed; Tailor evaluates on one file: using " +
                   refs[*i]->path + " (" + quote(refs[*i]->file) + ")");
    }
    use_dataset_file(*refs[*i], c_.eval, "data.eval");
  }

  // ---- training --------------------------------------------------------------

  void map_training() {
    map_batch();
    if (const MapEntry* e = take("num_epochs")) c_.epochs = get_number(*e, 0, false, "a number above 0");
    if (const MapEntry* e = take("max_steps")) c_.max_steps = get_int(*e, 1, "a positive integer");
    if (const MapEntry* e = take("learning_rate")) c_.lr = get_number(*e, 0, false, "a number above 0");
    map_scheduler();
    map_warmup();
    if (const MapEntry* e = take("weight_decay")) c_.weight_decay = get_number(*e, 0, true, "a number >= 0");
    if (const MapEntry* e = take("max_grad_norm")) c_.grad_clip = get_number(*e, 0, true, "a number >= 0");
    if (const MapEntry* e = take("seed")) c_.seed = get_int(*e, 0, "an integer >= 0");
    if (const MapEntry* e = take("eval_steps")) {
      c_.eval_every = get_step_interval(*e, "training.eval_every");
      if (c_.eval_every && c_.eval.empty()) {
        warn(*e,
             "mapped to training.eval_every, but there is no evaluation file: set data.eval (Axolotl's "
             "val_set_size split has no Tailor equivalent)");
      }
    }
    if (const MapEntry* e = take("gradient_checkpointing")) {
      const std::string v = e->value.is_scalar() ? to_lower(e->value.scalar) : "";
      if (v == "offload" || v == "offload_disk") {
        c_.gradient_checkpointing = true;
        warn(*e, quote(e->value.scalar) + ": Tailor keeps checkpointed activations on the GPU; mapped to true");
      } else {
        c_.gradient_checkpointing = get_bool(*e);
      }
    }
  }

  // Axolotl's micro_batch_size is per GPU and gradient_accumulation_steps
  // per process, so its effective batch is micro x accumulation x GPUs.
  void map_batch() {
    const MapEntry* micro_e = take("micro_batch_size");
    const MapEntry* accum_e = take("gradient_accumulation_steps");
    const MapEntry* batch_e = take("batch_size");
    // 0 = not set or not a positive integer (already warned).
    const std::int64_t micro = micro_e ? get_int(*micro_e, 1, "a positive integer").value_or(0) : 0;
    const std::int64_t accum = accum_e ? get_int(*accum_e, 1, "a positive integer").value_or(0) : 0;
    const std::int64_t batch = batch_e ? get_int(*batch_e, 1, "a positive integer").value_or(0) : 0;
    if (micro == 0) {
      for (const MapEntry* e : {accum > 0 ? accum_e : nullptr, batch > 0 ? batch_e : nullptr}) {
        if (e != nullptr) warn(*e, "ignored: micro_batch_size is not set, so Tailor picks the batch sizes");
      }
      return;
    }
    const MapEntry* note_at = micro_e;
    std::string how;
    std::int64_t steps = 1;
    if (accum > 0) {
      steps = accum;
      note_at = accum_e;
      how = "micro_batch_size x gradient_accumulation_steps = " + std::to_string(micro) + " x " + std::to_string(accum);
      if (batch > 0) warn(*batch_e, "ignored: gradient_accumulation_steps is set");
    } else if (batch > 0) {
      // Axolotl derives accumulation as batch_size // micro_batch_size.
      steps = std::max<std::int64_t>(1, batch / micro);
      note_at = batch_e;
      how = "micro_batch_size x (batch_size / micro_batch_size) = " + std::to_string(micro) + " x " +
            std::to_string(steps);
    } else {
      how = "micro_batch_size (no gradient accumulation)";
    }
    if (static_cast<double>(micro) * static_cast<double>(steps) > kMaxInt) {
      warn(*note_at, "the batch of " + how + " is too large; ignored");
      return;
    }
    c_.micro_batch_size = micro;
    c_.global_batch_size = micro * steps;
    warn(*note_at, "training.global_batch_size = " + how + " = " + std::to_string(micro * steps) +
                       ", assuming one GPU; Axolotl's batch grows with the GPU count, so multiply it by the number "
                       "of GPUs you trained on");
  }

  void map_scheduler() {
    const MapEntry* e = take("lr_scheduler");
    if (e == nullptr) return;  // Axolotl's default is cosine, as is Tailor's
    if (!e->value.is_scalar()) {
      warn_bad(*e, "a scheduler name");
      return;
    }
    const std::string v = to_lower(e->value.scalar);
    if (v == "cosine" || v == "linear" || v == "constant") {
      c_.scheduler = v;
    } else if (v == "constant_with_warmup") {
      c_.scheduler = "constant";  // Tailor's schedules all start with warmup_steps
    } else if (v == "cosine_with_min_lr" || v == "cosine_with_restarts") {
      c_.scheduler = "cosine";
      warn(*e, quote(e->value.scalar) + " mapped to cosine (decaying to zero, without restarts)");
    } else {
      warn(*e,
           "scheduler " + quote(e->value.scalar) +
               " has no Tailor equivalent (constant, cosine, linear); training.scheduler keeps its default, cosine");
    }
  }

  void map_warmup() {
    const MapEntry* steps_e = take("warmup_steps");
    const MapEntry* ratio_e = take("warmup_ratio");
    if (steps_e != nullptr) c_.warmup_steps = get_int(*steps_e, 0, "an integer >= 0");
    if (ratio_e != nullptr) {
      auto ratio = parse_number(ratio_e->value);
      if (!ratio || *ratio < 0 || *ratio >= 1) {
        warn_bad(*ratio_e, "a fraction in [0, 1)");
      } else if (c_.warmup_steps) {
        warn(*ratio_e, "ignored: warmup_steps is set");
      } else if (c_.max_steps) {
        c_.warmup_steps = static_cast<std::int64_t>(std::llround(*ratio * static_cast<double>(*c_.max_steps)));
        warn(*ratio_e, "Tailor takes warmup_steps: " + format_number(*ratio) + " x max_steps " +
                           std::to_string(*c_.max_steps) + " = " + std::to_string(*c_.warmup_steps));
      } else {
        warn(*ratio_e,
             "Tailor takes warmup_steps, and the total step count is unknown without max_steps; ignored: "
             "set training.warmup_steps to the ratio x total steps");
      }
    }
    if (c_.warmup_steps && c_.max_steps && *c_.warmup_steps > *c_.max_steps) {
      warn(steps_e ? *steps_e : *ratio_e, "warmup_steps " + std::to_string(*c_.warmup_steps) + " exceeds max_steps " +
                                              std::to_string(*c_.max_steps) + "; capped at max_steps");
      c_.warmup_steps = c_.max_steps;
    }
  }

  // eval_steps / save_steps: N steps, or a fraction of the total steps.
  std::optional<std::int64_t> get_step_interval(const MapEntry& e, const std::string& target) {
    auto v = parse_number(e.value);
    if (v && *v > 0 && *v < 1) {
      if (!c_.max_steps) {
        warn(e, "a fraction of the total steps needs max_steps to convert; ignored: set " + target + " by hand");
        return std::nullopt;
      }
      const auto steps =
          std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(*v * static_cast<double>(*c_.max_steps))));
      warn(e, format_number(*v) + " of max_steps " + std::to_string(*c_.max_steps) + " = every " +
                  std::to_string(steps) + " steps");
      return steps;
    }
    return get_int(e, 1, "a positive integer or a fraction of the total steps");
  }

  // ---- strategy --------------------------------------------------------------

  void map_adapter() {
    const MapEntry* adapter_e = take("adapter");
    const MapEntry* four_e = take("load_in_4bit");
    const MapEntry* eight_e = take("load_in_8bit");
    const bool four = four_e && get_bool(*four_e).value_or(false);
    const bool eight = eight_e && get_bool(*eight_e).value_or(false);
    std::string kind;
    bool unknown = false;
    if (adapter_e != nullptr) {
      const std::string v = adapter_e->value.is_scalar() ? to_lower(adapter_e->value.scalar) : "";
      if (v == "lora" || v == "qlora") {
        kind = v;
      } else if (!adapter_e->value.is_scalar()) {
        unknown = true;
        warn_bad(*adapter_e, "lora or qlora");
      } else {
        unknown = true;
        warn(*adapter_e, "adapter " + describe(adapter_e->value) +
                             " has no Tailor equivalent (lora, qlora or a full fine-tune); strategy.adapter is auto");
      }
    }
    const MapEntry* decided_by = adapter_e;
    if (four) {
      if (kind == "lora") warn(*four_e, "LoRA on a 4-bit base is QLoRA: strategy.adapter is qlora");
      if (kind.empty()) warn(*four_e, "a 4-bit base needs an adapter: strategy.adapter is qlora");
      kind = "qlora";
      decided_by = four_e;
    }
    if (eight) {
      if (four) {
        warn(*eight_e, "ignored: load_in_4bit is also set");
      } else {
        warn(*eight_e, "Tailor has no 8-bit base weights; the base stays 16-bit" +
                           std::string(kind.empty() ? " and strategy.adapter is lora" : ""));
        if (kind.empty()) {
          kind = "lora";
          decided_by = eight_e;
        }
      }
    }
    // Without an adapter Axolotl trains every weight; auto could pick LoRA and
    // hand back an adapter instead of a model, so pin the full fine-tune.
    if (kind.empty() && !unknown) c_.adapter = "none";
    if (!kind.empty()) c_.adapter = kind;
    map_lora(kind.empty() ? nullptr : decided_by);
  }

  // `adapter_at` is the entry that chose LoRA, or nullptr when there is none.
  void map_lora(const MapEntry* adapter_at) {
    const MapEntry* r = take("lora_r");
    const MapEntry* alpha = take("lora_alpha");
    const MapEntry* dropout = take("lora_dropout");
    const MapEntry* modules = take("lora_target_modules");
    const MapEntry* linear = take("lora_target_linear");
    const MapEntry* whole = take("lora_modules_to_save");
    if (adapter_at == nullptr) {
      for (const MapEntry* e : {r, alpha, dropout, modules, linear, whole}) {
        if (e != nullptr) warn(*e, "ignored: no LoRA adapter is used");
      }
      return;
    }
    if (r) c_.lora_r = get_int(*r, 1, "a positive integer");
    if (alpha) c_.lora_alpha = get_number(*alpha, 0, false, "a number above 0");
    if (dropout) {
      auto v = parse_number(dropout->value);
      if (v && *v >= 0 && *v < 1) {
        c_.lora_dropout = v;
      } else {
        warn_bad(*dropout, "a number in [0, 1)");
      }
    }
    const bool all_linear = linear && get_bool(*linear).value_or(false);
    if (modules != nullptr && !all_linear) {
      read_lora_targets(*modules);
    } else if (modules == nullptr && !all_linear) {
      warn(*adapter_at, "neither lora_target_modules nor lora_target_linear is set; Tailor adapts every linear layer");
    }
    // Checked against the model's family where the spec is loaded.
    if (whole != nullptr) {
      if (whole->value.is_scalar()) {
        c_.lora_modules_to_save.push_back(whole->value.scalar);
      } else if (whole->value.is_sequence() && std::all_of(whole->value.items.begin(), whole->value.items.end(),
                                                           [](const Node& n) { return n.is_scalar(); })) {
        for (const Node& n : whole->value.items)
          c_.lora_modules_to_save.push_back(n.scalar);
      } else {
        warn_bad(*whole, "a list of module names");
      }
    }
  }

  void read_lora_targets(const MapEntry& e) {
    std::vector<const Node*> items;
    if (e.value.is_scalar()) {
      items.push_back(&e.value);
    } else if (e.value.is_sequence()) {
      for (const Node& n : e.value.items) items.push_back(&n);
    } else {
      warn_bad(e, "a list of layer names");
      return;
    }
    // The preset's family's linears, or any family's without a preset.
    std::vector<std::string> valid;
    std::string family = "supported";
    if (preset_ != nullptr) {
      family = to_string(preset_->arch.family);
      valid = lora_target_names(preset_->arch.family);
    } else {
      for (const ModelFamilyInfo& f : model_families()) {
        for (const std::string& l : lora_target_names(f.id)) {
          if (!contains(valid, l)) valid.push_back(l);
        }
      }
    }
    bool dropped = false;
    for (std::size_t i = 0; i < items.size(); ++i) {
      const Node& n = *items[i];
      const std::string path = e.key + (e.value.is_sequence() ? "[" + std::to_string(i) + "]" : "");
      if (!n.is_scalar() || !contains(valid, n.scalar)) {
        dropped = true;
        std::string msg = describe(n) + " is not a linear layer Tailor adapts in a " + family + " model (" +
                          join(valid, ", ") + "); dropped";
        if (n.is_scalar()) {
          const std::string hint = closest_match(n.scalar, valid);
          if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
        }
        d_.warning(n.location, path, msg);
        continue;
      }
      if (!contains(c_.lora_targets, n.scalar)) c_.lora_targets.push_back(n.scalar);
    }
    if (dropped && c_.lora_targets.empty()) {
      warn(e, "no usable target is left; Tailor adapts every linear layer");
    }
  }

  void map_precision() {
    const MapEntry* bf16_e = take("bf16");
    const MapEntry* fp16_e = take("fp16");
    const MapEntry* pure_bf16_e = take("bfloat16");
    const MapEntry* pure_fp16_e = take("float16");
    // bf16 also takes "auto" (use it where supported) and "full" (bf16 eval).
    bool bf16 = false, bf16_explicit = false;
    if (bf16_e != nullptr) {
      const std::string v = bf16_e->value.is_scalar() ? to_lower(bf16_e->value.scalar) : "";
      if (v == "auto") {
        bf16 = true;
      } else if (v == "full") {
        bf16 = bf16_explicit = true;
      } else if (auto b = get_bool(*bf16_e)) {
        bf16 = bf16_explicit = *b;
      }
    }
    const bool fp16 = fp16_e && get_bool(*fp16_e).value_or(false);
    const bool pure_bf16 = pure_bf16_e && get_bool(*pure_bf16_e).value_or(false);
    const bool pure_fp16 = pure_fp16_e && get_bool(*pure_fp16_e).value_or(false);
    if (pure_bf16) {
      c_.precision = "pure-bf16";
      for (const MapEntry* e : {fp16 ? fp16_e : nullptr, pure_fp16 ? pure_fp16_e : nullptr}) {
        if (e != nullptr) warn(*e, "ignored: bfloat16 is set");
      }
    } else if (bf16_explicit && (fp16 || pure_fp16)) {
      c_.precision = "bf16";
      warn(fp16 ? *fp16_e : *pure_fp16_e, "ignored: bf16 is also set");
    } else if (fp16 || pure_fp16) {
      // Axolotl prefers an explicit fp16 over bf16: auto.
      c_.precision = "fp16";
      if (pure_fp16) {
        warn(*pure_fp16_e, "Tailor has no pure fp16 training; mapped to fp16 mixed precision (fp32 master weights)");
      }
    } else if (bf16) {
      c_.precision = "bf16";
    }
  }

  void map_optimizer() {
    const MapEntry* e = take("optimizer");
    if (e == nullptr) return;
    if (!e->value.is_scalar()) {
      warn_bad(*e, "an optimizer name");
      return;
    }
    const std::string v = e->value.is_scalar() ? to_lower(e->value.scalar) : "";
    static const char* kAdamw[] = {
        "adamw_torch",       "adamw_hf", "adamw_torch_fused", "adamw_apex_fused", "optimi_adamw",
        "paged_adamw_32bit", "adamw"};
    static const char* kAdamw8bit[] = {"adamw_bnb_8bit", "paged_adamw_8bit", "adamw_8bit", "ao_adamw_8bit"};
    for (const char* name : kAdamw) {
      if (v == name) c_.optimizer = "adamw";
    }
    for (const char* name : kAdamw8bit) {
      if (v == name) c_.optimizer = "adamw_8bit";
    }
    if (v == "sgd") c_.optimizer = "sgd";
    if (v == "lion_32bit" || v == "paged_lion_32bit") c_.optimizer = "lion";
    if (c_.optimizer.empty()) {
      warn(*e, "optimizer " + describe(e->value) +
                   " has no Tailor equivalent (adamw, adamw_8bit, sgd, lion); strategy.optimizer is auto");
    }
  }

  // DeepSpeed or FSDP settings -> ZeRO stage and offload.
  void map_sharding() {
    const MapEntry* ds = take("deepspeed");
    const MapEntry* fsdp = take("fsdp");
    const MapEntry* fsdp_config = take("fsdp_config");
    // `fsdp: false` and `fsdp_config: {}` say "no FSDP" as plainly as leaving them out.
    if (fsdp != nullptr && fsdp->value.is_scalar() && to_lower(fsdp->value.scalar) == "false") fsdp = nullptr;
    if (fsdp != nullptr && fsdp->value.is_sequence() && fsdp->value.items.empty()) fsdp = nullptr;
    if (fsdp_config != nullptr && fsdp_config->value.is_map() && fsdp_config->value.entries.empty()) {
      fsdp_config = nullptr;
    }
    if (ds != nullptr) {
      map_deepspeed(*ds);
      for (const MapEntry* e : {fsdp, fsdp_config}) {
        if (e != nullptr) warn(*e, "ignored: deepspeed is also set");
      }
      return;
    }
    if (fsdp != nullptr || fsdp_config != nullptr) map_fsdp(fsdp, fsdp_config);
  }

  void set_sharding(std::int64_t stage, bool offload_optimizer, bool offload_params, const MapEntry& at) {
    c_.zero_stage = stage;
    if (offload_params && stage != 3) {
      // DeepSpeed offloads parameters only under ZeRO-3; so does Tailor.
      warn(at, "parameter offload needs ZeRO stage 3; only the optimizer states are offloaded");
      offload_params = false;
      offload_optimizer = true;
    }
    c_.offload = offload_params ? "optimizer_and_params" : offload_optimizer ? "optimizer" : "none";
  }

  static bool offloaded(const Node* section) {
    if (section == nullptr || !section->is_map()) return false;
    const Node* device = section->find("device");
    if (device == nullptr || !device->is_scalar()) return false;
    const std::string v = to_lower(device->scalar);
    return v == "cpu" || v == "nvme";
  }

  void map_deepspeed(const MapEntry& e) {
    if (e.value.is_map()) {
      map_deepspeed_config(e.value, e);
      return;
    }
    if (!e.value.is_scalar()) {
      warn_bad(e, "the path of a DeepSpeed JSON config");
      return;
    }
    const fs::path given(e.value.scalar);
    const fs::path file = given.is_absolute() ? given : dir_ / given;
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) {
      Diagnostics scratch;
      // JSON is YAML, so the tree parser reads DeepSpeed configs as well.
      auto config = load_yaml_file(file.string(), scratch);
      if (config && config->is_map()) {
        map_deepspeed_config(*config, e);
        return;
      }
      std::string why = scratch.items().empty() ? "not a JSON object" : scratch.items().front().message;
      infer_deepspeed_from_name(e, "could not read " + quote(file.string()) + " (" + why + ")");
      return;
    }
    infer_deepspeed_from_name(e, quote(file.string()) + " was not found");
  }

  void map_deepspeed_config(const Node& config, const MapEntry& at) {
    const Node* zero = config.find("zero_optimization");
    std::int64_t stage = 0;  // DeepSpeed's default without zero_optimization
    if (zero != nullptr && zero->is_map()) {
      const Node* s = zero->find("stage");
      auto v = s ? parse_number(*s) : std::nullopt;
      if (s != nullptr && (!v || *v < 0 || *v > 3 || *v != std::floor(*v))) {
        warn(at, "the DeepSpeed config's zero_optimization.stage is " + describe(*s) +
                     ", not 0-3; strategy.zero_stage is auto");
        return;
      }
      if (v) stage = static_cast<std::int64_t>(*v);
    }
    const Node* opt = zero && zero->is_map() ? zero->find("offload_optimizer") : nullptr;
    const Node* param = zero && zero->is_map() ? zero->find("offload_param") : nullptr;
    const bool off_opt = offloaded(opt), off_param = offloaded(param);
    if (off_param && !off_opt) {
      warn(at,
           "the DeepSpeed config offloads parameters but not optimizer states; Tailor offloads parameters only "
           "together with them: strategy.offload is optimizer_and_params");
    }
    set_sharding(stage, off_opt, off_param, at);
  }

  // Axolotl's deepspeed_configs/ are named for what they do: zero1.json,
  // zero2.json, zero3_bf16.json, zero3_bf16_cpuoffload_all.json, ...
  void infer_deepspeed_from_name(const MapEntry& e, const std::string& why) {
    const std::string name = to_lower(fs::path(e.value.scalar).filename().string());
    std::optional<std::int64_t> stage;
    for (const char* prefix : {"zero", "stage"}) {
      const auto at = name.find(prefix);
      const std::size_t digit = at == std::string::npos ? at : at + std::string_view(prefix).size();
      if (digit != std::string::npos && digit < name.size() && name[digit] >= '0' && name[digit] <= '3') {
        stage = name[digit] - '0';
        break;
      }
    }
    if (!stage) {
      warn(e, why + ", and its name does not say the ZeRO stage; strategy.zero_stage and offload are auto");
      return;
    }
    const bool offload = name.find("offload") != std::string::npos;
    set_sharding(*stage, offload, offload && *stage == 3, e);
    warn(e,
         why + "; inferred from its name: strategy.zero_stage " + std::to_string(*stage) + ", offload " + c_.offload);
  }

  void map_fsdp(const MapEntry* fsdp, const MapEntry* config) {
    // FSDP full_shard shards what ZeRO-3 shards; shard_grad_op is ZeRO-2.
    std::int64_t stage = 3;
    bool offload = false;
    if (fsdp != nullptr) {
      const std::string flags = fsdp->value.is_scalar() ? to_lower(fsdp->value.scalar) : "";
      std::vector<std::string> words = split(flags, ' ');
      for (const Node& n : fsdp->value.items) {
        if (n.is_scalar()) words.push_back(to_lower(n.scalar));
      }
      for (const std::string& w : words) {
        if (w == "shard_grad_op") stage = 2;
        if (w == "offload") offload = true;
      }
    }
    if (config != nullptr && config->value.is_map()) {
      for (const char* key : {"fsdp_offload_params", "offload_params"}) {
        const Node* n = config->value.find(key);
        if (n != nullptr && n->is_scalar() && to_lower(n->scalar) == "true") offload = true;
      }
      for (const char* key : {"fsdp_reshard_after_forward", "reshard_after_forward", "fsdp_sharding_strategy"}) {
        const Node* n = config->value.find(key);
        if (n == nullptr || !n->is_scalar()) continue;
        const std::string v = to_lower(n->scalar);
        if (v == "false" || v == "shard_grad_op" || v == "2") stage = 2;
      }
    }
    const MapEntry& at = fsdp != nullptr ? *fsdp : *config;
    set_sharding(stage, offload, offload && stage == 3, at);
    warn(at, "Tailor shards with ZeRO instead of FSDP: strategy.zero_stage " + std::to_string(stage) + ", offload " +
                 c_.offload);
    if (fsdp != nullptr && config != nullptr) {
      warn(*config, "only the sharding and offload settings are used; the other FSDP settings are ignored");
    }
  }

  // ---- checkpoint ------------------------------------------------------------

  void map_checkpoint() {
    if (const MapEntry* e = take("save_steps")) c_.checkpoint_every = get_step_interval(*e, "checkpoint.every_steps");
    if (const MapEntry* e = take("save_total_limit")) c_.checkpoint_keep = get_int(*e, 1, "a positive integer");
  }

  // ---- everything else -------------------------------------------------------

  void warn_unmapped() {
    std::vector<std::string> known = mapped_keys();
    for (const IgnoredKey& k : ignored_keys()) known.emplace_back(k.key);
    for (const MapEntry& e : root_.entries) {
      if (taken_.count(e.key) != 0 || is_unset(e.value)) continue;
      std::string msg = "no Tailor equivalent; ignored";
      bool listed = false;
      for (const IgnoredKey& k : ignored_keys()) {
        if (e.key == k.key) {
          msg += " (" + std::string(k.why) + ")";
          listed = true;
        }
      }
      if (!listed && is_tracker_key(e.key)) {
        msg += " (tailord records every step's metrics)";
      } else if (!listed) {
        const std::string hint = closest_match(e.key, known);
        if (!hint.empty() && hint != e.key) msg += "; did you mean '" + hint + "'?";
      }
      d_.warning(e.key_location, e.key, msg);
    }
  }

  const Node& root_;
  std::string file_;
  fs::path dir_;  // the Axolotl file's folder: DeepSpeed configs and datasets are looked up there
  Diagnostics& d_;
  std::set<std::string, std::less<>> taken_;
  const ModelPreset* preset_ = nullptr;
  Converted c_;
};

Node build_spec(const Converted& c, const std::string& name) {
  Node doc = Node::make_map();
  doc.set("apiVersion", word_node(kApiVersion));
  doc.set("kind", word_node(kJobKind));
  doc.set("name", text_node(name));

  Node model = Node::make_map();
  if (!c.preset.empty()) {
    model.set("preset", text_node(c.preset));
  } else {
    model.set("path", text_node(c.model_path));
  }
  doc.set("model", std::move(model));

  Node data = Node::make_map();
  if (c.more_train.empty()) {
    data.set("train", text_node(c.train));
  } else {
    Node list = Node::make_sequence();
    list.items.push_back(text_node(c.train));
    for (const std::string& more : c.more_train) list.items.push_back(text_node(more));
    data.set("train", std::move(list));
  }
  if (!c.eval.empty()) data.set("eval", text_node(c.eval));
  data.set("format", word_node(c.format));
  if (!c.chat.empty()) {
    data.set("chat", word_node(c.chat));
    if (!c.fields.empty()) {
      Node fields = Node::make_map();
      for (const auto& [k, v] : c.fields) fields.set(k, text_node(v));
      data.set("fields", std::move(fields));
    }
    if (!c.train_on_eos.empty()) data.set("train_on_eos", word_node(c.train_on_eos));
  } else if (c.format == "jsonl" || c.format == "json") {
    if (!c.prompt_field.empty()) {
      data.set("prompt_field", text_node(c.prompt_field));
      data.set("completion_field", text_node(c.completion_field));
    } else if (!c.field.empty()) {
      data.set("field", text_node(c.field));
    }
  }
  if (c.seq_len) data.set("seq_len", int_node(*c.seq_len));
  data.set("packing", bool_node(c.packing));
  doc.set("data", std::move(data));

  Node training = Node::make_map();
  if (c.global_batch_size) training.set("global_batch_size", int_node(*c.global_batch_size));
  if (c.micro_batch_size && c.global_batch_size) training.set("micro_batch_size", int_node(*c.micro_batch_size));
  if (c.epochs) training.set("epochs", number_node(*c.epochs));
  if (c.max_steps) training.set("max_steps", int_node(*c.max_steps));
  if (c.lr) training.set("lr", number_node(*c.lr));
  if (!c.scheduler.empty()) training.set("scheduler", word_node(c.scheduler));
  if (c.warmup_steps) training.set("warmup_steps", int_node(*c.warmup_steps));
  if (c.weight_decay) training.set("weight_decay", number_node(*c.weight_decay));
  if (c.grad_clip) training.set("grad_clip", number_node(*c.grad_clip));
  if (c.seed) training.set("seed", int_node(*c.seed));
  if (c.eval_every) training.set("eval_every", int_node(*c.eval_every));
  if (!training.entries.empty()) doc.set("training", std::move(training));

  auto or_auto = [](const std::string& v) { return word_node(v.empty() ? "auto" : v); };
  Node strategy = Node::make_map();
  strategy.set("precision", or_auto(c.precision));
  strategy.set("gradient_checkpointing",
               c.gradient_checkpointing ? bool_node(*c.gradient_checkpointing) : word_node("auto"));
  strategy.set("adapter", or_auto(c.adapter));
  if (c.adapter == "lora" || c.adapter == "qlora") {
    Node lora = Node::make_map();
    if (c.lora_r) lora.set("r", int_node(*c.lora_r));
    if (c.lora_alpha) lora.set("alpha", number_node(*c.lora_alpha));
    if (c.lora_dropout) lora.set("dropout", number_node(*c.lora_dropout));
    if (!c.lora_targets.empty()) {
      Node targets = Node::make_sequence();
      for (const std::string& t : c.lora_targets) targets.items.push_back(text_node(t));
      lora.set("targets", std::move(targets));
    }
    if (!c.lora_modules_to_save.empty()) {
      Node whole = Node::make_sequence();
      for (const std::string& m : c.lora_modules_to_save)
        whole.items.push_back(text_node(m));
      lora.set("modules_to_save", std::move(whole));
    }
    if (!lora.entries.empty()) strategy.set("lora", std::move(lora));
  }
  strategy.set("optimizer", or_auto(c.optimizer));
  strategy.set("zero_stage", c.zero_stage ? int_node(*c.zero_stage) : word_node("auto"));
  strategy.set("offload", or_auto(c.offload));
  doc.set("strategy", std::move(strategy));
  // Plans of an imported spec predict the Axolotl run's memory
  // (transformers, PEFT, bitsandbytes); tailor run trains it with
  // tailor-runner, planned as its own.
  Node planner = Node::make_map();
  planner.set("runtime", word_node("hf"));
  doc.set("planner", std::move(planner));

  if (c.checkpoint_every || c.checkpoint_keep) {
    Node checkpoint = Node::make_map();
    if (c.checkpoint_every) checkpoint.set("every_steps", int_node(*c.checkpoint_every));
    if (c.checkpoint_keep) checkpoint.set("keep", int_node(*c.checkpoint_keep));
    doc.set("checkpoint", std::move(checkpoint));
  }
  return doc;
}

// For the header comment: one line, no control characters.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  return out;
}

}  // namespace

AxolotlImport import_axolotl(std::string_view text, std::string_view file_name, std::string_view job_name) {
  AxolotlImport out;
  Diagnostics& d = out.diagnostics;
  const std::string file(file_name);
  auto root = parse_yaml(text, file_name, d);
  if (!root) return out;  // parse_yaml reported why
  if (!root->is_map()) {
    d.error(root->location, "",
            root->is_null() ? "the document is empty; expected an Axolotl config (a map of options)"
                            : "expected an Axolotl config (a map of options), got " + std::string(root->kind_name()));
    return out;
  }

  std::string name = sanitize_job_name(job_name);
  if (job_name.empty()) {
    name = sanitize_job_name(fs::path(file).stem().string());
  } else if (name != job_name) {
    d.warning({file, 0, 0}, "name",
              quote(job_name) + " is not a valid job name (lowercase letters, digits, '.', '_', '-'); using " +
                  quote(name.empty() ? "axolotl-import" : name));
  }
  if (name.empty()) name = "axolotl-import";

  const Converted converted = Importer(*root, file, d).convert();
  out.spec_yaml = "# Converted from " + printable(file_name) +
                  " by Tailor's Axolotl importer; the warnings list what was not carried over.\n" +
                  emit_yaml(build_spec(converted, name));

  // The mapping keeps every value in range, so a failure here is a bug in
  // this file; report it rather than hand back a spec that will not load.
  LoadOptions check;
  check.check_files = false;
  const LoadedSpec loaded = load_job_spec_text(out.spec_yaml, "<converted spec>", ".", check);
  if (!loaded.ok()) {
    for (const Diagnostic& diag : loaded.diagnostics.items()) {
      if (diag.severity != Severity::kError) continue;
      d.error({file, 0, 0}, diag.path, "internal error: the converted spec does not validate: " + diag.message);
    }
  }
  return out;
}

}  // namespace tailor::dsl
