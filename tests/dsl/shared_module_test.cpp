// dsl::open_shared_module: the places it looks for a module (beside the
// program, then where the build wrote it), and what it says of each one it
// passed over.
#include "dsl/shared_module.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/testing/temp_dir.h"

namespace tailor::dsl {
namespace {

using tailor::testing::TempDir;

// The symbol itself, whatever it is; or nothing, as for a module of another ABI.
const void* symbol_as_entry(void* symbol) { return symbol; }
const void* entry_refused(void*) { return nullptr; }

// The test binaries live in build/tests/, the modules in build/lib/: the
// place beside the program (bin/../lib) is the build's lib/.
constexpr const char* kBuiltModule = "libtailor_sentencepiece.so";
bool built_module_exists() { return std::filesystem::exists(std::string(TAILOR_BINARY_DIR) + "/lib/" + kBuiltModule); }

TEST(SharedModuleTest, AMissingModuleNamesEachPlaceItLookedInOrder) {
  TempDir dir;
  const std::string built = dir.file("libnot_built.so");
  const auto r = open_shared_module("libnot_built.so", built, "entry", symbol_as_entry);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string& said = r.status().message();
  const std::string beside = std::filesystem::weakly_canonical(std::string(TAILOR_BINARY_DIR) + "/lib").string() +
                             "/libnot_built.so (missing)";
  const auto first = said.find(beside), second = said.find(built + " (missing)");
  EXPECT_NE(first, std::string::npos) << said;
  EXPECT_NE(second, std::string::npos) << said;
  EXPECT_LT(first, second) << said;
  // Without a build path, only the place beside the program.
  const auto alone = open_shared_module("libnot_built.so", "", "entry", symbol_as_entry);
  ASSERT_FALSE(alone.is_ok());
  EXPECT_EQ(alone.status().message(), " " + beside);
}

TEST(SharedModuleTest, AFileThatIsNoSharedObjectIsPassedOverInTheLoadersWords) {
  TempDir dir;
  const std::string bad = dir.write("libbad.so", "not an ELF file, though named like one\n");
  const auto r = open_shared_module("libbad.so", bad, "entry", symbol_as_entry);
  ASSERT_FALSE(r.is_ok());
  const std::string& said = r.status().message();
  const auto at = said.find(" " + bad + " (");
  ASSERT_NE(at, std::string::npos) << said;
  EXPECT_EQ(said.find(bad + " (missing)"), std::string::npos) << said;
  EXPECT_EQ(said.find(bad + " (not this build's module)"), std::string::npos) << said;
}

TEST(SharedModuleTest, TheEntryDecidesWhetherAModuleIsThisBuilds) {
  if (!built_module_exists()) GTEST_SKIP() << kBuiltModule << " is not built here";
  const auto found = open_shared_module(kBuiltModule, "", "tailor_sentencepiece_api", symbol_as_entry);
  ASSERT_TRUE(found.is_ok()) << found.status().message();
  EXPECT_NE(*found, nullptr);
  struct NotThisBuilds {
    const char* symbol;
    const void* (*entry)(void*);
  };
  for (const NotThisBuilds& c : {NotThisBuilds{"tailor_no_such_symbol", symbol_as_entry},
                                 NotThisBuilds{"tailor_sentencepiece_api", entry_refused}}) {
    const auto r = open_shared_module(kBuiltModule, "", c.symbol, c.entry);
    ASSERT_FALSE(r.is_ok()) << c.symbol;
    EXPECT_NE(r.status().message().find(std::string(kBuiltModule) + " (not this build's module)"), std::string::npos)
        << r.status().message();
  }
}

}  // namespace
}  // namespace tailor::dsl
