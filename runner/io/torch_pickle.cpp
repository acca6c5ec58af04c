#include "runner/io/torch_pickle.h"

#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <utility>

namespace tailor::runner::io {
namespace {

struct Storage {
  std::string key;
  DType dtype = DType::kU8;
  std::int64_t numel = 0;
};

struct TensorRef {
  Storage storage;
  std::int64_t offset = 0;
  std::vector<std::int64_t> shape, strides;
};

struct Value;
using ValuePtr = std::shared_ptr<Value>;

// What the machine's stack holds. Containers are shared, so that a dict
// memoised before SETITEMS fills it is the same dict when fetched again.
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  Kind kind = Kind::kNone;
  std::int64_t i = 0;  // kBool, kInt
  double f = 0;
  std::string s;                                       // kString; kGlobal: "module.name"
  std::vector<ValuePtr> items;                         // kTuple, kList
  std::vector<std::pair<ValuePtr, ValuePtr>> entries;  // kDict, in insertion order
  Storage storage;                                     // kStorage
  TensorRef tensor;                                    // kTensor
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return "a bool";
    case Value::Kind::kInt: return "an int";
    case Value::Kind::kFloat: return "a float";
    case Value::Kind::kString: return "a string";
    case Value::Kind::kTuple: return "a tuple";
    case Value::Kind::kList: return "a list";
    case Value::Kind::kDict: return "a dict";
    case Value::Kind::kGlobal: return "a class or function";
    case Value::Kind::kStorage: return "a storage";
    case Value::Kind::kTensor: return "a tensor";
  }
  return "a value";
}

struct Bad {
  std::string what;
};

[[noreturn]] void fail(std::string what) { throw Bad{std::move(what)}; }

ValuePtr make(Value::Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

ValuePtr make_int(std::int64_t i, Value::Kind k = Value::Kind::kInt) {
  auto v = make(k);
  v->i = i;
  return v;
}

// The globals a state_dict's pickle names; anything else is refused as soon
// as it is named.
std::optional<DType> storage_dtype(std::string_view name) {
  static const std::map<std::string_view, DType> k = {{"FloatStorage", DType::kF32}, {"DoubleStorage", DType::kF64},
                                                      {"HalfStorage", DType::kF16},  {"BFloat16Storage", DType::kBF16},
                                                      {"LongStorage", DType::kI64},  {"IntStorage", DType::kI32},
                                                      {"ShortStorage", DType::kI16}, {"CharStorage", DType::kI8},
                                                      {"ByteStorage", DType::kU8},   {"BoolStorage", DType::kBool}};
  const auto it = k.find(name);
  return it == k.end() ? std::nullopt : std::optional<DType>(it->second);
}

bool known_global(const std::string& module, const std::string& name) {
  if (module == "collections" && name == "OrderedDict") return true;
  if (module == "torch._utils") {
    return name == "_rebuild_tensor_v2" || name == "_rebuild_tensor" || name == "_rebuild_parameter" ||
           name == "_rebuild_parameter_with_state";
  }
  return module == "torch" && storage_dtype(name).has_value();
}

class Machine {
 public:
  explicit Machine(std::string_view pickle) : in_(pickle) {}

  ValuePtr run() {
    // Bounds on what a hostile pickle can make us hold.
    constexpr std::size_t kMaxStack = 1 << 20;
    while (true) {
      if (stack_.size() > kMaxStack) fail("its stack grows past " + std::to_string(kMaxStack) + " entries");
      const std::uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;    // PROTO
        case 0x95: bytes(8); break;  // FRAME: a length hint
        case '.': {                  // STOP
          if (stack_.size() != 1 || !marks_.empty())
            fail("it ends with " + std::to_string(stack_.size()) + " values left");
          return stack_.back();
        }
        case 'c': {  // GLOBAL
          std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const ValuePtr name = pop(), module = pop();
          if (module->kind != Value::Kind::kString || name->kind != Value::Kind::kString)
            fail("a malformed STACK_GLOBAL");
          push(global(module->s, name->s));
          break;
        }
        case 'q': memo_[byte()] = top(); break;                                     // BINPUT
        case 'r': memo_[u32()] = top(); break;                                      // LONG_BINPUT
        case 0x94: memo_[static_cast<std::uint32_t>(memo_.size())] = top(); break;  // MEMOIZE
        case 'h': push(memo(byte())); break;                                        // BINGET
        case 'j': push(memo(u32())); break;                                         // LONG_BINGET
        case '(': marks_.push_back(stack_.size()); break;                           // MARK
        case ')': push(make(Value::Kind::kTuple)); break;                           // EMPTY_TUPLE
        case 't': push(sequence(Value::Kind::kTuple, pop_mark())); break;           // TUPLE
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1, TUPLE2, TUPLE3
          const std::size_t n = op - 0x84u;
          if (stack_.size() < n + base()) fail("a tuple of " + std::to_string(n) + " past its stack");
          std::vector<ValuePtr> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(sequence(Value::Kind::kTuple, std::move(items)));
          break;
        }
        case '}': push(make(Value::Kind::kDict)); break;  // EMPTY_DICT
        case 'd': {                                       // DICT
          auto d = make(Value::Kind::kDict);
          set_items(*d, pop_mark());
          push(d);
          break;
        }
        case 's': {  // SETITEM
          ValuePtr value = pop(), key = pop();
          dict_at_top().entries.emplace_back(std::move(key), std::move(value));
          break;
        }
        case 'u': {  // SETITEMS
          std::vector<ValuePtr> items = pop_mark();
          set_items(dict_at_top(), std::move(items));
          break;
        }
        case ']': push(make(Value::Kind::kList)); break;                  // EMPTY_LIST
        case 'l': push(sequence(Value::Kind::kList, pop_mark())); break;  // LIST
        case 'a': {                                                       // APPEND
          ValuePtr v = pop();
          list_at_top().items.push_back(std::move(v));
          break;
        }
        case 'e': {  // APPENDS
          std::vector<ValuePtr> items = pop_mark();
          Value& l = list_at_top();
          for (ValuePtr& v : items)
            l.items.push_back(std::move(v));
          break;
        }
        case 'N': push(make(Value::Kind::kNone)); break;
        case 0x88: push(make_int(1, Value::Kind::kBool)); break;            // NEWTRUE
        case 0x89: push(make_int(0, Value::Kind::kBool)); break;            // NEWFALSE
        case 'J': push(make_int(static_cast<std::int32_t>(u32()))); break;  // BININT
        case 'K': push(make_int(byte())); break;                            // BININT1
        case 'M': push(make_int(u16())); break;                             // BININT2
        case 0x8a: push(make_int(long1())); break;                          // LONG1
        case 'G': {                                                         // BINFLOAT: big-endian
          std::uint64_t bits = 0;
          for (unsigned char c : bytes(8))
            bits = bits << 8 | c;
          auto v = make(Value::Kind::kFloat);
          v->f = std::bit_cast<double>(bits);
          push(v);
          break;
        }
        case 'X': push(string(u32())); break;      // BINUNICODE
        case 0x8c: push(string(byte())); break;    // SHORT_BINUNICODE
        case 0x8d: push(string(u64())); break;     // BINUNICODE8
        case 'T': push(string(u32())); break;      // BINSTRING
        case 'U': push(string(byte())); break;     // SHORT_BINSTRING
        case '0': pop(); break;                    // POP
        case '1': pop_mark(); break;               // POP_MARK
        case '2': push(top()); break;              // DUP
        case 'Q': push(persistent(pop())); break;  // BINPERSID
        case 'R': {                                // REDUCE
          const ValuePtr args = pop(), callable = pop();
          push(reduce(*callable, *args));
          break;
        }
        case 'b': {  // BUILD: state set on an object
          const ValuePtr state = pop();
          const Value& obj = *top();
          // An OrderedDict's attributes (a state_dict's _metadata) and a
          // parameter's are not the tensors' data.
          if (obj.kind != Value::Kind::kDict && obj.kind != Value::Kind::kTensor) {
            fail(std::string("BUILD on ") + kind_name(obj.kind));
          }
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          fail(std::string("opcode ") + hex + " at byte " + std::to_string(pos_ - 1) +
               ", which a pickled dict of tensors does not use");
        }
      }
    }
  }

 private:
  std::uint8_t byte() {
    if (pos_ >= in_.size()) fail("it is truncated (no STOP)");
    return static_cast<std::uint8_t>(in_[pos_++]);
  }
  std::string_view bytes(std::uint64_t n) {
    if (n > in_.size() - pos_) fail("it is truncated (a value runs past its end)");
    const std::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint64_t little(int n) {
    std::uint64_t v = 0;
    const std::string_view b = bytes(n);
    for (int k = n - 1; k >= 0; --k)
      v = v << 8 | static_cast<std::uint8_t>(b[k]);
    return v;
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(little(2)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(little(4)); }
  std::uint64_t u64() { return little(8); }
  std::int64_t long1() {
    const int n = byte();
    if (n > 8) fail("an integer of " + std::to_string(n) + " bytes");
    if (n == 0) return 0;
    std::uint64_t v = little(n);
    if (n < 8 && (v >> (8 * n - 1) & 1)) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<std::int64_t>(v);
  }
  std::string line() {
    const std::size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("it is truncated (a GLOBAL without its newline)");
    std::string out(in_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  ValuePtr string(std::uint64_t n) {
    auto v = make(Value::Kind::kString);
    v->s = std::string(bytes(n));
    return v;
  }

  std::size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  const ValuePtr& top() const {
    if (stack_.size() <= base()) fail("it reads past the bottom of its stack");
    return stack_.back();
  }
  ValuePtr pop() {
    ValuePtr v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<ValuePtr> pop_mark() {
    if (marks_.empty()) fail("it ends a MARK it never set");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  ValuePtr memo(std::uint32_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("it fetches memo " + std::to_string(key) + ", which it never stored");
    return it->second;
  }
  static ValuePtr sequence(Value::Kind k, std::vector<ValuePtr> items) {
    auto v = make(k);
    v->items = std::move(items);
    return v;
  }
  Value& dict_at_top() {
    Value& d = *top();
    if (d.kind != Value::Kind::kDict) fail(std::string("it sets an item of ") + kind_name(d.kind));
    return d;
  }
  Value& list_at_top() {
    Value& l = *top();
    if (l.kind != Value::Kind::kList) fail(std::string("it appends to ") + kind_name(l.kind));
    return l;
  }
  static void set_items(Value& d, std::vector<ValuePtr> items) {
    if (items.size() % 2 != 0) fail("a dict's items come in an odd number");
    for (std::size_t k = 0; k < items.size(); k += 2)
      d.entries.emplace_back(items[k], items[k + 1]);
  }

  static ValuePtr global(const std::string& module, const std::string& name) {
    if (!known_global(module, name)) {
      fail("the pickle names " + module + "." + name +
           ", which is not part of a dict of tensors (refused, not run: Tailor reads weights only)");
    }
    auto v = make(Value::Kind::kGlobal);
    v->s = module + "." + name;
    return v;
  }

  static std::int64_t as_int(const Value& v, const char* what) {
    if (v.kind != Value::Kind::kInt) fail(std::string(what) + " is " + kind_name(v.kind) + ", not an int");
    return v.i;
  }
  static std::vector<std::int64_t> as_ints(const Value& v, const char* what) {
    if (v.kind != Value::Kind::kTuple) fail(std::string(what) + " is " + kind_name(v.kind) + ", not a tuple");
    std::vector<std::int64_t> out;
    for (const ValuePtr& item : v.items)
      out.push_back(as_int(*item, what));
    return out;
  }

  // ('storage', torch.<Type>Storage, key, location, numel)
  ValuePtr persistent(const ValuePtr& pid) {
    const auto& t = pid->items;
    if (pid->kind != Value::Kind::kTuple || t.size() != 5 || t[0]->kind != Value::Kind::kString ||
        t[0]->s != "storage" || t[1]->kind != Value::Kind::kGlobal || t[2]->kind != Value::Kind::kString) {
      fail("a persistent id that is not a storage's");
    }
    const auto dtype = storage_dtype(std::string_view(t[1]->s).substr(std::string_view("torch.").size()));
    if (!dtype) fail("storage " + t[2]->s + " is of type " + t[1]->s);
    Storage s{t[2]->s, *dtype, as_int(*t[4], "a storage's size")};
    if (s.numel < 0) fail("storage " + s.key + " has a negative size");
    const auto [it, fresh] = storages_.emplace(s.key, s);
    if (!fresh && (it->second.dtype != s.dtype || it->second.numel != s.numel)) {
      fail("storage " + s.key + " appears with two types or sizes");
    }
    auto v = make(Value::Kind::kStorage);
    v->storage = std::move(s);
    return v;
  }

  static ValuePtr reduce(const Value& callable, const Value& args) {
    if (callable.kind != Value::Kind::kGlobal) fail(std::string("it calls ") + kind_name(callable.kind));
    if (args.kind != Value::Kind::kTuple) fail("it calls " + callable.s + " with " + kind_name(args.kind));
    const auto& a = args.items;
    if (callable.s == "collections.OrderedDict") {
      if (!a.empty()) fail("it builds an OrderedDict from arguments");
      return make(Value::Kind::kDict);
    }
    if (callable.s == "torch._utils._rebuild_parameter" || callable.s == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Value::Kind::kTensor) fail("a parameter without its tensor");
      return a[0];
    }
    if (callable.s == "torch._utils._rebuild_tensor_v2" || callable.s == "torch._utils._rebuild_tensor") {
      if (a.size() < 4 || a[0]->kind != Value::Kind::kStorage) fail(callable.s + " without a storage and a view");
      auto v = make(Value::Kind::kTensor);
      TensorRef& t = v->tensor;
      t.storage = a[0]->storage;
      t.offset = as_int(*a[1], "a tensor's offset");
      t.shape = as_ints(*a[2], "a tensor's size");
      t.strides = as_ints(*a[3], "a tensor's stride");
      check_view(t);
      return v;
    }
    fail("it calls " + callable.s);  // a storage type called: not a tensor's pickle
  }

  // The view's last element lies within its storage.
  static void check_view(const TensorRef& t) {
    const std::string where = "a tensor of storage " + t.storage.key;
    if (t.shape.size() != t.strides.size()) fail(where + ": its size and stride differ in length");
    if (t.offset < 0) fail(where + ": a negative offset");
    std::int64_t last = t.offset;
    bool empty = false;
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] < 0 || t.strides[d] < 0) fail(where + ": a negative size or stride");
      if (t.shape[d] == 0) empty = true;
      std::int64_t reach = 0;
      if (t.shape[d] > 0 && (__builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &reach) ||
                             __builtin_add_overflow(last, reach, &last))) {
        fail(where + ": its view overflows");
      }
    }
    if (!empty && last >= t.storage.numel) {
      fail(where + ": its view reaches element " + std::to_string(last) + " of " + std::to_string(t.storage.numel));
    }
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint32_t, ValuePtr> memo_;
  std::map<std::string, Storage> storages_;
};

}  // namespace

Result<std::vector<PickledTensor>> read_state_dict_pickle(std::string_view pickle) {
  try {
    const ValuePtr root = Machine(pickle).run();
    if (root->kind != Value::Kind::kDict) {
      return Status::invalid_argument(std::string("it holds ") + kind_name(root->kind) +
                                      ", not a dict of tensors (a state_dict, as transformers saves "
                                      "pytorch_model.bin)");
    }
    std::vector<PickledTensor> out;
    std::map<std::string, bool, std::less<>> seen;
    for (const auto& [key, value] : root->entries) {
      if (key->kind != Value::Kind::kString) {
        return Status::invalid_argument(std::string("a key of its dict is ") + kind_name(key->kind) +
                                        ", not a tensor name");
      }
      if (value->kind != Value::Kind::kTensor) {
        return Status::invalid_argument(key->s + " is " + kind_name(value->kind) +
                                        ", not a tensor (the file is not a state_dict of weights)");
      }
      if (!seen.emplace(key->s, true).second) return Status::invalid_argument(key->s + " appears twice");
      const TensorRef& t = value->tensor;
      out.push_back({key->s, t.storage.key, t.storage.dtype, t.storage.numel, t.offset, t.shape, t.strides});
    }
    return out;
  } catch (const Bad& bad) {
    return Status::invalid_argument(bad.what);
  }
}

}  // namespace tailor::runner::io
