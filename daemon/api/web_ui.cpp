#include "daemon/api/web_ui.h"

#include <string>

extern const char tailor_web_index_html[];
extern const char tailor_web_app_js[];
extern const char tailor_web_app_css[];

namespace tailor::daemon {

void add_web_ui_headers(HttpResponse& r) {
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                         "img-src 'self' data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  // Small, and replaced with tailord: revalidated each load, never stale.
  r.headers.emplace_back("Cache-Control", "no-cache");
}

std::optional<HttpResponse> web_ui_file(std::string_view name) {
  struct File {
    std::string_view name;
    const char* body;
    const char* type;
  };
  static const File kFiles[] = {{"index.html", tailor_web_index_html, "text/html; charset=utf-8"},
                                {"app.js", tailor_web_app_js, "text/javascript; charset=utf-8"},
                                {"app.css", tailor_web_app_css, "text/css; charset=utf-8"}};
  for (const File& f : kFiles) {
    if (f.name != name) continue;
    HttpResponse r;
    r.content_type = f.type;
    r.body = f.body;
    add_web_ui_headers(r);
    return r;
  }
  return std::nullopt;
}

}  // namespace tailor::daemon
