// Package expertsource reads the routed experts of a Hugging Face
// safetensors checkpoint for the CPU expert engine: how a checkpoint names
// its expert tensors (per-expert, Mixtral's w1/w3/w2, transformers' fused
// stacks), the MoE shape and expert layers of any checkpoint directory, and
// a cpuexperts.Source over one layer's experts (FP8 block scales included).
package expertsource
