#include "dsl/spec_fields.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>

#include "core/text.h"
#include "dsl/catalog.h"
#include "dsl/field_table.h"
#include "dsl/library_version.h"
#include "dsl/model_family.h"
#include "dsl/rope.h"

namespace tailor::dsl {

namespace fields {

// The families' names live in model_family.h.
template <>
struct EnumNames<ModelFamily> {
  static const std::vector<std::pair<ModelFamily, const char*>>& names() {
    static const std::vector<std::pair<ModelFamily, const char*>> k = [] {
      std::vector<std::pair<ModelFamily, const char*>> v;
      for (const ModelFamilyInfo& f : model_families()) v.emplace_back(f.id, f.name);
      return v;
    }();
    return k;
  }
};
template <>
struct EnumNames<RopeScalingType> {
  static const std::vector<std::pair<RopeScalingType, const char*>>& names() {
    static const std::vector<std::pair<RopeScalingType, const char*>> k = [] {
      std::vector<std::pair<RopeScalingType, const char*>> v;
      for (RopeScalingType t : {RopeScalingType::kNone, RopeScalingType::kLinear, RopeScalingType::kLlama3}) {
        v.emplace_back(t, to_string(t));
      }
      return v;
    }();
    return k;
  }
};
template <>
struct EnumNames<ModelInit> {
  static const std::vector<std::pair<ModelInit, const char*>>& names() {
    static const std::vector<std::pair<ModelInit, const char*>> k = {{ModelInit::kPretrained, "pretrained"},
                                                                      {ModelInit::kRandom, "random"}};
    return k;
  }
};
template <>
struct EnumNames<DataFormat> {
  static const std::vector<std::pair<DataFormat, const char*>>& names() {
    static const std::vector<std::pair<DataFormat, const char*>> k = {
        {DataFormat::kJsonl, "jsonl"}, {DataFormat::kJson, "json"}, {DataFormat::kText, "text"}, {DataFormat::kTokens, "tokens"},
        {DataFormat::kParquet, "parquet"}, {DataFormat::kArrow, "arrow"}};
    return k;
  }
};
template <>
struct EnumNames<DataMix> {
  static const std::vector<std::pair<DataMix, const char*>>& names() {
    static const std::vector<std::pair<DataMix, const char*>> k = {{DataMix::kConcat, "concat"},
                                                                    {DataMix::kInterleave, "interleave"}};
    return k;
  }
};

template <>
struct EnumNames<OnBadRecord> {
  static const std::vector<std::pair<OnBadRecord, const char*>>& names() {
    static const std::vector<std::pair<OnBadRecord, const char*>> k = {{OnBadRecord::kError, "error"},
                                                                        {OnBadRecord::kSkip, "skip"}};
    return k;
  }
};

template <>
struct EnumNames<ChatFormat> {
  static const std::vector<std::pair<ChatFormat, const char*>>& names() {
    static const std::vector<std::pair<ChatFormat, const char*>> k = {{ChatFormat::kNone, "none"},
                                                                       {ChatFormat::kMessages, "messages"},
                                                                       {ChatFormat::kShareGpt, "sharegpt"},
                                                                       {ChatFormat::kAlpaca, "alpaca"}};
    return k;
  }
};

template <>
struct EnumNames<TrainOn> {
  static const std::vector<std::pair<TrainOn, const char*>>& names() {
    static const std::vector<std::pair<TrainOn, const char*>> k = {
        {TrainOn::kAssistant, "assistant"}, {TrainOn::kAll, "all"}, {TrainOn::kLastAssistant, "last_assistant"}};
    return k;
  }
};

template <>
struct EnumNames<TrainOnEos> {
  static const std::vector<std::pair<TrainOnEos, const char*>>& names() {
    static const std::vector<std::pair<TrainOnEos, const char*>> k = {
        {TrainOnEos::kTurn, "turn"}, {TrainOnEos::kLast, "last"}, {TrainOnEos::kNone, "none"}};
    return k;
  }
};

template <>
struct EnumNames<LongExample> {
  static const std::vector<std::pair<LongExample, const char*>>& names() {
    static const std::vector<std::pair<LongExample, const char*>> k = {{LongExample::kTruncate, "truncate"},
                                                                        {LongExample::kDrop, "drop"}};
    return k;
  }
};
template <>
struct EnumNames<LrScheduler> {
  static const std::vector<std::pair<LrScheduler, const char*>>& names() {
    static const std::vector<std::pair<LrScheduler, const char*>> k = {
        {LrScheduler::kConstant, "constant"}, {LrScheduler::kCosine, "cosine"}, {LrScheduler::kLinear, "linear"}};
    return k;
  }
};
template <>
struct EnumNames<Runtime> {
  static const std::vector<std::pair<Runtime, const char*>>& names() {
    static const std::vector<std::pair<Runtime, const char*>> k = {{Runtime::kTailor, "tailor"},
                                                                    {Runtime::kHf, "hf"},
                                                                    {Runtime::kTorchtune, "torchtune"},
                                                                    {Runtime::kLitgpt, "litgpt"},
                                                                    {Runtime::kTorchtitan, "torchtitan"}};
    return k;
  }
};
template <>
struct EnumNames<TrainDevice> {
  static const std::vector<std::pair<TrainDevice, const char*>>& names() {
    static const std::vector<std::pair<TrainDevice, const char*>> k = {{TrainDevice::kAuto, "auto"},
                                                                        {TrainDevice::kCpu, "cpu"}};
    return k;
  }
};
template <>
struct EnumNames<ExecutorKind> {
  static const std::vector<std::pair<ExecutorKind, const char*>>& names() {
    static const std::vector<std::pair<ExecutorKind, const char*>> k = {{ExecutorKind::kDefault, "default"},
                                                                         {ExecutorKind::kLocal, "local"},
                                                                         {ExecutorKind::kSlurm, "slurm"},
                                                                         {ExecutorKind::kAuto, "auto"}};
    return k;
  }
};
// The technique knobs' names live in technique.h.
template <class E>
struct TechniqueKnobNames {
  static const std::vector<std::pair<E, const char*>>& names() {
    static const std::vector<std::pair<E, const char*>> k(enum_names<E>().begin(), enum_names<E>().end());
    return k;
  }
};
template <>
struct EnumNames<Precision> : TechniqueKnobNames<Precision> {};
template <>
struct EnumNames<Adapter> : TechniqueKnobNames<Adapter> {};
template <>
struct EnumNames<Quantization> : TechniqueKnobNames<Quantization> {};
template <>
struct EnumNames<Optimizer> : TechniqueKnobNames<Optimizer> {};
template <>
struct EnumNames<Offload> : TechniqueKnobNames<Offload> {};
// What a spec may pin: "none" is a supervised plan's, not a choice.
template <>
struct EnumNames<Reference> {
  static const std::vector<std::pair<Reference, const char*>>& names() {
    static const std::vector<std::pair<Reference, const char*>> k = {
        {Reference::kAdapterOff, "adapter_off"}, {Reference::kSeparate, "separate"}, {Reference::kPrecomputed, "precomputed"}};
    return k;
  }
};
template <>
struct EnumNames<TrainingMethod> {
  static const std::vector<std::pair<TrainingMethod, const char*>>& names() {
    static const std::vector<std::pair<TrainingMethod, const char*>> k = {
        {TrainingMethod::kSft, "sft"},     {TrainingMethod::kDpo, "dpo"},       {TrainingMethod::kOrpo, "orpo"},
        {TrainingMethod::kSimpo, "simpo"}, {TrainingMethod::kReward, "reward"}, {TrainingMethod::kKto, "kto"}};
    return k;
  }
};
template <>
struct EnumNames<PreferenceLoss> {
  static const std::vector<std::pair<PreferenceLoss, const char*>>& names() {
    static const std::vector<std::pair<PreferenceLoss, const char*>> k = {
        {PreferenceLoss::kSigmoid, "sigmoid"},
        {PreferenceLoss::kIpo, "ipo"},
        {PreferenceLoss::kHinge, "hinge"},
        {PreferenceLoss::kRobust, "robust"},
        {PreferenceLoss::kExoPair, "exo_pair"},
        {PreferenceLoss::kNcaPair, "nca_pair"},
        {PreferenceLoss::kBcoPair, "bco_pair"},
        {PreferenceLoss::kSppoHard, "sppo_hard"},
        {PreferenceLoss::kApoZero, "apo_zero"},
        {PreferenceLoss::kApoDown, "apo_down"},
        {PreferenceLoss::kSigmoidNorm, "sigmoid_norm"},
        {PreferenceLoss::kDiscopop, "discopop"},
        {PreferenceLoss::kSft, "sft"},
        {PreferenceLoss::kKto, "kto"},
        {PreferenceLoss::kApoZeroUnpaired, "apo_zero_unpaired"}};
    return k;
  }
};
template <>
struct EnumNames<FDivergence> {
  static const std::vector<std::pair<FDivergence, const char*>>& names() {
    static const std::vector<std::pair<FDivergence, const char*>> k = {
        {FDivergence::kReverseKl, "reverse_kl"},
        {FDivergence::kForwardKl, "forward_kl"},
        {FDivergence::kJsDivergence, "js_divergence"},
        {FDivergence::kAlphaDivergence, "alpha_divergence"}};
    return k;
  }
};

}  // namespace fields

namespace {

using namespace fields;

template <class E>
const char* name_of(E v) {
  for (const auto& [e, name] : EnumNames<E>::names()) {
    if (e == v) return name;
  }
  return "?";
}

}  // namespace

namespace fields {
template <>
struct Codec<Technique> {
  static std::optional<Technique> read(const Node& n, const std::string& p, Diagnostics& d) {
    if (n.is_scalar()) {
      if (auto t = technique_from_name(n.scalar)) return t;
    }
    report_bad_choice(n, p, technique_names(), d);
    return std::nullopt;
  }
  static Node write(const Technique& t) { return Node::make_scalar(to_string(t)); }
  static Json schema() { return {{"type", "string"}, {"enum", technique_names()}}; }
};
}  // namespace fields

namespace {

// A headroom fraction, below 90% (a plan needs some memory to plan with).
std::optional<double> read_headroom(const Node& n, const std::string& path, Diagnostics& d) {
  auto f = read_fraction(n, path, d);
  if (f && *f >= 0.9) {
    d.error(n.location, path, "headroom must be below 90%");
    return std::nullopt;
  }
  return f;
}

// "llama, mistral, qwen2: q_proj, ...; gpt2: c_attn, c_proj, c_fc": the
// families grouped by their LoRA targets (model_family.h).
std::string lora_targets_doc() {
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;  // (families, targets)
  for (const ModelFamilyInfo& f : model_families()) {
    const std::vector<std::string> targets = lora_target_names(f.id);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.second == targets; });
    if (it == groups.end()) {
      groups.emplace_back(f.name, targets);
    } else {
      it->first += std::string(", ") + f.name;
    }
  }
  std::string out;
  for (const auto& [families, targets] : groups) {
    out += (out.empty() ? "" : "; ") + families + ": " + join(targets, ", ");
  }
  return out;
}

const std::vector<Field<RopeScaling>>& rope_scaling_fields() {
  static const std::vector<Field<RopeScaling>> k = {
      field("type",
            "none, linear (every frequency divided by factor) or llama3 (Llama 3.1/3.2: low frequencies "
            "divided by factor, high ones kept, a ramp between).",
            &RopeScaling::type, {}, true),
      field("factor", "How much longer the context is than pretraining's (Llama 3.1: 8, 3.2: 32).",
            &RopeScaling::factor, number_at_least(1)),
      field("low_freq_factor", "llama3: wavelengths over original_max_seq_len / this are stretched. Default 1.",
            &RopeScaling::low_freq_factor, number_above(0)),
      field("high_freq_factor", "llama3: wavelengths under original_max_seq_len / this are kept. Default 4.",
            &RopeScaling::high_freq_factor, number_above(0)),
      zero_unset(field("original_max_seq_len", "llama3: pretraining's context (8192 for Llama 3.1/3.2).",
                       &RopeScaling::original_max_seq_len, int_at_least(1)),
                 &RopeScaling::original_max_seq_len),
  };
  return k;
}

// The scaling section, left out of a resolved spec when there is none.
Field<ModelArch> rope_scaling_section() {
  Field<ModelArch> f = section("rope_scaling", "RoPE scaling, as config.json's rope_scaling (llama family).",
                               &ModelArch::rope_scaling, &rope_scaling_fields());
  f.write = [write = std::move(f.write)](const ModelArch& a) -> std::optional<Node> {
    if (a.rope_scaling.type == RopeScalingType::kNone) return std::nullopt;
    return write(a);
  };
  return f;
}

const std::vector<Field<ModelArch>>& arch_fields() {
  static const std::vector<Field<ModelArch>> k = {
      field("family", "Architecture family: " + family_names_text() + ".", &ModelArch::family, {}, true),
      field("layers", "Number of transformer blocks.", &ModelArch::layers, int_at_least(1), true),
      field("hidden", "Model width (hidden size).", &ModelArch::hidden, int_at_least(1), true),
      field("intermediate", "MLP width; default 4 x hidden for gpt2.", &ModelArch::intermediate, int_at_least(1)),
      field("heads", "Attention heads.", &ModelArch::heads, int_at_least(1), true),
      field("kv_heads", "Key/value heads (grouped-query attention); default: heads.", &ModelArch::kv_heads,
            int_at_least(1)),
      field("vocab", "Vocabulary size.", &ModelArch::vocab, int_at_least(1), true),
      field("max_seq_len", "Longest supported context in tokens.", &ModelArch::max_seq_len, int_at_least(1), true),
      field("tie_embeddings", "The output head shares the embedding matrix. Default false.",
            &ModelArch::tie_embeddings),
      field("rope_theta", "RoPE base frequency (llama family, gpt_neox). Default 10000.", &ModelArch::rope_theta,
            number_above(0)),
      zero_unset(field("rope_local_theta",
                       "RoPE base of the windowed layers, never scaled (gemma3_text's rope_local_base_freq, "
                       "10000); default: rope_theta.",
                       &ModelArch::rope_local_theta, number_above(0)),
                 &ModelArch::rope_local_theta),
      zero_unset(field("partial_rotary_factor",
                       "The fraction of each head RoPE rotates, its leading dimensions (gpt_neox's rotary_pct); "
                       "default 0.25 for gpt_neox, as every Pythia.",
                       &ModelArch::partial_rotary_factor, number_above(0)),
                 &ModelArch::partial_rotary_factor),
      rope_scaling_section(),
      field("norm_eps", "Normalisation epsilon. Default 1e-5.", &ModelArch::norm_eps, number_above(0)),
      zero_unset(field("head_dim",
                       "Width of one attention head (llama family); default hidden / heads, 128 for qwen3 as "
                       "in its config.json.",
                       &ModelArch::head_size, int_at_least(1)),
                 &ModelArch::head_size),
      zero_unset(field("sliding_window",
                       "Tokens each position attends to, itself included, in every layer (mistral, mixtral, "
                       "qwen2, qwen3, phi3; Mistral 7B v0.1 says 4096); default: the whole context.",
                       &ModelArch::sliding_window, int_at_least(1)),
                 &ModelArch::sliding_window),
      zero_unset(field("experts",
                       "Routed experts per block (mixtral); default 8 for mixtral, none for dense "
                       "families.",
                       &ModelArch::experts, int_at_least(1)),
                 &ModelArch::experts),
      zero_unset(field("experts_per_token", "Experts each token goes through (mixtral); default 2.",
                       &ModelArch::experts_per_token, int_at_least(1)),
                 &ModelArch::experts_per_token),
      zero_unset(field("attn_logit_softcap",
                       "Attention scores capped as cap * tanh(score / cap) (gemma2, whose configs say 50); "
                       "default: not capped.",
                       &ModelArch::attn_logit_softcap, number_above(0)),
                 &ModelArch::attn_logit_softcap),
      zero_unset(field("final_logit_softcap",
                       "Output logits capped as cap * tanh(logit / cap) (gemma2, whose configs say 30); default: "
                       "not capped.",
                       &ModelArch::final_logit_softcap, number_above(0)),
                 &ModelArch::final_logit_softcap),
      zero_unset(field("query_pre_attn_scalar",
                       "Attention scores are scaled by this^-1/2 (gemma2, gemma3_text); default: head_dim.",
                       &ModelArch::query_pre_attn_scalar, int_at_least(1)),
                 &ModelArch::query_pre_attn_scalar),
  };
  return k;
}

const std::vector<Field<ModelSpec>>& model_fields() {
  static const std::vector<Field<ModelSpec>> k = {
      field("preset", "Model preset from the catalog (configs/catalog/models.yaml), e.g. llama-2-7b.",
            &ModelSpec::preset, string_not_empty()),
      field("path", "Hugging Face-style model folder; its config.json gives the architecture.", &ModelSpec::path,
            string_not_empty()),
      field("adapter",
            "A PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors or .bin) the job's adapters "
            "start from, over the model: its r, lora_alpha and target_modules are strategy.lora's, and "
            "strategy.adapter is lora unless it says qlora. A reward model's is a SEQ_CLS adapter, its score saved "
            "whole.",
            &ModelSpec::adapter, string_not_empty()),
      field("init",
            "pretrained (the weights of model.path; default for preset and path) or random (train from "
            "scratch; default for arch). A preset without model.path has no weights, so training it needs random.",
            &ModelSpec::init),
      section("arch", "Explicit architecture.", &ModelSpec::arch, &arch_fields()),
  };
  return k;
}

const std::vector<Field<ModelSpec>>& model_fields_resolved() {
  // The resolved spec names a preset or a folder, not both it and the
  // architecture it implies, so that it loads again as it prints.
  static const std::vector<Field<ModelSpec>> k = [] {
    std::vector<Field<ModelSpec>> t = model_fields();
    auto write_arch = t.back().write;
    t.back().write = [write_arch](const ModelSpec& m) -> std::optional<Node> {
      if (!m.preset.empty() || !m.path.empty()) return std::nullopt;
      return write_arch(m);
    };
    return t;
  }();
  return k;
}

// A key of conversation data, written back (--resolved) only for a spec
// with chat data, so the resolved form of other specs does not change.
Field<DataSpec> chat_only(Field<DataSpec> f) {
  f.write = [write = f.write](const DataSpec& d) -> std::optional<Node> {
    if (!is_chat(d)) return std::nullopt;
    return write(d);
  };
  return f;
}

// A key of supervised chat data: preference pairs score whole completions.
Field<DataSpec> chat_sft_only(Field<DataSpec> f) {
  f.write = [write = f.write](const DataSpec& d) -> std::optional<Node> {
    if (!is_chat(d) || d.preference) return std::nullopt;
    return write(d);
  };
  return f;
}

// A key of preference pairs (training.method dpo, orpo, simpo, reward or kto
// without data.label_field), written back only for them.
Field<DataSpec> preference_only(Field<DataSpec> f) {
  f.write = [write = f.write](const DataSpec& d) -> std::optional<Node> {
    if (!is_paired(d)) return std::nullopt;
    return write(d);
  };
  return f;
}

// A key with no default (data.margin_field), written back only when set.
Field<DataSpec> when_set(Field<DataSpec> f, std::string DataSpec::*member) {
  f.write = [write = f.write, member](const DataSpec& d) -> std::optional<Node> {
    if ((d.*member).empty()) return std::nullopt;
    return write(d);
  };
  return f;
}

// Generation at evaluation (training.eval_prompts), written back only when
// asked for, so the resolved form of other jobs does not change.
Field<TrainingSpec> eval_prompts_only(Field<TrainingSpec> f) {
  f.write = [write = f.write](const TrainingSpec& t) -> std::optional<Node> {
    if (t.eval_prompts.empty()) return std::nullopt;
    return write(t);
  };
  return f;
}

// A key of preference training, written back only for the methods that
// read it, so the resolved form of other jobs does not change.
Field<TrainingSpec> only_for(std::initializer_list<TrainingMethod> methods, Field<TrainingSpec> f) {
  f.write = [write = f.write, methods = std::vector<TrainingMethod>(methods)](const TrainingSpec& t)
      -> std::optional<Node> {
    if (std::find(methods.begin(), methods.end(), t.method) == methods.end()) return std::nullopt;
    return write(t);
  };
  return f;
}

// training.loss_type: one loss, or a list of them (dpo); written back as it
// is most often given, one name, when there is one.
Field<TrainingSpec> loss_type_field() {
  Field<TrainingSpec> f =
      field("loss_type",
            "dpo: one loss or a list of them, whose terms add up (each weighted by loss_weights, as TRL's DPOTrainer "
            "combines a list): sigmoid (the paper's, the default), ipo (Azar et al. 2023; per-token mean log-ratios), "
            "hinge (SLiC-HF, Zhao et al. 2023), robust (rDPO, Chowdhury et al. 2024; reads label_smoothing), exo_pair "
            "(EXO, Ji et al. 2024; label_smoothing > 0), nca_pair (NCA, Chen et al. 2024), bco_pair (BCO, Jung et al. "
            "2024), sppo_hard (SPPO, Wu et al. 2024), apo_zero or apo_down (APO, D'Oosterlinck et al. 2024), "
            "sigmoid_norm (sigmoid on per-token mean log-ratios), discopop (DiscoPOP, Lu et al. 2024; reads "
            "discopop_tau), sft (the chosen completions' mean token NLL: RPO, Pang et al. 2024, as sigmoid + sft; "
            "MPO as sigmoid + bco_pair + sft), as TRL's DPOTrainer computes them. kto: kto (the paper's Eq. 7, the "
            "default) or apo_zero_unpaired (APO-zero on unpaired examples, D'Oosterlinck et al. 2024; no KL "
            "estimate), as TRL's KTOTrainer computes them.",
            &TrainingSpec::losses, Check<std::vector<PreferenceLoss>>([](const std::vector<PreferenceLoss>& v) {
              if (v.empty()) return std::optional<std::string>("name at least one loss");
              for (std::size_t i = 0; i < v.size(); ++i) {
                for (std::size_t j = 0; j < i; ++j) {
                  if (v[i] == v[j]) {
                    return std::optional<std::string>(std::string(to_string(v[i])) +
                                                      " is named twice; name it once, with its weight in loss_weights");
                  }
                }
              }
              return std::optional<std::string>();
            }));
  f.schema = [doc = f.doc] {
    return Json{
        {"description", doc},
        {"anyOf", Json::array({Codec<PreferenceLoss>::schema(), Codec<std::vector<PreferenceLoss>>::schema()})}};
  };
  f.write = [write = f.write](const TrainingSpec& t) -> std::optional<Node> {
    if (t.losses.size() == 1) return Codec<PreferenceLoss>::write(t.losses.front());
    return write(t);
  };
  return f;
}

// A training key written back only where `read` says the job reads it.
Field<TrainingSpec> written_when(Field<TrainingSpec> f, bool (*read)(const TrainingSpec&)) {
  f.write = [write = f.write, read](const TrainingSpec& t) -> std::optional<Node> {
    if (!read(t)) return std::nullopt;
    return write(t);
  };
  return f;
}

const std::vector<Field<DataSource>>& data_source_fields() {
  static const std::vector<Field<DataSource>> k = {
      field("path", "The dataset: a file, or a folder datasets' save_to_disk wrote; relative to the spec file.",
            &DataSource::path, string_not_empty(), true),
      field("weight",
            "mix concat: times each example is taken per epoch (2: twice, 0.5: a seeded half); mix interleave: "
            "the dataset's share of each epoch's examples, relative to the others' weights. Default 1.",
            &DataSource::weight, number_above(0)),
      optional_field("format", "Its format, as data.format; default data.format, else from its extension.",
                     &DataSource::format),
  };
  return k;
}

// data.train: one path, or a list of datasets (paths, or maps with a weight
// and a format) mixed as data.mix says.
Field<DataSpec> train_field() {
  const std::string doc =
      "Training data, relative to the spec file: a file (or a save_to_disk folder), or a list of datasets "
      "(each a path, or {path, weight, format}) mixed as data.mix says.";
  const Json item_schema{
      {"anyOf", Json::array({Json{{"type", "string"}}, schema_of(data_source_fields(), "A dataset.")})}};
  Field<DataSpec> f = custom_field<DataSpec>(
      "train", doc,
      Json{{"anyOf", Json::array({Json{{"type", "string"}}, Json{{"type", "array"}, {"minItems", 1}, {"items", item_schema}}})}},
      [](const Node& n, DataSpec& s, const std::string& path, Diagnostics& d) {
        if (n.is_null()) return;
        if (!n.is_sequence()) {
          auto v = Codec<std::string>::read(n, path, d);
          if (v && run_check(string_not_empty(), *v, n, path, d)) s.train = *v;
          return;
        }
        if (n.items.empty()) {
          d.error(n.location, path, "lists no dataset");
          return;
        }
        std::vector<DataSource> sources;
        for (std::size_t i = 0; i < n.items.size(); ++i) {
          const Node& item = n.items[i];
          const std::string at = path + "[" + std::to_string(i) + "]";
          DataSource source;
          if (item.is_map()) {
            read_map(item, source, data_source_fields(), at, d);
          } else if (auto v = Codec<std::string>::read(item, at, d)) {
            if (run_check(string_not_empty(), *v, item, at, d)) source.path = *v;
          }
          sources.push_back(std::move(source));
        }
        s.train = sources.front().path;
        s.sources = std::move(sources);
      },
      [](const DataSpec& s) -> std::optional<Node> {
        if (s.sources.empty()) return Codec<std::string>::write(s.train);
        Node list = Node::make_sequence();
        for (const DataSource& source : s.sources) list.items.push_back(write_map(source, data_source_fields()));
        return list;
      });
  f.required = true;
  return f;
}

// Keys of several datasets, written back only for them.
Field<DataSpec> several_datasets_only(Field<DataSpec> f) {
  f.write = [write = f.write](const DataSpec& d) -> std::optional<Node> {
    if (d.sources.empty()) return std::nullopt;
    return write(d);
  };
  return f;
}

const std::vector<Field<DataSpec>>& data_fields() {
  static const std::vector<Field<DataSpec>> k = {
      train_field(),
      several_datasets_only(
          field("mix",
                "Several datasets (data.train a list): concat (the default; each dataset's examples weight times per "
                "epoch) or interleave (the datasets in proportion to their weights, an epoch as many examples as "
                "all of them together).",
                &DataSpec::mix)),
      several_datasets_only(optional_field(
          "mix_seed", "Several datasets: the seed of the mix's sampling and order. Default training.seed.",
          &DataSpec::mix_seed)),
      field("eval",
            "Held-out evaluation data file (optional), read like train: its masked mean loss (eval_loss) "
            "after every training.eval_every steps and after the last.",
            &DataSpec::eval, string_not_empty()),
      field("format",
            "jsonl (JSON Lines), json (a JSON array of records, or JSON Lines), text (paragraphs), tokens "
            "(int32 ids), parquet (a Parquet file) or arrow (an Arrow file, or a folder datasets' save_to_disk "
            "wrote). Default: from the file extension (.jsonl, .json, .txt/.md, .bin/.tokens, .parquet, .arrow; "
            "a folder is arrow).",
            &DataSpec::format),
      field("field", "Records (jsonl, json, parquet, arrow): the text field. Default \"text\".", &DataSpec::field,
            string_not_empty()),
      field("prompt_field",
            "Records (jsonl, json, parquet, arrow): prompt field of prompt/completion pairs, or of preference pairs "
            "(default \"prompt\" "
            "there); the loss is masked on it.",
            &DataSpec::prompt_field, string_not_empty()),
      preference_only(field("chosen_field",
                            "Preference pairs (training.method dpo, orpo, simpo, reward or kto): the preferred "
                            "completion's field. Default \"chosen\".",
                            &DataSpec::chosen_field, string_not_empty())),
      preference_only(field("rejected_field",
                            "Preference pairs: the dispreferred completion's field. Default \"rejected\".",
                            &DataSpec::rejected_field, string_not_empty())),
      when_set(field("margin_field",
                     "Reward models (training.method reward): a field with each pair's margin, a number; the "
                     "loss becomes -log sigmoid(r_chosen - r_rejected - margin), as TRL's RewardTrainer reads "
                     "a \"margin\" column. Default: none (no margin).",
                     &DataSpec::margin_field, string_not_empty()),
               &DataSpec::margin_field),
      when_set(field("label_field",
                     "KTO on unpaired examples (training.method kto): each record is a prompt, a completion "
                     "(data.completion_field, default \"completion\") and this field, true (or 1) where the "
                     "completion is desirable and false (or 0) where it is not, as TRL's KTOTrainer reads its "
                     "unpaired format; strings or, with data.chat: messages, lists of turns. Default: none (the "
                     "records are pairs, each chosen completion desirable and each rejected one not).",
                     &DataSpec::label_field, string_not_empty()),
               &DataSpec::label_field),
      field("completion_field",
            "Records (jsonl, json, parquet, arrow): completion field of prompt/completion pairs, or of kto's "
            "labelled completions (data.label_field; default \"completion\" there).",
            &DataSpec::completion_field, string_not_empty()),
      field("seq_len", "Tokens per sequence. Default: min(2048, the model's max_seq_len).", &DataSpec::seq_len,
            int_at_least(1)),
      field("packing",
            "Pack several documents into each sequence. Default true. Prompt/completion examples are placed "
            "whole (first-fit decreasing), never split; plain text is one stream cut at row boundaries.",
            &DataSpec::packing),
      field("on_long_example",
            "truncate or drop an example longer than seq_len + 1 tokens (prompt/completion packing, or packing "
            "false). Default truncate; one truncated to no trained token is dropped. Plain text is split instead.",
            &DataSpec::on_long_example),
      field("on_bad_record",
            "Records (jsonl, json, parquet, arrow): error (the default: the job fails naming the record) or skip (a "
            "record that cannot be read "
            "or rendered is left out, counted in the plan and the job's start event).",
            &DataSpec::on_bad_record),
      chat_only(
          field("chat",
                "Records are conversations, rendered with the model's chat template: messages (OpenAI's role/content "
                "turns, with a tools column), sharegpt (from/value turns) or alpaca (instruction/input/output). "
                "Default none.",
                &DataSpec::chat)),
      chat_only(
          field("fields",
                "chat: record field names over the format's defaults. messages: messages, tools, role, content; "
                "sharegpt: conversations, from, value, system, tools; alpaca: instruction, input, output, system, "
                "history.",
                &DataSpec::fields)),
      chat_only(
          field("roles",
                "sharegpt: \"from\" values and the roles they stand for, over the defaults (human, user: user; gpt, "
                "assistant, model: assistant; system; tool, observation, function_response: tool).",
                &DataSpec::roles)),
      field("chat_template",
            "chat: a Jinja chat template file, relative to the spec file. Default: the model folder's "
            "chat_template.jinja, else tokenizer_config.json's chat_template.",
            &DataSpec::chat_template, string_not_empty()),
      chat_sft_only(
          field("train_on",
                "chat: the tokens trained: assistant (every assistant turn, the default), all, or last_assistant.",
                &DataSpec::train_on)),
      chat_sft_only(
          field("train_on_eos",
                "chat: train the end-of-turn token after each trained reply (turn, the default), after the last "
                "(last), or none. A template's {% generation %} blocks say it themselves.",
                &DataSpec::train_on_eos)),
  };
  return k;
}

const std::vector<Field<TrainingSpec>>& training_fields() {
  static const std::vector<Field<TrainingSpec>> k = {
      // The bound keeps the planner's arithmetic (divisors, bytes per
      // micro-batch) finite: 2^20 sequences is 250x the largest published
      // pretraining batches (about 4M tokens of 1-4k-token sequences).
      field("global_batch_size", "Sequences per optimizer step over all GPUs, 1 to 1048576. Default 32.",
            &TrainingSpec::global_batch_size, positive_int_at_most(kMaxGlobalBatch)),
      auto_field("micro_batch_size", "Sequences per forward pass per GPU, or auto.", &TrainingSpec::micro_batch_size,
                 positive_int_at_most(kMaxGlobalBatch)),
      field("epochs", "Passes over the training data. Default 1.", &TrainingSpec::epochs, number_above(0)),
      optional_field("max_steps", "Optimizer steps; overrides epochs when set.", &TrainingSpec::max_steps,
                     int_at_least(1)),
      field("lr", "Peak learning rate. Default 1e-4.", &TrainingSpec::lr, number_above(0)),
      field("scheduler", "constant, cosine or linear (after warm-up). Default cosine.", &TrainingSpec::scheduler),
      field("warmup_steps", "Linear warm-up steps. Default 0.", &TrainingSpec::warmup_steps, int_at_least(0)),
      field("weight_decay", "Decoupled weight decay. Default 0.", &TrainingSpec::weight_decay, number_at_least(0)),
      field("grad_clip", "Maximum global gradient norm; 0 disables clipping. Default 1.0.", &TrainingSpec::grad_clip,
            number_at_least(0)),
      field("seed", "Random seed. Default 42.", &TrainingSpec::seed, int_at_least(0)),
      field("eval_every", "Evaluate every N optimizer steps; 0 = at the end only. Default 0.",
            &TrainingSpec::eval_every, int_at_least(0)),
      eval_prompts_only(
          field("eval_prompts",
                "Prompts the model answers at each evaluation (every eval_every steps and after the last; with "
                "data.eval or without), greedily, up to eval_max_tokens new tokens each; the answers are kept with the "
                "job's events and shown on its page. Plain text (after the tokenizer's BOS), or with data.chat a user "
                "turn rendered with the chat template and its generation prompt. At most 16. Default: none.",
                &TrainingSpec::eval_prompts, Check<std::vector<std::string>>([](const std::vector<std::string>& v) {
                  if (v.size() > 16)
                    return std::optional<std::string>("at most 16 prompts, got " + std::to_string(v.size()));
                  for (std::size_t i = 0; i < v.size(); ++i) {
                    if (v[i].empty()) return std::optional<std::string>("prompt " + std::to_string(i) + " is empty");
                  }
                  return std::optional<std::string>();
                }))),
      eval_prompts_only(field("eval_max_tokens",
                              "New tokens per eval prompt, 1 to 1024 (fewer when the model stops). Default 64.",
                              &TrainingSpec::eval_max_tokens, int_in_range(1, 1024))),
      only_for(
          {TrainingMethod::kDpo, TrainingMethod::kOrpo, TrainingMethod::kSimpo, TrainingMethod::kReward,
           TrainingMethod::kKto},
          field("method",
                "sft (the default: the next token of the data), or training on prompt/chosen/rejected preference "
                "pairs: dpo (Direct Preference Optimization, Rafailov et al. 2023, against a frozen reference model "
                "placed by strategy.reference), orpo (Hong et al. 2024: the chosen sequence's NLL plus an odds-ratio "
                "term, no reference), simpo (Meng et al. 2024: length-normalised rewards with a target margin, no "
                "reference) or reward (a reward model: a scalar score head read at each sequence's last token, "
                "trained on the Bradley-Terry pairwise loss as TRL's RewardTrainer does; exported for "
                "AutoModelForSequenceClassification) or kto (Ethayarajh et al. 2024: each pair's chosen completion "
                "a desirable example and its rejected one an undesirable example, each judged alone against the "
                "reference and a KL estimate, as TRL's KTOTrainer does on paired data).",
                &TrainingSpec::method)),
      only_for(
          {TrainingMethod::kDpo, TrainingMethod::kSimpo, TrainingMethod::kKto},
          field("beta",
                "dpo and kto: the scale of the log-ratios (the KL penalty's weight), > 0, default 0.1 as in the papers "
                "and TRL; simpo: the scale of the per-token mean log-probability rewards, > 0, default 2.0 as in the "
                "SimPO paper's configurations.",
                &TrainingSpec::beta, number_above(0))),
      only_for({TrainingMethod::kDpo, TrainingMethod::kKto}, loss_type_field()),
      written_when(field("loss_weights",
                         "dpo: one weight a loss of loss_type, each > 0, in its order: the loss is the sum of each "
                         "loss's mean times its weight (TRL's loss_weights; MPO's sigmoid, bco_pair, sft is 0.8, 0.2, "
                         "1.0). Default: 1 each.",
                         &TrainingSpec::loss_weights, Check<std::vector<double>>([](const std::vector<double>& v) {
                           for (double w : v) {
                             if (!(w > 0) || !std::isfinite(w)) {
                               return std::optional<std::string>("each weight must be above 0, got " +
                                                                 format_number(w));
                             }
                           }
                           return std::optional<std::string>();
                         })),
                   [](const TrainingSpec& t) { return t.method == TrainingMethod::kDpo && !t.loss_weights.empty(); }),
      only_for({TrainingMethod::kDpo},
               optional_field("ld_alpha",
                              "dpo: LD-DPO's weight of each completion's tokens past the length the pair's two "
                              "completions share (Liu et al. 2024, 'Length Desensitization in DPO'; TRL's ld_alpha), "
                              "in [0, 1], in the trained model's and the reference's log-probabilities alike: 1 is "
                              "plain DPO, 0 scores only the shared length. The paper's range is 0.1 to 0.5 (0.2 for "
                              "Llama-3-8B). Default: unset (off).",
                              &TrainingSpec::ld_alpha, number_in_range(0, 1, true))),
      written_when(field("use_weighting",
                         "dpo: WPO's weighting (Zhou et al. 2024, Eq. 2; TRL's use_weighting): each pair's loss "
                         "scaled by its two completions' weights, each exp of the mean over its tokens of log "
                         "p(token) - log sum_v p(v)^2 under the trained model (no gradient through them), so that "
                         "pairs the model would itself write count more. Costs one more pass of the head over the "
                         "completions, without gradients. Not with loss_type sft. Default false.",
                         &TrainingSpec::use_weighting),
                   [](const TrainingSpec& t) { return t.method == TrainingMethod::kDpo && t.use_weighting; }),
      // Written back only where read, so that other jobs' resolved specs
      // do not change (and reload: each is refused where it is not read).
      written_when(field("discopop_tau",
                         "dpo, loss_type discopop: the temperature of sigmoid(h / tau), which mixes its logistic and "
                         "exponential terms, > 0. Default 0.05 (the DiscoPOP paper's, and TRL's).",
                         &TrainingSpec::discopop_tau, number_above(0)),
                   [](const TrainingSpec& t) {
                     return t.method == TrainingMethod::kDpo && has_loss(t, PreferenceLoss::kDiscopop);
                   }),
      written_when(field("f_divergence_type",
                         "dpo: the divergence from the reference the loss regularises (Wang et al. 2023, f-DPO; "
                         "TRL's f_divergence_type): reverse_kl (DPO's, the default), forward_kl, js_divergence or "
                         "alpha_divergence (reads f_alpha_divergence_coef). Read by the losses of h alone: sigmoid, "
                         "sigmoid_norm, hinge, ipo, exo_pair, robust and discopop.",
                         &TrainingSpec::f_divergence_type),
                   [](const TrainingSpec& t) {
                     return t.method == TrainingMethod::kDpo && t.f_divergence_type != FDivergence::kReverseKl;
                   }),
      written_when(field("f_alpha_divergence_coef",
                         "dpo, f_divergence_type alpha_divergence: its a, in [0, 1] (0 is forward KL, 1 reverse KL). "
                         "Default 0.5 (TRL's).",
                         &TrainingSpec::f_alpha_divergence_coef, number_in_range(0, 1, true)),
                   [](const TrainingSpec& t) {
                     return t.method == TrainingMethod::kDpo && t.f_divergence_type == FDivergence::kAlphaDivergence;
                   }),
      only_for({TrainingMethod::kKto},
               field("desirable_weight",
                     "kto: the weight of each desirable (chosen) completion's loss, > 0. Default 1.0. The KTO paper "
                     "suggests desirable_weight x desirable count within 1 to 4/3 of undesirable_weight x undesirable "
                     "count; paired data has as many of each.",
                     &TrainingSpec::desirable_weight, number_above(0))),
      only_for({TrainingMethod::kKto},
               field("undesirable_weight",
                     "kto: the weight of each undesirable (rejected) completion's loss, > 0. Default 1.0.",
                     &TrainingSpec::undesirable_weight, number_above(0))),
      only_for(
          {TrainingMethod::kSimpo},
          field("gamma",
                "simpo: the target reward margin between the chosen and the rejected completion, >= 0. Default 1.0 "
                "(gamma / beta 0.5, the SimPO paper's default ratio).",
                &TrainingSpec::gamma, number_at_least(0))),
      only_for({TrainingMethod::kSimpo},
               field("cpo_alpha",
                     "simpo: the weight of the chosen completions' per-token NLL added to the pair loss, >= 0 (CPO's "
                     "term, Xu et al. 2024; TRL's CPOConfig cpo_alpha: SimPO with it is 'CPO-SimPO'). Default 0.",
                     &TrainingSpec::cpo_alpha, number_at_least(0))),
      only_for({TrainingMethod::kSimpo},
               field("alpha",
                     "simpo: AlphaPO's reward shape (Gupta et al. 2025; TRL's CPOConfig alpha), in [-10, 10]: each "
                     "completion's reward is (1 - p^-alpha) / alpha of its per-token mean probability p instead of "
                     "log p. Default 0 (log p, plain SimPO). Beyond 10, p^-alpha leaves fp32's range once a "
                     "completion's mean log-probability is below -8.8.",
                     &TrainingSpec::alpha, number_in_range(-10, 10, true))),
      only_for({TrainingMethod::kReward},
               field("center_rewards",
                     "reward: the weight of mean((r_chosen + r_rejected)^2) added to the loss, which keeps the scores "
                     "centred on zero, >= 0 (Eisenstein et al. 2023, 'Helping or Herding?'; TRL's "
                     "center_rewards_coefficient, which suggests 0.01). Default 0 (off).",
                     &TrainingSpec::center_rewards, number_at_least(0))),
      only_for({TrainingMethod::kOrpo},
               field("lambda",
                     "orpo: the weight of the odds-ratio term beside the chosen sequence's NLL, > 0. Default 0.1 (the "
                     "ORPO paper's lambda; TRL's ORPOConfig calls it beta).",
                     &TrainingSpec::orpo_lambda, number_above(0))),
      // Written back only where it is read, so other jobs' resolved form
      // does not change.
      [] {
        Field<TrainingSpec> f =
            field("label_smoothing",
                  "dpo with loss_type robust or exo_pair, and simpo: the assumed share of flipped preference labels, "
                  "in [0, 0.5) (exo_pair: above 0; TRL suggests 1e-3). Default 0.",
                  &TrainingSpec::label_smoothing, number_in_range(0, 0.5, false));
        f.write = [write = f.write](const TrainingSpec& t) -> std::optional<Node> {
          const bool dpo =
              t.method == TrainingMethod::kDpo && std::any_of(t.losses.begin(), t.losses.end(), uses_label_smoothing);
          const bool simpo = t.method == TrainingMethod::kSimpo && t.label_smoothing > 0;
          if (!dpo && !simpo) return std::nullopt;
          return write(t);
        };
        return f;
      }(),
  };
  return k;
}

const std::vector<Field<LoraSpec>>& lora_fields() {
  static const std::vector<Field<LoraSpec>> k = {
      field("r", "Adapter rank. Default 16.", &LoraSpec::r, int_at_least(1)),
      field("alpha", "Scaling numerator (updates are scaled by alpha / r). Default 32.", &LoraSpec::alpha,
            number_above(0)),
      field("dropout", "Dropout on the adapter input, in [0, 1). Default 0.05.", &LoraSpec::dropout,
            number_in_range(0, 1, false)),
      field("targets",
            "Target linear layers by their Hugging Face names (" + lora_targets_doc() + "). Default: all of them.",
            &LoraSpec::targets),
      field("modules_to_save",
            "The embedding and the head trained whole beside the adapters, by their Hugging Face names "
            "(embed_tokens, lm_head; gpt2: wte; gpt_neox: embed_in, embed_out), as PEFT's modules_to_save: new "
            "tokens' rows learn, and the adapter folder carries both matrices. A tied model's one matrix needs "
            "both names. Not with a reward model, or dpo and kto (their reference is the starting model); "
            "under planner.runtime other than tailor, not with ZeRO-3 or offload (not modelled). Default: none.",
            &LoraSpec::modules_to_save),
  };
  return k;
}

Field<StrategySpec> technique_list(std::string key, std::string doc, std::vector<Technique> StrategySpec::*member) {
  return custom_field<StrategySpec>(
      key, doc, Codec<std::vector<Technique>>::schema(),
      [member](const Node& n, StrategySpec& s, const std::string& path, Diagnostics& d) {
        if (n.is_null()) return;
        if (auto v = Codec<std::vector<Technique>>::read(n, path, d)) s.*member = *v;
      },
      [member](const StrategySpec& s) -> std::optional<Node> { return Codec<std::vector<Technique>>::write(s.*member); });
}

// Written only when pinned, so resolved specs of supervised jobs read as
// before; auto is the default.
Field<StrategySpec> reference_field() {
  Field<StrategySpec> f = auto_field(
      "reference",
      "dpo and kto: where the reference model's log-probabilities come from: adapter_off (LoRA/QLoRA: the "
      "same weights with the adapters off; no memory, one more forward each step), precomputed (dpo: one "
      "forward over the data before training, cached on disk for later jobs; no memory), separate (a frozen "
      "copy of the starting weights, sharded at ZeRO-3; beside adapters that start from model.adapter, those "
      "adapters frozen), or auto (under adapters adapter_off, or separate from model.adapter; else dpo "
      "precomputed, kto separate).",
      &StrategySpec::reference);
  f.write = [write = f.write](const StrategySpec& s) -> std::optional<Node> {
    if (!s.reference) return std::nullopt;
    return write(s);
  };
  return f;
}

const std::vector<Field<StrategySpec>>& strategy_fields() {
  static const std::vector<Field<StrategySpec>> k = {
      auto_field("precision",
                 "fp32; bf16 or fp16 (mixed precision, fp32 master weights and optimizer states); pure-bf16 "
                 "(weights, gradients and optimizer states all bf16); or auto.",
                 &StrategySpec::precision),
      custom_field<StrategySpec>(
          "gradient_checkpointing", "true (every layer), false, an integer N (checkpoint every N-th layer), or auto.",
          Json{{"anyOf", Json::array({Json{{"type", "boolean"}}, Json{{"type", "integer"}, {"minimum", 0}},
                                      Json{{"const", "auto"}}})}},
          [](const Node& n, StrategySpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null() || is_auto(n)) {
              s.gradient_checkpointing.reset();
              return;
            }
            if (n.is_scalar()) {
              const std::string v = to_lower(n.scalar);
              if (v == "true" || v == "yes" || v == "on") {
                s.gradient_checkpointing = 1;
                return;
              }
              if (v == "false" || v == "no" || v == "off") {
                s.gradient_checkpointing = 0;
                return;
              }
              Diagnostics scratch;
              if (auto every = read_int(n, path, scratch); every && *every >= 0) {
                s.gradient_checkpointing = *every;
                return;
              }
            }
            d.error(n.location, path,
                    "expected true, false, auto or a layer interval N >= 0, got " +
                        (n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name())));
          },
          [](const StrategySpec& s) -> std::optional<Node> {
            if (!s.gradient_checkpointing) return Node::make_scalar("auto");
            if (*s.gradient_checkpointing <= 1) return Codec<bool>::write(*s.gradient_checkpointing == 1);
            return Codec<std::int64_t>::write(*s.gradient_checkpointing);
          }),
      auto_field("adapter", "none (full fine-tune), lora, qlora (LoRA on a 4-bit NF4 base), or auto.",
                 &StrategySpec::adapter),
      section("lora", "LoRA settings, used when the adapter is lora or qlora.", &StrategySpec::lora, &lora_fields()),
      auto_field("quantization",
                 "How QLoRA stores the frozen base: nf4-double-quant (4-bit NormalFloat with 8-bit scales, 0.52 "
                 "B/param), nf4 (fp32 scales, 0.56 B/param: bitsandbytes without double quantisation), none, or "
                 "auto (nf4-double-quant under qlora); int8 is planned for other runtimes (planner.runtime), not "
                 "run by tailor-runner. A value other than none means qlora.",
                 &StrategySpec::quantization),
      auto_field("optimizer",
                 "adamw, adamw_8bit (8-bit block-wise states), sgd (with momentum) or lion (one momentum, "
                 "sign updates: a learning rate 3-10x below AdamW's), or auto.",
                 &StrategySpec::optimizer),
      auto_field("zero_stage", "ZeRO stage 0-3 (shard optimizer states, gradients, parameters), or auto.",
                 &StrategySpec::zero_stage, int_in_range(0, 3)),
      auto_field("offload", "none, optimizer, optimizer_and_params (to host RAM), or auto.", &StrategySpec::offload),
      reference_field(),
      custom_field<StrategySpec>(
          "activation_offload",
          "true: keep each checkpointed layer's saved input in host memory (pinned on a GPU) between its forward "
          "and its backward, brought back a layer ahead; the device holds two instead of one per checkpointed "
          "layer. Needs gradient checkpointing; tailor-runner only. false: never. auto (the default): the "
          "planner's choice, which does not choose it yet on its own.",
          Json{{"anyOf", Json::array({Json{{"type", "boolean"}}, Json{{"const", "auto"}}})}},
          [](const Node& n, StrategySpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null() || is_auto(n)) {
              s.activation_offload.reset();
              return;
            }
            Diagnostics scratch;
            if (auto v = Codec<bool>::read(n, path, scratch)) {
              s.activation_offload = *v;
              return;
            }
            d.error(
                n.location, path,
                "expected true, false or auto, got " + (n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name())));
          },
          // Written only when pinned, so that resolved specs read as before.
          [](const StrategySpec& s) -> std::optional<Node> {
            if (!s.activation_offload) return std::nullopt;
            return Codec<bool>::write(*s.activation_offload);
          }),
      technique_list("allow", "If set, the only techniques the planner may choose.", &StrategySpec::allow),
      technique_list("forbid", "Techniques the planner must not choose (e.g. adapters for a full fine-tune).",
                     &StrategySpec::forbid),
      field("allow_lossy",
            "Let a full fine-tune combine pure bf16 weights with 8-bit optimizer states (both round the update; "
            "together small updates can be lost). Default false: the planner chooses that pair only when both are "
            "pinned.",
            &StrategySpec::allow_lossy),
      custom_field<StrategySpec>(
          "headroom",
          "Fraction of each device's memory a plan keeps free for estimate error and fragmentation, e.g. 15%. "
          "Default: the measured error of the plan's kind of job: 10% for tailor-runner (its largest "
          "under-estimates measured are 8-10%); for another stack (planner.runtime) the 90th percentile of the "
          "published peaks' under-estimates of its runtime, adapter and sharding (tailor plan says which).",
          Codec<Fraction>::schema(),
          [](const Node& n, StrategySpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null()) return;
            if (auto f = read_headroom(n, path, d)) s.headroom = *f;
          },
          // Written only when set: unset, each plan keeps its kind's
          // (strategies/headroom.h), a resolved spec included.
          [](const StrategySpec& s) -> std::optional<Node> {
            if (!s.headroom) return std::nullopt;
            return Codec<Fraction>::write({*s.headroom});
          }),
      custom_field<StrategySpec>(
          "probe",
          "off (the default; also 0), or K from 1 to 5: before training, measure the planner's K fastest plans that "
          "fit "
          "on this machine (a few steps each on the longest batches; a plan of several ranks by its ranks together) "
          "and train with the "
          "fastest measured one that stays within the budget; the plan records each one's predicted and "
          "measured speed and peak. A probe that runs out of memory is a measured \"does not fit\".",
          Json{{"anyOf", Json::array({Json{{"type", "integer"}, {"minimum", 0}, {"maximum", kMaxProbe}},
                                      Json{{"const", "off"}}})}},
          [](const Node& n, StrategySpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null() || (n.is_scalar() && n.scalar == "off")) {
              s.probe = 0;
              return;
            }
            Diagnostics scratch;
            if (auto plans = read_int(n, path, scratch); plans && *plans >= 0 && *plans <= kMaxProbe) {
              s.probe = *plans;
              return;
            }
            d.error(n.location, path,
                    "expected off (or 0) or a number of plans from 1 to " + std::to_string(kMaxProbe) + ", got " +
                        (n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name())));
          },
          [](const StrategySpec& s) -> std::optional<Node> {
            if (s.probe == 0) return std::nullopt;
            return Codec<std::int64_t>::write(s.probe);
          }),
  };
  return k;
}

// Written only when it says cpu, so that resolved specs and plan documents
// of the usual case read as before.
Field<ResourcesSpec> device_field() {
  Field<ResourcesSpec> f =
      field("device",
            "Where tailor-runner trains: auto (the default: the plan's kind of hardware; a GPU plan on a CUDA "
            "device, an error saying why when the runner finds none) or cpu (on the CPU whatever the plan is "
            "for, e.g. to try a GPU plan on a laptop; the plan's memory budget then does not apply).",
            &ResourcesSpec::device);
  f.write = [](const ResourcesSpec& s) -> std::optional<Node> {
    if (s.device == TrainDevice::kAuto) return std::nullopt;
    return Codec<TrainDevice>::write(s.device);
  };
  return f;
}

const std::vector<Field<ResourcesSpec>>& resources_fields() {
  static const std::vector<Field<ResourcesSpec>> k = {
      custom_field<ResourcesSpec>(
          "gpus", "auto (all detected), a count (0 = CPU), or a list of device indices.",
          Json{{"anyOf", Json::array({Json{{"type", "integer"}, {"minimum", 0}},
                                      Json{{"type", "array"}, {"items", {{"type", "integer"}, {"minimum", 0}}}},
                                      Json{{"const", "auto"}}})}},
          [](const Node& n, ResourcesSpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null() || is_auto(n)) {
              s.gpu_count.reset();
              s.gpu_ids.clear();
              return;
            }
            if (n.is_sequence()) {
              auto ids = Codec<std::vector<std::int64_t>>::read(n, path, d);
              if (!ids) return;
              for (std::size_t i = 0; i < ids->size(); ++i) {
                const Node& at = n.items[i];
                if ((*ids)[i] < 0) {
                  d.error(at.location, path + "[" + std::to_string(i) + "]", "GPU indices are non-negative");
                  return;
                }
                for (std::size_t j = 0; j < i; ++j) {
                  if ((*ids)[j] == (*ids)[i]) {
                    d.error(at.location, path + "[" + std::to_string(i) + "]",
                            "GPU " + std::to_string((*ids)[i]) + " is listed twice");
                    return;
                  }
                }
              }
              s.gpu_ids = *ids;
              s.gpu_count = static_cast<std::int64_t>(ids->size());
              return;
            }
            if (auto count = read_int(n, path, d)) {
              if (*count < 0) {
                d.error(n.location, path, "expected a GPU count of at least 0, got " + std::to_string(*count));
                return;
              }
              s.gpu_count = *count;
              s.gpu_ids.clear();
            }
          },
          [](const ResourcesSpec& s) -> std::optional<Node> {
            if (!s.gpu_ids.empty()) return Codec<std::vector<std::int64_t>>::write(s.gpu_ids);
            if (s.gpu_count) return Codec<std::int64_t>::write(*s.gpu_count);
            return Node::make_scalar("auto");
          }),
      field("gpu_model", "GPU catalog name (e.g. A6000, H100-80) to plan for instead of detecting.",
            &ResourcesSpec::gpu_model, string_not_empty()),
      optional_field("gpu_memory", "Memory per GPU, e.g. 24GiB; overrides the GPU model's figure.",
                     &ResourcesSpec::gpu_memory, bytes_positive()),
      optional_field("host_memory", "Host RAM per node available to the job, e.g. 64GiB. Default: detected.",
                     &ResourcesSpec::host_memory, bytes_positive()),
      field("nodes", "Machines the job spans; gpus counts the GPUs of each. Default 1.", &ResourcesSpec::nodes,
            int_in_range(1, 4096)),
      optional_field("ranks",
                     "Training processes (data-parallel ranks). On GPUs at most one per GPU; default: every GPU "
                     "or one, whichever plans faster. On the CPU, processes sharing its cores and memory; default 1.",
                     &ResourcesSpec::ranks, int_in_range(1, 4096)),
      device_field(),
      custom_field<ResourcesSpec>(
          "headroom", "Deprecated: use strategy.headroom.", Codec<Fraction>::schema(),
          [](const Node& n, ResourcesSpec& s, const std::string& path, Diagnostics& d) {
            if (n.is_null()) return;
            if (auto f = read_headroom(n, path, d)) {
              s.headroom = *f;
              d.warning(n.location, path, "resources.headroom is now strategy.headroom (a planning policy, not hardware)");
            }
          },
          [](const ResourcesSpec& s) -> std::optional<Node> {
            if (!s.headroom) return std::nullopt;
            return Codec<Fraction>::write({*s.headroom});
          }),
  };
  return k;
}

// A version is text ("4.47"), but YAML reads 4.47 unquoted as a number:
// the schema takes both, and the reader the scalar's text either way.
Field<PlannerSpec> transformers_field() {
  Field<PlannerSpec> f =
      field("transformers",
            "Under runtime hf: the transformers version the run uses (major.minor[.patch], e.g. 4.47). 4.x "
            "keeps more than 5.x: every checkpointed layer input and its gradient until backward ends under "
            "FSDP with adapters (checkpointing is reentrant by default), and 4.46-4.48 an fp32 copy of the "
            "shifted logits. Default: 5.x.",
            &PlannerSpec::transformers, Check<std::string>([](const std::string& v) -> std::optional<std::string> {
              if (parse_library_version(v)) return std::nullopt;
              return "expected a version major.minor[.patch] such as 4.47, got \"" + v + "\"";
            }));
  const std::string doc = f.doc;
  f.schema = [doc] { return Json{{"description", doc}, {"type", Json::array({"string", "number"})}}; };
  return f;
}

const std::vector<Field<PlannerSpec>>& planner_fields() {
  static const std::vector<Field<PlannerSpec>> k = {
      field("runtime",
            "Whose memory behaviour plans predict: tailor (tailor-runner, the default), hf (transformers with "
            "PEFT, TRL, Axolotl: bitsandbytes QLoRA, composed losses), torchtune, litgpt or torchtitan.",
            &PlannerSpec::runtime),
      transformers_field(),
  };
  return k;
}

const std::vector<Field<CheckpointSpec>>& checkpoint_fields() {
  static const std::vector<Field<CheckpointSpec>> k = {
      field("every_steps", "Save every N optimizer steps; 0 = only at the end. Default 0.",
            &CheckpointSpec::every_steps, int_at_least(0)),
      field("keep", "Keep the newest K checkpoints. Default 3.", &CheckpointSpec::keep, int_at_least(1)),
      field("dir", "Folder inside the job's output folder. Default \"checkpoints\".", &CheckpointSpec::dir,
            string_not_empty()),
  };
  return k;
}

const std::vector<Field<OutputSpec>>& output_fields() {
  static const std::vector<Field<OutputSpec>> k = {
      optional_field("merge",
                     "Write the merged model (model/, a Hugging Face folder) as well as the adapter. Default: true "
                     "for a full fine-tune, false with LoRA or QLoRA (adapter/ is the output, at adapter size).",
                     &OutputSpec::merge),
  };
  return k;
}

const std::vector<Field<SlurmSpec>>& slurm_fields() {
  static const std::vector<Field<SlurmSpec>> k = {
      field("partition", "Partition to submit to. Default: tailord's --slurm-partition, else Slurm's default.",
            &SlurmSpec::partition, string_not_empty()),
      field("account", "Account to charge (sbatch --account).", &SlurmSpec::account, string_not_empty()),
      field("qos", "Quality of service (sbatch --qos).", &SlurmSpec::qos, string_not_empty()),
      field("time_limit", "Time limit in Slurm's format: minutes, hours:minutes:seconds or days-hours:minutes.",
            &SlurmSpec::time_limit, Check<std::string>([](const std::string& v) { return check_slurm_time_limit(v); })),
      field("sbatch_options", "Extra sbatch arguments, one per item, e.g. --exclusive or --constraint=a100.",
            &SlurmSpec::sbatch_options, Check<std::vector<std::string>>([](const std::vector<std::string>& v) {
              for (const std::string& o : v) {
                if (auto why = check_sbatch_option(o)) return std::optional<std::string>("\"" + o + "\": " + *why);
              }
              return std::optional<std::string>();
            })),
  };
  return k;
}

const std::vector<Field<ExecutorSpec>>& executor_fields() {
  static const std::vector<Field<ExecutorSpec>> k = {
      field("kind",
            "Where tailord runs the job: local (its own machine), slurm (the cluster), auto (the cluster when its "
            "own machine cannot hold the job) or default (tailord's --executor).",
            &ExecutorSpec::kind),
      section("slurm", "sbatch settings for a job run on Slurm.", &ExecutorSpec::slurm, &slurm_fields()),
  };
  return k;
}

// The executor section, left out of a resolved spec while it says nothing
// (most specs leave the choice to tailord).
Field<JobSpec> executor_section() {
  Field<JobSpec> f = section("executor", "Where tailord runs the job: its machine or a Slurm cluster.",
                             &JobSpec::executor, &executor_fields());
  f.write = [write = f.write](const JobSpec& s) -> std::optional<Node> {
    const ExecutorSpec& e = s.executor;
    const SlurmSpec& sl = e.slurm;
    if (e.kind == ExecutorKind::kDefault && sl.partition.empty() && sl.account.empty() && sl.qos.empty() &&
        sl.time_limit.empty() && sl.sbatch_options.empty()) {
      return std::nullopt;
    }
    return write(s);
  };
  return f;
}

// MLflow's rule for tag keys (mlflow/utils/validation.py): letters,
// digits, '_', '-', '.', ' ' and '/'.
std::optional<std::string> check_mlflow_tags(const std::map<std::string, std::string>& tags) {
  for (const auto& [k, v] : tags) {
    if (k.empty() || k.size() > 250) return "tag key \"" + k.substr(0, 80) + "\": 1 to 250 characters";
    for (char c : k) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != ' ' && c != '/') {
        return "tag key \"" + k + "\": MLflow takes letters, digits, '_', '-', '.', ' ' and '/'";
      }
    }
    if (v.size() > 8000) return "tag \"" + k + "\": values take at most 8000 characters";
  }
  return std::nullopt;
}

const std::vector<Field<TensorboardSpec>>& tensorboard_fields() {
  static const std::vector<Field<TensorboardSpec>> k = {
      optional_field("enabled", "Write TensorBoard event files. Default true where this section is written.",
                     &TensorboardSpec::enabled),
      field("dir", "Their folder, relative to the job's output folder. Default: that folder itself.",
            &TensorboardSpec::dir, Check<std::string>([](const std::string& v) -> std::optional<std::string> {
              if (!v.empty() && (v.front() == '/' || v == ".." || v.rfind("../", 0) == 0 ||
                                 v.find("/../") != std::string::npos)) {
                return std::string("must lie inside the job's output folder (a relative path without '..')");
              }
              return std::nullopt;
            })),
  };
  return k;
}

const std::vector<Field<MlflowSpec>>& mlflow_fields() {
  static const std::vector<Field<MlflowSpec>> k = {
      optional_field("enabled", "Log the job to an MLflow tracking server. Default true where this section is written.",
                     &MlflowSpec::enabled),
      field("uri",
            "The tracking server, http(s)://host[:port][/prefix]; default tailord's mlflow_uri. Credentials come "
            "from the environment as MLflow's clients read them (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME "
            "and MLFLOW_TRACKING_PASSWORD), never from the spec.",
            &MlflowSpec::uri, Check<std::string>([](const std::string& v) -> std::optional<std::string> {
              if (v.rfind("http://", 0) == 0 || v.rfind("https://", 0) == 0) {
                if (v.find_first_of(" \t\r\n@") == std::string::npos) return std::nullopt;
                return std::string("credentials and spaces do not belong in the URI (MLFLOW_TRACKING_USERNAME and "
                                   "MLFLOW_TRACKING_PASSWORD carry credentials)");
              }
              return std::string("expected an http:// or https:// URI of an MLflow tracking server");
            })),
      field("experiment", "Experiment name, found or created. Default: tailord's mlflow_experiment, else \"Default\".",
            &MlflowSpec::experiment, string_not_empty()),
      field("run_name", "Run name. Default: the job's name.", &MlflowSpec::run_name, string_not_empty()),
      field("tags", "Tags set on the run (as well as tailor.job and tailor.run_dir).", &MlflowSpec::tags,
            Check<std::map<std::string, std::string>>(check_mlflow_tags)),
  };
  return k;
}

// A tracker's section turns it on by being written; left out of a resolved
// spec while unset.
template <class Sub>
Field<TrackingSpec> tracker_section(std::string key, std::string doc, Sub TrackingSpec::*member,
                                    const std::vector<Field<Sub>>* table) {
  Field<TrackingSpec> f = section(key, doc, member, table);
  f.read = [read = f.read, member](const Node& n, TrackingSpec& s, const std::string& path, Diagnostics& d) {
    read(n, s, path, d);
    if (n.is_map() && !(s.*member).enabled) (s.*member).enabled = true;
  };
  f.write = [write = f.write, member](const TrackingSpec& s) -> std::optional<Node> {
    if (!(s.*member).enabled) return std::nullopt;
    return write(s);
  };
  return f;
}

const std::vector<Field<TrackingSpec>>& tracking_fields() {
  static const std::vector<Field<TrackingSpec>> k = {
      tracker_section("tensorboard", "TensorBoard event files: every metric, the spec and the plan.",
                      &TrackingSpec::tensorboard, &tensorboard_fields()),
      tracker_section("mlflow", "An MLflow run: the spec and plan as params, every metric, the final status.",
                      &TrackingSpec::mlflow, &mlflow_fields()),
  };
  return k;
}

Field<JobSpec> tracking_section() {
  Field<JobSpec> f = section("tracking", "Experiment trackers the job reports to, besides tailord.",
                             &JobSpec::tracking, &tracking_fields());
  f.write = [write = f.write](const JobSpec& s) -> std::optional<Node> {
    if (!s.tracking.tensorboard.enabled && !s.tracking.mlflow.enabled) return std::nullopt;
    return write(s);
  };
  return f;
}

// Keys consumed before field reading (they shape the tree itself).
Field<JobSpec> consumed(std::string key, std::string doc, Json schema) {
  return custom_field<JobSpec>(
      key, doc, schema, [](const Node&, JobSpec&, const std::string&, Diagnostics&) {},
      [](const JobSpec&) -> std::optional<Node> { return std::nullopt; });
}

Field<JobSpec> constant(std::string key, std::string doc, std::string value) {
  return custom_field<JobSpec>(
      key, doc, Json{{"const", value}},
      [value](const Node& n, JobSpec&, const std::string& path, Diagnostics& d) {
        if (!n.is_scalar() || n.scalar != value) {
          d.error(n.location, path,
                  "expected \"" + value + "\", got " + (n.is_scalar() ? quote(n.scalar) : std::string(n.kind_name())));
        }
      },
      [value](const JobSpec&) -> std::optional<Node> { return Node::make_scalar(value); });
}

const std::vector<Field<JobSpec>>& job_fields() {
  static const std::vector<Field<JobSpec>> k = [] {
    std::vector<Field<JobSpec>> t = {
        constant("apiVersion", "Spec version: tailor/v1.", kApiVersion),
        constant("kind", "Document kind: TrainingJob.", kJobKind),
        field("name", "Job name: lowercase letters, digits, '.', '_' and '-'; default: the file name.",
              &JobSpec::name, string_not_empty()),
        consumed("extends", "A base spec (path relative to this file) deep-merged under this one.",
                 Json{{"type", "string"}}),
        consumed("vars", "Variables for ${name} interpolation in any string value.",
                 Json{{"type", "object"}, {"additionalProperties", {{"type", Json::array({"string", "number", "boolean"})}}}}),
        section("model", "The model to train: preset, path or arch.", &JobSpec::model, &model_fields_resolved()),
        section("data", "Training data.", &JobSpec::data, &data_fields()),
        section("training", "Optimisation settings.", &JobSpec::training, &training_fields()),
        section("strategy", "Memory strategy knobs: auto or pinned.", &JobSpec::strategy, &strategy_fields()),
        section("resources", "Hardware to plan for.", &JobSpec::resources, &resources_fields()),
        section("planner", "How plans are made.", &JobSpec::planner, &planner_fields()),
        section("checkpoint", "Checkpointing.", &JobSpec::checkpoint, &checkpoint_fields()),
        section("output", "What the job writes when it finishes.", &JobSpec::output, &output_fields()),
        executor_section(),
        tracking_section(),
        field("retries", "Retries after failures other than bad input. Default 2.", &JobSpec::retries,
              int_in_range(0, 100)),
        field("priority", "Scheduling priority; higher runs first. Default 0.", &JobSpec::priority,
              int_in_range(-1000, 1000)),
        field("labels",
              "Key/value labels for filtering (GET /v1/jobs?label=k=v): at most 64; keys of letters, digits, "
              "'.', '_', '/' and '-' (at most 63 characters); values at most 256 characters, without ','.",
              &JobSpec::labels),
    };
    t[0].required = true;
    t[1].required = true;
    return t;
  }();
  return k;
}

}  // namespace

std::int64_t ModelArch::parameter_count() const {
  const std::int64_t h = hidden, q_dim = heads * head_dim(), kv_dim = kv_heads * head_dim();
  std::int64_t per_layer = 0;
  std::int64_t total = vocab * h;  // token embedding
  const ModelFamilyInfo& f = family_info(family);
  if (block_traits(f.block).layer_norm) {
    // GPT-2 and GPT-NeoX: two LayerNorms, q/k/v (+bias), the attention's
    // output (+bias), the MLP's two linears (+bias)
    per_layer = 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + 2 * h + (h * intermediate + intermediate) +
                (intermediate * h + h);
    if (f.tensors.positions) total += max_seq_len * h;  // GPT-2's learned position embedding
    total += 2 * h;                                     // the final LayerNorm
  } else {
    // q, k, v, o projections; gate, up, down (in every expert, plus the
    // router, under a mixture of experts); two RMSNorms.
    const std::int64_t mlp = 3 * h * intermediate;
    per_layer = h * q_dim + 2 * h * kv_dim + q_dim * h + (moe() ? experts * (mlp + h) : mlp) + 2 * h;
    if (f.qkv_bias) per_layer += q_dim + 2 * kv_dim;  // q/k/v biases
    if (f.qk_norm) per_layer += 2 * head_dim();        // q_norm, k_norm (one head wide)
    if (f.gemma) per_layer += 2 * h;                   // post-attention and post-MLP norms
    total += h;                                  // final norm
  }
  total += layers * per_layer;
  if (!tie_embeddings) total += vocab * h;  // lm_head
  return total;
}

void read_job_spec(const Node& root, JobSpec& spec, Diagnostics& d) { read_map(root, spec, job_fields(), "", d); }

Node write_job_spec(const JobSpec& spec) { return write_map(spec, job_fields()); }

std::string job_spec_json_schema(const Catalog* catalog) {
  Json schema = schema_of(job_fields(), "A Tailor training job (apiVersion tailor/v1, kind TrainingJob).");
  if (catalog != nullptr) {
    Json models = Json::array();
    for (const ModelPreset& m : catalog->models()) models.push_back(m.name);
    Json gpus = Json::array();
    for (const GpuModel& g : catalog->gpus()) gpus.push_back(g.key);
    schema["properties"]["model"]["properties"]["preset"]["examples"] = models;
    schema["properties"]["resources"]["properties"]["gpu_model"]["examples"] = gpus;
  }
  Json out{{"$schema", "https://json-schema.org/draft/2020-12/schema"},
           {"$id", "https://tailor.dev/schemas/tailor-v1-trainingjob.json"},
           {"title", "Tailor TrainingJob"}};
  for (auto& [k, v] : schema.items()) out[k] = v;
  return out.dump(2) + "\n";
}

void read_model_arch(const Node& n, ModelArch& arch, const std::string& path, Diagnostics& d) {
  read_map(n, arch, arch_fields(), path, d);
}

Node write_model_arch(const ModelArch& arch) { return write_map(arch, arch_fields()); }

const char* to_string(ModelFamily v) { return name_of(v); }
const char* to_string(DataFormat v) { return name_of(v); }
const char* to_string(ModelInit v) { return name_of(v); }
const char* to_string(LrScheduler v) { return name_of(v); }
const char* to_string(Runtime v) { return name_of(v); }
const char* to_string(ExecutorKind v) { return name_of(v); }
const char* to_string(LongExample v) { return name_of(v); }
const char* to_string(ChatFormat v) { return name_of(v); }
const char* to_string(OnBadRecord v) { return name_of(v); }
const char* to_string(DataMix v) { return name_of(v); }
const char* to_string(TrainOn v) { return name_of(v); }
const char* to_string(TrainOnEos v) { return name_of(v); }
const char* to_string(TrainingMethod v) { return name_of(v); }
const char* to_string(PreferenceLoss v) { return name_of(v); }
const char* to_string(FDivergence v) { return name_of(v); }

const char* to_string(Packing v) {
  switch (v) {
    case Packing::kNone: return "none";
    case Packing::kStream: return "stream";
    case Packing::kWholeExamples: return "whole-examples";
  }
  return "?";
}

const char* describe(Packing v) {
  switch (v) {
    case Packing::kNone: return "none: one example per row, padded";
    case Packing::kStream: return "stream, split at row boundaries (plain text)";
    case Packing::kWholeExamples: return "whole examples, first-fit decreasing";
  }
  return "?";
}
const char* to_string(TrainDevice v) { return name_of(v); }

std::optional<std::string> check_slurm_time_limit(const std::string& v) {
  // sbatch(1) --time: "minutes", "minutes:seconds", "hours:minutes:seconds",
  // "days-hours", "days-hours:minutes", "days-hours:minutes:seconds".
  const std::string why = "expected a Slurm time limit: minutes, hours:minutes:seconds or days-hours[:minutes[:seconds]]";
  if (v.empty() || v.size() > 16) return why;
  auto numbers = [](const std::string& part, std::size_t max_parts) {
    const auto pieces = split(part, ':');
    if (pieces.empty() || pieces.size() > max_parts) return false;
    for (const std::string& p : pieces) {
      if (p.empty() || p.size() > 6 || p.find_first_not_of("0123456789") != std::string::npos) return false;
    }
    return true;
  };
  const std::size_t dash = v.find('-');
  if (dash == std::string::npos) return numbers(v, 3) ? std::nullopt : std::optional<std::string>(why);
  const std::string days = v.substr(0, dash), rest = v.substr(dash + 1);
  if (days.empty() || days.find_first_not_of("0123456789") != std::string::npos) return why;
  return numbers(rest, 3) ? std::nullopt : std::optional<std::string>(why);
}

std::optional<std::string> check_sbatch_option(const std::string& v) {
  if (v.size() < 3 || v.rfind("--", 0) != 0 || v.size() > 256) return "expected --name or --name=value";
  for (const char c : v) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "control characters are not allowed";
  }
  const std::string name = v.substr(2, v.find('=') == std::string::npos ? std::string::npos : v.find('=') - 2);
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
    return "expected --name or --name=value with a lowercase option name";
  }
  // What the batch script and tailord's reconciliation rely on.
  static const char* const kOurs[] = {"comment", "requeue", "no-requeue", "output", "error", "open-mode", "chdir",
                                      "nodes", "ntasks", "ntasks-per-node", "job-name", "parsable", "wrap",
                                      "array", "export", "export-file", "gres", "gpus", "gpus-per-node", "wait",
                                      "partition", "account", "qos", "time"};
  for (const char* ours : kOurs) {
    if (name == ours) return "Tailor sets --" + name + " itself" +
                             (name == "partition" || name == "account" || name == "qos" || name == "time"
                                  ? std::string("; use executor.slurm.") + (name == "time" ? "time_limit" : name)
                                  : std::string());
  }
  return std::nullopt;
}

}  // namespace tailor::dsl
