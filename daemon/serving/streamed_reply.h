// A reply the model process may stream (a completion or chat completion
// with "stream": true) relayed as OpenAI streams it: server-sent events, one
// "data: {chunk}" each, then "data: [DONE]". The call runs on a thread of
// its own, so that the HTTP server sends the chunks as they come (its
// stream poll) while the model generates.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "daemon/http/message.h"
#include "daemon/serving/completion_worker.h"

namespace tailor::daemon {

// Calls `worker` with `route` and `body` and waits for the first chunk or
// the reply. A reply without chunks (a refusal, a reply not streamed) is
// answered as it is, JSON with its status; `failed` answers a call that
// failed (the process ended). Once a chunk came, the answer is an event
// stream; a failure after it is one last event with the error object
// (`failed`'s body) before [DONE]. A client that leaves (the server drops
// the stream) stops the generation at its next chunk: the model answers one
// request at a time and is free again. `done` runs once the call has returned,
// however it ended, and before the answer is complete (a slot given back
// before the client can ask again).
HttpResponse answer_streamed(std::shared_ptr<CompletionWorker> worker, std::string route, std::string body,
                             std::function<void()> done, std::function<HttpResponse(const Status&)> failed);

}  // namespace tailor::daemon
