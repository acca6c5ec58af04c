// Loading a job spec: file -> tree -> `extends` chain deep-merged -> --set
// overrides -> ${var} interpolation -> typed JobSpec -> cross-field rules
// and resolution (preset or config.json to an architecture, relative paths
// to absolute ones, defaults that depend on other fields).
// Every problem is collected into the result's diagnostics; nothing throws.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/catalog.h"
#include "dsl/data_records.h"
#include "dsl/diagnostics.h"
#include "dsl/job_spec.h"
#include "dsl/yaml_tree.h"

namespace tailor::dsl {

struct LoadOptions {
  // "key.path=value" assignments applied after `extends`, before ${vars};
  // values are YAML ("training.lr=1e-4", "strategy.forbid=[lora,qlora]").
  std::vector<std::string> overrides;
  // Presets and GPU models; nullptr = Catalog::builtin().
  const Catalog* catalog = nullptr;
  // Check that model folders exist and read the data files as the runner
  // will (dsl/data_records.h). Off for specs checked away from the machine
  // that will run them.
  bool check_files = true;
  // With check_files, also read the data files (off in tailor-runner, which
  // reads them itself moments later, under its read root).
  bool check_data = true;
  YamlLimits limits;
  int max_extends_depth = 16;
  // When set, every `extends` must resolve, symbolic links followed, to a
  // file inside this folder, and one that does not is an error before it is
  // read (so nothing of it is echoed); data files outside it are not read
  // (the caller refuses them by name). tailord passes its --spec-root.
  std::string read_root;
};

struct LoadedSpec {
  std::optional<JobSpec> spec;  // set when there are no errors
  Diagnostics diagnostics;      // errors and warnings, in order found
  Node merged;                  // the document after extends, overrides and vars
  // What reading data.train and data.eval found (check_files and a spec
  // otherwise valid): train first.
  std::vector<DataFileFacts> data;

  bool ok() const { return spec.has_value(); }
};

LoadedSpec load_job_spec(const std::string& path, const LoadOptions& options = {});

// Whether the job's model can start training: a preset without model.path
// has no weights here, and fine-tuning it would train a random model in
// silence, so that needs model.init: random. InvalidArgument saying what to
// set otherwise. `tailor run`, tailord and tailor-runner call it; validate
// and plan do not (a plan for a model whose weights are elsewhere is fine).
Status check_weights(const JobSpec& spec);

// Whether the job's trackers can start: an MLflow tracker needs a server
// (tracking.mlflow.uri, or tailord's mlflow_uri filled in at submission).
// InvalidArgument naming the key otherwise. Called where check_weights is.
Status check_tracking(const JobSpec& spec);

// For text that is not in a file (REST bodies, fuzzing): `name` labels
// diagnostics, `base_dir` resolves relative paths and `extends`.
LoadedSpec load_job_spec_text(std::string_view text, std::string_view name, const std::string& base_dir,
                              const LoadOptions& options = {});

// Deep merge: maps merge key by key (overlay wins), anything else is
// replaced by the overlay. Exposed for tests.
Node deep_merge(Node base, const Node& overlay);

// Applies one "key.path=value" override; problems go to `d`.
void apply_override(Node& root, std::string_view assignment, Diagnostics& d);

// Replaces ${name} in every scalar with the value from the `vars` map (vars
// may use earlier vars); "$${" stands for a literal "${". Problems go to `d`,
// among them text expanding past `max_bytes` in all (vars of vars double).
void interpolate_vars(Node& root, Diagnostics& d, std::size_t max_bytes = YamlLimits{}.max_bytes);

}  // namespace tailor::dsl
