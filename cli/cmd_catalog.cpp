// `tailor catalog models|gpus`: what the presets and GPU names that specs,
// --gpus and --model accept stand for, as a table or JSON.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/spec_options.h"
#include "core/text.h"
#include "core/units.h"
#include "dsl/catalog.h"
#include "dsl/model_family.h"

namespace tailor::cli {
namespace {

constexpr const char* kCatalogHelp = R"(usage: tailor catalog models|gpus [OPTIONS]

Lists the catalog: the model presets a spec's model.preset and
`tailor plan --model` accept (family, exact parameter count, shape, context),
or the GPUs --gpus and resources.gpu_model name (memory, bf16, peak TFLOP/s,
memory bandwidth, interconnect).

options:
  --output FORMAT  text (default) or json
  --catalog DIR    list models.yaml and gpus.yaml from DIR instead
  -h, --help       show this help
)";

using Json = nlohmann::ordered_json;

// Columns padded to their widest cell, the last one left ragged.
void print_table(const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

std::string number(double v, const char* format) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

Json model_json(const dsl::ModelPreset& m) {
  const dsl::ModelArch& a = m.arch;
  Json j{{"name", m.name},
         {"family", dsl::family_info(a.family).name},
         {"parameters", m.params},
         {"layers", a.layers},
         {"hidden", a.hidden},
         {"heads", a.heads},
         {"kv_heads", a.kv_heads},
         {"head_dim", a.head_dim()},
         {"vocab", a.vocab},
         {"max_seq_len", a.max_seq_len},
         {"description", m.description},
         {"source", m.source}};
  if (a.moe()) {
    j["experts"] = a.experts;
    j["experts_per_token"] = a.experts_per_token;
  }
  if (a.sliding_window > 0) j["sliding_window"] = a.sliding_window;
  return j;
}

void list_models(const dsl::Catalog& c, bool json, std::ostream& out) {
  if (json) {
    Json all = Json::array();
    for (const dsl::ModelPreset& m : c.models()) all.push_back(model_json(m));
    out << all.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"PRESET", "FAMILY", "PARAMS", "LAYERS", "HIDDEN", "HEADS/KV", "CONTEXT", "DESCRIPTION"}};
  for (const dsl::ModelPreset& m : c.models()) {
    const dsl::ModelArch& a = m.arch;
    std::string desc = m.description;
    if (a.moe()) desc += " (" + std::to_string(a.experts) + " experts, " + std::to_string(a.experts_per_token) + " a token)";
    rows.push_back({m.name, dsl::family_info(a.family).name, format_count(static_cast<double>(m.params)),
                    std::to_string(a.layers), std::to_string(a.hidden),
                    std::to_string(a.heads) + "/" + std::to_string(a.kv_heads), std::to_string(a.max_seq_len), desc});
  }
  print_table(rows, out);
}

void list_gpus(const dsl::Catalog& c, bool json, std::ostream& out) {
  if (json) {
    Json all = Json::array();
    for (const dsl::GpuModel& g : c.gpus()) {
      all.push_back({{"key", g.key},
                     {"name", g.name},
                     {"memory_bytes", g.memory.count()},
                     {"bf16", g.bf16},
                     {"peak_tflops_bf16", g.peak_tflops_bf16},
                     {"peak_tflops_fp16", g.peak_tflops_fp16},
                     {"peak_tflops_fp32", g.peak_tflops_fp32},
                     {"memory_bandwidth_gbps", g.memory_bandwidth_gbps},
                     {"interconnect", g.interconnect},
                     {"interconnect_gbps", g.interconnect_gbps},
                     {"host_link_gbps", g.host_link_gbps}});
    }
    out << all.dump(2) << "\n";
    return;
  }
  std::vector<std::vector<std::string>> rows = {
      {"GPU", "MEMORY", "BF16", "TFLOP/S BF16", "TFLOP/S FP32", "MEMORY GB/S", "INTERCONNECT", "NAME"}};
  for (const dsl::GpuModel& g : c.gpus()) {
    rows.push_back({g.key, g.memory.to_string(), g.bf16 ? "yes" : "no", number(g.peak_tflops_bf16, "%.0f"),
                    number(g.peak_tflops_fp32, "%.1f"), number(g.memory_bandwidth_gbps, "%.0f"),
                    g.interconnect + " " + number(g.interconnect_gbps, "%.0f") + " GB/s", g.name});
  }
  print_table(rows, out);
}

}  // namespace

int run_catalog(const Argv& argv, Streams io) {
  auto command = parse_command(argv, {{"output", true}, {"catalog", true}}, "catalog", kCatalogHelp, io);
  if (!command.args) return command.exit_code;
  const Args& args = *command.args;
  const std::string format = args.get("output", "text");
  const auto& what = args.positional();
  if (what.size() != 1 || (what[0] != "models" && what[0] != "gpus") || (format != "text" && format != "json")) {
    io.err << "tailor catalog: "
           << (what.size() != 1 || (what[0] != "models" && what[0] != "gpus") ? "expected models or gpus"
                                                                              : "--output must be text or json")
           << "\n"
           << kCatalogHelp;
    return kExitUsage;
  }
  auto options = spec_options(args);
  if (!options.is_ok()) {
    io.err << "tailor catalog: " << options.status().message() << "\n";
    return kExitInvalid;
  }
  if (what[0] == "models") {
    list_models(options->catalog(), format == "json", io.out);
  } else {
    list_gpus(options->catalog(), format == "json", io.out);
  }
  return kExitOk;
}

}  // namespace tailor::cli
