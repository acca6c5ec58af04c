#include "dsl/spec_loader.h"

#include "dsl/chat_records.h"
#include "dsl/chat_template_source.h"
#include "dsl/library_version.h"
#include "dsl/model_family.h"
#include "dsl/peft_config.h"
#include "dsl/rope.h"
#include "dsl/tokenizer_files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <tuple>

#include "core/text.h"
#include "dsl/spec_fields.h"

namespace tailor::dsl {
namespace fs = std::filesystem;

namespace {

// ---- extends ---------------------------------------------------------------

struct ExtendsContext {
  const LoadOptions& options;
  Diagnostics& diags;
  std::vector<std::string> chain;  // canonical paths being loaded, outermost first
};

std::string canonical_or_same(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

std::string dir_of(const std::string& file) {
  fs::path p(file);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

std::optional<Node> resolve_extends(Node root, const std::string& base_dir, ExtendsContext& ctx);

std::optional<Node> load_with_extends(const std::string& path, const SourceLocation& from, ExtendsContext& ctx) {
  const std::string canon = canonical_or_same(path);
  if (std::find(ctx.chain.begin(), ctx.chain.end(), canon) != ctx.chain.end()) {
    std::string cycle;
    for (const std::string& c : ctx.chain) cycle += fs::path(c).filename().string() + " -> ";
    cycle += fs::path(canon).filename().string();
    ctx.diags.error(from, "extends", "cyclic extends: " + cycle);
    return std::nullopt;
  }
  if (static_cast<int>(ctx.chain.size()) >= ctx.options.max_extends_depth) {
    ctx.diags.error(from, "extends",
                    "extends chain deeper than " + std::to_string(ctx.options.max_extends_depth) + " files");
    return std::nullopt;
  }
  std::error_code ec;
  if (!from.file.empty() && !fs::exists(path, ec)) {
    ctx.diags.error(from, "extends", "base spec " + quote(path, kWhole) + " does not exist");
    return std::nullopt;
  }
  auto root = load_yaml_file(path, ctx.diags, from, from.file.empty() ? "" : "extends", ctx.options.limits);
  if (!root) return std::nullopt;
  ctx.chain.push_back(canon);
  auto out = resolve_extends(std::move(*root), dir_of(path), ctx);
  ctx.chain.pop_back();
  return out;
}

std::optional<Node> resolve_extends(Node root, const std::string& base_dir, ExtendsContext& ctx) {
  if (!root.is_map()) return root;
  const MapEntry* ext = root.find_entry("extends");
  if (ext == nullptr) return root;
  if (!ext->value.is_scalar() || ext->value.scalar.empty()) {
    ctx.diags.error(ext->value.location, "extends", "expected the path of a base spec file");
    return std::nullopt;
  }
  fs::path base_path(ext->value.scalar);
  if (base_path.is_relative()) base_path = fs::path(base_dir) / base_path;
  if (const std::string& spec_root = ctx.options.read_root; !spec_root.empty()) {
    const fs::path canon(canonical_or_same(base_path.string()));
    const fs::path rel = canon.lexically_relative(fs::path(canonical_or_same(spec_root)));
    if (rel.empty() || *rel.begin() == "..") {
      ctx.diags.error(ext->value.location, "extends",
                      "base spec " + quote(ext->value.scalar, kWhole) + " is outside the spec root " + spec_root);
      return std::nullopt;
    }
  }
  auto base = load_with_extends(base_path.lexically_normal().string(), ext->value.location, ctx);
  if (!base) return std::nullopt;
  root.erase("extends");
  return deep_merge(std::move(*base), root);
}

// ---- paths, lookups --------------------------------------------------------

// `dotted` may index a list: "data.train[1].path".
const Node* node_at(const Node& root, std::string_view dotted) {
  const Node* n = &root;
  for (std::string part : split(dotted, '.')) {
    std::optional<std::size_t> index;
    if (const auto open = part.find('['); open != std::string::npos && part.back() == ']') {
      index = static_cast<std::size_t>(std::strtoull(part.c_str() + open + 1, nullptr, 10));
      part.resize(open);
    }
    n = n->find(part);
    if (n == nullptr) return nullptr;
    if (index) {
      if (!n->is_sequence() || *index >= n->items.size()) return nullptr;
      n = &n->items[*index];
    }
  }
  return n;
}

SourceLocation loc_at(const Node& root, std::string_view dotted) {
  std::string path(dotted);
  while (true) {
    if (const Node* n = node_at(root, path)) return n->location;
    const auto dot = path.rfind('.');
    if (dot == std::string::npos) return root.location;
    path.resize(dot);
  }
}

// A relative path is relative to the file that wrote it (extends may bring
// values from another folder); values from --set are relative to the
// working directory.
std::string resolve_path(const std::string& value, const SourceLocation& written_at, const std::string& base_dir) {
  fs::path p(value);
  if (p.is_absolute()) return p.lexically_normal().string();
  std::string dir = base_dir;
  if (written_at.line > 0 && !written_at.file.empty() && written_at.file[0] != '<') dir = dir_of(written_at.file);
  if (written_at.line == 0) dir = ".";
  std::error_code ec;
  fs::path abs = fs::absolute(fs::path(dir) / p, ec);
  return (ec ? fs::path(dir) / p : abs).lexically_normal().string();
}

// ---- config.json -------------------------------------------------------------

bool read_hf_config(const std::string& folder, ModelArch& arch, const SourceLocation& at, Diagnostics& d) {
  const std::string file = (fs::path(folder) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    d.error(at, "model.path", "no config.json in " + quote(folder, kWhole));
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::vector<std::string> errors;
  const bool ok = arch_from_hf_config(ss.str(), file, arch, errors);
  for (const std::string& e : errors) d.error(at, "model.path", e);
  return ok;
}

// ---- cross-field rules -------------------------------------------------------

bool valid_job_name(const std::string& name) {
  static const std::regex kName("^[a-z0-9][a-z0-9._-]{0,62}$");
  return std::regex_match(name, kName);
}

std::string default_job_name(const std::string& source) {
  std::string stem = to_lower(fs::path(source).stem().string());
  for (char& c : stem) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  while (!stem.empty() && !std::isalnum(static_cast<unsigned char>(stem.front()))) stem.erase(stem.begin());
  if (stem.size() > 63) stem.resize(63);
  return stem.empty() ? "job" : stem;
}

void check_arch(ModelArch& a, const Node& root, const std::string& path, Diagnostics& d) {
  if (a.kv_heads == 0) a.kv_heads = a.heads;
  const ModelFamilyInfo& family = family_info(a.family);
  if (a.intermediate == 0) {
    if (family.default_intermediate_per_hidden > 0) {
      a.intermediate = family.default_intermediate_per_hidden * a.hidden;
    } else {
      d.error(loc_at(root, path), path + ".intermediate",
              std::string("missing required key (") + family.name + " has no default)");
    }
  }
  if (a.head_size == 0) a.head_size = family.default_head_dim;
  if (a.sliding_window > 0 && !has_sliding_window(family)) {
    std::string windowed;
    for (const ModelFamilyInfo& f : model_families()) {
      if (has_sliding_window(f)) windowed += std::string(windowed.empty() ? "" : ", ") + f.name;
    }
    d.error(loc_at(root, path + ".sliding_window"), path + ".sliding_window",
            std::string(family.name) + " has no sliding window (" + windowed + " have one)");
  }
  if (family.keys.experts == nullptr) {
    const std::pair<const char*, std::int64_t> given[] = {{"experts", a.experts},
                                                          {"experts_per_token", a.experts_per_token}};
    for (const auto& [key, value] : given) {
      if (value != 0) {
        d.error(loc_at(root, path + "." + key), path + "." + key, std::string(family.name) + " has no experts");
      }
    }
  } else {
    if (a.experts == 0) a.experts = family.default_experts;
    if (a.experts_per_token == 0) a.experts_per_token = family.default_experts_per_token;
    if (a.experts_per_token > a.experts) {
      d.error(loc_at(root, path + ".experts_per_token"), path + ".experts_per_token",
              "must be at most experts (" + std::to_string(a.experts) + ")");
    }
  }
  // Keys only some families' configs have: elsewhere they would be trained
  // and exported as a model that has none.
  const std::tuple<const char*, bool, bool, const char*> given[] = {
      {"attn_logit_softcap", a.attn_logit_softcap != 0, family.gemma, "gemma2 and gemma3_text have"},
      {"final_logit_softcap", a.final_logit_softcap != 0, family.gemma, "gemma2 and gemma3_text have"},
      {"query_pre_attn_scalar", a.query_pre_attn_scalar != 0, family.gemma, "gemma2 and gemma3_text have"},
      {"rope_local_theta", a.rope_local_theta != 0, family.local_rope, "gemma3_text has"},
      {"partial_rotary_factor", a.partial_rotary_factor != 0, family.keys.partial_rotary != nullptr, "gpt_neox has"}};
  for (const auto& [key, set, allowed, who] : given) {
    if (set && !allowed) {
      d.error(loc_at(root, path + "." + key), path + "." + key,
              std::string(family.name) + " has no " + key + " (" + who + ")");
    }
  }
  if (a.rope_scaling.type != RopeScalingType::kNone) {
    const std::string at = path + ".rope_scaling";
    if (!block_traits(family.block).rope) {
      d.error(loc_at(root, at), at, std::string(family.name) + " has no RoPE (learned positions)");
    } else if (const std::string problem = rope_scaling_problem(a.rope_scaling); !problem.empty()) {
      d.error(loc_at(root, at), at, problem);
    }
  }
  if (a.head_size > 0 && !block_traits(family.block).free_head_dim) {
    d.error(loc_at(root, path + ".head_dim"), path + ".head_dim",
            std::string(family.name) + " heads are hidden / heads wide");
  } else if (a.head_size % 2 != 0) {
    d.error(loc_at(root, path + ".head_dim"), path + ".head_dim", "must be even (RoPE rotates pairs)");
  }
  if (a.partial_rotary_factor > 1) {
    d.error(loc_at(root, path + ".partial_rotary_factor"), path + ".partial_rotary_factor",
            "must be at most 1 (the whole head)");
  } else if (block_traits(family.block).rope && a.heads > 0 && (a.rotary_dims() % 2 != 0 || a.rotary_dims() == 0)) {
    d.error(loc_at(root, path + ".partial_rotary_factor"), path + ".partial_rotary_factor",
            "rotates " + std::to_string(a.rotary_dims()) + " of a head's " + std::to_string(a.head_dim()) +
                " dimensions; RoPE rotates pairs, at least one");
  }
  if (a.head_size == 0 && a.heads > 0 && a.hidden % a.heads != 0) {
    d.error(loc_at(root, path + ".heads"), path + ".heads",
            "hidden (" + std::to_string(a.hidden) + ") must be divisible by heads (" + std::to_string(a.heads) + ")");
  }
  if (a.kv_heads > 0 && a.heads % a.kv_heads != 0) {
    d.error(loc_at(root, path + ".kv_heads"), path + ".kv_heads",
            "heads (" + std::to_string(a.heads) + ") must be divisible by kv_heads (" + std::to_string(a.kv_heads) +
                ")");
  }
  if (family.keys.kv_heads == nullptr && a.kv_heads != a.heads) {
    d.error(loc_at(root, path + ".kv_heads"), path + ".kv_heads",
            std::string(family.name) + " has no grouped-query attention");
  }
}

void resolve_model(JobSpec& spec, const Node& root, const std::string& base_dir, const LoadOptions& opt,
                   const Catalog& catalog, Diagnostics& d) {
  const Node* model = root.find("model");
  if (model == nullptr) {
    d.error(root.location, "model", "missing required key (give preset, path or arch)");
    return;
  }
  if (!model->is_map()) return;  // reported by field reading
  const bool has_preset = model->find("preset"), has_path = model->find("path"), has_arch = model->find("arch");
  const int given = int{has_preset} + int{has_path} + int{has_arch};
  if (given != 1) {
    d.error(model->location, "model",
            given == 0 ? "give one of preset, path or arch" : "give only one of preset, path and arch");
    return;
  }
  if (has_arch && model->find("init") == nullptr) spec.model.init = ModelInit::kRandom;
  if (has_preset) {
    const ModelPreset* p = catalog.find_model(spec.model.preset);
    if (p == nullptr) {
      std::string msg = "unknown model preset " + quote(spec.model.preset);
      std::string hint = closest_match(spec.model.preset, catalog.model_names());
      msg += hint.empty() ? "; see configs/catalog/models.yaml" : "; did you mean '" + hint + "'?";
      d.error(loc_at(root, "model.preset"), "model.preset", msg);
      return;
    }
    spec.model.arch = p->arch;
  } else if (has_path) {
    spec.model.path = resolve_path(spec.model.path, loc_at(root, "model.path"), base_dir);
    // The folder gives the architecture: read it wherever it exists, even
    // when files are not required to (a plan needs the shape).
    std::error_code exists_ec;
    if (opt.check_files || fs::is_directory(spec.model.path, exists_ec)) {
      std::error_code ec;
      if (!fs::is_directory(spec.model.path, ec)) {
        d.error(loc_at(root, "model.path"), "model.path", "model folder " + quote(spec.model.path, kWhole) + " does not exist");
        return;
      }
      if (!read_hf_config(spec.model.path, spec.model.arch, loc_at(root, "model.path"), d)) return;
      // The folder's tokenizer is the job's: one Tailor cannot read is an
      // error now, not bytes at training time.
      if (auto tok = choose_tokenizer(spec.model.path); !tok.is_ok()) {
        d.error(loc_at(root, "model.path"), "model.path", tok.status().message());
      }
    } else {
      return;  // the architecture is unknown without the folder
    }
  }
  check_arch(spec.model.arch, root, has_arch ? "model.arch" : "model", d);
}

bool inside_root(const std::string& path, const std::string& root);

// model.adapter: a PEFT adapter the job's adapters start from. Its r,
// lora_alpha and target_modules become strategy.lora's (a key the spec
// writes must agree), the adapter is lora unless the spec says qlora, and a
// reward model's is a sequence classifier's (SEQ_CLS). Read wherever the
// folder exists, as model.path is.
void resolve_start_adapter(JobSpec& spec, const Node& root, const std::string& base_dir, const LoadOptions& opt,
                           Diagnostics& d) {
  if (spec.model.adapter.empty()) return;
  const SourceLocation at = loc_at(root, "model.adapter");
  spec.model.adapter = resolve_path(spec.model.adapter, at, base_dir);
  if (spec.strategy.adapter && *spec.strategy.adapter == Adapter::kNone) {
    d.error(loc_at(root, "strategy.adapter"), "strategy.adapter",
            "none contradicts model.adapter, whose adapters the job trains: use lora or qlora");
    return;
  }
  if (!spec.strategy.adapter) spec.strategy.adapter = Adapter::kLora;
  // Outside tailord's spec root it is not read: the caller refuses it by name.
  if (!opt.read_root.empty() && !inside_root(spec.model.adapter, opt.read_root)) return;
  std::error_code ec;
  if (!fs::is_directory(spec.model.adapter, ec)) {
    if (opt.check_files) {
      d.error(at, "model.adapter", "adapter folder " + quote(spec.model.adapter, kWhole) + " does not exist");
    }
    return;
  }
  const auto cfg = read_peft_config_file(spec.model.adapter);
  if (!cfg.is_ok()) {
    d.error(at, "model.adapter", cfg.status().message());
    return;
  }
  if (const bool reward = scores_sequences(spec.training.method); cfg->sequence_classifier != reward) {
    d.error(at, "model.adapter",
            reward ? "a reward model starts from a sequence classifier's adapter (task_type SEQ_CLS, its score "
                     "saved whole); this one is a causal language model's"
                   : "a sequence classifier's adapter (task_type SEQ_CLS) starts a reward model (training.method "
                     "reward) only");
    return;
  }
  LoraSpec& lora = spec.strategy.lora;
  auto number = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  std::vector<std::string> targets = lora.targets;
  std::sort(targets.begin(), targets.end());
  std::vector<std::string> whole = lora.modules_to_save;
  std::sort(whole.begin(), whole.end());
  whole.erase(std::unique(whole.begin(), whole.end()), whole.end());
  const std::tuple<const char*, bool, std::string, std::string> agree[] = {
      {"r", lora.r == cfg->rank, std::to_string(lora.r), std::to_string(cfg->rank)},
      {"alpha", lora.alpha == cfg->alpha, number(lora.alpha), number(cfg->alpha)},
      {"targets", targets == cfg->targets, join(targets, ", "), join(cfg->targets, ", ")},
      {"modules_to_save", whole == cfg->modules_to_save, join(whole, ", "), join(cfg->modules_to_save, ", ")}};
  for (const auto& [key, same, ours, theirs] : agree) {
    const std::string path = std::string("strategy.lora.") + key;
    if (node_at(root, path) != nullptr && !same) {
      d.error(loc_at(root, path), path,
              ours + " differs from model.adapter's " +
                  (!theirs.empty()                 ? theirs
                   : std::string(key) == "targets" ? "(every linear)"
                                                   : "(none)") +
                  ": leave it out to take the adapter's");
    }
  }
  lora.r = cfg->rank;
  lora.alpha = cfg->alpha;
  lora.targets = cfg->targets;
  lora.modules_to_save = cfg->modules_to_save;
}

// The keys of conversation data (data.chat): each applies to it alone, and
// the record fields, roles and template file are checked here.
void check_chat_data(DataSpec& data, const Node& root, const std::string& base_dir, const LoadOptions& opt,
                     Diagnostics& d) {
  if (!is_chat(data)) {
    for (const char* key : {"fields", "roles", "chat_template", "train_on", "train_on_eos"}) {
      const std::string path = std::string("data.") + key;
      if (node_at(root, path) != nullptr) d.error(loc_at(root, path), path, "applies to chat data only (set data.chat)");
    }
    return;
  }
  const std::string kind = to_string(data.chat);
  // A resolved spec writes every key back: only values other than the
  // defaults were asked for. Preference pairs name their prompt field.
  for (const auto& [key, set] : {std::pair{"field", data.field != DataSpec().field},
                                 std::pair{"prompt_field", !data.prompt_field.empty() && !data.preference},
                                 std::pair{"completion_field", !data.completion_field.empty() && !is_labelled(data)}}) {
    const std::string path = std::string("data.") + key;
    if (set) {
      d.error(loc_at(root, path), path,
              "does not apply to chat data (data.chat: " + kind + "); data.fields names its record fields");
    }
  }
  if (!has_records_of_fields(data.format)) {
    d.error(loc_at(root, "data.chat"), "data.chat",
            "chat data is read from jsonl, json, parquet or arrow records, not " + std::string(to_string(data.format)));
  }
  const auto& defaults = chat_field_defaults(data.chat);
  for (const auto& field : data.fields) {
    const std::string& key = field.first;
    const std::string& value = field.second;
    const std::string path = "data.fields." + key;
    const bool known = std::any_of(defaults.begin(), defaults.end(), [&](const auto& kv) { return kv.first == key; });
    if (!known) {
      std::vector<std::string> keys;
      for (const auto& kv : defaults) keys.push_back(kv.first);
      d.error(loc_at(root, path), path, "not a field of " + kind + " records; expected one of " + join(keys, ", "));
    } else if (value.empty()) {
      d.error(loc_at(root, path), path, "must not be empty");
    }
  }
  if (!data.roles.empty() && data.chat != ChatFormat::kShareGpt) {
    d.error(loc_at(root, "data.roles"), "data.roles", "applies to sharegpt data only");
  }
  for (const auto& [from, role] : data.roles) {
    const auto& roles = template_roles();
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      const std::string path = "data.roles." + from;
      d.error(loc_at(root, path), path, "unknown role " + quote(role) + "; expected one of " + join(roles, ", "));
    }
  }
  if (!data.chat_template.empty()) {
    data.chat_template = resolve_path(data.chat_template, loc_at(root, "data.chat_template"), base_dir);
    std::error_code ec;
    if (opt.check_files && !fs::is_regular_file(data.chat_template, ec)) {
      d.error(loc_at(root, "data.chat_template"), "data.chat_template",
              "chat template file " + quote(data.chat_template, kWhole) + " does not exist or is not a file");
    }
  }
}

// Preference pairs (training.method: dpo): prompt, chosen and rejected
// strings in jsonl or json records, never packed.
void check_preference_data(DataSpec& data, const Node& root, Diagnostics& d) {
  if (data.prompt_field.empty()) data.prompt_field = "prompt";
  if (is_labelled(data)) {
    // kto's labelled completions: prompt, completion and label fields.
    if (data.completion_field.empty()) data.completion_field = "completion";
    // (A resolved spec writes `field` back, at its default.)
    for (const auto& [key, set] : {std::pair{"field", data.field != DataSpec().field},
                                   std::pair{"chosen_field", node_at(root, "data.chosen_field") != nullptr},
                                   std::pair{"rejected_field", node_at(root, "data.rejected_field") != nullptr}}) {
      const std::string path = std::string("data.") + key;
      if (set) {
        d.error(loc_at(root, path), path,
                "does not apply to labelled completions (data.label_field): each record is read from prompt_field, "
                "completion_field and label_field");
      }
    }
  } else {
    // A resolved spec writes every key back: their defaults are not asked for.
    for (const auto& [key, set] : {std::pair{"field", data.field != DataSpec().field},
                                   std::pair{"completion_field", !data.completion_field.empty()}}) {
      const std::string path = std::string("data.") + key;
      if (set) {
        d.error(loc_at(root, path), path,
                "does not apply to preference pairs (training.method dpo, orpo, simpo, reward or kto): they are read "
                "from prompt_field, chosen_field and rejected_field" +
                    std::string(key == std::string("completion_field") && data.unpaired
                                    ? " (kto reads single completions with data.label_field)"
                                    : ""));
      }
    }
  }
  if (node_at(root, "data.packing") == nullptr) {
    data.packing = false;
  } else if (data.packing) {
    d.error(loc_at(root, "data.packing"), "data.packing",
            "preference pairs are not packed: each completion is a row of its own, padded to the batch's longest");
  }
  if (is_chat(data) && data.chat != ChatFormat::kMessages) {
    d.error(loc_at(root, "data.chat"), "data.chat",
            "preference pairs as conversations are lists of OpenAI-style turns (data.chat: messages), not " +
                std::string(to_string(data.chat)));
  }
  // The completions are what follows the prompt, whole: nothing to choose.
  for (const char* key : {"train_on", "train_on_eos"}) {
    const std::string path = std::string("data.") + key;
    if (node_at(root, path) != nullptr) {
      d.error(loc_at(root, path), path,
              "does not apply to preference pairs: each completion is scored whole, from where the prompt ends");
    }
  }
  if (!has_records_of_fields(data.format)) {
    d.error(loc_at(root, "data.format"), "data.format",
            "preference pairs are read from jsonl, json, parquet or arrow records, not " +
                std::string(to_string(data.format)));
  }
}

// A reward model trains its score head whole, and the rest of the model
// whole or through adapters (PEFT's SEQ_CLS task, the score among its
// modules_to_save). Adapters change what a reward model learns, so they
// are the spec's choice: an unset (or auto) adapter is none, never the
// planner's. It has no vocabulary to generate from: what needs one is
// refused by name.
void check_reward(JobSpec& spec, const Node& root, Diagnostics& d) {
  if (!spec.strategy.adapter) spec.strategy.adapter = Adapter::kNone;
  if (!spec.training.eval_prompts.empty()) {
    d.error(loc_at(root, "training.eval_prompts"), "training.eval_prompts",
            "a reward model scores sequences and generates none; its evaluation is data.eval's pairs");
  }
}

// KTO's loss defaults to its own; a dpo loss is refused. Its KL rows pair
// each prompt with another row's completion of the same micro-batch, drawn
// anew each epoch, so no pass before training can score them: the
// reference is the model with its adapters off or a frozen copy.
void check_kto(JobSpec& spec, const Node& root, Diagnostics& d) {
  const Node* loss = node_at(root, "training.loss_type");
  std::vector<PreferenceLoss>& losses = spec.training.losses;
  if (loss == nullptr || loss->is_null()) {
    losses = {PreferenceLoss::kKto};
  } else if (losses.size() > 1) {
    d.error(loc_at(root, "training.loss_type"), "training.loss_type",
            "kto trains one loss (kto or apo_zero_unpaired); a list of losses is dpo's");
  } else if (losses.size() == 1 && !is_kto_loss(losses.front())) {
    d.error(loc_at(root, "training.loss_type"), "training.loss_type",
            std::string(to_string(losses.front())) + " is a dpo loss; kto's are kto and apo_zero_unpaired");
  }
  if (spec.strategy.reference == Reference::kPrecomputed) {
    d.error(loc_at(root, "strategy.reference"), "strategy.reference",
            "a precomputed reference is not built for kto: its KL rows pair each prompt with another row's "
            "completion, drawn anew each epoch; use adapter_off (with adapters) or separate");
  }
}

// Keys of preference training set on a job whose method does not read them
// are refused, not ignored. They depend on the method alone, so they are
// told beside the fields' type errors too: `skip` names paths already in
// error, which get no second one.
void check_method_keys(TrainingMethod method, const Node& root, Diagnostics& d,
                       const std::vector<std::string>& skip = {}) {
  // Which methods read each key (data.chosen_field and rejected_field: every
  // preference method).
  struct Key {
    const char* path;
    std::vector<TrainingMethod> readers;
    const char* who;
  };
  const std::vector<TrainingMethod> pairs = {TrainingMethod::kDpo, TrainingMethod::kOrpo, TrainingMethod::kSimpo,
                                             TrainingMethod::kReward, TrainingMethod::kKto};
  const std::vector<Key> keys = {
      {"training.beta", {TrainingMethod::kDpo, TrainingMethod::kSimpo, TrainingMethod::kKto}, "dpo, simpo and kto"},
      {"training.loss_type", {TrainingMethod::kDpo, TrainingMethod::kKto}, "dpo and kto"},
      {"training.label_smoothing", {TrainingMethod::kDpo, TrainingMethod::kSimpo}, "dpo and simpo"},
      {"training.gamma", {TrainingMethod::kSimpo}, "simpo"},
      {"training.cpo_alpha", {TrainingMethod::kSimpo}, "simpo"},
      {"training.alpha",
       {TrainingMethod::kSimpo},
       "simpo (AlphaPO's reward shape; LoRA's alpha is strategy.lora.alpha)"},
      {"training.center_rewards", {TrainingMethod::kReward}, "reward"},
      {"training.lambda", {TrainingMethod::kOrpo}, "orpo (its odds-ratio weight; simpo and dpo read beta)"},
      {"training.discopop_tau", {TrainingMethod::kDpo}, "dpo"},
      {"training.loss_weights", {TrainingMethod::kDpo}, "dpo (one weight a loss of its loss_type list)"},
      {"training.ld_alpha", {TrainingMethod::kDpo}, "dpo"},
      {"training.use_weighting", {TrainingMethod::kDpo}, "dpo"},
      {"training.f_divergence_type", {TrainingMethod::kDpo}, "dpo"},
      {"training.f_alpha_divergence_coef", {TrainingMethod::kDpo}, "dpo"},
      {"training.desirable_weight", {TrainingMethod::kKto}, "kto"},
      {"training.undesirable_weight", {TrainingMethod::kKto}, "kto"},
      {"strategy.reference",
       {TrainingMethod::kDpo, TrainingMethod::kKto},
       "dpo and kto (orpo, simpo and reward have no reference model)"},
      {"data.chosen_field", pairs, "dpo, orpo, simpo, reward and kto"},
      {"data.rejected_field", pairs, "dpo, orpo, simpo, reward and kto"},
      {"data.margin_field", {TrainingMethod::kReward}, "reward (the pairs' margins in its loss)"},
      {"data.label_field", {TrainingMethod::kKto}, "kto (its unpaired examples, each a labelled completion)"},
  };
  // A key set to null is a default asked for, not a key set.
  const auto set = [&](const char* path) {
    const Node* n = node_at(root, path);
    return n != nullptr && !n->is_null();
  };
  for (const Key& k : keys) {
    if (!set(k.path) || std::find(skip.begin(), skip.end(), k.path) != skip.end()) continue;
    if (std::find(k.readers.begin(), k.readers.end(), method) != k.readers.end()) continue;
    d.error(loc_at(root, k.path), k.path, std::string("applies to training.method ") + k.who + ", not " + to_string(method));
  }
}

// dpo's losses and the keys they read: each key set must be read by one of
// the losses, each loss's needs met.
void check_dpo_losses(const TrainingSpec& t, const Node& root, Diagnostics& d) {
  const std::vector<PreferenceLoss>& losses = t.losses;
  const auto names = [&] {
    std::string out;
    for (PreferenceLoss l : losses)
      out += (out.empty() ? "" : ", ") + std::string(to_string(l));
    return (losses.size() > 1 ? "loss_type [" : "loss_type ") + out + (losses.size() > 1 ? "]" : "");
  };
  for (PreferenceLoss l : losses) {
    if (is_kto_loss(l)) {
      d.error(
          loc_at(root, "training.loss_type"), "training.loss_type",
          std::string(to_string(l)) + " is a kto loss (training.method: kto); dpo's are sigmoid to discopop and sft");
    }
  }
  const auto any = [&](bool (*reads)(PreferenceLoss)) { return std::any_of(losses.begin(), losses.end(), reads); };
  if (node_at(root, "training.label_smoothing") != nullptr && !any(uses_label_smoothing)) {
    d.error(loc_at(root, "training.label_smoothing"), "training.label_smoothing",
            names() + " does not read it (robust and exo_pair do)");
  }
  if (node_at(root, "training.discopop_tau") != nullptr && !has_loss(t, PreferenceLoss::kDiscopop)) {
    d.error(loc_at(root, "training.discopop_tau"), "training.discopop_tau",
            names() + " does not read it (discopop does)");
  }
  const FDivergence f = t.f_divergence_type;
  for (PreferenceLoss l : losses) {
    if (f == FDivergence::kReverseKl || allows_f_divergence(l)) continue;
    d.error(loc_at(root, "training.f_divergence_type"), "training.f_divergence_type",
            std::string(to_string(f)) +
                " applies to the losses of h alone (sigmoid, sigmoid_norm, hinge, ipo, "
                "exo_pair, robust, discopop; sft beside them), not " +
                to_string(l) + ", whose terms read each log-ratio on its own");
  }
  if (node_at(root, "training.f_alpha_divergence_coef") != nullptr && f != FDivergence::kAlphaDivergence) {
    d.error(loc_at(root, "training.f_alpha_divergence_coef"), "training.f_alpha_divergence_coef",
            std::string("f_divergence_type ") + to_string(f) + " does not read it (alpha_divergence does)");
  }
  if (has_loss(t, PreferenceLoss::kExoPair) && t.label_smoothing <= 0) {
    d.error(loc_at(root, "training.loss_type"), "training.loss_type",
            "exo_pair needs training.label_smoothing above 0 (its target is (1 - e, e); TRL suggests 1e-3)");
  }
  if (!t.loss_weights.empty() && t.loss_weights.size() != losses.size()) {
    d.error(loc_at(root, "training.loss_weights"), "training.loss_weights",
            std::to_string(t.loss_weights.size()) + " weights for " + std::to_string(losses.size()) +
                (losses.size() == 1 ? " loss" : " losses") + " (" + names() +
                "): give one weight a loss, in its order");
  }
  if (t.use_weighting && has_loss(t, PreferenceLoss::kSft)) {
    // TRL scales sft's micro-batch mean by the pairs' mean weight: a product
    // of two means that accumulation and ranks cannot add up before backward.
    d.error(loc_at(root, "training.use_weighting"), "training.use_weighting",
            "WPO's weights with loss_type sft are not built: TRL scales sft's token mean by the pairs' mean "
            "weight, which no micro-batch knows before the step's last; leave sft out, or the weighting");
  }
}

// The method's keys (above), its defaults (SimPO's beta) and its
// combinations with the strategy.
void check_method(JobSpec& spec, const Node& root, Diagnostics& d) {
  const TrainingMethod method = spec.training.method;
  check_method_keys(method, root, d);
  const auto set = [&](const char* path) {
    const Node* n = node_at(root, path);
    return n != nullptr && !n->is_null();
  };
  if (method == TrainingMethod::kSimpo && !set("training.beta")) spec.training.beta = 2.0;
  if (method == TrainingMethod::kReward) check_reward(spec, root, d);
  if (method == TrainingMethod::kKto) check_kto(spec, root, d);
  if (!needs_reference(method)) return;
  const Adapter* adapter = spec.strategy.adapter ? &*spec.strategy.adapter : nullptr;
  if (spec.strategy.reference == Reference::kAdapterOff && adapter != nullptr && *adapter == Adapter::kNone) {
    d.error(loc_at(root, "strategy.reference"), "strategy.reference",
            "adapter_off needs adapters (lora or qlora), but strategy.adapter is none; use precomputed or separate");
  }
  if (spec.strategy.reference == Reference::kSeparate && adapter != nullptr && *adapter != Adapter::kNone &&
      spec.model.adapter.empty()) {
    d.error(loc_at(root, "strategy.reference"), "strategy.reference",
            "a separate reference beside adapters is the adapters model.adapter starts from, frozen; without "
            "model.adapter the adapters start at zero, so adapter_off is the same reference without the copy");
  }
  if (spec.strategy.reference == Reference::kNone) {
    d.error(loc_at(root, "strategy.reference"), "strategy.reference",
            std::string(to_string(method)) + " needs a reference model: adapter_off, " +
                (method == TrainingMethod::kKto ? "" : "precomputed, ") + "separate or auto");
  }
  if (method != TrainingMethod::kDpo) return;
  check_dpo_losses(spec.training, root, d);
}

void resolve_data(JobSpec& spec, const Node& root, const std::string& base_dir, const LoadOptions& opt,
                  Diagnostics& d) {
  DataSpec& data = spec.data;
  if (root.find("data") == nullptr) {
    d.error(root.location, "data", "missing required key");
    return;
  }
  // Each dataset's place in the spec: data.train, or data.train[i].path.
  const auto source_key = [&](std::size_t i) {
    if (data.sources.empty()) return std::string("data.train");
    const std::string item = "data.train[" + std::to_string(i) + "]";
    return node_at(root, item + ".path") != nullptr ? item + ".path" : item;
  };
  for (std::size_t i = 0; i < data.sources.size(); ++i) {
    DataSource& source = data.sources[i];
    if (!source.path.empty()) source.path = resolve_path(source.path, loc_at(root, source_key(i)), base_dir);
  }
  for (auto [key, value] : {std::pair{"train", &data.train}, std::pair{"eval", &data.eval}}) {
    if (!value->empty()) *value = resolve_path(*value, loc_at(root, std::string("data.") + key), base_dir);
  }
  // A dataset's format: its own, else data.format, else its extension.
  const bool format_written = node_at(root, "data.format") != nullptr;
  const auto format_of = [&](const std::string& path, const std::string& key) -> std::optional<DataFormat> {
    const std::string ext = to_lower(fs::path(path).extension().string());
    std::error_code ec;
    if (ext == ".jsonl") return DataFormat::kJsonl;
    if (ext == ".json") return DataFormat::kJson;
    if (ext == ".txt" || ext == ".md" || ext == ".text") return DataFormat::kText;
    if (ext == ".bin" || ext == ".tokens") return DataFormat::kTokens;
    if (ext == ".parquet") return DataFormat::kParquet;
    if (ext == ".arrow" || fs::is_directory(path, ec)) return DataFormat::kArrow;  // a save_to_disk folder
    d.error(loc_at(root, key), data.sources.empty() ? "data.format" : key,
            "cannot tell the format from the extension " + quote(ext) +
                "; set format: jsonl, json, text, tokens, parquet or arrow");
    return std::nullopt;
  };
  if (data.sources.empty()) {
    if (!format_written && !data.train.empty()) {
      if (auto f = format_of(data.train, "data.train")) data.format = *f;
    }
  } else {
    for (std::size_t i = 0; i < data.sources.size(); ++i) {
      DataSource& source = data.sources[i];
      if (source.format || source.path.empty()) continue;
      if (format_written) {
        source.format = data.format;
      } else if (auto f = format_of(source.path, source_key(i))) {
        source.format = *f;
      }
    }
    if (data.sources.front().format) data.format = *data.sources.front().format;
  } 
  if (data.sources.empty()) {
    for (const char* key : {"data.mix", "data.mix_seed"}) {
      if (node_at(root, key) != nullptr) {
        d.error(loc_at(root, key), key, "applies to several datasets (data.train as a list)");
      }
    }
  }
  std::vector<std::pair<std::string, const std::string*>> files;
  const std::vector<DataSource> sources = train_sources(data);
  for (std::size_t i = 0; i < data.sources.size(); ++i) files.emplace_back(source_key(i), &data.sources[i].path);
  if (data.sources.empty()) files.emplace_back("data.train", &data.train);
  files.emplace_back("data.eval", &data.eval);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& [path, value] = files[i];
    if (value->empty() || !opt.check_files) continue;
    // The eval file is read as the (first) training data is.
    const DataFormat format =
        i < sources.size() ? sources[i].format.value_or(data.format) : data.format;
    std::error_code ec;
    const fs::file_status status = fs::status(*value, ec);
    if (!fs::exists(status)) {
      d.error(loc_at(root, path), path, "data file " + quote(*value, kWhole) + " does not exist");
    } else if (fs::is_directory(status) && format == DataFormat::kArrow) {
      // A save_to_disk folder: check_data_files reads it.
    } else if (!fs::is_regular_file(status)) {
      d.error(loc_at(root, path), path,
              "data file " + quote(*value, kWhole) + " is " +
                  (fs::is_directory(status) ? "a directory"
                   : fs::is_fifo(status)    ? "a FIFO (named pipe)"
                                            : "not a regular file") +
                  ": name the file itself" +
                  (fs::is_directory(status) ? " (a folder datasets' save_to_disk wrote is data.format: arrow)" : ""));
    }
  }
  data.preference = trains_on_pairs(spec.training.method);
  data.unpaired = spec.training.method == TrainingMethod::kKto;
  // Other methods refuse the key (check_method_keys): read their pairs.
  if (spec.training.method != TrainingMethod::kKto) data.label_field.clear();
  if (data.preference) {
    check_preference_data(data, root, d);
  } else if (data.prompt_field.empty() != data.completion_field.empty()) {
    d.error(loc_at(root, data.prompt_field.empty() ? "data.completion_field" : "data.prompt_field"), "data",
            "prompt_field and completion_field go together");
  }
  if (!data.preference && (!data.prompt_field.empty() || data.field != DataSpec().field) &&
      !has_records_of_fields(data.format)) {
    d.error(loc_at(root, "data.format"), "data.format", "field names apply to jsonl, json, parquet and arrow data only");
  }
  check_chat_data(data, root, base_dir, opt, d);
  // Several datasets are read with the same data settings: conversations,
  // pairs and prompt/completion examples need records in every one.
  const bool needs_records = is_chat(data) || data.preference || !data.prompt_field.empty();
  for (std::size_t i = 1; i < data.sources.size() && needs_records; ++i) {
    const DataFormat f = data.sources[i].format.value_or(data.format);
    if (!has_records_of_fields(f)) {
      d.error(loc_at(root, source_key(i)), source_key(i),
              std::string(to_string(f)) + " data has no records of fields for the conversations, pairs or "
              "prompt/completion examples the data section reads (jsonl, json, parquet or arrow)");
    }
  }
  const std::int64_t max_len = spec.model.arch.max_seq_len;
  if (data.seq_len == 0) {
    data.seq_len = max_len > 0 ? std::min<std::int64_t>(2048, max_len) : 2048;
  } else if (max_len > 0 && data.seq_len > max_len) {
    d.error(loc_at(root, "data.seq_len"), "data.seq_len",
            std::to_string(data.seq_len) + " tokens exceeds the model's max_seq_len of " + std::to_string(max_len));
  }
}

bool inside_root(const std::string& path, const std::string& root) {
  const fs::path rel = fs::path(canonical_or_same(path)).lexically_relative(fs::path(canonical_or_same(root)));
  return !rel.empty() && *rel.begin() != "..";
}

// data.train and data.eval read as the runner will: a file the job would
// fail on is an error now, at file:line, not a queued job that fails.
void check_data_files(const JobSpec& spec, const Node& root, const LoadOptions& opt,
                      std::vector<DataFileFacts>& facts, Diagnostics& d) {
  const std::vector<DataSource> sources = train_sources(spec.data);
  std::vector<std::pair<std::string, DataSpec>> files;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    std::string key = "data.train";
    if (!spec.data.sources.empty()) {
      key += "[" + std::to_string(i) + "]";
      if (node_at(root, key + ".path") != nullptr) key += ".path";
    }
    files.emplace_back(key, source_spec(spec.data, sources[i]));
  }
  if (!spec.data.eval.empty()) {
    DataSpec eval = spec.data;
    eval.train = spec.data.eval;
    eval.sources.clear();
    files.emplace_back("data.eval", eval);
  }
  for (const auto& [key, data] : files) {
    const std::string& path = data.train;
    if (path.empty()) continue;
    if (!opt.read_root.empty() && !inside_root(path, opt.read_root)) continue;
    Result<DataFileFacts> checked = check_data_file(path, data);
    if (checked.is_ok()) {
      checked->key = key;
      facts.push_back(std::move(*checked));
    } else {
      d.error(loc_at(root, key), key, checked.status().message());
    }
  }
}

// The techniques a pinned knob uses, to check them against allow/forbid.
std::vector<Technique> pinned_techniques(const StrategySpec& s) { return techniques_used(pinned_knob_values(s)); }

// strategy.lora.modules_to_save: the family's embedding and head names; a
// tied matrix by both; what needs the untrained embedding and head (a
// reference model) is refused by name, and so is what another stack's plan
// would not model (its ZeRO-3 and offload).
void check_modules_to_save(const JobSpec& spec, const Node& root, Diagnostics& d) {
  const std::vector<std::string>& names = spec.strategy.lora.modules_to_save;
  if (names.empty() || spec.model.arch.layers == 0) return;
  const std::string path = "strategy.lora.modules_to_save";
  const SourceLocation at = loc_at(root, path);
  const std::vector<std::string> valid = whole_module_names(spec.model.arch.family);
  const Node* list = node_at(root, path);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (std::find(valid.begin(), valid.end(), names[i]) != valid.end()) continue;
    const SourceLocation item = list && list->is_sequence() && i < list->items.size() ? list->items[i].location : at;
    std::string msg = quote(names[i]) + " is not the embedding or the head of a " +
                      std::string(to_string(spec.model.arch.family)) + " model; expected one of " + join(valid, ", ");
    const std::string hint = closest_match(names[i], valid);
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    d.error(item, path + "[" + std::to_string(i) + "]", msg);
  }
  const bool embedding = std::find(names.begin(), names.end(), valid[0]) != names.end();
  const bool head = std::any_of(names.begin(), names.end(),
                                [&](const std::string& n) { return is_head_module(spec.model.arch.family, n); });
  if (spec.model.arch.tie_embeddings && embedding != head) {
    d.error(
        at, path,
        "this model ties " + valid[0] + " and " + valid[1] + " (one matrix): training it changes both, so name both");
  }
  const TrainingMethod method = spec.training.method;
  if (scores_sequences(method) || needs_reference(method)) {
    d.error(at, path,
            std::string("with training.method ") + to_string(method) + " is not built: " +
                (scores_sequences(method) ? "a reward model trains its score head whole and has no vocabulary head"
                                          : "the reference model is the starting model, whose embedding and head "
                                            "would no longer exist apart from the trained ones"));
  }
  // Another stack's ZeRO-3 and offload keep them in ways not modelled.
  if (spec.strategy.adapter == Adapter::kNone || spec.planner.runtime == Runtime::kTailor) return;
  if (spec.strategy.zero_stage && *spec.strategy.zero_stage >= 3) {
    d.error(loc_at(root, "strategy.zero_stage"), "strategy.zero_stage",
            std::string("3 with strategy.lora.modules_to_save is not modelled for planner.runtime ") +
                to_string(spec.planner.runtime));
  }
  if (spec.strategy.offload && *spec.strategy.offload != Offload::kNone) {
    d.error(loc_at(root, "strategy.offload"), "strategy.offload",
            quote(to_string(*spec.strategy.offload)) +
                " with strategy.lora.modules_to_save is not modelled for planner.runtime " +
                to_string(spec.planner.runtime));
  }
}

// The transformers version is the hf profile's, and only 4.x and 5.x are modelled.
void check_planner(const JobSpec& spec, const Node& root, Diagnostics& d) {
  if (spec.planner.transformers.empty()) return;
  const std::string path = "planner.transformers";
  if (spec.planner.runtime != Runtime::kHf) {
    d.error(loc_at(root, path), path,
            "is the version of planner.runtime hf's transformers, but planner.runtime is " +
                quote(to_string(spec.planner.runtime)));
    return;
  }
  const auto v = parse_library_version(spec.planner.transformers);
  if (v && (v->major < 4 || v->major > 5)) {
    d.error(loc_at(root, path), path,
            quote(spec.planner.transformers) + " is not modelled: transformers 4.x and 5.x are");
  }
}

void check_strategy(const JobSpec& spec, const Node& root, const Catalog& catalog, Diagnostics& d) {
  const StrategySpec& s = spec.strategy;
  if (s.headroom && spec.resources.headroom) {
    d.error(loc_at(root, "resources.headroom"), "resources.headroom",
            "set twice: strategy.headroom is the one to keep");
  }
  for (Technique t : s.allow) {
    if (contains(s.forbid, t)) {
      d.error(loc_at(root, "strategy.forbid"), "strategy.forbid", quote(to_string(t)) + " is both allowed and forbidden");
    }
  }
  for (Technique t : pinned_techniques(s)) {
    if (contains(s.forbid, t)) {
      // QLoRA pinned through its base names the key that pins it.
      const bool by_base = knob_of(t) == Knob::kAdapter && !s.adapter;
      const std::string path = by_base ? "strategy.quantization" : knob_path(knob_of(t));
      d.error(loc_at(root, path), path, "pinned to use " + quote(to_string(t)) + ", which strategy.forbid excludes");
    }
  }
  if (s.offload == Offload::kOptimizerAndParams && s.zero_stage && *s.zero_stage != 3) {
    // DeepSpeed ZeRO-Infinity/Offload: parameter offload needs stage 3.
    d.error(loc_at(root, "strategy.offload"), "strategy.offload",
            "parameter offload needs zero_stage 3, but zero_stage is pinned to " + std::to_string(*s.zero_stage));
  }
  if (s.activation_offload.value_or(false)) {
    if (s.gradient_checkpointing == 0) {
      d.error(loc_at(root, "strategy.activation_offload"), "strategy.activation_offload",
              "offloads the inputs checkpointed layers keep, but strategy.gradient_checkpointing is false");
    }
    if (spec.planner.runtime != Runtime::kTailor) {
      d.error(loc_at(root, "strategy.activation_offload"), "strategy.activation_offload",
              std::string("tailor-runner offloads activations, but planner.runtime is ") +
                  quote(to_string(spec.planner.runtime)));
    }
  }
  // The quantisation is QLoRA's base: the two pins must agree.
  if (s.quantization && s.adapter && (*s.quantization != Quantization::kNone) != (*s.adapter == Adapter::kQlora)) {
    d.error(loc_at(root, "strategy.quantization"), "strategy.quantization",
            *s.adapter == Adapter::kQlora ? "none, but qlora is the adapter over a quantised base"
                                          : quote(to_string(*s.quantization)) +
                                                " quantises the base under QLoRA's "
                                                "adapters, but strategy.adapter is pinned to " +
                                                quote(to_string(*s.adapter)));
  }
  if (s.adapter == Adapter::kNone && node_at(root, "strategy.lora") != nullptr) {
    d.warning(loc_at(root, "strategy.lora"), "strategy.lora", "ignored: adapter is none");
  }
  // LoRA targets must name linear layers of this architecture.
  if (!s.lora.targets.empty() && spec.model.arch.layers > 0) {
    const std::vector<std::string> valid = lora_target_names(spec.model.arch.family);
    const Node* targets = node_at(root, "strategy.lora.targets");
    for (std::size_t i = 0; i < s.lora.targets.size(); ++i) {
      const std::string& t = s.lora.targets[i];
      if (std::find(valid.begin(), valid.end(), t) != valid.end()) continue;
      SourceLocation at = targets && targets->is_sequence() && i < targets->items.size()
                              ? targets->items[i].location
                              : loc_at(root, "strategy.lora.targets");
      std::string msg = quote(t) + " is not a linear layer of a " +
                        std::string(to_string(spec.model.arch.family)) + " model; expected one of " +
                        join(valid, ", ");
      std::string hint = closest_match(t, valid);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      d.error(at, "strategy.lora.targets[" + std::to_string(i) + "]", msg);
    }
  }
  check_modules_to_save(spec, root, d);
  // Hardware facts known from the catalog (detected hardware is the planner's).
  if (!spec.resources.gpu_model.empty()) {
    const GpuModel* gpu = catalog.find_gpu(spec.resources.gpu_model);
    if (const auto several = catalog.gpus_matching(spec.resources.gpu_model); gpu == nullptr && several.size() > 1) {
      std::vector<std::string> keys;
      for (const GpuModel* g : several) keys.push_back(g->key);
      d.error(loc_at(root, "resources.gpu_model"), "resources.gpu_model",
              quote(spec.resources.gpu_model) + " names several GPUs: say which, " + join(keys, " or "));
    } else if (gpu == nullptr) {
      std::string msg = "unknown GPU model " + quote(spec.resources.gpu_model);
      std::string hint = closest_match(spec.resources.gpu_model, catalog.gpu_keys());
      msg += hint.empty() ? "; known: " + join(catalog.gpu_keys(), ", ") : "; did you mean '" + hint + "'?";
      d.error(loc_at(root, "resources.gpu_model"), "resources.gpu_model", msg);
    } else if (!gpu->bf16 && (s.precision == Precision::kBf16 || s.precision == Precision::kPureBf16)) {
      d.error(loc_at(root, "strategy.precision"), "strategy.precision",
              std::string(to_string(*s.precision)) + " is pinned, but the " + gpu->key +
                  " has no bf16 support; use fp16 or auto");
    }
  }
}

void check_training(const JobSpec& spec, const Node& root, Diagnostics& d) {
  const TrainingSpec& t = spec.training;
  if (t.micro_batch_size && *t.micro_batch_size > t.global_batch_size) {
    d.error(loc_at(root, "training.micro_batch_size"), "training.micro_batch_size",
            "micro_batch_size (" + std::to_string(*t.micro_batch_size) + ") exceeds global_batch_size (" +
                std::to_string(t.global_batch_size) + ")");
  } else if (t.micro_batch_size) {
    const std::int64_t gpus = std::max<std::int64_t>(1, spec.resources.gpu_count.value_or(1));
    if (t.global_batch_size % (*t.micro_batch_size * gpus) != 0) {
      d.error(loc_at(root, "training.global_batch_size"), "training.global_batch_size",
              "global_batch_size (" + std::to_string(t.global_batch_size) +
                  ") must be a multiple of micro_batch_size x GPUs (" + std::to_string(*t.micro_batch_size) + " x " +
                  std::to_string(gpus) + ") so that accumulation keeps it exact");
    }
  }
  if (t.max_steps && t.warmup_steps > *t.max_steps) {
    // A warning, not an error: short smoke runs (--set training.max_steps=5) are common.
    d.warning(loc_at(root, "training.warmup_steps"), "training.warmup_steps",
              "warmup_steps (" + std::to_string(t.warmup_steps) + ") exceeds max_steps (" +
                  std::to_string(*t.max_steps) + "): the learning rate never reaches its peak");
  }
  if (t.eval_every > 0 && spec.data.eval.empty() && t.eval_prompts.empty()) {
    d.warning(loc_at(root, "training.eval_every"), "training.eval_every", "no data.eval is set; nothing to evaluate");
  }
}

void check_checkpoint(const JobSpec& spec, const Node& root, Diagnostics& d) {
  const fs::path dir(spec.checkpoint.dir);
  bool escapes = dir.is_absolute();
  for (const auto& part : dir) escapes = escapes || part == "..";
  if (escapes) {
    d.error(loc_at(root, "checkpoint.dir"), "checkpoint.dir",
            "must be a relative folder inside the job's output folder (no absolute paths, no '..')");
  }
  // What tailor-runner and tailord write in a job's folder: checkpoints
  // there would fail (a file in the way) or overwrite the job's outputs.
  static const char* const kJobFiles[] = {"model",   "adapter",      "exports",   "metrics.jsonl", "events.jsonl",
                                          "runner.log", "plan.json", "slurm-batch.sh"};
  const std::string first = dir.empty() ? std::string() : dir.begin()->string();
  const bool rank_events = first.rfind("events.rank-", 0) == 0;
  if (!escapes && (rank_events || std::find(std::begin(kJobFiles), std::end(kJobFiles), first) != std::end(kJobFiles))) {
    d.error(loc_at(root, "checkpoint.dir"), "checkpoint.dir",
            quote(first) + " is one of the job folder's own files or folders (model, adapter, exports, "
            "metrics.jsonl, events.jsonl, runner.log, plan.json, ...): name another folder, e.g. checkpoints");
  }
  if (spec.output.merge == false && spec.strategy.adapter == Adapter::kNone) {
    d.warning(loc_at(root, "output.merge"), "output.merge",
              "a full fine-tune with merge: false writes no model/: the final checkpoint is its only output "
              "(tailor-runner --export makes a model folder of it)");
  }
}

// Labels within their bounds (spec_fields.h) and free of the filter's
// separators.
void check_labels(const JobSpec& spec, const Node& root, Diagnostics& d) {
  if (spec.labels.size() > kMaxLabels) {
    d.error(loc_at(root, "labels"), "labels",
            std::to_string(spec.labels.size()) + " labels; at most " + std::to_string(kMaxLabels));
    return;
  }
  static const std::regex kKey("^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$");
  for (const auto& [key, value] : spec.labels) {
    const std::string path = "labels." + key;
    if (!std::regex_match(key, kKey)) {
      d.error(loc_at(root, "labels"), "labels",
              quote(key.substr(0, 80)) + " is not a valid label key: letters, digits, '.', '_', '/' and '-', "
                                         "starting with a letter or digit, at most 63 characters");
    } else if (value.size() > kMaxLabelValue) {
      d.error(loc_at(root, path), path,
              std::to_string(value.size()) + " characters; at most " + std::to_string(kMaxLabelValue));
    } else if (std::any_of(value.begin(), value.end(),
                           [](char c) { return c == ',' || static_cast<unsigned char>(c) < 0x20; })) {
      d.error(loc_at(root, path), path, "may not contain ',' or control characters (',' separates label filters)");
    }
  }
}

LoadedSpec finish_loading(std::optional<Node> tree, const std::string& source, const std::string& base_dir,
                          const LoadOptions& opt, LoadedSpec out) {
  Diagnostics& d = out.diagnostics;
  if (!tree) return out;
  Node root = std::move(*tree);
  // A bad --set is skipped and reported; the rest is still checked.
  for (const std::string& o : opt.overrides) apply_override(root, o, d);
  // An unknown ${var} would only cause confusing follow-on type errors.
  const std::size_t errors_before_vars = d.error_count();
  interpolate_vars(root, d, opt.limits.max_bytes);
  out.merged = root;
  if (d.error_count() > errors_before_vars) return out;
  if (!root.is_map()) {
    d.error(root.location, "", root.is_null() ? "the document is empty; expected a TrainingJob"
                                              : "expected a map with apiVersion, kind, model, data, ...");
    return out;
  }
  const Catalog& catalog = opt.catalog ? *opt.catalog : Catalog::builtin();
  JobSpec spec;
  const std::size_t errors_before_fields = d.error_count();
  read_job_spec(root, spec, d);
  spec.source_file = source;
  if (d.error_count() > errors_before_fields) {
    // Cross-field rules assume well-typed fields, but which method reads a
    // key needs only the method: told now, where the spec names a method
    // that was read, so that fixing the type errors does not reveal a
    // second round. (An unset method, or a misspelt key for it, would make
    // it sft's by default.)
    std::vector<std::string> failed;
    for (const Diagnostic& item : d.items()) {
      if (item.severity == Severity::kError) failed.push_back(item.path);
    }
    const Node* method = node_at(root, "training.method");
    if (method != nullptr && !method->is_null() &&
        std::find(failed.begin(), failed.end(), "training.method") == failed.end()) {
      check_method_keys(spec.training.method, root, d, failed);
    }
    return out;
  }

  if (spec.name.empty()) spec.name = default_job_name(source);
  if (!valid_job_name(spec.name)) {
    d.error(loc_at(root, "name"), "name",
            quote(spec.name) + " is not a valid job name: use lowercase letters, digits, '.', '_' and '-', "
                                "starting with a letter or digit, at most 63 characters");
  }
  resolve_model(spec, root, base_dir, opt, catalog, d);
  resolve_start_adapter(spec, root, base_dir, opt, d);
  resolve_data(spec, root, base_dir, opt, d);
  check_training(spec, root, d);
  check_method(spec, root, d);
  check_strategy(spec, root, catalog, d);
  check_planner(spec, root, d);
  check_checkpoint(spec, root, d);
  check_labels(spec, root, d);
  // Data is read only for a spec otherwise valid: its format and fields
  // decide how, and a broken spec is not worth the reading.
  if (opt.check_files && opt.check_data && !d.has_errors()) check_data_files(spec, root, opt, out.data, d);
  // A chat job needs a template the runner will find (the folder's files
  // are read with check_files, as the tokenizer is).
  const bool template_readable = spec.data.chat_template.empty() || opt.read_root.empty() ||
                                 inside_root(spec.data.chat_template, opt.read_root);
  if (opt.check_files && is_chat(spec.data) && template_readable && !d.has_errors()) {
    if (auto found = find_chat_template(spec.data, spec.model.path); !found.is_ok()) {
      const char* key = spec.data.chat_template.empty() ? "data.chat" : "data.chat_template";
      d.error(loc_at(root, key), key, found.status().message());
    }
    // Masks map characters to tokens through the tokenizer's offsets, which
    // the SentencePiece reader does not give, and a chat template's special
    // tokens are the tokenizer.json's added tokens.
    if (auto tok = choose_tokenizer(spec.model.path); tok.is_ok() && tok->kind == TokenizerKind::kSentencePiece) {
      d.error(loc_at(root, "data.chat"), "data.chat",
              "conversations are read with the model folder's tokenizer.json (as transformers reads them), and " +
                  spec.model.path + " has only " + tok->file +
                  ": copy the base model's tokenizer.json beside it (Llama 2, Mistral and Gemma ship one)");
    }
  }
  if (!d.has_errors()) out.spec = std::move(spec);
  return out;
}

}  // namespace

Node deep_merge(Node base, const Node& overlay) {
  if (!base.is_map() || !overlay.is_map()) return overlay;
  for (const MapEntry& e : overlay.entries) {
    Node* existing = base.find(e.key);
    if (existing != nullptr) {
      *existing = deep_merge(std::move(*existing), e.value);
    } else {
      base.entries.push_back(e);
    }
  }
  base.location = overlay.location;
  return base;
}

void apply_override(Node& root, std::string_view assignment, Diagnostics& d) {
  const SourceLocation where{"--set " + std::string(assignment), 0, 0};
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    d.error(where, "", "expected key.path=value");
    return;
  }
  const std::string path(trim(assignment.substr(0, eq)));
  const std::string_view value_text = assignment.substr(eq + 1);
  Diagnostics parse_diags;
  auto value = parse_yaml(value_text, where.file, parse_diags);
  if (!value) {
    for (Diagnostic diag : parse_diags.items()) {
      diag.location = where;
      diag.path = path;
      d.add(std::move(diag));
    }
    return;
  }
  // Values from a flag have no line in any file.
  std::vector<Node*> todo = {&*value};
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    n->location = where;
    for (Node& i : n->items) todo.push_back(&i);
    for (MapEntry& e : n->entries) {
      e.key_location = where;
      todo.push_back(&e.value);
    }
  }
  if (value->is_null() && value_text.empty()) *value = Node::make_scalar("", where, false);
  const std::vector<std::string> parts = split(path, '.');
  Node* cur = &root;
  if (cur->is_null()) *cur = Node::make_map(where);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& key = parts[i];
    if (key.empty()) {
      d.error(where, path, "empty key in key path");
      return;
    }
    if (!cur->is_map()) {
      d.error(where, path, join(std::vector<std::string>(parts.begin(), parts.begin() + static_cast<long>(i)), ".") +
                               " is " + std::string(cur->kind_name()) + ", not a map");
      return;
    }
    if (i + 1 == parts.size()) {
      cur->set(key, std::move(*value), where);
      return;
    }
    Node* next = cur->find(key);
    if (next == nullptr || next->is_null()) next = &cur->set(key, Node::make_map(where), where);
    cur = next;
  }
}

void interpolate_vars(Node& root, Diagnostics& d, std::size_t max_bytes) {
  if (!root.is_map()) return;
  std::vector<std::pair<std::string, Node>> vars;  // resolved, in order
  std::vector<std::string> names;
  // Variables that use variables grow geometrically (each doubling the
  // last): the expanded text is held to the size a spec file may have.
  std::size_t expanded = 0;
  bool over = false;
  auto substitute = [&](Node& n, const std::string& path) {
    if (over) return;
    if (!n.is_scalar() || n.scalar.find('$') == std::string::npos) return;
    std::string out;
    const std::string& s = n.scalar;
    bool whole = false;
    for (std::size_t i = 0; i < s.size();) {
      if (s.compare(i, 3, "$${") == 0) {
        out += "${";
        i += 3;
        continue;
      }
      if (s.compare(i, 2, "${") != 0) {
        out += s[i++];
        continue;
      }
      const auto close = s.find('}', i + 2);
      if (close == std::string::npos) {
        d.error(n.location, path, "unterminated ${ in " + quote(s) + "; write $${ for a literal ${");
        return;
      }
      const std::string name(trim(std::string_view(s).substr(i + 2, close - i - 2)));
      auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
      if (it == vars.end()) {
        std::string msg = "unknown variable ${" + name + "}";
        std::string hint = closest_match(name, names);
        if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
        else if (names.empty()) msg += "; define it under vars:";
        d.error(n.location, path, msg);
        return;
      }
      whole = (i == 0 && close + 1 == s.size());
      expanded += it->second.scalar.size();
      if (expanded > max_bytes) {
        d.error(n.location, path,
                "variables expand to more than " + std::to_string(max_bytes) + " bytes (the size limit of a spec)");
        over = true;
        return;
      }
      out += it->second.scalar;
      i = close + 1;
    }
    n.scalar = std::move(out);
    if (whole) n.plain = true;
  };

  if (Node* v = root.find("vars")) {
    if (v->is_map()) {
      for (MapEntry& e : v->entries) {
        if (!e.value.is_scalar()) {
          d.error(e.value.location, "vars." + e.key, "a variable holds a single value, not " +
                                                         std::string(e.value.kind_name()));
          continue;
        }
        substitute(e.value, "vars." + e.key);  // earlier vars may be used
        vars.emplace_back(e.key, e.value);
        names.push_back(e.key);
      }
    } else if (!v->is_null()) {
      d.error(v->location, "vars", "expected a map of name: value");
    }
  }
  // Walk everything except vars itself.
  std::vector<std::pair<Node*, std::string>> todo;
  for (MapEntry& e : root.entries) {
    if (e.key != "vars") todo.emplace_back(&e.value, e.key);
  }
  while (!todo.empty()) {
    auto [n, path] = todo.back();
    todo.pop_back();
    substitute(*n, path);
    for (std::size_t i = 0; i < n->items.size(); ++i) todo.emplace_back(&n->items[i], path + "[" + std::to_string(i) + "]");
    for (MapEntry& e : n->entries) todo.emplace_back(&e.value, path + "." + e.key);
  }
}

LoadedSpec load_job_spec(const std::string& path, const LoadOptions& options) {
  LoadedSpec out;
  ExtendsContext ctx{options, out.diagnostics, {}};
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    out.diagnostics.error({path, 0, 0}, "", "no such file");
    return out;
  }
  auto tree = load_with_extends(path, {}, ctx);
  return finish_loading(std::move(tree), canonical_or_same(path), dir_of(path), options, std::move(out));
}

LoadedSpec load_job_spec_text(std::string_view text, std::string_view name, const std::string& base_dir,
                              const LoadOptions& options) {
  LoadedSpec out;
  ExtendsContext ctx{options, out.diagnostics, {}};
  auto tree = parse_yaml(text, name, out.diagnostics, options.limits);
  if (tree) tree = resolve_extends(std::move(*tree), base_dir, ctx);
  return finish_loading(std::move(tree), std::string(name), base_dir, options, std::move(out));
}

Status check_tracking(const JobSpec& spec) {
  if (spec.tracking.mlflow.on() && spec.tracking.mlflow.uri.empty()) {
    return Status::invalid_argument(
        "tracking.mlflow.uri: required: the spec names no MLflow tracking server, nor does tailord's mlflow_uri");
  }
  return Status::ok();
}

Status check_weights(const JobSpec& spec) {
  if (spec.model.init == ModelInit::kRandom || !spec.model.path.empty()) return Status::ok();
  return Status::invalid_argument("model.preset " + spec.model.preset +
                                  " has no weights here: set model.path to its Hugging Face folder, or "
                                  "model.init: random to train it from random weights");
}

}  // namespace tailor::dsl
