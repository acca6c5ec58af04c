// JobSpec: a validated `kind: TrainingJob` document as typed structs.
// Every field says its meaning, default and unit. A strategy knob held in a
// std::optional is "auto" when empty: the planner decides it.
// The loader (dsl/spec_loader.h) fills these; nothing here parses YAML.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "dsl/technique.h"

namespace tailor::dsl {

inline constexpr const char* kApiVersion = "tailor/v1";
inline constexpr const char* kJobKind = "TrainingJob";

enum class ModelFamily { kLlama, kGpt2, kMistral, kQwen2, kQwen3, kMixtral, kPhi3, kGemma2, kGemma3, kGptNeox };

// RoPE's frequencies stretched for a longer context than pretraining's.
enum class RopeScalingType {
  kNone,
  kLinear,  // every frequency divided by factor (position interpolation, Chen et al. 2023)
  kLlama3,  // Llama 3.1's: low frequencies divided by factor, high ones kept, a smooth ramp between
};
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;             // llama3: wavelengths over original / low_freq_factor are divided
  double high_freq_factor = 4.0;            // llama3: wavelengths under original / high_freq_factor are kept
  std::int64_t original_max_seq_len = 0;    // llama3: pretraining's context (original_max_position_embeddings)
};

// A decoder-only transformer's shape, as in a Hugging Face config.json.
struct ModelArch {
  ModelFamily family = ModelFamily::kLlama;
  std::int64_t layers = 0;        // transformer blocks (num_hidden_layers)
  std::int64_t hidden = 0;        // model width (hidden_size)
  std::int64_t intermediate = 0;  // MLP width (intermediate_size); gpt2 default 4 * hidden
  std::int64_t heads = 0;         // attention heads (num_attention_heads)
  std::int64_t kv_heads = 0;      // key/value heads for grouped-query attention; default = heads
  std::int64_t vocab = 0;         // vocabulary size
  std::int64_t max_seq_len = 0;   // longest supported context (max_position_embeddings)
  bool tie_embeddings = false;    // lm_head shares the embedding matrix
  double rope_theta = 10000.0;    // RoPE base (llama family); unused by gpt2
  double rope_local_theta = 0;    // gemma3: RoPE base of the windowed layers, never scaled; 0: rope_theta
  RopeScaling rope_scaling{};     // rope_scaling / rope_parameters of config.json (gemma3: global layers)
  double norm_eps = 1e-5;         // RMSNorm / LayerNorm epsilon
  std::int64_t head_size = 0;     // width of one attention head (head_dim); 0: hidden / heads
  std::int64_t sliding_window = 0;  // tokens a position sees, itself included (gemma: some layers); 0: all
  std::int64_t experts = 0;       // routed experts per block (num_local_experts); 0: a dense MLP
  std::int64_t experts_per_token = 0;  // experts each token goes through (num_experts_per_tok)
  // Gemma 2: attention scores and final logits soft-capped as cap * tanh(x / cap)
  // (0: not capped). Gemma 2 and 3: scores scaled by
  // query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 (0: head_dim).
  double attn_logit_softcap = 0;
  double final_logit_softcap = 0;
  std::int64_t query_pre_attn_scalar = 0;
  // The fraction of each q and k head RoPE rotates, its leading dimensions
  // (gpt_neox's rotary_pct / partial_rotary_factor); 0: the family's
  // default (gpt_neox 0.25, as every Pythia; 1 elsewhere).
  double partial_rotary_factor = 0;

  std::int64_t head_dim() const { return head_size > 0 ? head_size : heads > 0 ? hidden / heads : 0; }
  // The head dimensions RoPE rotates, head_dim x the fraction truncated as
  // transformers does.
  std::int64_t rotary_dims() const;
  // The factor on q.k before the softmax.
  double attention_scale() const;
  // A mixture of experts: every block's MLP is `experts` SwiGLU MLPs and a
  // router that sends each token through `experts_per_token` of them.
  bool moe() const { return experts > 0; }
  // Exact parameter count of this architecture (embeddings, blocks, norms, head).
  std::int64_t parameter_count() const;
};

// Where a model's starting weights come from.
enum class ModelInit {
  kPretrained,  // loaded from model.path (a preset alone has none here: check_weights refuses to train it)
  kRandom,      // random initialisation: training from scratch (model.path then gives the architecture only)
};

struct ModelSpec {
  // Exactly one of preset, path and arch is given in the document; after
  // loading, `arch` always holds the resolved architecture.
  std::string preset;  // catalog name (configs/catalog/models.yaml), e.g. "llama-2-7b"
  std::string path;    // Hugging Face-style folder whose config.json gives the arch (absolute after loading)
  // A PEFT LoRA adapter folder the job's adapters start from (absolute
  // after loading; its r, lora_alpha and targets are strategy.lora's).
  std::string adapter;
  // Default: pretrained for a preset or path, random for an inline arch.
  ModelInit init = ModelInit::kPretrained;
  ModelArch arch;
};

// jsonl: JSON Lines; json: a JSON array of records, or JSON Lines (as
// Hugging Face's json loader reads them); text: paragraphs; tokens: int32 ids.
// parquet: one Parquet file; arrow: an Arrow IPC file or a folder that
// Hugging Face datasets' save_to_disk wrote (dsl/table_records.h).
enum class DataFormat { kJsonl, kJson, kText, kTokens, kParquet, kArrow };
inline bool is_table(DataFormat f) { return f == DataFormat::kParquet || f == DataFormat::kArrow; }
inline bool has_records_of_fields(DataFormat f) {
  return f == DataFormat::kJsonl || f == DataFormat::kJson || is_table(f);
}

// What becomes of an example longer than a row (seq_len + 1 tokens: seq_len
// inputs and seq_len targets) where examples are kept whole.
enum class LongExample {
  kTruncate,  // cut to its first seq_len + 1 tokens
  kDrop,      // left out, counted
};

// What becomes of a record that cannot be read (invalid JSON, a missing
// field, a bad conversation, a template that raises on it).
enum class OnBadRecord {
  kError,  // the job fails, naming the file and record
  kSkip,   // left out, counted in the plan and the job's start event
};

// Records that are conversations, rendered with the model's chat template
// (runner/data/chat_template.h): OpenAI-style `messages`, ShareGPT's
// `conversations` (from/value), Alpaca's instruction/input/output.
enum class ChatFormat { kNone, kMessages, kShareGpt, kAlpaca };
// Which tokens of a rendered conversation are trained.
enum class TrainOn {
  kAssistant,      // every assistant turn
  kAll,            // every token (but the first)
  kLastAssistant,  // the last assistant turn only
};
// Whether the end-of-turn token after a trained reply is trained too (the
// model learns to stop): after each trained turn, the last one, or none.
enum class TrainOnEos { kTurn, kLast, kNone };

// How several training datasets (data.train as a list) become one.
enum class DataMix {
  // Each dataset's examples `weight` times per epoch: 2 repeats them all,
  // 0.5 takes a seeded half; the epoch is all of it.
  kConcat,
  // Datasets in proportion to their weights: an epoch has as many examples
  // as the datasets together, dataset i a share weight_i / sum of weights,
  // each one's examples taken in a seeded order, cycled when it has fewer
  // (Hugging Face's interleave_datasets with probabilities, counted exactly
  // rather than drawn at random).
  kInterleave,
};

// One training dataset of data.train's list form.
struct DataSource {
  std::string path;  // absolute after loading
  double weight = 1;
  // Its format; unset: data.format when written, else from its extension
  // (a folder: arrow). Set after loading.
  std::optional<DataFormat> format;
  bool operator==(const DataSource&) const = default;
};

struct DataSpec {
  std::string train;                  // training data file (absolute after loading); required. With
                                      // several datasets (sources), the first one's path.
  std::string eval;                   // optional held-out data file; empty = none
  DataFormat format = DataFormat::kJsonl;  // default: from train's extension (.jsonl, .json, .txt/.md,
                                           // .bin/.tokens, .parquet, .arrow; a folder: arrow)
  std::string field = "text";         // jsonl/json/parquet/arrow: the text field
  std::string prompt_field;           // jsonl/json: prompt field of prompt/completion pairs (loss masked on it)
  std::string completion_field;       // jsonl/json: completion field; set together with prompt_field
  std::int64_t seq_len = 0;           // tokens per sequence; default min(2048, model max_seq_len)
  bool packing = true;                // pack several documents per sequence (with boundaries)
  LongExample on_long_example = LongExample::kTruncate;  // whole examples and no packing; see Packing
  OnBadRecord on_bad_record = OnBadRecord::kError;
  // Conversations (chat != kNone); the keys below apply to them only.
  ChatFormat chat = ChatFormat::kNone;
  std::map<std::string, std::string> fields;  // record field names over the chat format's defaults
  std::map<std::string, std::string> roles;   // sharegpt: "from" values to template roles, over the defaults
  std::string chat_template;                  // a template file (absolute after loading); empty: the model's
  TrainOn train_on = TrainOn::kAssistant;
  TrainOnEos train_on_eos = TrainOnEos::kTurn;
  // Preference pairs (training.method: dpo): each record is a prompt and a
  // chosen and a rejected completion, strings in these fields. `preference`
  // is not a key: the loader sets it from training.method, so the data
  // readers know the shape of a record.
  bool preference = false;
  // kto reads each row of a pair alone, as TRL's KTOTrainer does: a row's
  // prompt ends where its own ids leave the prompt's, not where both rows'
  // do. Not a key either: set from training.method.
  bool unpaired = false;
  std::string chosen_field = "chosen";
  std::string rejected_field = "rejected";
  // reward: each pair's margin, a number in this field (TRL's RewardTrainer
  // reads a "margin" column): the loss is -log sigmoid(r_w - r_l - margin).
  // Empty: no margin.
  std::string margin_field;
  // kto on unpaired examples (TRL's unpaired format): each record is a
  // prompt, a completion (completion_field, default "completion") and this
  // field, true where the completion is desirable and false where it is
  // not. Empty: the records are pairs, each chosen completion desirable and
  // each rejected one not.
  std::string label_field;
  // data.train as a list: every dataset, the first one being `train` (and
  // `format` its format). Empty when data.train is one path.
  std::vector<DataSource> sources;
  DataMix mix = DataMix::kConcat;
  std::optional<std::int64_t> mix_seed;  // orders and samples the mix; default training.seed
};
inline bool is_chat(const DataSpec& d) { return d.chat != ChatFormat::kNone; }

// Every training dataset: `sources`, or `train` alone with weight 1.
inline std::vector<DataSource> train_sources(const DataSpec& d) {
  if (!d.sources.empty()) return d.sources;
  return {DataSource{d.train, 1.0, d.format}};
}
// The data settings one dataset is read with: `d` with its path and format.
inline DataSpec source_spec(const DataSpec& d, const DataSource& s) {
  DataSpec out = d;
  out.train = s.path;
  out.format = s.format.value_or(d.format);
  out.sources.clear();
  return out;
}

// How examples become rows of seq_len, decided from the spec alone so the
// plan can say it before any data is read.
enum class Packing {
  kNone,           // packing: false: one example per row, padded to the batch's longest
  kStream,         // plain text, field or tokens: one stream cut at row boundaries (a
                   // long document continues in the next row; harmless without a prompt)
  kWholeExamples,  // prompt/completion: whole examples placed into rows by first-fit
                   // decreasing, never split; on_long_example says what a long one becomes
};
// Whether the records are preference pairs, two rows each (every
// preference method but kto with data.label_field, whose records are one
// labelled completion each).
inline bool is_paired(const DataSpec& d) { return d.preference && d.label_field.empty(); }
// Whether they are kto's labelled completions.
inline bool is_labelled(const DataSpec& d) { return d.preference && !d.label_field.empty(); }

inline Packing packing_of(const DataSpec& d) {
  if (!d.packing || d.preference) return Packing::kNone;  // a pair's two rows are never packed
  if (is_chat(d)) return Packing::kWholeExamples;
  return d.prompt_field.empty() || d.completion_field.empty() ? Packing::kStream : Packing::kWholeExamples;
}

enum class LrScheduler { kConstant, kCosine, kLinear };

// What the loss trains: the next token of the data (sft), or a preference
// between two completions of a prompt, against a frozen reference model
// (dpo, kto) or without one (orpo, simpo), or a score (reward).
enum class TrainingMethod {
  kSft,
  kDpo,  // Rafailov et al., "Direct Preference Optimization", 2023
  // Hong et al., "ORPO: Monolithic Preference Optimization without Reference
  // Model", 2024: the chosen sequence's NLL (prompt and completion, per
  // token) minus lambda * log sigmoid of the log odds ratio of the two
  // completions' per-token mean probabilities, as TRL's ORPOTrainer
  // computes it.
  kOrpo,
  // Meng et al., "SimPO: Simple Preference Optimization with a
  // Reference-Free Reward", 2024: -log sigmoid(beta (mean log pi(y_w) -
  // mean log pi(y_l)) - gamma), per-token means, as TRL's CPOTrainer with
  // loss_type simpo and cpo_alpha 0 computes it.
  kSimpo,
  // A reward model (Ouyang et al. 2022, the Bradley-Terry pairwise loss):
  // the model's head replaced by a scalar score read at each sequence's
  // last token, trained on -log sigmoid(r_chosen - r_rejected), as TRL's
  // RewardTrainer computes it; exported for AutoModelForSequenceClassification.
  kReward,
  // Ethayarajh et al., "KTO: Model Alignment as Prospect Theoretic
  // Optimization", 2024: each completion judged alone, desirable (a pair's
  // chosen) or undesirable (its rejected), its log-ratio against the
  // reference compared with a KL estimate from mismatched prompt and
  // completion rows of the same micro-batch, as TRL's KTOTrainer computes it.
  kKto,
};
// Whether `m` trains on preference pairs, whether it scores them against a
// reference model, and whether its head is a scalar score (no vocabulary).
inline bool trains_on_pairs(TrainingMethod m) { return m != TrainingMethod::kSft; }
inline bool needs_reference(TrainingMethod m) { return m == TrainingMethod::kDpo || m == TrainingMethod::kKto; }
inline bool scores_sequences(TrainingMethod m) { return m == TrainingMethod::kReward; }
// DPO's loss on the margin h = beta * ((log pi(y_w) - log ref(y_w)) -
// (log pi(y_l) - log ref(y_l))), each a completion's summed log-probability:
// With r_w = beta (log pi(y_w) - log ref(y_w)) and r_l likewise (h = r_w - r_l),
// as TRL 1.16's DPOTrainer computes each:
enum class PreferenceLoss {
  kSigmoid,  // -log sigmoid(h) (Rafailov et al. 2023)
  kIpo,      // (h / beta - 1 / (2 beta))^2 on per-token mean log-ratios (Azar et al., "A General
             // Theoretical Paradigm to Understand Learning from Human Preferences", 2023)
  kHinge,    // max(0, 1 - h) (Zhao et al., "SLiC-HF", 2023)
  // ((1 - e) (-log sigmoid(h)) - e (-log sigmoid(-h))) / (1 - 2e), e = label_smoothing: an unbiased
  // loss under preference labels flipped with probability e (Chowdhury et al., "Provably Robust DPO", 2024)
  kRobust,
  // KL(softmax(h, 0) || (1 - e, e)) over the pair (Ji et al., "Towards Efficient Exact Optimization of
  // Language Model Alignment", 2024, EXO-pref), e = label_smoothing > 0
  kExoPair,
  kNcaPair,   // -log sigmoid(r_w) - (log sigmoid(-r_w) + log sigmoid(-r_l)) / 2 (Chen et al., "Noise Contrastive
              // Alignment", 2024)
  kBcoPair,   // -log sigmoid(r_w) - log sigmoid(-r_l) (Jung et al., "Binary Classifier Optimization", 2024)
  kSppoHard,  // (r_w / beta - 1 / (2 beta))^2 + (r_l / beta + 1 / (2 beta))^2 (Wu et al., "Self-Play Preference
              // Optimization", 2024, its hard-label form)
  kApoZero,   // (1 - sigmoid(r_w)) + sigmoid(r_l) (D'Oosterlinck et al., "Anchored Preference Optimization", 2024)
  kApoDown,   // sigmoid(r_w) + (1 - sigmoid(h)) (the same paper, for chosen answers worse than the model's own)
  // -log sigmoid(h) on per-token mean log-ratios (TRL's sigmoid_norm: DPO
  // insensitive to the completions' lengths)
  kSigmoidNorm,
  // -log sigmoid(h) (1 - sigmoid(h / tau)) + e^-h sigmoid(h / tau), tau = discopop_tau (Lu et al.,
  // "Discovering Preference Optimization Algorithms with and for Large Language Models", 2024, Eq. 5: DiscoPOP)
  kDiscopop,
  // The chosen completions' mean token NLL over the micro-batch, added to
  // the pair losses beside it (Pang et al., "Iterative Reasoning Preference
  // Optimization", 2024, RPO; TRL's loss_type sft, which replaced its
  // rpo_alpha)
  kSft,
  // kto's, each completion alone, with r its beta-scaled log-ratio and z the
  // micro-batch's KL estimate (clamped at 0):
  kKto,              // desirable 1 - sigmoid(r - beta z), undesirable 1 - sigmoid(beta z - r) (Eq. 7 of the KTO paper)
  kApoZeroUnpaired,  // desirable 1 - sigmoid(r), undesirable sigmoid(r) (APO-zero without pairs; no KL estimate)
};
// Whether `loss` is a kto loss (the others are dpo's).
inline bool is_kto_loss(PreferenceLoss loss) {
  return loss == PreferenceLoss::kKto || loss == PreferenceLoss::kApoZeroUnpaired;
}
// Whether `loss` reads training.label_smoothing.
inline bool uses_label_smoothing(PreferenceLoss loss) {
  return loss == PreferenceLoss::kRobust || loss == PreferenceLoss::kExoPair;
}

// The divergence from the reference that DPO's implicit reward regularises
// (Wang et al., "Beyond Reverse KL: Generalizing Direct Preference
// Optimization with Diverse Divergence Constraints", 2023; TRL's
// f_divergence_type): each completion's log-ratio u = log pi - log ref
// enters h as f'(e^u) instead of u.
enum class FDivergence {
  kReverseKl,        // f'(t) = log t + 1: u itself (DPO)
  kForwardKl,        // f'(t) = 1 - 1/t: 1 - e^-u
  kJsDivergence,     // f'(t) = log(2t / (t + 1)): log 2 + log sigmoid(u)
  kAlphaDivergence,  // f'(t) = (t^(a-1) - 1) / (a - 1), a = f_alpha_divergence_coef
};
// Whether `loss` reads its log-ratios through f_divergence_type (the losses
// of h alone; TRL refuses the others).
inline bool uses_f_divergence(PreferenceLoss loss) {
  return loss == PreferenceLoss::kSigmoid || loss == PreferenceLoss::kSigmoidNorm || loss == PreferenceLoss::kHinge ||
         loss == PreferenceLoss::kIpo || loss == PreferenceLoss::kExoPair || loss == PreferenceLoss::kRobust ||
         loss == PreferenceLoss::kDiscopop;
}
// Whether a loss may sit beside an f-divergence other than reverse KL: the
// losses of h, and sft, which reads no log-ratio (TRL allows the same).
inline bool allows_f_divergence(PreferenceLoss loss) { return uses_f_divergence(loss) || loss == PreferenceLoss::kSft; }

// The largest global (and micro) batch a spec may ask for, in sequences.
inline constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 20;

struct TrainingSpec {
  std::int64_t global_batch_size = 32;           // sequences per optimizer step, over all GPUs
  std::optional<std::int64_t> micro_batch_size;  // sequences per forward pass per GPU; empty = auto
  double epochs = 1.0;                           // passes over the training data
  std::optional<std::int64_t> max_steps;         // optimizer steps; when set it overrides epochs
  double lr = 1e-4;                              // peak learning rate
  LrScheduler scheduler = LrScheduler::kCosine;
  std::int64_t warmup_steps = 0;                 // linear warm-up from 0 to lr
  double weight_decay = 0.0;                     // decoupled (AdamW) weight decay
  double grad_clip = 1.0;                        // max global gradient L2 norm; 0 disables clipping
  std::int64_t seed = 42;                        // seeds data order, initialisation and dropout
  std::int64_t eval_every = 0;                   // evaluate every N optimizer steps; 0 = at the end only
  // Prompts the model answers at each evaluation (greedy, up to
  // eval_max_tokens new tokens), kept with the job's events: plain text, or
  // with data.chat a user turn rendered with the chat template. Empty = none.
  std::vector<std::string> eval_prompts;
  std::int64_t eval_max_tokens = 64;             // new tokens per eval prompt, 1 to 1024
  TrainingMethod method = TrainingMethod::kSft;
  // dpo: the log-ratio margin's scale (the KL penalty's weight), default
  // 0.1; simpo: the reward's scale, default 2.0 (the SimPO paper's).
  double beta = 0.1;
  // dpo: one loss or several, each term weighted by loss_weights and the
  // terms added (TRL's list of loss types: MPO's sigmoid + bco_pair + sft,
  // RPO's sigmoid + sft); kto: one (kto's default: kKto).
  std::vector<PreferenceLoss> losses = {PreferenceLoss::kSigmoid};
  std::vector<double> loss_weights;  // dpo: one per loss, > 0; empty = each 1
  // dpo: LD-DPO's weight of the completion tokens past the pair's shared
  // length (Liu et al., "Length Desensitization in Direct Preference
  // Optimization", 2024; TRL's ld_alpha), in [0, 1], in the trained
  // model's and the reference's log-probabilities alike. Unset = 1 (off).
  std::optional<double> ld_alpha;
  // dpo: WPO (Zhou et al., "WPO: Enhancing RLHF with Weighted Preference
  // Optimization", 2024, Eq. 2; TRL's use_weighting): each pair's loss
  // scaled by the product of its two completions' weights, each exp of the
  // mean over its tokens of log p(token) - log sum_v p(v)^2 under the
  // trained model, without gradients.
  bool use_weighting = false;
  double discopop_tau = 0.05;  // dpo, discopop: the temperature of the mix of its two terms (the paper's 0.05)
  FDivergence f_divergence_type = FDivergence::kReverseKl;  // dpo: see FDivergence
  double f_alpha_divergence_coef = 0.5;  // dpo, alpha_divergence: a in [0, 1] (0 forward KL, 1 reverse KL)
  double gamma = 1.0;        // simpo: the target reward margin (gamma / beta 0.5, the paper's default)
  // simpo: the weight of the chosen completions' per-token NLL beside the
  // pair loss (CPO's behaviour-cloning term, Xu et al. 2024; TRL's
  // cpo_alpha, "CPO-SimPO"), >= 0. Default 0 (pure SimPO).
  double cpo_alpha = 0.0;
  // simpo: AlphaPO's reward shape (Gupta et al., "AlphaPO: Reward Shape
  // Matters for LLM Alignment", 2025; TRL's CPOConfig alpha): each
  // completion's reward is (1 - p^-alpha) / alpha of its per-token mean
  // probability p instead of log p. Default 0 (log p: plain SimPO).
  double alpha = 0.0;
  double orpo_lambda = 0.1;  // orpo: the odds-ratio term's weight (the paper's lambda, TRL's beta)
  // dpo (robust and exo_pair) and simpo: the assumed share of flipped
  // preference labels, in [0, 0.5) (exo_pair: above 0). Default 0.
  double label_smoothing = 0.0;
  // reward: the weight of the pairs' mean squared summed score, mean((r_w +
  // r_l)^2), beside the pair loss, which keeps the scores centred on zero
  // (Eisenstein et al. 2023; TRL's center_rewards_coefficient). Default 0.
  double center_rewards = 0.0;
  // kto: the weights of the desirable (chosen) and undesirable (rejected)
  // completions' losses, each > 0. Default 1 (the KTO paper suggests
  // keeping weight x count within 1 to 4/3 of each other).
  double desirable_weight = 1.0;
  double undesirable_weight = 1.0;
};
// Whether `t` trains `loss` (alone or among several), and the weight of its
// i-th loss.
inline bool has_loss(const TrainingSpec& t, PreferenceLoss loss) {
  for (PreferenceLoss l : t.losses) {
    if (l == loss) return true;
  }
  return false;
}
inline double loss_weight(const TrainingSpec& t, std::size_t i) {
  return i < t.loss_weights.size() ? t.loss_weights[i] : 1.0;
}

struct LoraSpec {
  std::int64_t r = 16;       // adapter rank
  double alpha = 32.0;       // scaling numerator: the update is scaled by alpha / r
  double dropout = 0.05;     // dropout on the adapter input, in [0, 1)
  // Target linear layers by their Hugging Face names (q_proj, ..., down_proj;
  // gpt2: c_attn, c_proj, c_fc). Empty = every linear layer of the blocks.
  std::vector<std::string> targets;
  // The embedding and the head trained whole beside the adapters, by their
  // Hugging Face names (PEFT's modules_to_save: embed_tokens, lm_head; gpt2
  // wte; gpt_neox embed_in, embed_out). A tied model's one matrix is both
  // names, and both are then given. Empty = only the adapters train.
  std::vector<std::string> modules_to_save;
};

struct StrategySpec {
  std::optional<Precision> precision;  // fp32 | bf16 | fp16 (mixed, fp32 master) | pure-bf16; empty = auto
  // 0 = off, 1 = every layer, N = every N-th layer (layers 0, N, 2N, ...); empty = auto.
  std::optional<std::int64_t> gradient_checkpointing;
  std::optional<Adapter> adapter;      // none | lora | qlora; empty = auto
  LoraSpec lora;                       // used when the adapter is lora or qlora
  // How QLoRA stores the frozen base: none | int8 | nf4 | nf4-double-quant;
  // empty = auto (nf4-double-quant under qlora). Other than none means qlora.
  std::optional<Quantization> quantization;
  std::optional<Optimizer> optimizer;  // adamw | adamw_8bit | sgd; empty = auto (an AdamW)
  std::optional<std::int64_t> zero_stage;  // 0..3; empty = auto
  std::optional<Offload> offload;      // none | optimizer | optimizer_and_params; empty = auto
  std::optional<Reference> reference;  // dpo: adapter_off | separate; empty = auto
  // Each checkpointed layer's saved input kept in host memory between its
  // forward and backward (tailor-runner); empty = auto (the planner's
  // choice: not yet on GPUs, where no run has verified it).
  std::optional<bool> activation_offload;
  std::vector<Technique> allow;        // if non-empty, the only techniques the planner may choose (technique.h)
  std::vector<Technique> forbid;       // techniques the planner must not choose
  // A full fine-tune may combine pure bf16 weights with 8-bit optimizer
  // states: both round the update, and together they can lose small
  // updates entirely. Default false: the planner does not choose that pair
  // unless both are pinned.
  bool allow_lossy = false;
  // Fraction of device memory the plan keeps free for the memory model's
  // error and the allocator's fragmentation; empty = kDefaultHeadroom
  // (JobSpec::headroom() also reads the older resources.headroom).
  std::optional<double> headroom;
  // Measure the planner's top `probe` plans on this machine before training
  // (a few steps each on the longest batches) and train with the fastest
  // that stays within the budget; 0 = off. At most kMaxProbe.
  std::int64_t probe = 0;
};
inline constexpr std::int64_t kMaxProbe = 5;

// Why 10%: the largest under-estimates measured against tailor-runner are
// 8-10% (LoRA with dropout under materialised attention, where backward's
// score gradients are a transient the model leaves out; most cells are
// within 1-6%), so a plan at the budget still holds those runs.
// docs/planner.md ("Headroom") has the measurements.
inline constexpr double kDefaultHeadroom = 0.10;

// The device tailor-runner trains on. kAuto: the plan's kind of hardware (a
// GPU plan on a CUDA device, and an error naming why when the runner finds
// none); kCpu: on the CPU whatever the plan is for, e.g. to try a GPU plan
// on a laptop (the plan's memory budget then does not apply).
enum class TrainDevice { kAuto, kCpu };

struct ResourcesSpec {
  // GPUs to use: empty gpu_count and gpu_ids = auto (all detected);
  // gpu_count 0 = train on the CPU.
  std::optional<std::int64_t> gpu_count;
  std::vector<std::int64_t> gpu_ids;  // explicit device indices; sets gpu_count to their number
  std::string gpu_model;              // GPU catalog key (e.g. "A6000"): plan for this GPU instead of detecting
  std::optional<Bytes> gpu_memory;    // memory per GPU, overriding the model's or the detected figure
  std::optional<Bytes> host_memory;   // host RAM per node available to the job; default: detected
  std::int64_t nodes = 1;             // machines; the GPU count is per node
  // Training processes (data-parallel ranks): on GPUs at most one per GPU
  // (default: every GPU, or one); on the CPU processes sharing its cores and
  // memory (default 1).
  std::optional<std::int64_t> ranks;
  std::optional<double> headroom;     // deprecated spelling of strategy.headroom
  TrainDevice device = TrainDevice::kAuto;  // where tailor-runner trains (see TrainDevice)
};

// Whose training stack a plan predicts: tailor-runner's, or another
// framework's memory behaviour (strategies/runtime_profile.h), so that a
// user of that framework learns whether a run will fit.
enum class Runtime { kTailor, kHf, kTorchtune, kLitgpt, kTorchtitan };

struct PlannerSpec {
  Runtime runtime = Runtime::kTailor;
  // Under runtime hf: the transformers version its users run ("4.47", see
  // dsl/library_version.h); empty: 5.x. 4.x keeps more (strategies/runtime_profile.h).
  std::string transformers;
};

// Where tailord runs a job (daemon/executor/): its own machine, a Slurm
// cluster, or (auto) the cluster only when its own machine cannot hold it.
// kDefault: tailord's --executor decides.
enum class ExecutorKind { kDefault, kLocal, kSlurm, kAuto };

// sbatch settings of a job run on Slurm; empty fields take tailord's
// (--slurm-partition, ...), and those Slurm's defaults.
struct SlurmSpec {
  std::string partition;
  std::string account;
  std::string qos;
  std::string time_limit;                   // Slurm's format: "90", "2:00:00", "1-12:00:00"
  std::vector<std::string> sbatch_options;  // extra "--flag=value" arguments, each one argument
};

struct ExecutorSpec {
  ExecutorKind kind = ExecutorKind::kDefault;
  SlurmSpec slurm;
};

struct CheckpointSpec {
  std::int64_t every_steps = 0;       // save every N optimizer steps; 0 = only at the end
  std::int64_t keep = 3;              // keep the newest K checkpoints
  std::string dir = "checkpoints";    // relative to the job's output folder
};

struct OutputSpec {
  // Also write the merged model (OUT/model/, a Hugging Face folder): the
  // adapter folded into the base. Empty = true for a full fine-tune (its
  // model is the output), false for adapters (OUT/adapter/ is, at adapter
  // size; tailor-runner --export merges later).
  std::optional<bool> merge;
  bool merge_for(bool adapters) const { return merge.value_or(!adapters); }
};

// Where a job's metrics go besides tailord (runner/tracking/). A tracker
// is on when its section is written (enabled defaults to true there) or
// tailord's configuration turns it on for jobs that leave it unset.
struct TensorboardSpec {
  std::optional<bool> enabled;  // unset: off, unless tailord's defaults say otherwise
  std::string dir;              // event files' folder, relative to the job's output folder; "" = that folder
  bool on() const { return enabled.value_or(false); }
};

struct MlflowSpec {
  std::optional<bool> enabled;
  std::string uri;          // http(s)://host[:port][/prefix] of the tracking server
  std::string experiment;   // "" = MLflow's "Default"
  std::string run_name;     // "" = the job's name
  std::map<std::string, std::string> tags;
  bool on() const { return enabled.value_or(false); }
};

struct TrackingSpec {
  TensorboardSpec tensorboard;
  MlflowSpec mlflow;
  bool any() const { return tensorboard.on() || mlflow.on(); }
};

struct JobSpec {
  std::string name;                   // [a-z0-9][a-z0-9._-]*, at most 63 characters; default: file stem
  std::string source_file;            // the spec file it was loaded from (absolute); not written by users
  ModelSpec model;
  DataSpec data;
  TrainingSpec training;
  StrategySpec strategy;
  ResourcesSpec resources;
  PlannerSpec planner;
  CheckpointSpec checkpoint;
  OutputSpec output;
  ExecutorSpec executor;
  TrackingSpec tracking;
  std::int64_t retries = 2;           // retries after failures other than bad input; 0..100
  std::int64_t priority = 0;          // higher runs first; -1000..1000
  std::map<std::string, std::string> labels;  // free-form key/value labels for filtering

  // The planning margin: strategy.headroom, else resources.headroom, else kDefaultHeadroom.
  double headroom() const {
    return strategy.headroom.value_or(resources.headroom.value_or(kDefaultHeadroom));
  }
};

// Names as written in specs ("llama", "jsonl", "cosine"); technique.h names the techniques.
const char* to_string(ModelFamily v);
const char* to_string(DataFormat v);
const char* to_string(ModelInit v);
const char* to_string(LrScheduler v);
const char* to_string(Runtime v);  // tailor | hf | torchtune | litgpt | torchtitan
const char* to_string(ExecutorKind v);  // default | local | slurm | auto
const char* to_string(LongExample v);   // truncate | drop
const char* to_string(ChatFormat v);    // none | messages | sharegpt | alpaca
const char* to_string(OnBadRecord v);   // error | skip
const char* to_string(DataMix v);       // concat | interleave
const char* to_string(TrainOn v);       // assistant | all | last_assistant
const char* to_string(TrainOnEos v);    // turn | last | none
const char* to_string(Packing v);       // none | stream | whole-examples
const char* to_string(TrainingMethod v);  // sft | dpo | orpo | simpo
const char* to_string(PreferenceLoss v);  // sigmoid | ipo | hinge | robust | exo_pair | nca_pair | bco_pair | sppo_hard
                                          // | apo_zero | apo_down | sigmoid_norm | discopop | kto | apo_zero_unpaired
const char* to_string(FDivergence v);     // reverse_kl | forward_kl | js_divergence | alpha_divergence
// The plan's words: "whole examples, first-fit decreasing", "stream, split at
// row boundaries (plain text)", "none: one example per row, padded".
const char* describe(Packing v);
const char* to_string(TrainDevice v);  // auto | cpu

// Why a time limit is not in Slurm's format (minutes, minutes:seconds,
// hours:minutes:seconds, days-hours[:minutes[:seconds]]); nullopt when it is.
std::optional<std::string> check_slurm_time_limit(const std::string& v);
// Why an extra sbatch option cannot be passed: not "--name[=value]", or one
// Tailor sets itself (the job's tag, folders, size, requeue policy).
std::optional<std::string> check_sbatch_option(const std::string& v);

}  // namespace tailor::dsl
