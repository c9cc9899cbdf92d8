// The restricted pickle machine (checkpoint/pickle_machine.h) on pickles written by hand, opcode by
// opcode as Python's pickle writes them (protocol 2, as torch.save): what it builds, and what it
// refuses. fairseq's own file goes through it in tests/models/fairseq_fixture_test.cpp.
#include <gtest/gtest.h>
#include "tests/support/torch.h"

#include <string>

#include "fairseq_cpp/checkpoint/pickle_machine.h"
#include "fairseq_cpp/core/errors.h"

namespace fairseq_cpp::checkpoint {
namespace {

using Kind = PyValue::Kind;
using namespace std::string_literals;  // the pickles hold NUL bytes

std::string u32(uint32_t n) {
  std::string out;
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}
std::string unicode(const std::string& s) { return "X" + u32(static_cast<uint32_t>(s.size())) + s; }  // BINUNICODE

PyRef unpickle(const std::string& bytes, const StorageLoader& storage = {}) {
  return unpickle_restricted("t.pt", reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), storage);
}

std::string error_of(const std::string& bytes, const StorageLoader& storage = {}) {
  try {
    unpickle(bytes, storage);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(PickleMachine, BuildsTheContainersAndScalarsACheckpointHolds) {
  // pickle.dumps(OrderedDict([("a", [1, -2, 300, 2**40, -2**40]), ("b", (1.5, True, None)),
  //                           ("c", {"d": "e"})]), protocol=2), written out by hand.
  std::string p =
      "\x80\x02"
      "ccollections\nOrderedDict\nq\x00)Rq\x01("s;
  p += unicode("a") + "]q\x02(K\x01J" + u32(static_cast<uint32_t>(-2)) + "M\x2c\x01" +
       std::string("\x8a\x06\x00\x00\x00\x00\x00\x01", 8) + std::string("\x8a\x06\x00\x00\x00\x00\x00\xff", 8) + "e";
  p += unicode("b") + "G" + std::string("\x3f\xf8\x00\x00\x00\x00\x00\x00", 8) + "\x88N\x87";
  p += unicode("c") + "}q\x03" + unicode("d") + unicode("e") + "su.";
  PyRef v = unpickle(p);
  ASSERT_EQ(v->kind, Kind::kDict);
  ASSERT_EQ(v->entries.size(), 3u);
  const PyValue* a = v->get("a");
  ASSERT_TRUE(a != nullptr && a->kind == Kind::kList && a->items.size() == 5);
  EXPECT_EQ(a->items[0]->integer, 1);
  EXPECT_EQ(a->items[1]->integer, -2);
  EXPECT_EQ(a->items[2]->integer, 300);
  EXPECT_EQ(a->items[3]->integer, int64_t{1} << 40);
  EXPECT_EQ(a->items[4]->integer, -(int64_t{1} << 40));
  const PyValue* b = v->get("b");
  ASSERT_TRUE(b != nullptr && b->kind == Kind::kTuple && b->items.size() == 3);
  EXPECT_DOUBLE_EQ(b->items[0]->number, 1.5);
  EXPECT_TRUE(b->items[1]->boolean);
  EXPECT_EQ(b->items[2]->kind, Kind::kNone);
  EXPECT_EQ(v->get("c")->get("d")->text, "e");
}

TEST(PickleMachine, ANamespaceKeepsItsStateAndMemoEntriesAreShared) {
  // argparse.Namespace(arch="transformer", lr=[0.0005]) as pickle writes it: NEWOBJ-less REDUCE, BUILD.
  std::string p =
      "\x80\x02"
      "cargparse\nNamespace\nq\x00)Rq\x01}q\x02("s +
      unicode("arch") + unicode("transformer") + unicode("lr") + "]q\x03G" +
      std::string("\x3f\x40\x62\x4d\xd2\xf1\xa9\xfc", 8) + "a" + unicode("again") + "h\x03" + "ub.";
  PyRef v = unpickle(p);
  ASSERT_EQ(v->kind, Kind::kObject);
  EXPECT_EQ(v->text, "argparse.Namespace");
  EXPECT_EQ(v->get("arch")->text, "transformer");
  ASSERT_EQ(v->get("lr")->items.size(), 1u);
  EXPECT_DOUBLE_EQ(v->get("lr")->items[0]->number, 0.0005);
  EXPECT_EQ(v->get("again"), v->get("lr"));  // BINGET gives the same list, not a copy
}

TEST(PickleMachine, TensorsAreViewsOfTheirStorageThatStayInsideIt) {
  int loads = 0;
  StorageLoader storage = [&](const std::string& key, const std::string& type, int64_t numel) {
    ++loads;
    EXPECT_EQ(key, "0");
    EXPECT_EQ(type, "FloatStorage");
    return torch::arange(numel, torch::kFloat);
  };
  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict()), twice on one storage.
  auto tensor = [](int offset, const std::string& size, const std::string& stride) {
    return std::string("ctorch._utils\n_rebuild_tensor_v2\n(") + "(" + unicode("storage") + "ctorch\nFloatStorage\n" +
           unicode("0") + unicode("cpu") + "K\x0c" + "tQK" + std::string(1, static_cast<char>(offset)) + size + stride +
           "\x89" + "ccollections\nOrderedDict\n)RtR";
  };
  std::string p =
      "\x80\x02]q\x00("s + tensor(2, "K\x02K\x03\x86", "K\x03K\x01\x86") + tensor(0, "K\x0c\x85", "K\x01\x85") + "e.";
  PyRef v = unpickle(p, storage);
  ASSERT_EQ(v->items.size(), 2u);
  EXPECT_TRUE(torch::equal(v->items[0]->tensor, torch::arange(2, 8, torch::kFloat).view({2, 3})));
  EXPECT_EQ(v->items[1]->tensor.numel(), 12);
  EXPECT_EQ(loads, 1);  // one storage, read once
  // A view past the storage's end is refused, not read.
  std::string past = "\x80\x02" + tensor(7, "K\x02K\x03\x86", "K\x03K\x01\x86") + ".";
  EXPECT_NE(error_of(past, storage).find("a tensor view reaches element 12 of a storage of 12"), std::string::npos)
      << error_of(past, storage);
}

TEST(PickleMachine, AnyOtherGlobalIsRefusedBeforeAnythingIsCalled) {
  // The classic: os.system("touch pwned") as a REDUCE.
  const std::string p =
      "\x80\x02"
      "cposix\nsystem\nq\x00"s +
      unicode("touch pwned") + "\x85R.";
  EXPECT_NE(error_of(p).find("t.pt: data.pkl: refusing the global posix.system: a checkpoint holds data"),
            std::string::npos)
      << error_of(p);
  EXPECT_NE(error_of("\x80\x02"
                     "cbuiltins\neval\n.")
                .find("refusing the global builtins.eval"),
            std::string::npos);
  // fairseq's and omegaconf's classes are stand-ins: kept, never called.
  PyRef meter = unpickle(
      "\x80\x02"
      "cfairseq.meters\nAverageMeter\n)R}" +
      unicode("avg") + "K\x05sb.");
  EXPECT_EQ(meter->text, "fairseq.meters.AverageMeter");
  EXPECT_EQ(meter->get("avg")->integer, 5);
}

TEST(PickleMachine, MalformedPicklesAreOneLineErrors) {
  EXPECT_NE(error_of("\x80\x02"
                     "a.")
                .find("takes more values than the stack holds"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "]")
                .find("the pickle ends inside an opcode"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "h\x07.")
                .find("a memo entry that was never put"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "]}.")
                .find("STOP with 2 values left"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "e.")
                .find("needs a MARK"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "I1\n.")
                .find("opcode 0x49 is not one a checkpoint's data needs"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x02"
                     "X\xff\xff\xff\x7f"
                     "abc.")
                .find("a string runs past the end"),
            std::string::npos);
}

TEST(PickleMachine, AMillionLevelsOfNestingAreFreedWithoutRecursion) {
  std::string p = "\x80\x02]";
  p += std::string(1000000, '\x85');  // TUPLE1 around the last value, a million times
  p += ".";
  PyRef v = unpickle(p);
  EXPECT_EQ(v->kind, Kind::kTuple);
  v.reset();  // a recursive destructor would overflow the stack here
  SUCCEED();
}

}  // namespace
}  // namespace fairseq_cpp::checkpoint
