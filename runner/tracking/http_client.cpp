#include "runner/tracking/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

namespace tailor::runner::tracking {
namespace {

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

void init_http() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

Result<HttpReply> HttpClient::request(const char* method, const std::string& url, const std::string& body) const {
  init_http();
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return Status::unavailable(std::string(method) + " " + url + ": libcurl could not start a request");
  CURL* c = curl.get();
  HttpReply reply;
  const bool post = std::string(method) == "POST";
  const std::string bearer = "Authorization: Bearer " + auth_.bearer_token;
  curl_slist* headers = curl_slist_append(nullptr, "Accept: application/json");
  if (post) headers = curl_slist_append(headers, "Content-Type: application/json");
  if (!auth_.bearer_token.empty()) headers = curl_slist_append(headers, bearer.c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> header_list(headers, curl_slist_free_all);
  if (auth_.bearer_token.empty() && !auth_.username.empty()) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(c, CURLOPT_USERNAME, auth_.username.c_str());
    curl_easy_setopt(c, CURLOPT_PASSWORD, auth_.password.c_str());
  }
  if (post) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, header_list.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply.body);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, std::min(timeout_, 5L));
  curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: workers are threads
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  if (auth_.insecure_tls) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    return Status::unavailable(std::string(method) + " " + url + ": " + (error[0] ? error : curl_easy_strerror(rc)));
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &reply.status);
  return reply;
}

std::string url_encode(const std::string& v) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : v) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      out += '%';
      out += hex[ch >> 4];
      out += hex[ch & 15];
    }
  }
  return out;
}

}  // namespace tailor::runner::tracking
