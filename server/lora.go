package server

import (
	"encoding/json"
)

// loraPathIDs resolves /generate's lora_path (SGLang: an adapter name, or
// one name or null per prompt) to the adapter id of each of n prompts; an
// absent or null field is the base model. Names are resolved as the
// OpenAI routes resolve model=<served>:<name>.
func (s *Server) loraPathIDs(raw json.RawMessage, n int) ([]int, error) {
	ids := make([]int, n)
	if len(raw) == 0 || string(raw) == "null" {
		return ids, nil
	}
	var names []*string
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		names = make([]*string, n)
		for i := range names {
			names[i] = &one
		}
	} else if err := json.Unmarshal(raw, &names); err != nil {
		return nil, badRequest("lora_path", "field \"lora_path\": expected an adapter name, or a list of names (or nulls) with one per prompt")
	} else if len(names) != n {
		return nil, badRequest("lora_path", "%d lora_path entries for %d prompts", len(names), n)
	}
	for i, name := range names {
		if name == nil || *name == "" {
			continue
		}
		id, err := s.adapterOf(s.opt.ModelName + ":" + *name)
		if err != nil {
			if ae, ok := err.(*apiError); ok {
				ae.Param = "lora_path"
			}
			return nil, err
		}
		ids[i] = id
	}
	return ids, nil
}
