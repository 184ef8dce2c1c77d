package main

import (
	"log/slog"

	"github.com/ktserve/kt/lora"
	"github.com/ktserve/kt/serveconfig"
)

// openLoRA loads the adapters the LoRA flags name (nil when none), with
// SGLang-KT's limits (lora.Open), and logs what is served.
func openLoRA(cfg *serveconfig.Config, log *slog.Logger) (*lora.Set, error) {
	f := lora.Flags{KTLoRAPath: cfg.KTLoRAPath, KTExpertLoRAPath: cfg.KTExpertLoRAPath, MaxLoRARank: cfg.MaxLoRARank}
	for _, p := range cfg.LoRAPaths {
		f.LoRAPaths = append(f.LoRAPaths, p.Name+"="+p.Path)
	}
	if len(f.LoRAPaths) == 0 && f.KTLoRAPath == "" && f.KTExpertLoRAPath == "" {
		return nil, nil
	}
	set, err := lora.Open(f)
	if err != nil {
		return nil, err
	}
	for _, a := range []*lora.Adapter{set.Named, set.Static} {
		if a != nil {
			log.Info("Prepared merged KT LoRA adapter for runtime", "name", a.Name, "dir", a.Dir, "rank", a.Rank,
				"lora_alpha", a.Alpha, "scaling", a.Scale, "nonexpert_modules", a.NonExpertModules(), "expert", a.HasExperts())
		}
	}
	if set.Expert != nil && set.Expert != set.Named && set.Expert != set.Static {
		log.Info("KT expert LoRA", "dir", set.Expert.Dir, "rank", set.Expert.Rank, "scaling", set.Expert.Scale)
	}
	return set, nil
}
