// A conversation record read into OpenAI's form (dsl/chat_records.h).
// Internal to tailor_dsl: included by its .cpp files only.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "dsl/job_spec.h"

namespace tailor::dsl {

// `record` (one object of a jsonl or json file) as spec.chat reads it,
// serialized as {"messages": [...], "tools": ...} ("tools" only where the
// record has them). InvalidArgument after `where` ("path:line: "), naming
// the turn: not a list of turns, a turn that is not an object, a role that
// is missing, not a string or unknown (with the data.chat or data.roles
// that would read it), a content that is neither a string, null nor a list
// of parts, a conversation with no turn that data.train_on trains.
Result<std::string> conversation_of(const nlohmann::ordered_json& record, const DataSpec& spec,
                                    const std::string& where);

}  // namespace tailor::dsl
