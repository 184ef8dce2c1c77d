package doctor

import (
	"fmt"

	"github.com/ktserve/kt/internal/settings"
)

func settingsChecks() []Check {
	return []Check{{"settings.env", checkSettings}}
}

// checkSettings lists every environment variable kt reads
// (internal/settings): its type, default, value now and meaning. The API
// key's value is shown only as set.
func checkSettings(*Env) []Result {
	var out []Result
	for _, s := range settings.All() {
		value := s.Value()
		shown := value
		switch {
		case value == "":
			shown = "unset"
		case s.Name == settings.APIKey.Name:
			value, shown = "(set)", "set"
		default:
			shown = fmt.Sprintf("%q", value)
		}
		def := s.Default
		if def == "" {
			def = "none"
		}
		detail := fmt.Sprintf("%s, default %s, now %s: %s", s.Type, def, shown, s.Help)
		if s.Scope != settings.User {
			detail = fmt.Sprintf("[%s] %s", s.Scope, detail)
		}
		out = append(out, Result{Section: "settings", Name: s.Name, Status: Pass, Detail: detail,
			Data: map[string]any{"type": s.Type, "default": s.Default, "value": value, "help": s.Help, "scope": string(s.Scope)}})
	}
	return out
}
