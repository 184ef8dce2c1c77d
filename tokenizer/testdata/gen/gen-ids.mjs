// Generates reference token ids for the Go tokenizer tests with Hugging Face
// `tokenizers` 0.22.2 (Rust, via the @anush008/tokenizers 0.6.0 napi addon).
//
//   cd tokenizer/testdata/gen && npm install && node gen-ids.mjs
//
// Inputs (all in tokenizer/testdata): tokenizer.json (Qwen3), corpus.json
// (hand-written cases), llamacpp/ggml-vocab-qwen{2,35}.gguf.inp. A second
// variant swaps in the Qwen3.5 split regex (marks count as letters) on the
// same vocabulary, since no Qwen3.5 tokenizer.json is reachable here.
// Outputs: golden_qwen3.json and golden_qwen35.json.
import { Tokenizer } from "@anush008/tokenizers";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { randomCases as randomStrings } from "./random.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const td = path.join(here, "..");

const QWEN3_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35_RE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const tokJSON = fs.readFileSync(path.join(td, "tokenizer.json"), "utf8");
if (!tokJSON.includes(JSON.stringify(QWEN3_RE))) throw new Error("tokenizer.json lacks the Qwen3 regex");

// Random strings over an alphabet that stresses every branch of the split
// regex: letters, marks, digits, punctuation, all kinds of whitespace,
// apostrophe contractions, CJK, emoji and special tokens.
function randomCases(n, seed) {
  const atoms = [
    "a", "b", "Z", "é", "ß", "ſ", "İ", "ω", "Я", "中", "文", "の", "ア", "한", "ก", "ि", "्", "क",
    "\u0301", "\u0300", "\u20dd", "\u05c1", "\u0e31",
    "0", "7", "٣", "½", "²", "Ⅻ",
    " ", " ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2009", "\u000b",
    ".", ",", "!", "?", "'", "\"", "-", "_", "(", ")", "{", "}", "<", ">", "|", "/", "\\", "#", "$", "…", "。", "，",
    "'s", "'S", "'ll", "'Ve", "'re", "'d", "'m", "'t",
    "🤖", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️",
    "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|endoftext|>", "<tool_call>",
    "hello", "world", " the", "func", "你好", "東京",
  ];
  return randomStrings(n, seed, atoms, 40);
}

function llamaCases(name) {
  const inp = fs.readFileSync(path.join(td, "llamacpp", `ggml-vocab-${name}.gguf.inp`), "utf8");
  const parts = inp.split("\n__ggml_vocab_test__\n");
  parts.pop(); // the file ends with a separator
  return parts.map((text, i) => ({ name: `llamacpp_${name}_${i}`, text }));
}

const corpus = JSON.parse(fs.readFileSync(path.join(td, "corpus.json"), "utf8")).cases;

async function golden(variant, json, extra) {
  const tok = Tokenizer.fromString(json);
  const cases = [...corpus, ...randomCases(300, 20261122), ...extra];
  const out = [];
  for (const c of cases) {
    // Invalid UTF-8 reaches Hugging Face as the lossily decoded string.
    const text = c.hex !== undefined ? Buffer.from(c.hex, "hex").toString("utf8") : c.text;
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    const e = { name: c.name };
    if (c.hex !== undefined) e.hex = c.hex; else e.text = c.text;
    e.ids = ids;
    e.decoded = await tok.decode(ids, false);
    e.decoded_skip_special = await tok.decode(ids, true);
    out.push(e);
  }
  const file = path.join(td, `golden_${variant}.json`);
  fs.writeFileSync(file, JSON.stringify({
    generator: "tokenizer/testdata/gen/gen-ids.mjs with @anush008/tokenizers@0.6.0 (HF tokenizers 0.22.2)",
    variant, cases: out }, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
  console.log(`${file}: ${out.length} cases`);
}

await golden("qwen3", tokJSON, llamaCases("qwen2"));
await golden("qwen35", tokJSON.replace(JSON.stringify(QWEN3_RE), JSON.stringify(QWEN35_RE)), llamaCases("qwen35"));
