package server

import (
	"fmt"
	"net/http"
)

// ExpertRecorder is the expert-distribution recorder behind SGLang's
// /start_expert_distribution_record, /stop_expert_distribution_record and
// /dump_expert_distribution_record routes (moe/expertdist.Recorder).
type ExpertRecorder interface {
	Start()
	Stop()
	// Dump writes the counts recorded so far and returns the file's path.
	Dump() (string, error)
}

// handleExpertRecord serves the three recorder routes (GET or POST, as
// SGLang). Without a recorder (--expert-distribution-recorder-mode not
// given) they answer 400 saying so.
func (s *Server) handleExpertRecord(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opt.Experts == nil {
			writeError(w, badRequest("", "expert distribution recording is off: start kt serve with --expert-distribution-recorder-mode stat"))
			return
		}
		var msg string
		switch action {
		case "start":
			s.opt.Experts.Start()
			msg = "Start recording the expert distribution.\n"
		case "stop":
			s.opt.Experts.Stop()
			msg = "Stop recording the expert distribution.\n"
		case "dump":
			path, err := s.opt.Experts.Dump()
			if err != nil {
				writeError(w, err)
				return
			}
			s.log.Info("expert distribution dumped", "path", path)
			msg = fmt.Sprintf("Dump expert distribution record.\nWrote %s\n", path)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, msg)
	}
}
