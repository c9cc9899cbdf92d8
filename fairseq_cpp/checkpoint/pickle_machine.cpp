#include "fairseq_cpp/checkpoint/pickle_machine.h"

#include <ATen/ATen.h>

#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "fairseq_cpp/checkpoint/integrity.h"
#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {

PyValue::~PyValue() {
  std::vector<PyRef> pending;
  auto take_children = [&pending](PyValue& v) {
    for (auto& item : v.items) pending.push_back(std::move(item));
    for (auto& [key, value] : v.entries) {
      pending.push_back(std::move(key));
      pending.push_back(std::move(value));
    }
    v.items.clear();
    v.entries.clear();
  };
  take_children(*this);
  while (!pending.empty()) {
    PyRef last = std::move(pending.back());
    pending.pop_back();
    if (last && last.use_count() == 1) take_children(*last);  // it goes now, its children after it
  }
}

const PyValue* PyValue::get(const std::string& key) const {
  auto it = index.find(key);
  return it == index.end() ? nullptr : entries[it->second].second.get();
}

void PyValue::set(PyRef key, PyRef value) {
  if (key->kind != Kind::kString) {
    entries.emplace_back(std::move(key), std::move(value));
    return;
  }
  auto [it, added] = index.emplace(key->text, entries.size());
  if (added) {
    entries.emplace_back(std::move(key), std::move(value));
  } else {
    entries[it->second].second = std::move(value);
  }
}

namespace {

using Kind = PyValue::Kind;

PyRef make(Kind kind) {
  auto v = std::make_shared<PyValue>();
  v->kind = kind;
  return v;
}

PyRef make_int(int64_t i) {
  PyRef v = make(Kind::kInt);
  v->integer = i;
  return v;
}

PyRef make_text(Kind kind, std::string text) {
  PyRef v = make(kind);
  v->text = std::move(text);
  return v;
}

// Whether global `name` ("module.name") is one a checkpoint's data may name.
bool allowed_global(const std::string& module, const std::string& name) {
  const std::string top = module.substr(0, module.find('.'));
  if (top == "fairseq" || top == "omegaconf") return true;  // stand-ins that keep their state
  // A numpy scalar (fairseq 0.12's meters and val_loss may be one): kept as stand-ins, never made.
  if ((module == "numpy.core.multiarray" || module == "numpy._core.multiarray") && name == "scalar") return true;
  if ((module == "numpy" && name == "dtype") || (module == "_codecs" && name == "encode")) return true;
  if (module == "torch" && name.size() > 7 && name.compare(name.size() - 7, 7, "Storage") == 0) return true;
  static const char* const kAllowed[][2] = {{"collections", "OrderedDict"},
                                            {"argparse", "Namespace"},
                                            {"torch._utils", "_rebuild_tensor_v2"},
                                            {"torch._utils", "_rebuild_parameter"},
                                            {"torch", "Size"}};
  for (const auto& a : kAllowed)
    if (module == a[0] && name == a[1]) return true;
  return false;
}

class Machine {
 public:
  Machine(const std::string& path, const unsigned char* data, size_t size, const StorageLoader& load_storage)
      : path_(path), data_(data), size_(size), load_storage_(load_storage) {}

  PyRef run() {
    while (true) {
      const size_t at = at_;
      const unsigned char op = u8();
      op_at_ = at;
      if (op == '.') {
        if (stack_.size() != 1 || !marks_.empty()) fail("STOP with " + std::to_string(stack_.size()) + " values left");
        return stack_.back();
      }
      step(op);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    raise<DataError>("{}: data.pkl: {} (opcode at byte {})", path_, what, op_at_);
  }

  const unsigned char* take(size_t n) {
    if (n > size_ - at_) fail("the pickle ends inside an opcode");
    const unsigned char* p = data_ + at_;
    at_ += n;
    return p;
  }
  unsigned char u8() { return *take(1); }
  uint64_t little(size_t n) {
    const unsigned char* p = take(n);
    uint64_t v = 0;
    for (size_t i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
  }
  std::string bytes(uint64_t n) {
    if (n > size_ - at_) fail("a string runs past the end of the pickle");
    const auto* p = take(static_cast<size_t>(n));
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  std::string line() {
    const void* end = std::memchr(data_ + at_, '\n', size_ - at_);
    if (end == nullptr) fail("a line argument has no end");
    const size_t n = static_cast<size_t>(static_cast<const unsigned char*>(end) - (data_ + at_));
    std::string out = bytes(n);
    ++at_;
    return out;
  }

  PyRef pop() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) fail("an opcode takes more values than the stack holds");
    PyRef v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  PyRef& top() {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) fail("an opcode needs a value on the stack");
    return stack_.back();
  }
  std::vector<PyRef> pop_mark() {
    if (marks_.empty()) fail("an opcode needs a MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> out(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
                           std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return out;
  }
  void push(PyRef v) { stack_.push_back(std::move(v)); }

  void step(unsigned char op);
  void step_containers(unsigned char op);
  void step_scalars(unsigned char op);
  void step_memo(unsigned char op);
  void push_global(const std::string& module, const std::string& name);
  void reduce(const PyRef& callable, const PyRef& args);
  void build();
  void persistent_load();
  PyRef rebuild_tensor(const PyValue& args);
  void add_items(PyValue& container, std::vector<PyRef> items, bool pairs);

  const std::string& path_;
  const unsigned char* data_;
  size_t size_;
  size_t at_ = 0, op_at_ = 0;
  const StorageLoader& load_storage_;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyRef> memo_;
  std::map<std::string, PyRef> storages_;  // by key: a storage shared by several tensors stays one
};

void Machine::step(unsigned char op) {
  switch (op) {
    case 0x80:  // PROTO
      if (u8() > 5) fail("an unknown pickle protocol");
      return;
    case 0x95:  // FRAME
      take(8);
      return;
    case 'c': {  // GLOBAL
      std::string module = line();
      push_global(module, line());
      return;
    }
    case 0x93: {  // STACK_GLOBAL
      PyRef name = pop(), module = pop();
      if (name->kind != Kind::kString || module->kind != Kind::kString) fail("STACK_GLOBAL takes two strings");
      push_global(module->text, name->text);
      return;
    }
    case 'R': {  // REDUCE
      PyRef args = pop(), callable = pop();
      reduce(callable, args);
      return;
    }
    case 0x81: {  // NEWOBJ
      PyRef args = pop(), cls = pop();
      reduce(cls, args);
      return;
    }
    case 'b':  // BUILD
      build();
      return;
    case 'Q':  // BINPERSID
      persistent_load();
      return;
    default:
      step_containers(op);
  }
}

void Machine::add_items(PyValue& container, std::vector<PyRef> items, bool pairs) {
  if (pairs) {
    if (items.size() % 2 != 0) fail("SETITEMS with an odd number of values");
    if (container.kind != Kind::kDict) fail("SETITEMS on something that is not a dict");
    for (size_t i = 0; i < items.size(); i += 2) container.set(std::move(items[i]), std::move(items[i + 1]));
    return;
  }
  if (container.kind != Kind::kList) fail("APPENDS on something that is not a list");
  for (auto& item : items) container.items.push_back(std::move(item));
}

void Machine::step_containers(unsigned char op) {
  switch (op) {
    case '(':  // MARK
      marks_.push_back(stack_.size());
      return;
    case ')':  // EMPTY_TUPLE
      return push(make(Kind::kTuple));
    case ']':  // EMPTY_LIST
      return push(make(Kind::kList));
    case '}':  // EMPTY_DICT
      return push(make(Kind::kDict));
    case 't':
    case 'l': {  // TUPLE LIST
      PyRef v = make(op == 't' ? Kind::kTuple : Kind::kList);
      v->items = pop_mark();
      return push(std::move(v));
    }
    case 'd': {  // DICT
      PyRef v = make(Kind::kDict);
      add_items(*v, pop_mark(), true);
      return push(std::move(v));
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1 TUPLE2 TUPLE3
      PyRef v = make(Kind::kTuple);
      v->items.resize(op - 0x84);
      for (size_t i = v->items.size(); i-- > 0;) v->items[i] = pop();
      return push(std::move(v));
    }
    case 'a': {  // APPEND
      PyRef item = pop();
      return add_items(*top(), {std::move(item)}, false);
    }
    case 's': {  // SETITEM
      PyRef value = pop(), key = pop();
      return add_items(*top(), {std::move(key), std::move(value)}, true);
    }
    case 'e':
    case 'u': {  // APPENDS SETITEMS
      std::vector<PyRef> items = pop_mark();
      return add_items(*top(), std::move(items), op == 'u');
    }
    default:
      step_scalars(op);
  }
}

void Machine::step_scalars(unsigned char op) {
  switch (op) {
    case 'N':
      return push(make(Kind::kNone));
    case 0x88:
    case 0x89: {  // NEWTRUE NEWFALSE
      PyRef v = make(Kind::kBool);
      v->boolean = op == 0x88;
      return push(std::move(v));
    }
    case 'K':  // BININT1
      return push(make_int(static_cast<int64_t>(little(1))));
    case 'M':  // BININT2
      return push(make_int(static_cast<int64_t>(little(2))));
    case 'J':  // BININT
      return push(make_int(static_cast<int32_t>(little(4))));
    case 0x8a: {  // LONG1: little-endian two's complement of 0-8 bytes
      const unsigned n = u8();
      if (n > 8) fail("an integer wider than 64 bits");
      uint64_t v = n == 0 ? 0 : little(n);
      if (n > 0 && n < 8 && (v >> (8 * n - 1)) != 0) v |= ~uint64_t{0} << (8 * n);  // negative: sign-extend
      return push(make_int(static_cast<int64_t>(v)));
    }
    case 'G': {  // BINFLOAT: big-endian
      const unsigned char* p = take(8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
      PyRef v = make(Kind::kFloat);
      std::memcpy(&v->number, &bits, sizeof(bits));
      return push(std::move(v));
    }
    case 0x8c:
    case 'U':  // SHORT_BINUNICODE SHORT_BINSTRING
      return push(make_text(Kind::kString, bytes(u8())));
    case 'X':
    case 'T':  // BINUNICODE BINSTRING
      return push(make_text(Kind::kString, bytes(little(4))));
    case 0x8d:  // BINUNICODE8
      return push(make_text(Kind::kString, bytes(little(8))));
    case 'C':  // SHORT_BINBYTES
      return push(make_text(Kind::kBytes, bytes(u8())));
    case 'B':  // BINBYTES
      return push(make_text(Kind::kBytes, bytes(little(4))));
    default:
      step_memo(op);
  }
}

void Machine::step_memo(unsigned char op) {
  switch (op) {
    case 'q':
    case 'r':  // BINPUT LONG_BINPUT
      memo_[little(op == 'q' ? 1 : 4)] = top();
      return;
    case 0x94:  // MEMOIZE
      memo_[memo_.size()] = top();
      return;
    case 'h':
    case 'j': {  // BINGET LONG_BINGET
      auto it = memo_.find(little(op == 'h' ? 1 : 4));
      if (it == memo_.end()) fail("a memo entry that was never put");
      return push(it->second);
    }
    case '0':  // POP
      pop();
      return;
    case '1':  // POP_MARK
      pop_mark();
      return;
    case '2':  // DUP
      return push(top());
    default:
      fail(fmt::format("opcode 0x{:02x} is not one a checkpoint's data needs", op));
  }
}

void Machine::push_global(const std::string& module, const std::string& name) {
  if (!allowed_global(module, name))
    fail(
        fmt::format("refusing the global {}.{}: a checkpoint holds data, and only the globals of tensors, "
                    "containers and fairseq's classes are read",
                    one_line(module), one_line(name)));  // the file's bytes: control characters escaped
  push(make_text(Kind::kGlobal, module + "." + name));
}

void Machine::reduce(const PyRef& callable, const PyRef& args) {
  if (callable->kind != Kind::kGlobal) fail("a call of something that is not a global");
  if (args->kind != Kind::kTuple) fail("a call whose arguments are not a tuple");
  const std::string& name = callable->text;
  if (name == "collections.OrderedDict") {
    if (!args->items.empty()) fail("OrderedDict with arguments");
    return push(make(Kind::kDict));
  }
  if (name == "torch.Size") {
    if (args->items.size() != 1 || args->items[0]->kind != Kind::kTuple) fail("torch.Size takes one tuple");
    return push(args->items[0]);
  }
  if (name == "torch._utils._rebuild_tensor_v2") return push(rebuild_tensor(*args));
  if (name == "torch._utils._rebuild_parameter") {
    if (args->items.empty() || args->items[0]->kind != Kind::kTensor) fail("_rebuild_parameter takes a tensor");
    return push(args->items[0]);
  }
  if (name.rfind("torch.", 0) == 0) fail("a storage type called as a function");
  PyRef object = make_text(Kind::kObject, name);  // argparse.Namespace, fairseq's and omegaconf's classes
  object->items = args->items;
  push(std::move(object));
}

void Machine::build() {
  PyRef state = pop();
  PyValue& target = *top();
  if (target.kind == Kind::kDict || target.kind == Kind::kTensor) return;  // an OrderedDict's _metadata
  if (target.kind != Kind::kObject) fail("BUILD on something that is not an object");
  // (dict, slots) as objects with __slots__ pickle their state; anything else is kept whole.
  std::vector<PyRef> parts;
  if (state->kind == Kind::kTuple && state->items.size() == 2) {
    parts = state->items;
  } else {
    parts.push_back(state);
  }
  for (const PyRef& part : parts) {
    if (part->kind == Kind::kDict) {
      for (auto& [key, value] : part->entries) target.set(key, value);
    } else if (part->kind != Kind::kNone) {
      target.set(make_text(Kind::kString, "_state"), part);
    }
  }
}

void Machine::persistent_load() {
  PyRef pid = pop();
  const auto& f = pid->items;
  if (pid->kind != Kind::kTuple || f.size() != 5 || f[0]->kind != Kind::kString || f[0]->text != "storage" ||
      f[1]->kind != Kind::kGlobal || f[2]->kind != Kind::kString || f[4]->kind != Kind::kInt)
    fail("a persistent id that is not ('storage', type, key, location, size)");
  auto it = storages_.find(f[2]->text);
  if (it == storages_.end()) {
    PyRef storage = make(Kind::kTensor);
    const std::string type = f[1]->text.substr(f[1]->text.rfind('.') + 1);
    storage->tensor = load_storage_(f[2]->text, type, f[4]->integer);
    it = storages_.emplace(f[2]->text, std::move(storage)).first;
  }
  push(it->second);
}

// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]):
// a view of the storage that stays inside it.
PyRef Machine::rebuild_tensor(const PyValue& args) {
  const auto& a = args.items;
  if (a.size() < 4 || a[0]->kind != Kind::kTensor || a[1]->kind != Kind::kInt || a[2]->kind != Kind::kTuple ||
      a[3]->kind != Kind::kTuple || a[2]->items.size() != a[3]->items.size())
    fail("_rebuild_tensor_v2 with arguments that are not (storage, offset, size, stride, ...)");
  std::vector<int64_t> size, stride;
  int64_t last = a[1]->integer;  // the element furthest into the storage
  bool empty = false;
  for (size_t d = 0; d < a[2]->items.size(); ++d) {
    const PyValue &n = *a[2]->items[d], &s = *a[3]->items[d];
    if (n.kind != Kind::kInt || s.kind != Kind::kInt || n.integer < 0 || s.integer < 0 || n.integer > (1LL << 40) ||
        s.integer > (1LL << 40))
      fail("a tensor size or stride that is not a small non-negative integer");
    size.push_back(n.integer);
    stride.push_back(s.integer);
    empty = empty || n.integer == 0;
    if (n.integer > 0) last += (n.integer - 1) * s.integer;
  }
  const int64_t numel = a[0]->tensor.numel();
  if (a[1]->integer < 0 || (!empty && last >= numel))
    fail(fmt::format("a tensor view reaches element {} of a storage of {}", last, numel));
  PyRef out = make(Kind::kTensor);
  out->tensor = a[0]->tensor.as_strided(size, stride, a[1]->integer);
  return out;
}

}  // namespace

PyRef unpickle_restricted(const std::string& path, const unsigned char* data, size_t size,
                          const StorageLoader& load_storage) {
  return Machine(path, data, size, load_storage).run();
}

}  // namespace fairseq_cpp::checkpoint
