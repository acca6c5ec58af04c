// The API without a server: download links, and daemon/openapi.yaml
// against the routes, the error table and the memory components.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/api/api.h"
#include "daemon/api/download_links.h"
#include "daemon/http/errors.h"
#include "dsl/yaml_tree.h"
#include "strategies/strategy.h"

namespace tailor::daemon {
namespace {

TEST(DownloadLinksTest, ALinkWorksUntilItExpiresAndTheEarliestMakesRoom) {
  DownloadLinks links(2);
  auto a = links.make("j-a", "model/model.safetensors", "admin", 1000.0, 600.0);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  EXPECT_EQ(a->id.size(), 64u);
  EXPECT_EQ(a->id.find_first_not_of("0123456789abcdef"), std::string::npos);
  ASSERT_TRUE(links.find(a->id, 1599.9).has_value());
  EXPECT_EQ(links.find(a->id, 1000.0)->path, "model/model.safetensors");
  EXPECT_EQ(links.find(a->id, 1000.0)->job_id, "j-a");
  EXPECT_FALSE(links.find(a->id, 1600.0).has_value());
  EXPECT_FALSE(links.find(std::string(64, 'x'), 1000.0).has_value());

  auto b = links.make("j-b", "plan.json", "admin", 1000.0, 100.0);  // expires first
  auto c = links.make("j-c", "plan.json", "admin", 1000.0, 300.0);
  ASSERT_TRUE(b.is_ok() && c.is_ok());
  EXPECT_NE(b->id, c->id);
  EXPECT_TRUE(links.find(a->id, 1001.0).has_value());
  EXPECT_FALSE(links.find(b->id, 1001.0).has_value());
  EXPECT_TRUE(links.find(c->id, 1001.0).has_value());
  // At capacity again, expired links are dropped and no live one evicted.
  auto d = links.make("j-d", "plan.json", "admin", 1700.0, 10.0);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(links.find(d->id, 1700.0).has_value());
  EXPECT_FALSE(links.find(a->id, 1500.0).has_value());
}


// One token's links make room among its own: a read-only token making
// links without end never evicts the admin token's.
TEST(DownloadLinksTest, EachOwnerMakesRoomAmongItsOwnLinks) {
  DownloadLinks links(6, 4);
  auto admin = links.make("j-a", "plan.json", "admin", 0.0, 600.0);
  ASSERT_TRUE(admin.is_ok());
  std::vector<std::string> reads;
  for (int i = 0; i < 50; ++i) {
    auto l = links.make("j-r", "plan.json", "read", 1.0 + i, 600.0);
    ASSERT_TRUE(l.is_ok());
    reads.push_back(l->id);
  }
  EXPECT_TRUE(links.find(admin->id, 10.0).has_value());
  // The reader keeps its newest four.
  for (std::size_t i = 0; i < reads.size(); ++i) {
    EXPECT_EQ(links.find(reads[i], 10.0).has_value(), i + 4 >= reads.size()) << "read link " << i;
  }
  // A full table (2 + 4) makes room among the links of whoever holds most.
  auto a2 = links.make("j-a", "plan.json", "admin", 60.0, 600.0);
  auto s1 = links.make("j-s", "plan.json", "session", 62.0, 600.0);
  ASSERT_TRUE(a2.is_ok() && s1.is_ok());
  EXPECT_TRUE(links.find(admin->id, 70.0).has_value());
  EXPECT_TRUE(links.find(a2->id, 70.0).has_value());
  EXPECT_TRUE(links.find(s1->id, 70.0).has_value());
  EXPECT_FALSE(links.find(reads[46], 70.0).has_value());  // the reader's earliest
  EXPECT_TRUE(links.find(reads[47], 70.0).has_value());
}

// daemon/openapi.yaml as the source tree has it; nullopt (with a failure)
// when it does not parse.
std::optional<dsl::Node> load_openapi() {
  std::ifstream f(std::string(TAILOR_SOURCE_DIR) + "/daemon/openapi.yaml");
  std::stringstream ss;
  ss << f.rdbuf();
  dsl::Diagnostics d;
  auto doc = dsl::parse_yaml(ss.str(), "openapi.yaml", d);
  EXPECT_TRUE(doc) << d.to_string();
  return doc;
}

TEST(OpenApiTest, DocumentListsExactlyTheServedRoutes) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* paths = doc->find("paths");
  ASSERT_NE(paths, nullptr);
  std::set<std::string> documented;
  for (const auto& p : paths->entries) {
    for (const auto& op : p.value.entries) {
      std::string method = op.key;
      if (method == "parameters") continue;
      for (char& c : method) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      documented.insert(method + " " + p.key);
    }
  }
  Api api{ApiContext{}};
  std::set<std::string> served;
  for (const Route& r : api.router().routes()) served.insert(r.method + " " + r.pattern);
  EXPECT_EQ(documented, served);
}

// The document's MemoryBreakdown lists the components' table, in order.
TEST(OpenApiTest, TheMemoryBreakdownIsTheComponentsTable) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* props = doc->find("components");
  for (const char* key : {"schemas", "MemoryBreakdown", "properties"}) {
    ASSERT_NE(props, nullptr) << key;
    props = props->find(key);
  }
  ASSERT_NE(props, nullptr);
  std::vector<std::string> documented, table;
  for (const auto& p : props->entries) {
    if (p.key != "overlap" && p.key != "total") documented.push_back(p.key);
  }
  for (const strategies::MemoryComponent& c : strategies::kMemoryComponents) table.emplace_back(c.key);
  EXPECT_EQ(documented, table);
}

// The error table and the document's Error.error enum are the same list,
// and the description gives each code the status the table does.
TEST(OpenApiTest, TheErrorCodesAreTheErrorTables) {
  auto doc = load_openapi();
  ASSERT_TRUE(doc);
  const dsl::Node* error = doc->find("components");
  for (const char* key : {"schemas", "Error", "properties", "error"}) {
    ASSERT_NE(error, nullptr) << key;
    error = error->find(key);
  }
  ASSERT_NE(error, nullptr);
  const dsl::Node* listed = error->find("enum");
  ASSERT_NE(listed, nullptr);
  std::vector<std::string> documented;
  for (const auto& item : listed->items) documented.push_back(item.scalar);
  std::vector<std::string> table;
  const std::string description = error->find("description")->scalar;
  for (const ErrorKind& k : error_table()) {
    table.emplace_back(k.code);
    // "<status> ... <code>" with no other status between them.
    const auto at = description.find(std::string(k.code));
    ASSERT_NE(at, std::string::npos) << k.code;
    const auto status_at = description.rfind(std::to_string(k.http_status), at);
    ASSERT_NE(status_at, std::string::npos) << k.code;
    for (const ErrorKind& other : error_table()) {
      if (other.http_status == k.http_status) continue;
      const auto between = description.find(std::to_string(other.http_status), status_at);
      EXPECT_TRUE(between == std::string::npos || between > at) << k.code << " is not listed under " << k.http_status;
    }
  }
  EXPECT_EQ(documented, table);
  for (const ErrorKind& k : error_table()) EXPECT_EQ(&error_kind(k.error), &k);
}

}  // namespace
}  // namespace tailor::daemon
