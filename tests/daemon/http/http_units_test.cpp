// tailord's HTTP pieces without a server: routing, request parsing, the
// token and the Host/Origin policy.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/http/auth.h"
#include "daemon/http/message.h"
#include "daemon/http/router.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

TEST(RouterTest, BindsPathParametersAndReports405WithAllow) {
  Router r;
  r.add({"GET", "/v1/jobs/{id}/plan", true, [](HttpRequest& q) { return HttpResponse::json(200, q.params["id"]); }});
  r.add({"POST", "/v1/jobs/{id}/cancel", true, {}});
  HttpRequest q;
  q.method = "GET";
  q.path = "/v1/jobs/j-42/plan";
  auto m = r.match(q);
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(q.params["id"], "j-42");
  q.method = "GET";
  q.path = "/v1/jobs/j-42/cancel";
  m = r.match(q);
  EXPECT_EQ(m.route, nullptr);
  EXPECT_EQ(m.status, 405);
  EXPECT_EQ(m.allow, "POST");
  q.path = "/v1/jobs//plan";
  EXPECT_EQ(r.match(q).status, 404);
}

TEST(MessageTest, ParsesTargetWithPercentEscapes) {
  std::string path;
  std::map<std::string, std::string> query;
  ASSERT_TRUE(parse_target("/v1/jobs?label=team%3Dnlp&state=running&x", path, query));
  EXPECT_EQ(path, "/v1/jobs");
  EXPECT_EQ(query["label"], "team=nlp");
  EXPECT_EQ(query["state"], "running");
  EXPECT_TRUE(query.count("x"));
  EXPECT_FALSE(parse_target("/bad%zz", path, query));
  EXPECT_FALSE(parse_target("/bad%2", path, query));
  EXPECT_FALSE(parse_target("http://host/x", path, query));
}

TEST(AuthTest, ConstantTimeEqualComparesWholeStrings) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abc", "abd"));
  EXPECT_FALSE(constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(constant_time_equal("", "a"));
}

TEST(AuthTest, TokenIsCreatedPrivateAndReusedAndAWorldReadableOneRefused) {
  tailor::testing::TempDir dir;
  auto a = load_or_create_token(dir.file("token"));
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->size(), 64u);
  struct stat st {};
  ASSERT_EQ(stat(dir.file("token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto b = load_or_create_token(dir.file("token"));
  EXPECT_EQ(*a, *b);
  chmod(dir.file("token").c_str(), 0644);
  EXPECT_EQ(load_or_create_token(dir.file("token")).status().code(), StatusCode::kFailedPrecondition);
}

TEST(AuthTest, BearerHeaderIsCheckedCaseInsensitivelyForTheScheme) {
  HttpRequest r;
  r.headers["authorization"] = "bearer secret-token-value";
  EXPECT_TRUE(has_bearer_token(r, "secret-token-value"));
  r.headers["authorization"] = "Basic secret-token-value";
  EXPECT_FALSE(has_bearer_token(r, "secret-token-value"));
}

TEST(AuthTest, HostPolicyAllowsLoopbackNamesWithThePortOnly) {
  HostPolicy p(8470, "127.0.0.1", {"tailor.lan"});
  HttpRequest r;
  std::string why;
  r.headers["host"] = "localhost:8470";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "127.0.0.1:9999";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "tailor.lan";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "tailor.lan:8470";
  EXPECT_TRUE(p.allows(r, why));
  r.headers["host"] = "tailor.lan:9999";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "attacker.example:8470";
  EXPECT_FALSE(p.allows(r, why));
  r.headers["host"] = "localhost:8470";
  r.headers["origin"] = "http://attacker.example";
  EXPECT_FALSE(p.allows(r, why));
  EXPECT_NE(why.find("Origin"), std::string::npos);
}

// In a pod, kubelet's probes and Prometheus' scrapes send the pod's address
// as Host; a server bound to every interface takes any address, never a
// name it was not given, and an Origin only when it is the request's own.
TEST(AuthTest, AServerBoundToEveryInterfaceAcceptsAddressesAsHostButNotOtherNames) {
  HostPolicy p(8470, "0.0.0.0", {"tailord"});
  HttpRequest r;
  std::string why;
  for (const char* host : {"10.1.2.3:8470", "10.1.2.3", "10.1.2.3:18470", "[fd00::1]:8470", "[::1]", "tailord:8470",
                           "tailord", "localhost:8470"}) {
    r.headers["host"] = host;
    EXPECT_TRUE(p.allows(r, why)) << host << ": " << why;
  }
  for (const char* host : {"attacker.example:8470", "10.1.2.3.nip.io:8470", "2130706433:8470", "0x7f.1:8470",
                           "10.1.2.3:", "10.1.2.3:84a0", "10.1.2.3:847000", "[fd00::1", "[fd00::1]x", "fd00::1"}) {
    r.headers["host"] = host;
    EXPECT_FALSE(p.allows(r, why)) << host;
  }
  r.headers["host"] = "10.1.2.3:8470";
  r.headers["origin"] = "http://10.1.2.3:8470";
  EXPECT_TRUE(p.allows(r, why)) << why;
  r.headers["origin"] = "http://10.9.9.9:8470";
  EXPECT_FALSE(p.allows(r, why));
  EXPECT_NE(why.find("Origin"), std::string::npos);
  r.headers["origin"] = "http://tailord";
  EXPECT_TRUE(p.allows(r, why)) << why;

  // Bound to loopback, an address is a name like any other: only the listed ones.
  HostPolicy loopback(8470, "127.0.0.1", {});
  r.headers.erase("origin");
  r.headers["host"] = "10.1.2.3:8470";
  EXPECT_FALSE(loopback.allows(r, why));
}

// A link works until its moment of expiry and not from then on; ids are
// 32 random bytes; at capacity the link expiring first makes room.

}  // namespace
}  // namespace tailor::daemon
