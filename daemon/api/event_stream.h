// GET /v1/jobs/{id}/events?follow=true: a job as it happens, as server-sent
// events (https://html.spec.whatwg.org/multipage/server-sent-events.html),
// for the web UI and scripts instead of polling three endpoints:
//   id: <event id> / event: <kind> / data: <Event>  each stored event, in order
//   event: step / data: <StepMetric>                each new step metric row
//   event: job / data: <Job, plan left out>        whenever the job changed
//   event: end / data: <Job, plan left out>        the job finished; the stream ends
//   : keep-alive                                    after 15 s of silence
//   event: closed / data: {"reason", "retry_ms"}   tailord's stream budget closed
//                                                   it to make room (retry: too)
// A client that reconnects with Last-Event-ID (or after_id) misses no event.
#pragma once

#include <cstdint>
#include <string>

#include "daemon/http/message.h"
#include "daemon/store/job_store.h"

namespace tailor::daemon {

// The body of the stream: events after `after_id`, step rows after
// `since_step`. `store` must outlive the stream.
StreamPoll job_event_stream(JobStore& store, const std::string& id, const std::string& output_dir,
                            std::int64_t after_id, std::int64_t since_step);

// GET /v1/events?follow=true: every job's events after `after_id`, as they
// are stored (id, event: kind, data: Event with its job_id), and a
// keep-alive after 15 s of silence; it ends only when the client leaves.
// The web UI's jobs table listens to it instead of polling.
StreamPoll fleet_event_stream(JobStore& store, std::int64_t after_id);

// The last words of an event stream that the server's stream budget closes
// (ServerOptions::max_streams): a `closed` event with the reason, and a
// reconnection delay of kClosedRetryMs for EventSource (and the CLI).
inline constexpr int kClosedRetryMs = 10'000;
std::string stream_closed_event(const std::string& reason);

}  // namespace tailor::daemon
