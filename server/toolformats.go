package server

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ktserve/kt/chattemplate/jinja"
)

// The tool-call sections of DeepSeek-V3, DeepSeek-V3.1 and Kimi-K2, parsed
// as SGLang's detectors of the same names parse them (deepseekv3,
// deepseekv31, kimi_k2):
//
//	deepseekv3:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
//	             ```json
//	             ARGS
//	             ```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//	deepseekv31: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
//	kimi_k2:     <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>
//
// The answer is the text before the section's first marker; the rest of the
// output is the section. DeepSeek's calls must name an offered tool (others
// are dropped) and their arguments are re-encoded as Python's json.dumps
// writes them; a call that does not parse leaves the whole output as the
// answer, without calls. Kimi-K2's calls keep their arguments as written and
// are dropped one by one when they do not match.

const (
	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"

	kimiSectionBegin = "<|tool_calls_section_begin|>"
	kimiSectionEnd   = "<|tool_calls_section_end|>"
	kimiCallBegin    = "<|tool_call_begin|>"
	kimiArgBegin     = "<|tool_call_argument_begin|>"
	kimiCallEnd      = "<|tool_call_end|>"
)

// pyWS is Python's \s on str (Unicode whitespace); pyWord its \w and pyDigit
// its \d, so that the regular expressions match what SGLang's do.
const (
	pyWS    = `[\t\n\v\f\r\x{1c}-\x{1f} \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`
	pyWord  = `[\p{L}\p{N}_]`
	pyDigit = `\p{Nd}`
)

var (
	dsCallRe     = regexp.MustCompile(`(?s)` + regexp.QuoteMeta(dsCallBegin) + `.*?` + regexp.QuoteMeta(dsCallEnd))
	dsV3DetailRe = regexp.MustCompile(`(?s)` + regexp.QuoteMeta(dsCallBegin) + `(.*)` + regexp.QuoteMeta(dsSep) + "(.*)\n```json\n(.*)\n```" + regexp.QuoteMeta(dsCallEnd))
	dsV31DetailR = regexp.MustCompile(`(?s)` + regexp.QuoteMeta(dsCallBegin) + `(.*)` + regexp.QuoteMeta(dsSep) + `(.*)` + regexp.QuoteMeta(dsCallEnd))
	kimiCallRe   = regexp.MustCompile(regexp.QuoteMeta(kimiCallBegin) + pyWS + `*((?:` + pyWord + `|\.)+:` + pyDigit + `+)` + pyWS + `*` +
		regexp.QuoteMeta(kimiArgBegin) + pyWS + `*(\{.*?\})` + pyWS + `*` + regexp.QuoteMeta(kimiCallEnd))
	kimiIDRe = regexp.MustCompile(`^(?:functions\.)?((?:` + pyWord + `|\.)+):(` + pyDigit + `+)$`)
)

// sectionFormat is a tool-call format whose calls follow the answer in one
// section that begin opens.
type sectionFormat struct {
	name  string // the --tool-call-parser value
	begin string // the section's first marker
	// trim: the answer before a parsed section loses its surrounding
	// whitespace (SGLang strips it for DeepSeek's formats).
	trim bool
	// parse reads the calls of a whole output that holds begin; ok false
	// means the output is all answer.
	parse func(text string, tools []toolDef) (calls []parsedCall, ok bool)
}

// parsedCall is a tool call read from the output.
type parsedCall struct {
	name, args string
}

// sectionFormats are the tool-call parsers that sectionFormat implements.
var sectionFormats = map[string]*sectionFormat{
	"deepseekv3":  {name: "deepseekv3", begin: dsCallsBegin, trim: true, parse: parseDeepSeekV3},
	"deepseekv31": {name: "deepseekv31", begin: dsCallsBegin, trim: true, parse: parseDeepSeekV31},
	"kimi_k2":     {name: "kimi_k2", begin: kimiSectionBegin, parse: parseKimiK2},
}

// parseDeepSeekV3 reads DeepSeek-V3's calls: a name after the separator, the
// arguments in a ```json fence.
func parseDeepSeekV3(text string, tools []toolDef) ([]parsedCall, bool) {
	return parseDeepSeek(text, tools, dsV3DetailRe, 2, 3)
}

// parseDeepSeekV31 reads DeepSeek-V3.1's calls: the name before the
// separator, bare JSON arguments after it.
func parseDeepSeekV31(text string, tools []toolDef) ([]parsedCall, bool) {
	return parseDeepSeek(text, tools, dsV31DetailR, 1, 2)
}

func parseDeepSeek(text string, tools []toolDef, detail *regexp.Regexp, nameGroup, argsGroup int) ([]parsedCall, bool) {
	var calls []parsedCall
	for _, m := range dsCallRe.FindAllString(text, -1) {
		g := detail.FindStringSubmatch(m)
		if g == nil {
			return nil, false
		}
		args, empty, err := jinja.PythonJSON([]byte(g[argsGroup]), false)
		if err != nil {
			return nil, false
		}
		if empty {
			args = "{}" // SGLang: parameters or arguments or {}
		}
		if name := g[nameGroup]; name != "" && offers(tools, name) {
			calls = append(calls, parsedCall{name: name, args: args})
		}
	}
	return calls, true
}

// offers reports whether tools has a function named name.
func offers(tools []toolDef, name string) bool {
	for _, t := range tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

// parseKimiK2 reads Kimi-K2's calls: functions.NAME:IDX ids and JSON
// object arguments on one line, kept as written.
func parseKimiK2(text string, _ []toolDef) ([]parsedCall, bool) {
	var calls []parsedCall
	for _, g := range kimiCallRe.FindAllStringSubmatch(text, -1) {
		id := kimiIDRe.FindStringSubmatch(g[1])
		if id == nil {
			continue
		}
		calls = append(calls, parsedCall{name: id[1], args: g[2]})
	}
	return calls, true
}

// feedSection is toolExtractor.feed for a section format: the answer
// streams until the section's first marker (a partial marker at the end
// is held back); from there the output is held and parsed at the end. When
// it does not parse, the held text is answer after all.
func (t *toolExtractor) feedSection(text string, final bool) string {
	f := t.section
	t.full.WriteString(text)
	if t.inCall {
		t.callBuf.WriteString(text)
		if !final {
			return ""
		}
		return t.closeSection()
	}
	buf := t.held + text
	t.held = ""
	if i := strings.Index(buf, f.begin); i >= 0 {
		t.inCall = true
		t.callBuf.WriteString(buf[i:])
		if final {
			return buf[:i] + t.closeSection()
		}
		return buf[:i]
	}
	if !final {
		if k := partialSuffix(buf, f.begin); k > 0 {
			t.held = buf[len(buf)-k:]
			buf = buf[:len(buf)-k]
		}
	}
	return buf
}

// closeSection parses the whole output's calls and returns the answer
// text the held section turns out to be (none when it parsed).
func (t *toolExtractor) closeSection() string {
	held := t.callBuf.String()
	t.callBuf.Reset()
	t.inCall = false
	calls, ok := t.section.parse(t.full.String(), t.tools)
	if !ok {
		t.errs = append(t.errs, t.section.name+": the tool-call section does not parse")
		return held
	}
	t.parsed = true
	for _, c := range calls {
		var tc toolCall
		idx := len(t.calls)
		tc.Index = &idx
		if t.section.name == "kimi_k2" {
			// Kimi-K2's ids count the calls of the whole conversation.
			tc.ID = "functions." + c.name + ":" + strconv.Itoa(t.history+idx)
		} else {
			tc.ID = fmt.Sprintf("call_%s_%d", t.prefix, t.nextID)
			t.nextID++
		}
		tc.Type = "function"
		tc.Function.Name = c.name
		tc.Function.Arguments = c.args
		t.calls = append(t.calls, tc)
	}
	return ""
}

// answer is the whole answer of a non-streamed choice given its streamed
// text: DeepSeek's formats strip it once a section was read, as SGLang's
// one-shot parse does.
func (t *toolExtractor) answer(content string) string {
	if t.parsed && t.section.trim {
		return strings.TrimSpace(content)
	}
	return content
}
