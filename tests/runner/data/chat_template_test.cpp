// The chat-template engine: its pieces one behaviour at a time, its errors,
// and the whole of it against Python jinja2 as transformers runs it
// (chat_template_reference.py), byte for byte.
#include "runner/data/chat_template.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>

#include "runner/data/jinja/template.h"

namespace tailor::runner::data {
namespace {

using jinja::Template;
using jinja::Value;

// Renders `source` with `vars` (a JSON object) as transformers would pass
// them, without messages unless vars holds them.
Result<std::string> render(const std::string& source, const ChatJson& vars = ChatJson::object(),
                           const jinja::RenderLimits& limits = {}) {
  TAILOR_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  ChatInput in;
  if (vars.contains("messages")) in.messages = vars["messages"];
  for (const auto& [k, v] : vars.items()) {
    if (k != "messages") in.variables[k] = v;
  }
  TAILOR_ASSIGN_OR_RETURN(RenderedChat out, t.render(in, limits));
  return out.text;
}

std::string ok(const std::string& source, const ChatJson& vars = ChatJson::object()) {
  Result<std::string> r = render(source, vars);
  EXPECT_TRUE(r.is_ok()) << source << "\n" << r.status().to_string();
  return r.is_ok() ? r.value() : "<error>";
}

std::string error_of(const std::string& source, const ChatJson& vars = ChatJson::object(),
                     const jinja::RenderLimits& limits = {}) {
  Result<std::string> r = render(source, vars, limits);
  EXPECT_FALSE(r.is_ok()) << source << " rendered " << (r.is_ok() ? r.value() : "");
  return r.is_ok() ? "" : r.status().message();
}

// ---- whitespace: trim_blocks, lstrip_blocks, "-" and "+"

TEST(ChatTemplateWhitespace, TrimBlocksRemovesTheNewlineAfterABlockTag) {
  EXPECT_EQ(ok("{% if true %}\nyes\n{% endif %}\nend"), "yes\nend");
}

TEST(ChatTemplateWhitespace, LstripBlocksRemovesIndentationBeforeABlockTag) {
  EXPECT_EQ(ok("a\n    {% if true %}\n    b\n    {% endif %}\nc"), "a\n    b\nc");
}

TEST(ChatTemplateWhitespace, LstripBlocksLeavesIndentationBeforeAPrintTag) {
  EXPECT_EQ(ok("a\n  {{ 'x' }}\n"), "a\n  x");
}

TEST(ChatTemplateWhitespace, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(ok("a  \n\n  {{- 'b' -}}  \n\n c"), "abc");
  EXPECT_EQ(ok("a \n {%- if true -%} \n b {%- endif %}"), "ab");
}

TEST(ChatTemplateWhitespace, PlusKeepsWhatTrimAndLstripWouldRemove) {
  EXPECT_EQ(ok("a\n  {%+ if true +%}\nb{% endif %}"), "a\n  \nb");
}

TEST(ChatTemplateWhitespace, OneTrailingNewlineOfTheTemplateIsDropped) {
  EXPECT_EQ(ok("x\n"), "x");
  EXPECT_EQ(ok("x\n\n"), "x\n");
}

TEST(ChatTemplateWhitespace, CommentsAndRawBlocks) {
  EXPECT_EQ(ok("a{# note #}b\n  {# indented comment #}\nc"), "ab\nc");
  EXPECT_EQ(ok("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(ChatTemplateWhitespace, CarriageReturnsBecomeNewlines) { EXPECT_EQ(ok("a\r\nb\rc"), "a\nb\nc"); }

// ---- expressions and values printed as Python prints them

TEST(ChatTemplateValues, PythonStrOfScalarsAndContainers) {
  EXPECT_EQ(ok("{{ none }}|{{ true }}|{{ False }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ 1e20 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 7 / 2 }}"),
            "None|True|False|1.0|0.30000000000000004|1e+20|3|-4|2|1024|3.5");
  EXPECT_EQ(ok("{{ [1, 'a', none, [true]] }}|{{ {'k': 'v', 'n': 1} }}|{{ (1,) }}|{{ ('a', \"it's\") }}"),
            "[1, 'a', None, [True]]|{'k': 'v', 'n': 1}|(1,)|('a', \"it's\")");
}

TEST(ChatTemplateValues, StringLiteralEscapesFollowPython) {
  EXPECT_EQ(ok(R"({{ 'a\nb\tc\\d\'e' }}|{{ "\u00e9\x41" }}|{{ 'x' 'y' }})"), "a\nb\tc\\d'e|\xC3\xA9" "A|xy");
}

TEST(ChatTemplateValues, UndefinedPrintsEmptyIsFalsyAndRaisesOnAttribute) {
  EXPECT_EQ(ok("[{{ nothing }}]{% if not nothing %}falsy{% endif %}{{ nothing | length }}"), "[]falsy0");
  EXPECT_EQ(ok("{{ {'a': 1}.b is defined }}"), "False");
  EXPECT_NE(error_of("{{ nothing.attr }}").find("'nothing' is undefined"), std::string::npos);
}

TEST(ChatTemplateValues, SlicingAndLengthCountCodePoints) {
  const ChatJson vars = {{"s", "h\xC3\xA9llo \xF0\x9F\x98\x80!"}};
  EXPECT_EQ(ok("{{ s | length }}|{{ s[1] }}|{{ s[-2] }}|{{ s[::-1] }}|{{ s[1:3] }}", vars),
            "8|\xC3\xA9|\xF0\x9F\x98\x80|!\xF0\x9F\x98\x80 oll\xC3\xA9h|\xC3\xA9l");
  EXPECT_EQ(ok("{{ [1,2,3,4,5][1::2] }}|{{ [1,2,3][-2:] }}|{{ [1,2,3][5:] }}"), "[2, 4]|[2, 3]|[]");
}

TEST(ChatTemplateValues, ComparisonsMembershipAndLogicReturnPythonValues) {
  EXPECT_EQ(ok("{{ 1 == 1.0 }}|{{ 'a' in 'cat' }}|{{ 2 not in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 0 or 'x' }}|{{ 'a' and '' }}|{{ 1 < 2 < 3 }}"),
            "True|True|False|True|x||True");
  EXPECT_EQ(ok("{{ 'yes' if [] else 'no' }}|{{ 'a' ~ 1 ~ none }}|{{ -3 | abs }}"), "no|a1None|3");
}

// ---- statements

TEST(ChatTemplateStatements, LoopVariablesAndElse) {
  EXPECT_EQ(ok("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}"),
            "103TrueFalse3 212FalseFalse3 321FalseTrue3 ");
  EXPECT_EQ(ok("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(ok("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}{{ loop.cycle('a','b') }} {% endfor %}"),
            "-2a 1-3b 2-a ");
}

TEST(ChatTemplateStatements, LoopFilterClauseCountsOnlyKeptItems) {
  EXPECT_EQ(ok("{% for x in range(10) if x is odd %}{{ x }}/{{ loop.length }} {% endfor %}"), "1/5 3/5 5/5 7/5 9/5 ");
}

TEST(ChatTemplateStatements, TupleUnpackingBreakAndContinue) {
  EXPECT_EQ(ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(ok("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"), "013");
}

TEST(ChatTemplateStatements, SetInsideALoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(ok("{% set x = 1 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set x = 5 %}{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}"),
            "1 3");
  EXPECT_EQ(ok("{% if true %}{% set y = 2 %}{% endif %}{{ y }}"), "2");
}

TEST(ChatTemplateStatements, BlockSetWithFilter) {
  EXPECT_EQ(ok("{% set s | upper %} hi {% endset %}[{{ s }}]"), "[ HI ]");
}

TEST(ChatTemplateStatements, MacrosWithDefaultsVarargsAndCaller) {
  EXPECT_EQ(ok("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ varargs }}{% endmacro %}{{ m(1) }}|{{ m(1, b=2) }}|{{ m(1, 2, 3) }}"),
            "1B()|12()|12(3,)");
  EXPECT_EQ(ok("{% macro w() %}[{{ caller() }}]{% endmacro %}{% call w() %}inner{% endcall %}"), "[inner]");
  EXPECT_EQ(ok("{% filter upper %}abc{% endfilter %}"), "ABC");
}

// ---- filters, tests and methods templates call

TEST(ChatTemplateFilters, TojsonIsTransformersJsonDumps) {
  const ChatJson vars = {{"d", {{"b", "\xC3\xA9\"\n"}, {"a", {1, 2.5, nullptr, true}}}}};
  EXPECT_EQ(ok("{{ d | tojson }}", vars), "{\"b\": \"\xC3\xA9\\\"\\n\", \"a\": [1, 2.5, null, true]}");
  EXPECT_EQ(ok("{{ d | tojson(indent=2) }}", vars),
            "{\n  \"b\": \"\xC3\xA9\\\"\\n\",\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  EXPECT_EQ(ok("{{ d | tojson(sort_keys=true) }}|{{ 'é' | tojson(ensure_ascii=true) }}", vars),
            "{\"a\": [1, 2.5, null, true], \"b\": \"\xC3\xA9\\\"\\n\"}|\"\\u00e9\"");
}

TEST(ChatTemplateFilters, StringFilters) {
  EXPECT_EQ(ok("{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | title }}|{{ 'hELLO' | capitalize }}|{{ 'aXbX' | replace('X', '-') }}"),
            "x|hi|Hello World|Hello|a-b-");
  EXPECT_EQ(ok("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(ok("{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int(7) }}|{{ '2.5' | float }}|{{ 3.14159 | round(2) }}|{{ 2.5 | round }}|{{ 7 | string }}"),
            "42|4|7|2.5|3.14|2.0|7");
}

TEST(ChatTemplateFilters, SequenceFilters) {
  const ChatJson vars = {{"ms", {{{"role", "system"}, {"n", 3}}, {{"role", "user"}, {"n", 1}}, {{"role", "user"}, {"n", 2}}}}};
  EXPECT_EQ(ok("{{ ms | map(attribute='role') | join(',') }}|{{ ms | selectattr('role', 'equalto', 'user') | list | length }}|{{ ms | rejectattr('role', 'eq', 'user') | map(attribute='n') | first }}",
               vars),
            "system,user,user|2|3");
  EXPECT_EQ(ok("{{ ms | sort(attribute='n') | map(attribute='n') | list }}|{{ ms | map(attribute='role') | unique | list }}|{{ ms | sum(attribute='n') }}|{{ ms | map(attribute='n') | max }}",
               vars),
            "[1, 2, 3]|['system', 'user']|6|3");
  EXPECT_EQ(ok("{{ [3,1,2] | reverse | list }}|{{ {'b': 1, 'a': 2} | dictsort }}|{{ [1,2,3] | last }}|{{ [] | first is undefined }}|{{ [1,2,3,4,5] | batch(2) | list }}"),
            "[2, 1, 3]|[('a', 2), ('b', 1)]|3|True|[[1, 2], [3, 4], [5]]");
  EXPECT_EQ(ok("{{ [0, 1, '', 'a'] | select | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ nothing | default('d') }}|{{ '' | default('d', true) }}"),
            "[1, 'a']|[1, 3]|d|d");
}

TEST(ChatTemplateFilters, TestsOnTypes) {
  EXPECT_EQ(ok("{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is integer }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ none is none }}{{ true is boolean }}{{ false is false }}"),
            "TrueTrueTrueFalseTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(ok("{{ 4 is even }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'a' is eq 'a' }}{{ 1 is ne 1 }}{{ x is not defined }}"),
            "TrueTrueTrueTrueTrueFalseTrue");
}

TEST(ChatTemplateFilters, StringAndDictMethods) {
  EXPECT_EQ(ok("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a.b.c'.rsplit('.', 1) }}"),
            "a b|axx|['a', 'b', '', 'c']|['a', 'b']|['a.b', 'c']");
  EXPECT_EQ(ok("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'abc'.upper() }}|{{ 'h\xC3\xA9llo'.find('l') }}|{{ 'banana'.count('an') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a b'.title() }}"),
            "TrueTrue|ABC|2|2|a-b|A B");
  EXPECT_EQ(ok("{{ {'a': 1}.get('a') }}|{{ {'a': 1}.get('b', 'dflt') }}|{{ {'a': 1}.keys() | list }}|{{ {'a': 1}.values() | list }}"),
            "1|dflt|['a']|[1]");
}

TEST(ChatTemplateFilters, DictAttributeAccessPrefersMethodsLikeJinja) {
  const ChatJson vars = {{"m", {{"items", "not a method"}, {"content", "c"}}}};
  EXPECT_EQ(ok("{{ m.content }}|{{ m['items'] }}|{{ m.items is callable }}", vars), "c|not a method|True");
}

TEST(ChatTemplateFilters, GlobalsTransformersInstalls) {
  EXPECT_EQ(ok("{{ range(3) | list }}|{{ range(1, 7, 2) | list }}|{{ dict(a=1) }}"), "[0, 1, 2]|[1, 3, 5]|{'a': 1}");
  EXPECT_EQ(ok("{{ strftime_now('%Y') | length }}"), "4");
}

// ---- generation spans

TEST(ChatTemplateGeneration, SpansAreOffsetsOfEachGenerationBlockInCodePoints) {
  Result<ChatTemplate> t = ChatTemplate::parse("\xC3\xA9{% for m in messages %}<{% generation %}{{ m.content }}{% endgeneration %}>{% endfor %}");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ChatInput in;
  in.messages = ChatJson::parse(R"([{"role": "assistant", "content": "ab"}, {"role": "assistant", "content": "\u00e9z"}])");
  Result<RenderedChat> r = t->render(in);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->text, "\xC3\xA9<ab><\xC3\xA9z>");
  ASSERT_EQ(r->generation_spans.size(), 2u);
  EXPECT_EQ(r->generation_spans[0].begin_chars, 2u);
  EXPECT_EQ(r->generation_spans[0].end_chars, 4u);
  EXPECT_EQ(r->generation_spans[1].begin_chars, 6u);
  EXPECT_EQ(r->generation_spans[1].end_chars, 8u);
  EXPECT_EQ(r->generation_spans[1].begin_bytes, 7u);
  EXPECT_EQ(r->generation_spans[1].end_bytes, 10u);
}

// ---- errors

TEST(ChatTemplateErrors, SyntaxErrorNamesLineAndColumn) {
  Result<ChatTemplate> t = ChatTemplate::parse("line one\n{% if x %}\n  {{ x + }}\n{% endif %}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().message().rfind("chat template 3:", 0), 0u) << t.status().message();
}

TEST(ChatTemplateErrors, UnclosedBlockIsAnError) {
  Result<ChatTemplate> t = ChatTemplate::parse("{% for x in y %}no end");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("endfor"), std::string::npos) << t.status().message();
}

TEST(ChatTemplateErrors, UnknownFilterNamesTheFilterAndPosition) {
  Result<ChatTemplate> t = ChatTemplate::parse("ok\n  {{ x | foo }}");
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().message(), "chat template 2:10: unknown filter 'foo'");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheTemplatesMessage) {
  const std::string msg = error_of("\n{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}");
  EXPECT_EQ(msg, "chat template 2:17: raise_exception: Roles must alternate");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheConstruct) {
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("1:"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] | tojson }}{{ x.y.z }}").find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ range(200000) | length }}").find("Range too big"), std::string::npos);
}

TEST(ChatTemplateErrors, InfiniteMacroRecursionEndsInAnError) {
  const std::string msg = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(msg.find("call depth"), std::string::npos) << msg;
}

TEST(ChatTemplateErrors, HugeLoopsAndOutputsEndInAnError) {
  jinja::RenderLimits limits;
  limits.max_loop_iterations = 100000;
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {}, limits).find("loop iterations"),
            std::string::npos);
  limits.max_output_bytes = 1000;
  EXPECT_NE(error_of("{% for i in range(1000) %}xx{% endfor %}", {}, limits).find("output exceeds"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("too large"), std::string::npos);
}

TEST(ChatTemplateErrors, ValuesNestedWithoutBoundOrInACycleAreErrorsNotCrashes) {
  EXPECT_NE(error_of("{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}")
                .find("nested more than"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns }}").find("recursion"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(a=1) %}{% set ns.a = [ns] %}{{ ns.a | tojson }}").find("JSON"), std::string::npos);
}

TEST(ChatTemplateErrors, DeeplyNestedBlocksAreAnErrorNotACrash) {
  std::string deep;
  for (int i = 0; i < 5000; ++i) deep += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(deep).is_ok());
}

TEST(ChatTemplateErrors, DeeplyNestedExpressionIsAnErrorNotACrash) {
  std::string deep(5000, '(');
  deep = "{{ " + deep + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(deep).is_ok());
}

TEST(ChatTemplateErrors, MutatingMethodsAreRefusedAsInTheImmutableSandbox) {
  EXPECT_NE(error_of("{% set l = [1] %}{{ l.append(2) }}").find("unsafe"), std::string::npos);
}

TEST(ChatTemplateErrors, NonUtf8InputIsRefused) {
  EXPECT_FALSE(ChatTemplate::parse("bad \xFF byte").is_ok());
}

// ---- the comparison with Python

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string excerpt(const std::string& s, std::size_t at) {
  const std::size_t b = at > 60 ? at - 60 : 0;
  std::string e = s.substr(b, 140);
  std::string out;
  for (char c : e) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Compares one rendering with jinja2's: the same text and generation spans,
// or an error where jinja2 raised (raise_exception's message included).
std::string compare(const Result<RenderedChat>& r, const ChatJson& c) {
  if (c.contains("error")) {
    const std::string expected_error = c["error"];
    if (r.is_ok()) return "jinja2 raised " + c["error_type"].get<std::string>() + ": " + expected_error + "\n  ours rendered: " + excerpt(r->text, 0);
    if (c["error_type"] == "TemplateError" && r.status().message().find(expected_error) == std::string::npos) {
      return "raise_exception message differs:\n  jinja2: " + expected_error + "\n  ours:   " + r.status().message();
    }
    return "";
  }
  if (!r.is_ok()) return "jinja2 rendered, ours failed: " + r.status().message();
  const std::string expected = c["expected"];
  if (r->text != expected) {
    std::size_t at = 0;
    while (at < expected.size() && at < r->text.size() && expected[at] == r->text[at]) ++at;
    return "first difference at byte " + std::to_string(at) + " (lengths " + std::to_string(expected.size()) + " vs " +
           std::to_string(r->text.size()) + ")\n  jinja2: " + excerpt(expected, at) + "\n  ours:   " + excerpt(r->text, at);
  }
  std::vector<std::vector<std::size_t>> spans;
  for (const auto& s : r->generation_spans) spans.push_back({s.begin_chars, s.end_chars});
  if (c["spans"].get<std::vector<std::vector<std::size_t>>>() != spans) {
    return "generation spans differ: jinja2 " + c["spans"].dump() + " ours " + ChatJson(spans).dump();
  }
  return "";
}

// Runs chat_template_reference.py once for the suite.
class ChatTemplateReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("tailor-chat-template-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::filesystem::path out = dir / "expected.json";
    const std::string cmd = std::string(TAILOR_SOURCE_DIR) + "/.venv/bin/python " + TAILOR_SOURCE_DIR +
                            "/tests/runner/data/chat_template_reference.py " + out.string() + " > " +
                            (dir / "python.log").string() + " 2>&1";
    const auto start = std::chrono::steady_clock::now();
    const int rc = std::system(cmd.c_str());
    python_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rc != 0) {
      error_ = cmd + " exited " + std::to_string(rc) + ":\n" + read_file(dir / "python.log");
    } else {
      doc_ = new ChatJson(ChatJson::parse(read_file(out)));
    }
    std::filesystem::remove_all(dir);
  }
  static void TearDownTestSuite() {
    delete doc_;
    doc_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(doc_, nullptr) << error_; }

  static ChatJson* doc_;
  static std::string error_;
  static double python_seconds_;
};

ChatJson* ChatTemplateReference::doc_ = nullptr;
std::string ChatTemplateReference::error_;
double ChatTemplateReference::python_seconds_ = 0;

TEST_F(ChatTemplateReference, EveryTemplateAndConversationMatchesJinja2ByteForByte) {
  const ChatJson& doc = *doc_;
  const ChatJson& convs = doc["conversations"];
  const std::filesystem::path tdir = std::filesystem::path(TAILOR_SOURCE_DIR) / "tests/runner/data/chat_templates";

  std::map<std::string, std::shared_ptr<Result<ChatTemplate>>> templates;
  std::map<std::string, std::pair<int, int>> per_template;  // passed, total
  int passed = 0;
  int failed = 0;
  std::vector<std::string> reports;
  double render_s = 0;  // ChatTemplate::render alone, JSON handling excluded
  for (std::size_t i = 0; i < doc["cases"].size(); ++i) {
    const ChatJson& c = doc["cases"][i];
    const std::string name = c["template"];
    auto& t = templates[name];
    if (!t) t = std::make_shared<Result<ChatTemplate>>(ChatTemplate::parse(read_file(tdir / name)));
    const ChatJson& conv = convs[c["conversation"].get<std::size_t>()];
    ChatInput in;
    in.messages = conv["messages"];
    if (conv.contains("tools")) in.tools = conv["tools"];
    in.add_generation_prompt = c["add_generation_prompt"];
    in.variables = c["variables"];
    const auto render_start = std::chrono::steady_clock::now();
    const Result<RenderedChat> r = t->is_ok() ? (*t)->render(in) : Result<RenderedChat>(t->status());
    render_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - render_start).count();
    const std::string problem = compare(r, c);
    auto& pt = per_template[name];
    ++pt.second;
    if (problem.empty()) {
      ++passed;
      ++pt.first;
    } else {
      ++failed;
      if (reports.size() < 15) {
        reports.push_back(name + " case " + std::to_string(i) + " (conversation " + c["conversation"].dump() +
                          ", add_generation_prompt " + c["add_generation_prompt"].dump() + "): " + problem);
      }
    }
  }
  int templates_ok = 0;
  for (const auto& [name, pt] : per_template) {
    if (pt.first == pt.second) {
      ++templates_ok;
    } else {
      std::printf("  %s: %d/%d cases match\n", name.c_str(), pt.first, pt.second);
    }
  }
  std::printf("chat templates: %d/%zu templates and %d/%d cases match jinja2 byte for byte (%zu conversations); "
              "python %.1fs (rendering %.1fs), ours %.2fs rendering\n",
              templates_ok, per_template.size(), passed, passed + failed, convs.size(), python_seconds_,
              doc["python_seconds"].get<double>(), render_s);
  for (const auto& r : reports) std::printf("MISMATCH %s\n", r.c_str());
  EXPECT_EQ(failed, 0);
  EXPECT_GE(per_template.size(), 20u);
  EXPECT_GE(convs.size(), 200u);
}

TEST_F(ChatTemplateReference, EverySnippetMatchesJinja2) {
  const ChatJson& doc = *doc_;
  int failed = 0;
  for (const ChatJson& c : doc["snippets"]) {
    ChatInput in;
    in.messages = doc["snippet_messages"];
    in.variables = doc["snippet_variables"];
    in.variables["msgs"] = doc["snippet_messages"];
    const std::string source = c["source"];
    Result<ChatTemplate> t = ChatTemplate::parse(source);
    const Result<RenderedChat> r = t.is_ok() ? t->render(in) : Result<RenderedChat>(t.status());
    const std::string problem = compare(r, c);
    if (!problem.empty()) {
      ++failed;
      ADD_FAILURE() << "snippet " << ChatJson(source).dump() << ": " << problem;
    }
  }
  std::printf("snippets: %d/%zu match jinja2\n", static_cast<int>(doc["snippets"].size()) - failed, doc["snippets"].size());
}

}  // namespace
}  // namespace tailor::runner::data
