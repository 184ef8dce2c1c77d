// Package ktformat holds kt's on-disk formats of pre-quantized CPU experts:
// kt quant's output (one safetensors shard per layer and a manifest,
// QuantizeLayer, OpenQuantDir) and KTransformers' own converted AMXINT8 /
// AMXINT4 files (BufferB byte images, OpenKTDir), both read back as a
// cpuexperts.QuantSource.
package ktformat
