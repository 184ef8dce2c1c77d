package servebench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestErrorBody(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"error":{"message":"bad"}}`, true},
		{`{"object":"error","message":"bad"}`, true},
		{"data: {\"text\":\"a\"}\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n", true},
		{`{"text":"an \"error\" in the text","meta_info":{}}`, false},
		{"data: {\"text\":\"error\"}\n\ndata: [DONE]\n\n", false},
	} {
		if got := errorBody([]byte(c.body)); got != c.want {
			t.Errorf("errorBody(%q) = %v, want %v", c.body, got, c.want)
		}
	}
}

// TestAttacksClassified runs the attack mix against a server that refuses
// every request and cuts slow connections: every attempt must count as
// refused or cut.
func TestAttacksClassified(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, io.LimitReader(r.Body, 8<<20))
		http.Error(w, `{"error":{"message":"no"}}`, http.StatusBadRequest)
	}))
	srv.Config.ReadHeaderTimeout = 200 * time.Millisecond
	srv.Config.ReadTimeout = 400 * time.Millisecond
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	stats, err := runAttacks(ctx, srv.URL, "", 100, len(Attacks()))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Refused+s.Cut == 0 || s.Accepted+s.Failed > 0 {
			t.Errorf("%s: refused %d cut %d accepted %d failed %d (%s)", s.Name, s.Refused, s.Cut, s.Accepted, s.Failed, s.FirstFailure)
		}
	}
}
