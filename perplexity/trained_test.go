package perplexity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ktserve/kt/internal/fixtures"
	"github.com/ktserve/kt/tokenizer"
)

// trainedFixture is the model tools/train/train_moe.py trains.
const trainedFixture = "qwen3moe-trained"

// trainReport is the part of train_report.json the test reads.
type trainReport struct {
	HeldoutCtx       int     `json:"heldout_ctx"`
	HeldoutTokens    int     `json:"heldout_tokens"`
	HeldoutIDs       int     `json:"heldout_ids"`
	HeldoutIDsSHA256 string  `json:"heldout_ids_sha256"`
	HeldoutNLLF32    float64 `json:"heldout_nll_f32"`
}

// TestTrainedModel checks kt against the trained model's
// train_report.json: kt's tokenizer gives the ids the tokenizers library
// gave for heldout.txt (count and sha256 of the comma-joined ids), and kt's
// held-out NLL matches transformers' float32 figure. It skips when the
// model is not there; the perplexity part skips with -short and -race.
func TestTrainedModel(t *testing.T) {
	dir := fixtures.Dir(trainedFixture)
	raw, err := os.ReadFile(filepath.Join(dir, "train_report.json"))
	if errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s: no trained model (tools/train/train_moe.py writes it)", dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	var rep trainReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(dir, "heldout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(string(text))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ",")))
	if len(ids) != rep.HeldoutIDs || hex.EncodeToString(sum[:]) != rep.HeldoutIDsSHA256 {
		t.Fatalf("heldout.txt: kt's tokenizer gives %d ids (sha256 %x), the tokenizers library %d (%s)", len(ids), sum, rep.HeldoutIDs, rep.HeldoutIDsSHA256)
	}
	if testing.Short() || raceEnabled {
		t.Skip("-short or -race: the full held-out perplexity is not measured (TestTrainedReferencePrompts scores the reference prompts)")
	}
	res, err := Score(load(t, dir, "backend"), ids, Options{Ctx: rep.HeldoutCtx, Chunk: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("held-out: %d tokens scored, NLL %.6f (transformers %.6f), perplexity %.4f, %.1fs", res.Tokens, res.NLL, rep.HeldoutNLLF32, res.Perplexity, res.Seconds)
	if res.Tokens != rep.HeldoutTokens || math.Abs(res.NLL-rep.HeldoutNLLF32) > 1e-3 {
		t.Errorf("held-out: %d tokens NLL %.6f; transformers %d tokens NLL %.6f", res.Tokens, res.NLL, rep.HeldoutTokens, rep.HeldoutNLLF32)
	}
}

// TestTrainedReferencePrompts scores each held-out prompt of the trained
// model's reference.json as one window and checks its NLL against the mean
// of transformers' float32 prompt logprobs for the same ids: the
// perplexity path against transformers, fast enough for every test run.
func TestTrainedReferencePrompts(t *testing.T) {
	dir := fixtures.Dir(trainedFixture)
	if _, err := os.Stat(filepath.Join(dir, "reference.json")); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s: no trained model (tools/train/train_moe.py writes it)", dir)
	}
	cases, err := fixtures.Read(trainedFixture)
	if err != nil {
		t.Fatal(err)
	}
	r := load(t, dir, "backend")
	for _, c := range cases {
		var want float64
		for _, lp := range c.PromptLogprobs[1:] {
			want -= *lp
		}
		want /= float64(len(c.PromptIDs) - 1)
		got, err := Score(r, c.PromptIDs, Options{Ctx: len(c.PromptIDs), Chunk: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d tokens, NLL %.6f (transformers %.6f)", c.Name, got.Tokens, got.NLL, want)
		if got.Tokens != len(c.PromptIDs)-1 || math.Abs(got.NLL-want) > 1e-4 {
			t.Errorf("%s: %d tokens NLL %.6f; transformers %d tokens NLL %.6f", c.Name, got.Tokens, got.NLL, len(c.PromptIDs)-1, want)
		}
	}
}
