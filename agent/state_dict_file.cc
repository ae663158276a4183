#include "agent/state_dict_file.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

namespace firedrill::agent {
namespace {

// Each tensor's values as a compact CPU tensor of its own.
at::Tensor Compact(const at::Tensor& t) {
  at::Tensor c = t.detach().to(at::kCPU).contiguous();
  if (c.storage_offset() != 0 || c.storage().nbytes() != c.nbytes()) c = c.clone();
  return c;
}

// The names torch.save gives each dtype: its storage class and safetensors'
// dtype code. Empty: not exported (complex, quantized, ...).
struct DtypeNames {
  const char* storage;
  const char* safetensors;
};
DtypeNames NamesOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return {"FloatStorage", "F32"};
    case at::kDouble:
      return {"DoubleStorage", "F64"};
    case at::kHalf:
      return {"HalfStorage", "F16"};
    case at::kBFloat16:
      return {"BFloat16Storage", "BF16"};
    case at::kLong:
      return {"LongStorage", "I64"};
    case at::kInt:
      return {"IntStorage", "I32"};
    case at::kShort:
      return {"ShortStorage", "I16"};
    case at::kChar:
      return {"CharStorage", "I8"};
    case at::kByte:
      return {"ByteStorage", "U8"};
    case at::kBool:
      return {"BoolStorage", "BOOL"};
    default:
      return {"", ""};
  }
}

Status Unsupported(const std::string& name, const at::Tensor& t) {
  return InvalidArgument("tensor " + name + " has dtype " + std::string(c10::toString(t.scalar_type())) +
                         ", which the export does not write (floating, integer and bool tensors only)");
}

// The opcodes of pickle protocol 2 that a state dict needs (Lib/pickle.py),
// each one the restricted unpickler handles.
class Pickle {
 public:
  void Proto() { Op("\x80\x02", 2); }
  void Stop() { Op(".", 1); }
  void Mark() { Op("(", 1); }
  void Tuple() { Op("t", 1); }
  void EmptyTuple() { Op(")", 1); }
  void EmptyDict() { Op("}", 1); }
  void SetItems() { Op("u", 1); }
  void Reduce() { Op("R", 1); }
  void BinPersId() { Op("Q", 1); }
  void False() { Op("\x89", 1); }
  void Global(const std::string& module, const std::string& name) {
    out_ += 'c';
    out_ += module + "\n" + name + "\n";
  }
  void Str(const std::string& s) {
    out_ += 'X';
    Le(static_cast<uint32_t>(s.size()), 4);
    out_ += s;
  }
  void Int(int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      Le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      Le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      out_ += 'J';
      Le(static_cast<uint32_t>(static_cast<int32_t>(v)), 4);
    } else {
      out_ += '\x8a';  // LONG1: little-endian two's complement, 8 bytes
      out_ += '\x08';
      Le(static_cast<uint64_t>(v), 8);
    }
  }
  void IntTuple(at::IntArrayRef v) {
    if (v.empty()) return EmptyTuple();
    Mark();
    for (int64_t x : v) Int(x);
    Tuple();
  }
  const std::string& bytes() const { return out_; }

 private:
  void Op(const char* p, size_t n) { out_.append(p, n); }
  void Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  std::string out_;
};

Status WriteTorch(const std::map<std::string, at::Tensor>& tensors, const ByteWriter& write) {
  // data.pkl: {name: _rebuild_tensor_v2(storage, 0, size, stride, False,
  // OrderedDict())}, each storage a persistent id ('storage', torch.<T>Storage,
  // key, 'cpu', numel) whose bytes are the record data/<key>.
  std::vector<at::Tensor> storages;
  Pickle p;
  p.Proto();
  p.EmptyDict();
  if (!tensors.empty()) p.Mark();
  for (const auto& [name, t] : tensors) {
    const DtypeNames names = NamesOf(t.scalar_type());
    if (*names.storage == '\0') return Unsupported(name, t);
    at::Tensor c = Compact(t);
    const std::string key = std::to_string(storages.size());
    p.Str(name);
    p.Global("torch._utils", "_rebuild_tensor_v2");
    p.Mark();
    p.Mark();
    p.Str("storage");
    p.Global("torch", names.storage);
    p.Str(key);
    p.Str("cpu");
    p.Int(c.numel());
    p.Tuple();
    p.BinPersId();
    p.Int(0);
    p.IntTuple(c.sizes());
    p.IntTuple(c.strides());
    p.False();
    p.Global("collections", "OrderedDict");
    p.EmptyTuple();
    p.Reduce();
    p.Tuple();
    p.Reduce();
    storages.push_back(std::move(c));
  }
  if (!tensors.empty()) p.SetItems();
  p.Stop();

  std::unique_ptr<caffe2::serialize::PyTorchStreamWriter> zip;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamWriter>([&](const void* data, size_t n) {
      write(static_cast<const char*>(data), n);
      return n;
    });
    zip->writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
    static const char kLittle[] = "little";
    zip->writeRecord("byteorder", kLittle, std::strlen(kLittle));
    for (size_t i = 0; i < storages.size(); ++i)
      zip->writeRecord("data/" + std::to_string(i), storages[i].data_ptr(), storages[i].nbytes());
    zip->writeEndOfFile();  // and archive/version
  } catch (const std::exception& e) {
    // An unfinished writer's destructor finalises and may throw again: leak
    // it on this (rare) path rather than terminate.
    if (zip && !zip->finalized()) (void)zip.release();
    const std::string what = e.what();
    return Internal("cannot write the torch.save archive: " + what.substr(0, what.find('\n')));
  }
  return Status::Ok();
}

Status WriteSafetensors(const std::map<std::string, at::Tensor>& tensors, const ByteWriter& write) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<at::Tensor> data;
  int64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // name order, as the header's
    const DtypeNames names = NamesOf(t.scalar_type());
    if (*names.safetensors == '\0') return Unsupported(name, t);
    if (name == "__metadata__")
      return InvalidArgument("a tensor may not be named __metadata__ in safetensors");
    at::Tensor c = Compact(t);
    const int64_t n = static_cast<int64_t>(c.nbytes());
    header[name] = {
        {"dtype", names.safetensors}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    data.push_back(std::move(c));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string("the safetensors header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  write(len, sizeof len);
  write(text.data(), text.size());
  for (const auto& c : data) write(static_cast<const char*>(c.data_ptr()), c.nbytes());
  return Status::Ok();
}

}  // namespace

StatusOr<StateDictFormat> ParseStateDictFormat(const std::string& name, const std::string& file_name) {
  if (name == "torch") return StateDictFormat::kTorch;
  if (name == "safetensors") return StateDictFormat::kSafetensors;
  if (name == "auto" || name.empty()) {
    const std::string suffix = ".safetensors";
    const bool st = file_name.size() >= suffix.size() &&
                    file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) == 0;
    return st ? StateDictFormat::kSafetensors : StateDictFormat::kTorch;
  }
  return InvalidArgument("unknown export format \"" + name +
                         "\": torch, safetensors or auto (by the file name)");
}

const char* StateDictFormatName(StateDictFormat format) {
  return format == StateDictFormat::kSafetensors ? "safetensors" : "torch";
}

namespace {

// Both formats store names as UTF-8 (the pickle's BINUNICODE, the
// safetensors header's JSON): one that is not would make a file Python
// cannot read, or throw out of the JSON writer.
bool IsUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

// Both formats are little-endian on disk and written here from memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "state dict files are written in the host's byte order");

Status WriteStateDict(const std::map<std::string, at::Tensor>& tensors, StateDictFormat format,
                      const ByteWriter& write) {
  for (const auto& entry : tensors)
    if (!IsUtf8(entry.first)) return InvalidArgument("a tensor name is not UTF-8, which both formats need");
  return format == StateDictFormat::kSafetensors ? WriteSafetensors(tensors, write)
                                                 : WriteTorch(tensors, write);
}

}  // namespace firedrill::agent
