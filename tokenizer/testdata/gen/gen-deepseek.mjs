// Generates the DeepSeek-V3 tokenizer test data with Hugging Face
// `tokenizers` 0.22.2 (Rust, via the @anush008/tokenizers 0.6.0 napi addon).
//
//   cd tokenizer/testdata/gen && npm install && node gen-deepseek.mjs
//
// Input: the full DeepSeek-V3 tokenizer.json at
// tokenizer/testdata/deepseek-v3/full/tokenizer.json (not committed; see
// PROVENANCE.md for where it comes from and its sha256).
// Outputs in tokenizer/testdata/deepseek-v3:
//   tokenizer.json  the full file's normalizer, pre_tokenizer, decoder and
//                   post_processor unchanged, with the vocabulary cut to the
//                   256 bytes plus the first MERGES merges (ids renumbered
//                   densely in the original order) and a few added tokens.
//   golden.json     per case: the pre-tokenizer's pieces (from the full
//                   file's pre_tokenizer), the ids of the reduced tokenizer
//                   and the ids of the full tokenizer.
import { Tokenizer } from "@anush008/tokenizers";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomCases as randomStrings } from "./random.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const td = path.join(here, "..");
const out = path.join(td, "deepseek-v3");
const FULL_SHA256 = "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41";
const MERGES = 6000;

const fullText = fs.readFileSync(path.join(out, "full", "tokenizer.json"));
const sum = crypto.createHash("sha256").update(fullText).digest("hex");
if (sum !== FULL_SHA256) throw new Error(`full tokenizer.json sha256 ${sum}, want ${FULL_SHA256}`);
const full = JSON.parse(fullText.toString("utf8"));

// ByteLevel's byte -> character table (GPT-2's bytes_to_unicode).
const b2u = [];
{
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (bs.includes(b)) b2u[b] = String.fromCodePoint(b);
    else b2u[b] = String.fromCodePoint(256 + n++);
  }
}
const u2b = new Map(b2u.map((c, b) => [c, b]));
const unByteLevel = (s) => Buffer.from([...s].map((c) => {
  if (!u2b.has(c)) throw new Error(`not byte-level: ${JSON.stringify(s)}`);
  return u2b.get(c);
})).toString("utf8");

// The reduced tokenizer.
function reduced() {
  const keep = new Set(b2u);
  const merges = [];
  for (const m of full.model.merges.slice(0, MERGES)) {
    const [a, b] = typeof m === "string" ? m.split(" ") : m;
    if (keep.has(a) && keep.has(b)) {
      keep.add(a + b);
      merges.push(`${a} ${b}`);
    }
  }
  const keepAdded = new Set(["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>",
    "<｜fim▁hole｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>", "<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"]);
  const vocab = {};
  let next = 0;
  for (const [tok] of Object.entries(full.model.vocab).sort((x, y) => x[1] - y[1])) {
    if (keep.has(tok) || keepAdded.has(tok)) vocab[tok] = next++;
  }
  const added = [];
  for (const a of full.added_tokens) {
    if (!keepAdded.has(a.content)) continue;
    const id = a.content in vocab ? vocab[a.content] : next++;
    added.push({ ...a, id });
  }
  return {
    version: full.version, truncation: null, padding: null, added_tokens: added,
    normalizer: full.normalizer, pre_tokenizer: full.pre_tokenizer,
    post_processor: full.post_processor, decoder: full.decoder,
    model: { ...full.model, vocab, merges },
  };
}

// Random strings over an alphabet that stresses every split pattern:
// digits of all kinds next to letters, the CJK/kana ranges and their edges,
// ASCII punctuation before ASCII and non-ASCII letters, marks, controls,
// format characters, whitespace of every kind, emoji and added tokens.
function randomCases(n, seed) {
  const atoms = [
    "a", "b", "Z", "é", "ß", "ω", "Я", "한", "ก", "क", "ि", "\u0301", "\u20dd", "\u3099",
    "中", "文", "一", "龥", "龦", "\u9fff", "ぁ", "の", "ゟ", "゠", "ア", "ヿ", "ー", "・", "゛", "ㇰ", "〇", "々",
    "0", "1", "7", "٣", "½", "²", "Ⅻ", "１", "৪",
    " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\u000b", "\u0085",
    ".", ",", "!", "?", "'", "\"", "-", "_", "(", ")", "{", "}", "<", ">", "|", "/", "\\", "#", "$", "`", "~", "^",
    "…", "。", "，", "「", "€", "©", "\u0000", "\u0007", "\u200d", "\ufeff", "\ue000",
    "🤖", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️",
    "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<|EOT|>", "<｜tool▁sep｜>",
    "hello", "World", " the", "func", "x.y", "你好", "東京", "12345",
  ];
  return randomStrings(n, seed, atoms, 30);
}

const digitRuns = [];
for (let n = 1; n <= 13; n++) digitRuns.push("1234567890123".slice(0, n));

const own = [
  { name: "ds_digit_lengths", text: digitRuns.join(" ") + "\n" + digitRuns.join("x") },
  { name: "ds_digits_letters", text: "abc123def4567ghi 2024年3月15日 v1.2.3 0x1F 3.14159 1e-10 -42 +7" },
  { name: "ds_unicode_digits", text: "٣٤٥٦ ١٢٣ ½¾ x² Ⅻ Ⅰ１２３４ ৪৫ 〇一二" },
  { name: "ds_money", text: "$1,234,567.89 and €99.99 (12%) #1 @2 10:30am 2024-01-01T12:00:00Z" },
  { name: "ds_cjk", text: "深度求索（DeepSeek）是一家人工智能公司。我们的目标是探索AGI！中文English混合" },
  { name: "ds_cjk_edges", text: "一龥龦\u9fff\u4dff㐀 ぁゟ゠ヿ ー・゛゜ゝ ㇰㇱ ｱｲｳ 々〆" },
  { name: "ds_japanese", text: "東京・大阪へ行きました。カタカナとひらがな、漢字を混ぜた文章です！「こんにちは」" },
  { name: "ds_korean", text: "안녕하세요, 세계! 한국어 텍스트입니다. ㄱㄴㄷ" },
  { name: "ds_code", text: "func main() {\n\tfmt.Println(\"hi\")\n\tx := a.b.c[1]+y->z;\n}\n\n// comment\nif (a==b&&c!=d) { return; }" },
  { name: "ds_python", text: "def f(x):\n    return x**2  # square\n\n\nclass A(B):\n    pass\n" },
  { name: "ds_punct_ascii_letters", text: ".Foo .foo _bar -baz 'quote @user #tag $var ~home /path\\win [a] {b} <c> |d| ^e `f`" },
  { name: "ds_punct_nonascii_letters", text: ".éa .Ωmega _über 'çа .中文 .ひら" },
  { name: "ds_punct_runs", text: "!!! ??? ... --- === *** ### ;;; :: \"\"\" ''' ))) ((( }}} >>> <<< ~~~ ,,,\n!!\n\n?? \r\n" },
  { name: "ds_symbols", text: "© ® ™ € £ ¥ ° ± × ÷ → ← ↑ ↓ ∑ ∫ √ ∞ ≠ ≤ ≥ ≈ ♠ ♥ ☃ ★" },
  { name: "ds_emoji", text: "🤖👍🏽 👨‍👩‍👧 🇯🇵 ❤️ hi🙂there 😀😃😄" },
  { name: "ds_whitespace_runs", text: "a  b   c    d\t\te \t \n f\n\n\ng  \n  h   " },
  { name: "ds_whitespace_before_digits", text: "a  1 b   22 c\t333 \n 4444" },
  { name: "ds_newlines", text: "\n\n\nx\r\n\r\ny\r\rz\n \n \n" },
  { name: "ds_unicode_spaces", text: "a\u00a0b\u3000c\u2009d\u200be\u202ff\u0085g\u000bh\u000ci" },
  { name: "ds_marks", text: "e\u0301 \u0301x क्षि ที่ ̈a \u20dd \u3099か" },
  { name: "ds_controls_format", text: "a\u0000b \u0007 \u200dcd \ufeffx \ue000y \u00ad z\u200d" },
  { name: "ds_only_whitespace", text: "     " },
  { name: "ds_space_then_punct", text: " . ,x  ;y \t!z" },
  { name: "ds_special_tokens", text: "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>Hi 123<｜Assistant｜>Hello!<｜end▁of▁sentence｜><|EOT|>" },
  { name: "ds_tool_tokens", text: "<｜tool▁calls▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"北京\"}\n```" },
  { name: "ds_long_digits", text: "3".repeat(100) + " " + "٣".repeat(10) },
  { name: "ds_long_cjk", text: "漢".repeat(60) + "ア".repeat(30) },
  { name: "ds_url", text: "https://www.deepseek.com/path?q=1&x=y#frag mail@example.org" },
];

const corpus = JSON.parse(fs.readFileSync(path.join(td, "corpus.json"), "utf8")).cases;
const cases = [...corpus, ...own, ...randomCases(300, 20261207)];

const red = reduced();
const redJSON = JSON.stringify(red);
fs.writeFileSync(path.join(out, "tokenizer.json"), redJSON + "\n");
const tokFull = Tokenizer.fromString(fullText.toString("utf8"));
const tokRed = Tokenizer.fromString(redJSON);
const pre = tokFull.getPreTokenizer();

const res = [];
for (const c of cases) {
  // Invalid UTF-8 reaches Hugging Face as the lossily decoded string.
  const text = c.hex !== undefined ? Buffer.from(c.hex, "hex").toString("utf8") : c.text;
  const pieces = pre.preTokenizeString(text).map(([s]) => unByteLevel(s));
  if (pieces.join("") !== text) throw new Error(`${c.name}: pieces do not tile the text`);
  const ids = Array.from((await tokRed.encode(text, null, { addSpecialTokens: false })).getIds());
  const idsFull = Array.from((await tokFull.encode(text, null, { addSpecialTokens: false })).getIds());
  const e = { name: c.name };
  if (c.hex !== undefined) e.hex = c.hex; else e.text = c.text;
  Object.assign(e, { pieces, ids, ids_full: idsFull });
  res.push(e);
}
fs.writeFileSync(path.join(out, "golden.json"), JSON.stringify({
  generator: "tokenizer/testdata/gen/gen-deepseek.mjs with @anush008/tokenizers@0.6.0 (HF tokenizers 0.22.2)",
  full_sha256: FULL_SHA256,
  cases: res }, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.log(`${res.length} cases; reduced vocab ${Object.keys(red.model.vocab).length}, merges ${red.model.merges.length}`);
