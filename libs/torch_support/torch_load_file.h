// The bytes of a file that Python's torch.load reads as it reads what torch.save wrote: a state
// dict (ravnest fuse), predictions (ravnest predict).
//
// torch::jit::pickle_save tags every dict and list with its TorchScript type through
// torch.jit._pickle.restore_type_tag, a global that torch.load refuses since PyTorch 2.6, whose
// default became weights_only=True ("Unsupported global: GLOBAL
// torch.jit._pickle.restore_type_tag"). These files are pickled without the tags: plain dicts,
// lists and tuples of tensors and numbers, which every torch.load accepts, weights_only or not.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <ATen/core/ivalue.h>

namespace ravnest::torch_support {

// `value` (tensors, numbers, strings, and dicts, lists and tuples of them) as a torch.save file.
// Tensors are written from the CPU (a tensor on another device is copied there first).
std::string torch_load_file(const c10::IValue& value);
// The same file handed to `write` in pieces as it is made, never whole in memory (a fused state
// dict of GB: ravnest fuse); what `write` throws ends it.
void write_torch_load_file(const c10::IValue& value,
                           const std::function<void(const void*, size_t)>& write);

}  // namespace ravnest::torch_support
