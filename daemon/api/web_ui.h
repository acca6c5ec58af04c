// The web UI (web/index.html, app.js, app.css), embedded at build time and
// served by tailord without a token: the files hold no data, and every
// request they make carries the token the user enters.
#pragma once

#include <optional>
#include <string_view>

#include "daemon/http/message.h"

namespace tailor::daemon {

// The UI's page, or one of its files by name ("app.js"); nullopt for any
// other name. Each carries the UI's security headers.
std::optional<HttpResponse> web_ui_file(std::string_view name);

// What a browser may do with the UI's pages: scripts, styles and requests
// from tailord's own origin only, no framing, no inline code, no referrer.
void add_web_ui_headers(HttpResponse& r);

}  // namespace tailor::daemon
