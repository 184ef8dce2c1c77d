package doctor

import "fmt"

func memoryChecks() []Check {
	return []Check{
		{"memory.ram", checkRAM},
		{"memory.thp", checkTHP},
	}
}

func checkRAM(env *Env) []Result {
	m := env.Sys.Memory
	r := Result{Section: "memory", Name: "memory.ram", Status: Pass,
		Detail: fmt.Sprintf("%s total, %s available", GiB(m.Total), GiB(m.Available)),
		Data:   map[string]any{"total": m.Total, "available": m.Available, "free": m.Free, "cgroup_limit": m.CgroupLimit}}
	switch {
	case m.Total == 0:
		r.Status, r.Detail, r.Hint = Warn, "memory size unknown", "/proc/meminfo was unreadable"
	case m.CgroupLimit > 0 && m.CgroupLimit < m.Available:
		r.Status = Warn
		r.Detail += fmt.Sprintf(", but a cgroup limit of %s applies", GiB(m.CgroupLimit))
		r.Hint = "the container's memory limit, not the machine's RAM, bounds how many experts fit on the CPU; raise it (docker --memory) for big models"
	case m.Available < 32<<30:
		r.Status = Warn
		r.Hint = "under 32 GiB available: only small MoE models fit their routed experts in RAM; run kt doctor --model-path DIR to check a model"
	}
	return []Result{r}
}

func checkTHP(env *Env) []Result {
	m := env.Sys.Memory
	r := Result{Section: "memory", Name: "memory.thp", Data: map[string]any{"enabled": m.THP, "defrag": m.THPDefrag}}
	switch m.THP {
	case "always", "madvise":
		r.Status = Pass
		r.Detail = "transparent huge pages: " + m.THP
		if m.THPDefrag != "" {
			r.Detail += " (defrag " + m.THPDefrag + ")"
		}
	case "never":
		r.Status = Warn
		r.Detail = "transparent huge pages: never"
		r.Hint = "expert weights span hundreds of GiB; 4 KiB pages thrash the TLB. As root: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"
	default:
		r.Status = Warn
		r.Detail = "transparent huge pages: unknown"
		r.Hint = "/sys/kernel/mm/transparent_hugepage/enabled is missing; huge pages may be unavailable"
	}
	return []Result{r}
}
