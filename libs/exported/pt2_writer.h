// Writing a Pt2Archive (pt2_archive.h) as a .pt2 file that torch.export.load and read_pt2_archive
// read: the zip layout torch.export.save writes (torch/export/pt2_archive/_package.py), through
// LibTorch's PyTorchStreamWriter:
//   archive/data/weights/weight_<i>               raw bytes, one file a storage
//   archive/data/weights/<model>_weights_config.json
//   archive/data/constants/tensor_<i>             the same for constants
//   archive/data/constants/<model>_constants_config.json
//   archive/models/<model>.json                   archive.model_json, as it is
//   archive/data/sample_inputs/<model>.pt         empty (Python loads it as no example inputs)
//   archive/archive_format ("pt2"), archive/archive_version ("0")
// The payload configs are made from the tensors themselves: dtype, sizes, strides, storage offset,
// requires_grad; is_param for the weights model_json's signature names as parameters. Tensors
// viewing one storage with one dtype (tied weights) share one file holding the span they reach,
// as torch.export.save writes them once. A tensor on a device is copied to the host one storage
// at a time; the archive's tensors are not changed.
//
// Only Pt2Archive's fields are read: model_name, model_json, weights, constants (and origin, in
// messages); `program` is not (model_json is what is written, and its signature is read from it).
//
// Any thread; blocking. write_pt2_archive writes atomically (base::AtomicFileWriter: a temporary
// file in the same directory, fsync, rename): a reader never sees half a file, and a failure
// leaves the previous file untouched. Throws base::ConfigError "<path>: <what>" for an archive
// that cannot be written as a .pt2 (no model name, a model_json that does not parse, a sparse or
// quantized tensor, a dtype without a code), std::runtime_error naming the path when the disk
// fails. On LibTorch 1.13 both refuse in one line naming that LibTorch and the 2.x build.
#pragma once

#include <string>

namespace ravnest::exported {

struct Pt2Archive;

void write_pt2_archive(const Pt2Archive& archive, const std::string& path);
// The file's bytes in memory (tests, the fuzz target); messages name archive.origin.
std::string write_pt2_archive_bytes(const Pt2Archive& archive);

}  // namespace ravnest::exported
