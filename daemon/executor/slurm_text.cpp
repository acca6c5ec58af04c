#include "daemon/executor/slurm_text.h"

#include <algorithm>
#include <cctype>

#include "core/text.h"
#include "core/units.h"

namespace tailor::daemon::slurm {
namespace {

// A word that starts a field: letters first, then letters, digits, '_',
// ':', '/', '.', then '='.
bool starts_field(std::string_view word) {
  const std::size_t eq = word.find('=');
  if (eq == std::string_view::npos || eq == 0 || !std::isalpha(static_cast<unsigned char>(word[0]))) return false;
  for (std::size_t i = 0; i < eq; ++i) {
    const char c = word[i];
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':' && c != '/' && c != '.') return false;
  }
  return true;
}

std::string upper_word(const std::string& state) {
  // "CANCELLED by 0" -> "CANCELLED"; "DOWN*+DRAIN" keeps its flags.
  std::string s = state.substr(0, state.find(' '));
  for (char& c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

void parse_exit(const std::string& text, int& code, int& signal) {
  const std::size_t colon = text.find(':');
  code = std::atoi(text.substr(0, colon).c_str());
  signal = colon == std::string::npos ? 0 : std::atoi(text.substr(colon + 1).c_str());
}

std::string get(const std::map<std::string, std::string>& f, const char* key) {
  const auto it = f.find(key);
  return it == f.end() ? std::string() : it->second;
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> out;
  for (const std::string& l : split(text, '\n')) {
    std::string t(trim(l));
    if (!t.empty()) out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> scontrol_fields(std::string_view line) {
  std::map<std::string, std::string> out;
  std::string* last = nullptr;
  for (const std::string& word : split(line, ' ')) {
    if (word.empty()) continue;
    if (starts_field(word)) {
      const std::size_t eq = word.find('=');
      last = &out[word.substr(0, eq)];
      *last = word.substr(eq + 1);
    } else if (last) {
      *last += " " + word;
    }
  }
  return out;
}

Phase phase_of(const std::string& slurm_state) {
  const std::string s = upper_word(slurm_state);
  if (s == "PENDING" || s == "CONFIGURING" || s == "REQUEUED" || s == "REQUEUE_HOLD" || s == "REQUEUE_FED" ||
      s == "RESV_DEL_HOLD" || s == "SUSPENDED" || s == "STOPPED" || s == "RESIZING") {
    return Phase::kPending;
  }
  // COMPLETING: the script ended and Slurm is cleaning up its steps; the
  // runner may still be writing its last lines.
  if (s == "RUNNING" || s == "COMPLETING" || s == "SIGNALING" || s == "STAGE_OUT") return Phase::kRunning;
  return Phase::kEnded;
}

std::string tailor_state_name(const std::string& slurm_state) {
  const std::string s = upper_word(slurm_state);
  switch (phase_of(s)) {
    case Phase::kPending: return "pending";
    case Phase::kRunning: return "running";
    case Phase::kEnded: break;
  }
  if (s == "COMPLETED") return "completed";
  if (s == "CANCELLED" || s == "REVOKED") return "cancelled";
  if (s == "TIMEOUT" || s == "DEADLINE") return "timeout";
  if (s == "NODE_FAIL" || s == "BOOT_FAIL") return "node_fail";
  if (s == "PREEMPTED") return "preempted";
  return "failed";  // FAILED, OUT_OF_MEMORY, SPECIAL_EXIT, anything new
}

std::string Job::describe() const {
  std::string out = state.empty() ? "UNKNOWN" : state;
  switch (phase()) {
    case Phase::kPending:
      if (!reason.empty() && reason != "None") out += " (" + reason + ")";
      break;
    case Phase::kRunning:
      if (!nodes.empty() && nodes != "(null)") out += " on " + nodes;
      break;
    case Phase::kEnded:
      if (exit_signal) {
        out += " (signal " + std::to_string(exit_signal) + ")";
      } else if (exit_code) {
        out += " (exit " + std::to_string(exit_code) + ")";
      }
      break;
  }
  return out;
}

std::vector<Job> parse_squeue(std::string_view text) {
  std::vector<Job> out;
  for (const std::string& line : lines_of(text)) {
    const auto parts = split(line, '|');
    if (parts.size() < 5) continue;
    Job j;
    j.id = parts[0];
    j.comment = parts[1] == "(null)" ? std::string() : parts[1];
    j.state = parts[2];
    j.reason = parts[3];
    j.nodes = parts[4];
    out.push_back(std::move(j));
  }
  return out;
}

std::optional<Job> parse_sacct(std::string_view text, const std::string& id) {
  std::optional<Job> found;
  for (const std::string& line : lines_of(text)) {
    const auto parts = split(line, '|');
    if (parts.size() < 3 || parts[0] != id) continue;  // steps are ID.batch, ID.0
    Job j;
    j.id = parts[0];
    j.state = parts[1];
    parse_exit(parts[2], j.exit_code, j.exit_signal);
    if (parts.size() > 3) j.nodes = parts[3];
    found = j;
  }
  return found;
}

bool Node::usable() const {
  std::string s = state;
  for (char& c : s)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* bad : {"DOWN", "DRAIN", "FAIL", "INVAL", "FUTURE", "*"}) {
    if (s.find(bad) != std::string::npos) return false;
  }
  return !s.empty();
}

void parse_gres_gpus(const std::string& gres, int& count, std::string& type) {
  count = 0;
  type.clear();
  for (const std::string& item : split(gres, ',')) {
    std::string g = item.substr(0, item.find('('));  // "(S:0-1)" socket binding
    const auto parts = split(g, ':');
    if (parts.empty() || parts[0] != "gpu") continue;
    if (parts.size() == 2) {
      count += std::atoi(parts[1].c_str());
    } else if (parts.size() >= 3) {
      if (type.empty()) type = parts[1];
      count += std::atoi(parts[2].c_str());
    } else {
      count += 1;  // "gpu" alone is one
    }
  }
}

std::optional<Node> parse_scontrol_node(std::string_view line) {
  const auto f = scontrol_fields(line);
  Node n;
  n.name = get(f, "NodeName");
  if (n.name.empty()) return std::nullopt;
  n.addr = get(f, "NodeAddr");
  n.state = get(f, "State");
  n.cpus = std::atoi(get(f, "CPUTot").c_str());
  n.memory_mib = std::atoll(get(f, "RealMemory").c_str());
  parse_gres_gpus(get(f, "Gres"), n.gpus, n.gpu_type);
  for (const std::string& p : split(get(f, "Partitions"), ',')) {
    if (!p.empty()) n.partitions.push_back(p);
  }
  return n;
}

std::vector<Node> Partition::usable_nodes() const {
  std::vector<Node> out;
  std::copy_if(nodes.begin(), nodes.end(), std::back_inserter(out), [](const Node& n) { return n.usable(); });
  return out;
}

std::string Partition::describe() const {
  const auto ok = usable_nodes();
  std::string names;
  for (const Node& n : ok)
    names += (names.empty() ? "" : ", ") + n.name;
  std::string out = "partition " + name + ": " + std::to_string(ok.size()) + " usable node(s)";
  if (!names.empty()) out += " (" + names + ")";
  if (ok.empty()) return out + (nodes.empty() ? "" : " of " + std::to_string(nodes.size()));
  int gpus = ok.front().gpus, cpus = ok.front().cpus;
  std::int64_t mem = ok.front().memory_mib;
  for (const Node& n : ok) {
    gpus = std::min(gpus, n.gpus);
    cpus = std::min(cpus, n.cpus);
    mem = std::min(mem, n.memory_mib);
  }
  out += " x ";
  if (gpus > 0) out += std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : "") + ", ";
  return out + std::to_string(cpus) + " CPU" + (cpus != 1 ? "s" : "") + ", " + Bytes::mib(mem).to_string();
}

Result<Partition> parse_partition(std::string_view partitions_text, std::string_view nodes_text,
                                  const std::string& name) {
  std::optional<Partition> found;
  std::vector<std::string> names;
  for (const std::string& line : lines_of(partitions_text)) {
    const auto f = scontrol_fields(line);
    Partition p;
    p.name = get(f, "PartitionName");
    if (p.name.empty()) continue;
    names.push_back(p.name);
    p.state = get(f, "State");
    p.is_default = get(f, "Default") == "YES";
    const std::string max_nodes = get(f, "MaxNodes");
    p.max_nodes = max_nodes == "UNLIMITED" || max_nodes.empty() ? 0 : std::atoll(max_nodes.c_str());
    p.max_time = get(f, "MaxTime");
    if (name.empty() ? p.is_default : p.name == name) found = std::move(p);
  }
  if (!found) {
    std::string have;
    for (const auto& n : names)
      have += (have.empty() ? "" : ", ") + n;
    if (name.empty()) return Status::not_found("Slurm has no default partition (partitions: " + have + ")");
    return Status::not_found("Slurm has no partition \"" + name + "\"" +
                             (have.empty() ? "" : " (partitions: " + have + ")"));
  }
  for (const std::string& line : lines_of(nodes_text)) {
    auto n = parse_scontrol_node(line);
    if (!n) continue;
    if (std::find(n->partitions.begin(), n->partitions.end(), found->name) != n->partitions.end()) {
      found->nodes.push_back(std::move(*n));
    }
  }
  return std::move(*found);
}

}  // namespace tailor::daemon::slurm
