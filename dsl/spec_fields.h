// The spec's keys: reading a tree into JobSpec field by field (types,
// ranges, unknown keys), writing a JobSpec back as a tree, and the JSON
// Schema of the document. Cross-field rules and resolution (presets, files,
// defaults that depend on other fields) are in spec_loader.cpp.
#pragma once

#include <string>

#include "dsl/diagnostics.h"
#include "dsl/job_spec.h"
#include "dsl/yaml_tree.h"

namespace tailor::dsl {

// Labels are indexed (one store row each) and matched by `label=k=v,...`
// filters: bounded in number and size so that a submission stays cheap and
// a filter (never more pairs than a job has labels) stays bounded too.
inline constexpr std::size_t kMaxLabels = 64;
inline constexpr std::size_t kMaxLabelValue = 256;

// Reads every section of `root` into `spec`; problems go to `d`. Keys that
// are handled before this step (extends, vars) are accepted and skipped.
void read_job_spec(const Node& root, JobSpec& spec, Diagnostics& d);

// The resolved spec as a tree, every field present (knobs print "auto").
Node write_job_spec(const JobSpec& spec);

class Catalog;

// JSON Schema (draft 2020-12) of a TrainingJob document, pretty-printed.
// With a catalog, model.preset and resources.gpu_model list its names as
// `examples` (suggestions for editors; any name the catalog loaded later
// knows stays valid).
std::string job_spec_json_schema(const Catalog* catalog = nullptr);

// An architecture block (model.arch, or a catalog preset's arch).
void read_model_arch(const Node& n, ModelArch& arch, const std::string& path, Diagnostics& d);
Node write_model_arch(const ModelArch& arch);


}  // namespace tailor::dsl
