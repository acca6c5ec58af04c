#include "strategies/plan.h"

namespace tailor::strategies {

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::kFits: return "fits";
    case Verdict::kDoesNotFit: return "does_not_fit";
    case Verdict::kApplied: return "applied";
    case Verdict::kAlready: return "already";
    case Verdict::kNotNeeded: return "not_needed";
    case Verdict::kNotChosen: return "not_chosen";
    case Verdict::kNotAllowed: return "not_allowed";
    case Verdict::kNotExecutable: return "not_executable";
    case Verdict::kChosen: return "chosen";
    case Verdict::kNoneFits: return "none_fits";
  }
  return "?";
}

namespace {

// "needs 15.0 GiB of a 21.6 GiB budget (1.2 GiB over); host RAM ..."
std::string needs_text(const Decision& d) {
  std::string t = "needs " + d.needed.to_string() + " of a " + d.budget.to_string() + " budget";
  if (d.needed > d.budget) t += " (" + (d.needed - d.budget).to_string() + " over)";
  if (d.host_needed > d.host_budget && d.host_budget.count() > 0) {
    t += "; host RAM " + d.host_needed.to_string() + " is " + (d.host_needed - d.host_budget).to_string() +
         " over its " + d.host_budget.to_string() + " budget";
  }
  return t;
}

std::string saves_text(Bytes saved, bool would = false) {
  if (saved.count() >= 0) return (would ? "save " : "saves ") + saved.to_string();
  return (would ? "cost " : "costs ") + (Bytes(0) - saved).to_string() + " more";
}

std::string with_reason(std::string text, const std::string& reason) {
  return reason.empty() ? text : text + "; " + reason;
}

}  // namespace

std::string Decision::answer() const {
  switch (verdict) {
    case Verdict::kFits: return with_reason("yes: " + needs_text(*this), reason);
    case Verdict::kDoesNotFit: return with_reason("no: " + needs_text(*this), reason);
    case Verdict::kApplied:
      return with_reason((fits ? "yes: " : "not yet: ") + needs_text(*this) + " (" + saves_text(saved) + ")", reason);
    case Verdict::kAlready: return "already in use: " + reason;
    case Verdict::kNotNeeded: return "not needed: " + reason;
    case Verdict::kNotChosen:
      return "not taken: it would " + saves_text(saved, true) + " (" + needs_text(*this) + "), but " + reason;
    case Verdict::kNotAllowed: return "skipped: " + reason;
    case Verdict::kNotExecutable: return "skipped: tailor-runner cannot run it: " + reason;
    case Verdict::kChosen: return reason;
    case Verdict::kNoneFits: return with_reason("none fits; the closest " + needs_text(*this), reason);
  }
  return reason;
}

std::string Decision::action() const {
  switch (verdict) {
    case Verdict::kFits: return "keep it";
    case Verdict::kDoesNotFit: return "reduce memory";
    case Verdict::kApplied: return change;
    case Verdict::kAlready: return "keep";
    case Verdict::kChosen: return "choose it";
    case Verdict::kNoneFits: return "reject the job";
    default: return "none";
  }
}

std::string Plan::no_fit_reason() const {
  if (fits) return {};
  std::string msg = "does not fit " + hardware.describe();
  if (!errors.empty()) {
    for (const std::string& e : errors) msg += "; " + e;
    return msg;
  }
  // Device and host shortfalls apart: one sum would name neither.
  const char* per = on_cpu ? " of memory" : " per GPU";
  if (shortfall.count() > 0) msg += "; short by " + shortfall.to_string() + per;
  if (host_shortfall.count() > 0) {
    msg += (shortfall.count() > 0 ? " and " : "; short by ") + host_shortfall.to_string() + " of host RAM";
  }
  if (preferred_if_executable) {
    msg += "; " + preferred_if_executable->candidate.strategy.describe() + " would fit, but tailor-runner cannot run it: " +
           preferred_if_executable->candidate.not_executable;
  }
  if (with_activation_offload) {
    const Candidate& c = with_activation_offload->candidate;
    msg += "; " + c.strategy.describe() + " " + with_activation_offload->why + ", at " +
           c.memory.per_device.total().to_string() + " per GPU";
  }
  if (!smallest_fitting_gpu.empty()) msg += "; the smallest catalog GPU that fits: " + smallest_fitting_gpu;
  return msg;
}

}  // namespace tailor::strategies
