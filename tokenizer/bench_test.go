package tokenizer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// reportCPU adds an "MB/cpu-s" metric: bytes per CPU second of the whole
// process over the timed loop (with -cpu 1 that is one core's throughput).
func reportCPU(b *testing.B, bytes int, start time.Duration) {
	if d := cpuTime() - start; d > 0 {
		b.ReportMetric(float64(bytes)*float64(b.N)/d.Seconds()/1e6, "MB/cpu-s")
	}
}

// benchText builds about size bytes of mixed text deterministically:
// English prose, Chinese, code, numbers, emoji and whitespace runs, with
// words drawn from a Zipf distribution so the word cache sees a realistic
// mix of hits and misses.
func benchText(size int) string {
	r := rand.New(rand.NewPCG(1, 2))
	english := strings.Fields("the of and to in is that it was for on are as with his they at be this from have or by one had not but what all were when we there can an your which their said if do will each about how up out them then she many some so these would other into has more her two like him see time could no make than first been its who now people my made over did down only way find use may water long little very after words called just where most know")
	chinese := []rune("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严")
	code := []string{"func main() {\n\tfmt.Println(\"hello\")\n}\n", "for i := 0; i < n; i++ {\n", "    return x * y + z  # comment\n", "if err != nil {\n\t\treturn nil, fmt.Errorf(\"load: %w\", err)\n\t}\n", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}\n"}
	emoji := []string{"🤖", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "😀"}
	zipf := rand.NewZipf(r, 1.1, 1, uint64(len(english)-1))
	var b strings.Builder
	for b.Len() < size {
		switch k := r.IntN(20); {
		case k < 12:
			for range 5 + r.IntN(20) {
				w := english[zipf.Uint64()]
				if r.IntN(10) == 0 {
					w = strings.ToUpper(w[:1]) + w[1:]
				}
				b.WriteString(w)
				b.WriteByte(" ,. "[r.IntN(4)])
				if r.IntN(8) == 0 {
					b.WriteByte(' ')
				}
			}
			b.WriteString(".\n")
		case k < 15:
			for range 10 + r.IntN(40) {
				b.WriteRune(chinese[r.IntN(len(chinese))])
			}
			b.WriteString("。")
		case k < 18:
			b.WriteString(code[r.IntN(len(code))])
		case k < 19:
			b.WriteString(strings.Repeat(" ", r.IntN(30)))
			b.WriteString(emoji[r.IntN(len(emoji))])
		default:
			b.WriteString(" ")
			b.WriteString(strings.Repeat("9", 1+r.IntN(6)))
			b.WriteString(".")
			b.WriteString(strings.Repeat("7", r.IntN(4)))
		}
	}
	return b.String()
}

// BenchmarkEncode encodes 4 MB of mixed text; the MB/s figure is the
// encode throughput on one core.
func BenchmarkEncode(b *testing.B) {
	tok := qwen3(b)
	text := benchText(4 << 20)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	start := cpuTime()
	for b.Loop() {
		tok.Encode(text)
	}
	reportCPU(b, len(text), start)
}

// BenchmarkEncodeCold is BenchmarkEncode with an empty word cache each
// time.
func BenchmarkEncodeCold(b *testing.B) {
	tok := qwen3(b)
	text := benchText(4 << 20)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		tok.cache = newWordCache()
		b.StartTimer()
		tok.Encode(text)
	}
}

// BenchmarkDecode decodes the ids of the same text; MB/s counts text bytes.
func BenchmarkDecode(b *testing.B) {
	tok := qwen3(b)
	text := benchText(4 << 20)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	start := cpuTime()
	for b.Loop() {
		tok.Decode(ids)
	}
	reportCPU(b, len(text), start)
}

// BenchmarkStreamDecode decodes the same ids one at a time.
func BenchmarkStreamDecode(b *testing.B) {
	tok := qwen3(b)
	text := benchText(4 << 20)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	start := cpuTime()
	for b.Loop() {
		d := tok.NewStreamDecoder(false)
		for _, id := range ids {
			d.Add(id)
		}
		d.Flush()
	}
	reportCPU(b, len(text), start)
}

// BenchmarkLoad parses the 11 MB Qwen3 tokenizer.json.
func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load("testdata"); err != nil {
			b.Fatal(err)
		}
	}
}
