// The state_dict pickle reader against pickles built byte by byte as
// torch.save writes them (protocol 2: an OrderedDict of
// _rebuild_tensor_v2 calls on persistent storages), and against what it
// must refuse: other globals, views past their storage, other shapes of
// object, every truncation and random damage. (Files torch.save and
// transformers really wrote: tests/runner/torch/hf_interop_test.cpp.)
#include "runner/io/torch_pickle.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace tailor::runner::io {
namespace {

// Opcodes, as Python's pickletools names them.
class Pickle {
 public:
  Pickle() { b_ += "\x80\x02"; }  // PROTO 2
  Pickle& global(const std::string& module, const std::string& name) {
    b_ += "c" + module + "\n" + name + "\n";
    return *this;
  }
  Pickle& text(const std::string& s) {
    b_ += 'X';
    for (int k = 0; k < 4; ++k)
      b_ += static_cast<char>(s.size() >> (8 * k) & 0xff);
    b_ += s;
    return *this;
  }
  Pickle& small(int v) {  // BININT1
    b_ += 'K';
    b_ += static_cast<char>(v);
    return *this;
  }
  Pickle& op(char c) {
    b_ += c;
    return *this;
  }
  Pickle& ordered_dict() { return global("collections", "OrderedDict").op(')').op('R'); }
  Pickle& ints(std::initializer_list<int> v) {
    op('(');
    for (int x : v)
      small(x);
    return op('t');
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  Pickle& tensor(const std::string& storage_type, const std::string& key, int numel, int offset,
                 std::initializer_list<int> size, std::initializer_list<int> stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').text("storage").global("torch", storage_type).text(key).text("cpu").small(numel).op('t').op('Q');
    small(offset).ints(size).ints(stride).op('\x89').ordered_dict();
    return op('t').op('R');
  }
  const std::string& bytes() const { return b_; }

 private:
  std::string b_;
};

// Two tensors sharing storage "0" (the second its transpose, as a tied or
// transposed matrix is saved), a bf16 one, and the state_dict's _metadata
// set by BUILD, as torch.save writes a module's state_dict.
std::string state_dict() {
  Pickle p;
  p.ordered_dict().op('q').op('\x00').op('(');
  p.text("w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
  p.text("w_t").tensor("FloatStorage", "0", 6, 0, {3, 2}, {1, 3});
  p.text("b").tensor("BFloat16Storage", "1", 4, 1, {3}, {1});
  p.op('u');
  p.op('}').text("_metadata").ordered_dict().op('s').op('b');
  return p.op('.').bytes();
}

TEST(TorchPickleTest, AStateDictGivesEachTensorsStorageAndView) {
  const auto r = read_state_dict_pickle(state_dict());
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->size(), 3u);
  const PickledTensor& w = (*r)[0];
  EXPECT_EQ(w.name, "w");
  EXPECT_EQ(w.storage, "0");
  EXPECT_EQ(w.dtype, DType::kF32);
  EXPECT_EQ(w.storage_numel, 6);
  EXPECT_EQ(w.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(w.strides, (std::vector<std::int64_t>{3, 1}));
  const PickledTensor& t = (*r)[1];
  EXPECT_EQ(t.name, "w_t");
  EXPECT_EQ(t.storage, "0");
  EXPECT_EQ(t.strides, (std::vector<std::int64_t>{1, 3}));
  const PickledTensor& b = (*r)[2];
  EXPECT_EQ(b.dtype, DType::kBF16);
  EXPECT_EQ(b.offset, 1);
  EXPECT_EQ(b.shape, std::vector<std::int64_t>{3});
}

TEST(TorchPickleTest, OtherGlobalsAreRefusedByNameBeforeAnythingIsCalled) {
  Pickle p;
  p.global("posix", "system").text("touch PWNED").op('\x85').op('R').op('.');
  const auto r = read_state_dict_pickle(p.bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("the pickle names posix.system, which is not part of a dict of tensors"),
            std::string::npos)
      << r.status().message();
  // A known global called as something it is not.
  Pickle storage;
  storage.ordered_dict().text("x").global("torch", "FloatStorage").op(')').op('R').op('s').op('.');
  const auto s = read_state_dict_pickle(storage.bytes());
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("it calls torch.FloatStorage"), std::string::npos) << s.status().message();
}

TEST(TorchPickleTest, AViewPastItsStorageIsRefused) {
  // (2, 3) from element 1, (3, 3), (2, 3) with rows 4 apart: each ends
  // past the storage's 6 elements.
  const Pickle views[] = {
      Pickle().ordered_dict().text("w").tensor("FloatStorage", "0", 6, 1, {2, 3}, {3, 1}).op('s').op('.'),
      Pickle().ordered_dict().text("w").tensor("FloatStorage", "0", 6, 0, {3, 3}, {3, 1}).op('s').op('.'),
      Pickle().ordered_dict().text("w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {4, 1}).op('s').op('.'),
  };
  for (const Pickle& p : views) {
    const auto r = read_state_dict_pickle(p.bytes());
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("a tensor of storage 0: its view reaches element"), std::string::npos)
        << r.status().message();
  }
  Pickle negative;
  negative.ordered_dict().text("w").tensor("FloatStorage", "0", 6, 0, {2}, {255}).op('s').op('.');
  EXPECT_FALSE(read_state_dict_pickle(negative.bytes()).is_ok());
  // One storage named with two sizes.
  Pickle twice;
  twice.ordered_dict().op('(');
  twice.text("a").tensor("FloatStorage", "0", 6, 0, {6}, {1});
  twice.text("b").tensor("FloatStorage", "0", 8, 0, {8}, {1});
  twice.op('u').op('.');
  const auto r = read_state_dict_pickle(twice.bytes());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("storage 0 appears with two types or sizes"), std::string::npos)
      << r.status().message();
}

TEST(TorchPickleTest, ObjectsOtherThanADictOfTensorsAreRefusedSayingWhat) {
  const struct {
    std::string pickle;
    std::string says;
  } cases[] = {
      {Pickle().op(']').op('.').bytes(), "it holds a list, not a dict of tensors"},
      // A training checkpoint: {"model": state_dict, "step": 3}.
      {Pickle().op('}').text("model").ordered_dict().op('s').text("step").small(3).op('s').op('.').bytes(),
       "model is a dict, not a tensor"},
      {Pickle().op('}').small(1).tensor("FloatStorage", "0", 1, 0, {1}, {1}).op('s').op('.').bytes(),
       "a key of its dict is an int, not a tensor name"},
      {Pickle()
           .op('(')
           .text("a")
           .tensor("FloatStorage", "0", 1, 0, {1}, {1})
           .text("a")
           .tensor("FloatStorage", "0", 1, 0, {1}, {1})
           .op('d')
           .op('.')
           .bytes(),
       "a appears twice"},
      // INST, which protocol 0 uses to build arbitrary objects.
      {Pickle().op('i').bytes() + "os\nsystem\n.",
       "opcode 0x69 at byte 2, which a pickled dict of tensors does not use"},
      {Pickle().op('h').op('\x07').op('.').bytes(), "it fetches memo 7, which it never stored"},
      {Pickle().op('}').op('s').op('.').bytes(), "it reads past the bottom of its stack"},
      {Pickle().op('}').op('}').op('.').bytes(), "it ends with 2 values left"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    const auto r = read_state_dict_pickle(c.pickle);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

TEST(TorchPickleTest, EveryTruncationAndRandomDamageIsAnErrorNotACrash) {
  const std::string whole = state_dict();
  for (std::size_t n = 0; n < whole.size(); ++n) {
    const auto r = read_state_dict_pickle(whole.substr(0, n));
    EXPECT_FALSE(r.is_ok()) << "the first " << n << " bytes";
  }
  std::mt19937 rng(7);
  int read = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string damaged = whole;
    for (int flips = 1 + k % 4; flips > 0; --flips) {
      damaged[rng() % damaged.size()] = static_cast<char>(rng() & 0xff);
    }
    const auto r = read_state_dict_pickle(damaged);
    read += r.is_ok();
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  // Some damage lands in names or values and still reads; most does not.
  EXPECT_LT(read, 3000);
}

}  // namespace
}  // namespace tailor::runner::io
