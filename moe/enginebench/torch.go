package enginebench

import _ "embed"

// TorchMoEScript is the PyTorch expert-by-expert bf16 MoE baseline that
// kt bench --type moe --compare-torch runs with python3.
//
//go:embed torch_moe.py
var TorchMoEScript []byte
