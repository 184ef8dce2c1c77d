// Renders every golden.json case with @huggingface/jinja 0.5.11 (the Jinja
// implementation of Hugging Face's JS libraries) for a second reference.
//
//   cd chattemplate/testdata/gen && npm install && node gen-hfjs.mjs
//
// Output: ../golden_hfjs.json, one entry per golden.json case, in order.
import { Template } from "@huggingface/jinja";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const td = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const golden = JSON.parse(fs.readFileSync(path.join(td, "golden.json"), "utf8")).cases;
const convs = Object.fromEntries(JSON.parse(fs.readFileSync(path.join(td, "conversations.json"), "utf8")).conversations.map((c) => [c.name, c]));
const source = (name) => name.endsWith("tokenizer_config.json")
  ? JSON.parse(fs.readFileSync(path.join(td, name), "utf8")).chat_template
  : fs.readFileSync(path.join(td, name), "utf8");
// The special tokens of the model each template belongs to, as gen_golden.py's special_tokens.
const special = (name) => {
  const base = name.split("/").pop().toLowerCase();
  if (base.startsWith("deepseek") || name.startsWith("deepseek")) {
    return { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>", pad_token: "<｜end▁of▁sentence｜>" };
  }
  if (base.includes("kimi")) return { bos_token: "[BOS]", eos_token: "[EOS]", pad_token: "[PAD]", unk_token: "[UNK]" };
  return { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" };
};
const compiled = {};
const out = golden.map((c) => {
  compiled[c.template] ??= new Template(source(c.template));
  const conv = convs[c.conversation];
  const ctx = { ...special(c.template), messages: conv.messages, tools: conv.tools ?? null,
    documents: null, add_generation_prompt: c.add_generation_prompt, ...c.chat_template_kwargs };
  const e = { template: c.template, conversation: c.conversation, add_generation_prompt: c.add_generation_prompt, chat_template_kwargs: c.chat_template_kwargs };
  try { e.output = compiled[c.template].render(ctx); } catch (err) { e.error = String(err.message ?? err); }
  return e;
});
fs.writeFileSync(path.join(td, "golden_hfjs.json"), JSON.stringify({ generator: "chattemplate/testdata/gen/gen-hfjs.mjs, @huggingface/jinja 0.5.11", cases: out }, null, 0).replace(/\},\{"template"/g, '},\n{"template"') + "\n");
console.log(out.length, "cases");
