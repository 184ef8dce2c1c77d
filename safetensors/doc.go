// Package safetensors reads and writes the safetensors format: an 8-byte
// little-endian header length, a JSON header mapping tensor names to dtype,
// shape and data offsets (plus an optional "__metadata__" string map), then
// the tensors' raw little-endian bytes.
//
// Reading: Open maps one file read-only and validates its header; the
// header is untrusted, and every inconsistency (bad JSON, unknown dtype,
// shape/size mismatch, overlapping, out-of-range or non-contiguous offsets,
// absurd header length, truncated file, duplicate names) is an *Error naming
// the file and tensor, never a panic or an allocation sized by the file's
// claims. File.Tensor returns a Tensor whose Data aliases the mapping;
// Tensor.BF16, F32, I8, ... give zero-copy typed views (a copy only when the
// data is misaligned) and fail on a dtype mismatch. OpenDir opens a
// checkpoint directory: sharded through model.safetensors.index.json, a
// single model.safetensors, or every *.safetensors file.
//
// Writing: Create declares every tensor (name, dtype, shape) and the
// metadata up front, since the header holds the offsets; the data then
// streams in declaration order through Write, WriteTensor or
// WriteTensorFrom, in pieces of any size. The file appears atomically at
// its path on Close; Abort discards it. WriteFile does it all for in-memory
// tensors.
//
// Data is assumed little-endian, as on every platform kt targets.
package safetensors
