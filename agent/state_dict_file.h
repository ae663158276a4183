// A model's state dict (name -> tensor) as one file that other tools read,
// written through `write` in order (the caller makes the file atomic).
//
// kTorch: what `torch.save(state_dict, f)` writes: PyTorch's zip container
// (archive/data.pkl, archive/data/<n> per storage, archive/version,
// archive/byteorder), the pickle a protocol-2 dict whose values are built by
// torch._utils._rebuild_tensor_v2 from torch.<Dtype>Storage records. It uses
// nothing but what the restricted unpickler of `torch.load(f,
// weights_only=True)` allows (PyTorch >= 1.13; the default since 2.6), unlike
// LibTorch's pickle_save, whose typed dict needs
// torch.jit._pickle.restore_type_tag and is refused there.
//
// kSafetensors: Hugging Face's safetensors: an 8-byte little-endian header
// length, a JSON header ({name: {dtype, shape, data_offsets}} and
// __metadata__, padded with spaces to 8 bytes), then every tensor's bytes,
// in name order. Any framework reads it without unpickling anything.
//
// Each tensor is written as its own contiguous CPU copy of its values
// (views are not kept: one tensor never drags in another's storage).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace firedrill::agent {

enum class StateDictFormat { kTorch, kSafetensors };

// "torch" | "safetensors"; "auto" (or "") picks by the file name: a
// ".safetensors" suffix is safetensors, anything else torch.
StatusOr<StateDictFormat> ParseStateDictFormat(const std::string& name, const std::string& file_name);
const char* StateDictFormatName(StateDictFormat format);

using ByteWriter = std::function<void(const char* data, size_t n)>;

Status WriteStateDict(const std::map<std::string, at::Tensor>& tensors, StateDictFormat format,
                      const ByteWriter& write);

}  // namespace firedrill::agent
