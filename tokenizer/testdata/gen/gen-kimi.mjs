// Generates the Kimi-K2 tokenizer test data with tiktoken 1.0.22 (npm: the
// Rust tiktoken core compiled to WebAssembly, its regexes run by
// fancy-regex and the regex crate, Unicode 16).
//
//   cd tokenizer/testdata/gen && npm install && node gen-kimi.mjs
//
// Outputs in tokenizer/testdata/kimi-k2:
//   tiktoken.model         the first RANKS ranks of o200k_base (npm tiktoken's
//                          encoders/o200k_base.json) in the tiktoken.model
//                          format: "<base64 of the token's bytes> <rank>".
//   tokenizer_config.json  Kimi-K2's special-token names at its offsets past
//                          the base vocabulary, and its auto_map.
//   golden.json            per case: the ids of tiktoken.Encoding(Kimi-K2's
//                          pattern, those ranks, the 258 special tokens) with
//                          allowed_special="all" (ids) and with no special
//                          tokens (ids_ordinary), and the pattern's pieces.
//   full/                  the same for all of o200k_base's ranks (git-ignored;
//                          ids_full in golden.json).
//   classes.json           the class of every code point from U+0080 up as
//                          tiktoken's pattern sees it, read off tiktoken.
//
// The pieces are found with a JavaScript rendition of the pattern and then
// confirmed by tiktoken: a second Encoding whose vocabulary is the 256 bytes
// plus every piece as a whole token must give exactly one id per piece, and
// no run of two or more adjacent pieces may byte-pair-encode to those same
// ids, so equal ids mean equal pieces.
import { Tiktoken } from "tiktoken";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomCases as randomStrings } from "./random.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const td = path.join(here, "..");
const out = path.join(td, "kimi-k2");
fs.mkdirSync(out, { recursive: true });

const RANKS = 10000;

// Kimi-K2's pattern (tokenization_kimi.py, TikTokenTokenizer.pat_str).
const ALTS = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
];
const PAT = ALTS.join("|");

const b64 = (b) => Buffer.from(b).toString("base64");
// tiktoken's JS constructor takes "<ignored> <first rank> <b64> <b64> ...".
const ranksString = (tokens) => "! 0 " + tokens.map(b64).join(" ");
const byteTokens = () => Array.from({ length: 256 }, (_, b) => Buffer.from([b]));

// The base vocabulary and the config.
const o200k = JSON.parse(fs.readFileSync(path.join(here, "node_modules/tiktoken/encoders/o200k_base.json"), "utf8"));
const o200kTokens = o200k.bpe_ranks.split(" ").slice(2).map((s) => Buffer.from(s, "base64"));
const base = o200kTokens.slice(0, RANKS);
{
  const singles = new Set(base.slice(0, 256).filter((t) => t.length === 1).map((t) => t[0]));
  if (singles.size !== 256) throw new Error("o200k_base's first 256 ranks are not the 256 bytes");
  if (new Set(base.map((t) => t.toString("hex"))).size !== base.length) throw new Error("duplicate token");
}

const NAMED = { 0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
  6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
  11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
  14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
  22: "<think>", 23: "</think>", 254: "[UNK]", 255: "[PAD]" };

// writeVocab writes tiktoken.model and tokenizer_config.json for ranks to
// dir and returns the special tokens (name -> id) as tokenization_kimi.py
// builds them: the 258 ids after the ranks, named by added_tokens_decoder
// or <|reserved_token_ID|>.
function writeVocab(dir, tokens) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tiktoken.model"), tokens.map((t, r) => `${b64(t)} ${r}\n`).join(""));
  const special = {};
  const decoderEntries = {};
  for (let i = 0; i < 258; i++) {
    const id = tokens.length + i;
    const name = NAMED[i] ?? `<|reserved_token_${id}|>`;
    special[name] = id;
    if (NAMED[i] !== undefined) {
      decoderEntries[String(id)] = { content: name, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
    }
  }
  const config = {
    added_tokens_decoder: decoderEntries,
    additional_special_tokens: ["<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|start_header_id|>",
      "<|end_header_id|>", "[EOT]", "<|im_system|>", "<|im_middle|>"],
    auto_map: { AutoTokenizer: ["tokenization_kimi.TikTokenTokenizer", null] },
    bos_token: "[BOS]",
    clean_up_tokenization_spaces: false,
    eos_token: "[EOS]",
    model_max_length: 1000000,
    pad_token: "[PAD]",
    tokenizer_class: "TikTokenTokenizer",
    unk_token: "[UNK]",
  };
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
  return special;
}
const kimi = new Tiktoken(ranksString(base), writeVocab(out, base), PAT);
// The whole of o200k_base, in kimi-k2/full (not committed).
const kimiFull = new Tiktoken(o200k.bpe_ranks, writeVocab(path.join(out, "full"), o200kTokens), PAT);


// ---- The class of every code point, read off tiktoken. ----
//
// Each probe text puts the character x beside ASCII characters; a marker
// token (the two bytes on either side of the boundary) appears in the
// output exactly when the pattern keeps the two sides in one piece. The
// eight boundaries tell the classes apart:
//   x|\n  1|x  x|1  a|x  A|x  x|Ab  !|x  !!|x
const SIGS = {
  "00000000": "han", // Script=Han letter
  "01000000": "han_number", // Script=Han \p{N} (〇)
  "00000011": "han_other", // Script=Han, neither letter nor number (radicals)
  "00001110": "upper", // Lu, Lt
  "00011010": "lower", // Ll
  "00011110": "letter", // Lm, Lo
  "00011111": "mark", // M
  "01100000": "number", // N
  "10000100": "space", // White_Space
  "10000111": "other",
};
function classes() {
  const markers = [];
  const id = new Map();
  const add = (a, b) => {
    const k = a * 256 + b;
    if (!id.has(k)) {
      id.set(k, 256 + markers.length);
      markers.push(Buffer.from([a, b]));
    }
  };
  const [NL, ONE, UA, LA, BANG] = [0x0a, 0x31, 0x41, 0x61, 0x21];
  for (let c = 0x80; c < 0xc0; c++) for (const a of [NL, ONE, UA]) add(c, a);
  for (let l = 0xc2; l < 0xf5; l++) for (const a of [ONE, LA, UA, BANG]) add(a, l);
  const t = new Tiktoken(ranksString([...byteTokens(), ...markers]), {}, PAT);
  const joined = (s, a, b) => (t.encode(s, [], []).includes(id.get(a * 256 + b)) ? "1" : "0");
  const ranges = [];
  for (let cp = 0x80; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const x = String.fromCodePoint(cp);
    const xb = Buffer.from(x);
    const f = xb[0], l = xb[xb.length - 1];
    const sig = joined(x + "\n", l, NL) + joined("1" + x, ONE, f) + joined(x + "1", l, ONE) + joined("a" + x, LA, f) +
      joined("A" + x, UA, f) + joined(x + "Ab", l, UA) + joined("!" + x, BANG, f) + joined("!!" + x, BANG, f);
    const cls = SIGS[sig];
    if (cls === undefined) throw new Error(`U+${cp.toString(16)}: unexpected signature ${sig}`);
    const last = ranges[ranges.length - 1];
    if (last && last[2] === cls && last[1] === cp - 1) last[1] = cp;
    else ranges.push([cp, cp, cls]);
  }
  t.free();
  return ranges;
}
const classRanges = classes();
fs.writeFileSync(path.join(out, "classes.json"), JSON.stringify({
  generator: "tokenizer/testdata/gen/gen-kimi.mjs with tiktoken@1.0.22",
  comment: "the class of every code point from U+0080 (surrogates left out) under Kimi-K2's pattern, as [first, last, class]",
  ranges: classRanges,
}).replace(/\],\[/g, "],\n[") + "\n");
console.log(`classes.json: ${classRanges.length} ranges`);
const classOf = (cp) => {
  let lo = 0, hi = classRanges.length - 1;
  while (lo <= hi) {
    const m = (lo + hi) >> 1;
    if (cp < classRanges[m][0]) hi = m - 1;
    else if (cp > classRanges[m][1]) lo = m + 1;
    else return classRanges[m][2];
  }
  return null;
};

// ---- The pattern in JavaScript, to find candidate pieces. ----
//
// Rust's \s is White_Space (JavaScript's adds U+FEFF and lacks U+0085);
// (?i:...) folds s to ſ as well; && is set subtraction of Han. The
// JavaScript engine's Unicode tables (ICU) may be newer than tiktoken's, so
// every character whose class differs from classes.json is first replaced
// by one of tiktoken's class.
const WS = String.raw`\t\n\v\f\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
const U = String.raw`[[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]--\p{Script=Han}]`;
const W = String.raw`[[\p{Ll}\p{Lm}\p{Lo}\p{M}]--\p{Script=Han}]`;
const P = String.raw`[^\r\n\p{L}\p{N}]`;
const C = String.raw`(?:'(?:[sSſ]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))`;
const JS_PAT = [
  String.raw`\p{Script=Han}+`,
  `${P}?${U}*${W}+${C}?`,
  `${P}?${U}+${W}*${C}?`,
  String.raw`\p{N}{1,3}`,
  ` ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*`,
  `[${WS}]*[\\r\\n]+`,
  `[${WS}]+(?![^${WS}])`,
  `[${WS}]+`,
].join("|");
const jsRe = new RegExp(JS_PAT, "gv");
const jsClassRes = {
  space: new RegExp(`^[${WS}]$`, "v"), han: /^\p{Script=Han}$/v, upper: /^[\p{Lu}\p{Lt}]$/v, lower: /^\p{Ll}$/v,
  letter: /^[\p{Lm}\p{Lo}]$/v, mark: /^\p{M}$/v, number: /^\p{N}$/v, letterAny: /^\p{L}$/v,
};
function jsClass(ch) {
  const r = jsClassRes;
  if (r.space.test(ch)) return "space";
  if (r.han.test(ch)) return r.letterAny.test(ch) ? "han" : r.number.test(ch) ? "han_number" : "han_other";
  for (const k of ["upper", "lower", "letter", "mark", "number"]) if (r[k].test(ch)) return k;
  return "other";
}
const STAND_IN = { han: "中", han_number: "〇", han_other: "⺀", upper: "A", lower: "a", letter: "ª", mark: "\u0301",
  number: "1", space: "\u2000", other: "\u0378" };
function jsPieces(text) {
  const chars = Array.from(text);
  const subst = chars.map((ch) => {
    const cp = ch.codePointAt(0);
    if (cp < 0x80) return ch;
    const want = classOf(cp);
    return jsClass(ch) === want ? ch : STAND_IN[want];
  });
  // Work in code point indices so stand-ins of other lengths line up.
  const s = subst.join("");
  const idx = new Map([[0, 0]]);
  let u = 0;
  subst.forEach((ch, n) => { u += ch.length; idx.set(u, n + 1); });
  const pieces = [];
  let last = 0;
  for (const m of s.matchAll(jsRe)) {
    if (m.index !== last) throw new Error(`unmatched text in ${JSON.stringify(text)} at ${last}`);
    const a = idx.get(m.index), b = idx.get(m.index + m[0].length);
    pieces.push(chars.slice(a, b).join(""));
    last = m.index + m[0].length;
  }
  if (last !== s.length) throw new Error(`unmatched tail in ${JSON.stringify(text)}`);
  return pieces;
}

// ---- Cases. ----
const R = (k) => `<|reserved_token_${RANKS + k}|>`;
const kimiCases = [
  ["han_run", "中文分词测试，这是一个句子。"],
  ["han_radicals", "⺀⺁⻳ ⼀⼁⿕ x⺀ !⺀ ⺀a 中⺀文"],
  ["han_numerals", "二〇二四年 〇1 1〇 12〇3 x〇 〡〢〸"],
  ["han_iteration_mark", "時々 人々々 々a"],
  ["han_next_to_kana", "東京タワーとひらがなカタカナ漢字"],
  ["han_next_to_hangul", "한국어中文한글漢字 조선"],
  ["han_next_to_latin", "中文abc中文ABC Abc中 a中b 中'S"],
  ["han_supplementary", "\u{20000}\u{2A6D6}\u{2B740} a\u{20001}"],
  ["camel_case", "CamelCaseWord parseHTTPResponse getID XMLHttpRequest iPhone eBay McDonald"],
  ["all_caps", "ALLCAPS HELLO WORLD NASA'S I'M WE'LL ABC's A's"],
  ["contractions", "it's IT'S It'S it'ſ IT'ſ don't DON'T we've they'RE I'd I'm you'll 's 't 're x'Ve"],
  ["contraction_partial", "it'r it'l we'v I'x 'sa ''s"],
  ["marks_after_letters", "e\u0301 a\u0301b Cafe\u0301 x\u0301\u0301y ñ"],
  ["marks_before_letters", "\u0301a \u0301A \u0301ABC \u0301\u0301 \u0301'S \u0301"],
  ["marks_after_punct", "!\u0301a .\u0301 \u20dd\u20dd ?\u0301\n"],
  ["titlecase_and_modifiers", "ǅemal ǅ ǅǅ ʰa aʰ ʰʰ Aʰb ǈǋ Aǅ ʰA"],
  ["lo_runs", "ひらがなABC カタカナabc กขค Aกข مرحبا"],
  ["digits", "1 12 123 1234 12345 123456 1234567"],
  ["digits_non_ascii", "٣٤٥٦ ४२ ½² Ⅻ ①②③④ 𝟘𝟙"],
  ["digits_in_words", "abc123def A1B2 v2.0.1 x86_64"],
  ["punct_runs", "!!! ... ?!\n\n ;;\r\n x,y. (a) [b] {c} --> <== ***"],
  ["punct_space", " !! . ,\n  ?? \t!"],
  ["slash_after_punct", "a/b // http://x.y/z .../ /\n/ ./\n"],
  ["whitespace_runs", "a  b   c\t\td \n\n e\r\n\r\nf \u00a0 g\u3000h\u2009\u2009i  \n  j"],
  ["whitespace_kinds", "a\u0085b\u2028c\u2029d\u000be\u000cf\u1680g\u205fh\u202fi"],
  ["trailing_spaces", "end   "],
  ["leading_spaces", "   start"],
  ["spaces_before_digits", "a   1 b 2"],
  ["special_chat", "<|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>"],
  ["special_reserved", `x${R(5)}y${R(100)} ${R(253)}`],
  ["special_adjacent", "[BOS][EOS]<think></think>[EOT][UNK][PAD]"],
  ["special_partial", "<|im_end <|im_end| im_end|> [BOS [EOS]] <think <|reserved_token_1|>"],
  ["special_tool_call", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"北京\"}<|tool_call_end|><|tool_calls_section_end|>"],
  ["special_in_words", "a<|im_end|>b  <|im_end|>  c\n<think>\nx</think>\n\n"],
  ["emoji", "👍🏽 🤖👨‍👩‍👧 🇯🇵 ❤️"],
  ["code", "func main() {\n\tfmt.Println(\"hi\")\n}\n\nif x != nil { return err }\n"],
  ["unicode16", "\u1C89\u1C8A Ᲊ\n \u{13460}\u{13461} \u{2EBF0}\u{2EBF1} \u0295a aʕ \u{10D40}\u{10D41}"],
  ["unicode17_unassigned", "\u{323B0}\n \u{11DB0}a \u{16EA0}\u{16EBB}"],
  ["control_and_format", "a\u0000b\u200dc\ufeffd\u00ade\u202ef"],
  ["private_use", "\ue000\ue001a \u{F0000}"],
  ["long_han", "中华人民共和国".repeat(40)],
  ["long_word", "antidisestablishmentarianism".repeat(12)],
  ["long_caps", "ABCDEFGHIJKLMNOPQRSTUVWXYZ".repeat(12) + "abc"],
  ["long_punct", "=".repeat(600) + "-+".repeat(150) + "\n"],
  ["long_whitespace", "\n".repeat(300) + " ".repeat(300) + "x" + "\t ".repeat(200)],
];

function randomCases(n, seed) {
  const atoms = [
    "a", "b", "Z", "Q", "é", "ß", "ſ", "İ", "ω", "Я", "ǅ", "ʰ", "ª", "中", "文", "々", "〇", "⺀", "の", "ア", "ー", "한", "ก", "ि", "्", "क",
    "\u0301", "\u0300", "\u20dd", "\u0e31", "\u1C89", "\u{13460}", "\u{20000}",
    "0", "7", "٣", "½", "²", "Ⅻ",
    " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\u000b", "\u0085",
    ".", ",", "!", "?", "'", "\"", "-", "_", "(", ")", "{", "}", "<", ">", "|", "/", "\\", "#", "$", "…", "。", "，",
    "'s", "'S", "'ſ", "'ll", "'Ve", "'re", "'d", "'m", "'t", "'LL",
    "🤖", "👍🏽", "👨‍👩‍👧", "❤️",
    "[BOS]", "<|im_end|>", "<|im_user|>", "<think>", "</think>", "<|tool_call_begin|>", R(7), "<|im_end", "|>",
    "hello", "World", " the", "HTTP", "func", "你好", "東京",
  ];
  return randomStrings(n, seed, atoms, 40);
}

const corpus = JSON.parse(fs.readFileSync(path.join(td, "corpus.json"), "utf8")).cases;
const cases = [...corpus, ...kimiCases.map(([name, text]) => ({ name: `kimi_${name}`, text })), ...randomCases(300, 20261207)];
const textOf = (c) => (c.hex !== undefined ? Buffer.from(c.hex, "hex").toString("utf8") : c.text);

// ---- Pieces, confirmed by tiktoken. ----
const allPieces = cases.map((c) => jsPieces(textOf(c)));
const pieceSet = new Set();
for (const ps of allPieces) for (const p of ps) if (Buffer.byteLength(p) > 1) pieceSet.add(p);
const pieceList = [...pieceSet].sort();
const eq = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
// A run of adjacent pieces that byte-pair-encodes to the pieces' own ids
// becomes a whole token too (then tiktoken would give it one id), until
// there is none.
const extra = new Set();
for (let round = 1; ; round++) {
  const tokens = [...byteTokens(), ...pieceList.map((p) => Buffer.from(p)), ...[...extra].sort().map((p) => Buffer.from(p))];
  const tokenID = new Map(tokens.map((t, i) => [t.toString("hex"), i]));
  const vocab = ranksString(tokens);
  const byPattern = new Tiktoken(vocab, {}, PAT);
  const whole = new Tiktoken(vocab, {}, String.raw`[\s\S]+`); // byte-pair encodes the whole text
  let runs = 0, added = 0;
  cases.forEach((c, k) => {
    const ps = allPieces[k];
    const want = ps.map((p) => tokenID.get(Buffer.from(p).toString("hex")));
    const got = Array.from(byPattern.encode(textOf(c), [], []));
    if (!eq(got, want)) throw new Error(`${c.name}: tiktoken's pieces differ from the JavaScript pattern's:\n got ${got}\nwant ${want}\npieces ${JSON.stringify(ps)}`);
    for (let i = 0; i < ps.length; i++) {
      for (let j = i + 2; j <= ps.length; j++) {
        runs++;
        const run = ps.slice(i, j).join("");
        if (!extra.has(run) && eq(Array.from(whole.encode(run, [], [])), want.slice(i, j))) {
          extra.add(run);
          added++;
        }
      }
    }
  });
  byPattern.free();
  whole.free();
  console.log(`pieces round ${round}: ${pieceList.length} pieces, ${extra.size} merged runs as tokens, ${runs} runs checked, ${added} added`);
  if (added === 0) break;
}

// ---- Golden ids. ----
const golden = cases.map((c, k) => {
  const text = textOf(c);
  const e = { name: c.name };
  if (c.hex !== undefined) e.hex = c.hex; else e.text = c.text;
  e.pieces = allPieces[k];
  e.ids = Array.from(kimi.encode(text, "all"));
  e.ids_ordinary = Array.from(kimi.encode(text, [], []));
  e.ids_full = Array.from(kimiFull.encode(text, "all"));
  return e;
});
fs.writeFileSync(path.join(out, "golden.json"), JSON.stringify({
  generator: "tokenizer/testdata/gen/gen-kimi.mjs with tiktoken@1.0.22",
  ranks: RANKS,
  full_ranks: o200kTokens.length,
  cases: golden,
}, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.log(`golden.json: ${golden.length} cases`);
