"""Renders the chat-template golden file with Python Jinja2, set up exactly as
Hugging Face transformers' apply_chat_template does it
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
loopcontrols extension, a tojson filter that is json.dumps(ensure_ascii=False),
and raise_exception/strftime_now globals. The render context is
messages, tools, add_generation_prompt, the tokenizer's special tokens (those of
the model the template belongs to: special_tokens below) and the
chat_template_kwargs.

    python3 gen_golden.py     # from chattemplate/testdata/gen; needs jinja2>=3.1

Output: ../golden.json. Used with Jinja2 3.1.6.
"""
import json
import os
import sys

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TD = os.path.dirname(HERE)


class AssistantTracker(Extension):
    # {% generation %} ... {% endgeneration %} renders its body unchanged.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def compile_template(src):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "FIXED-DATE"
    return env.from_string(src)


# The special tokens each model's tokenizer_config.json sets (None ones are
# left out, as in transformers' special_tokens_map), by template name prefix.
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
DEEPSEEK = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>",
            "pad_token": "<｜end▁of▁sentence｜>"}
KIMI = {"bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]"}


def special_tokens(name):
    base = name.split("/")[-1].lower()
    if base.startswith("deepseek") or name.startswith("deepseek"):
        return DEEPSEEK
    if "kimi" in base:
        return KIMI
    return QWEN


def templates():
    out = {}
    for cfg_dir in ("qwen3", "deepseek-v3"):
        cfg = json.load(open(os.path.join(TD, cfg_dir, "tokenizer_config.json"), encoding="utf-8"))
        out[cfg_dir + "/tokenizer_config.json"] = cfg["chat_template"]
    for name in sorted(os.listdir(os.path.join(TD, "templates"))):
        if name.endswith(".jinja"):
            with open(os.path.join(TD, "templates", name), encoding="utf-8", newline="") as f:
                out["templates/" + name] = f.read()
    return out


def main():
    convs = json.load(open(os.path.join(TD, "conversations.json"), encoding="utf-8"))["conversations"]
    # enable_thinking switches Qwen3's templates and the llama.cpp form of
    # DeepSeek-V3.1's; thinking switches DeepSeek-V3.1's and takes precedence there.
    kwargs_list = ({}, {"enable_thinking": False}, {"enable_thinking": True}, {"thinking": True},
                   {"thinking": False, "enable_thinking": True})
    cases = []
    for tname, src in templates().items():
        tmpl = compile_template(src)
        special = special_tokens(tname)
        for conv in convs:
            for agp in (False, True):
                for kwargs in kwargs_list:
                    ctx = dict(special)
                    ctx.update(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                               add_generation_prompt=agp)
                    ctx.update(kwargs)
                    case = {"template": tname, "conversation": conv["name"],
                            "add_generation_prompt": agp, "chat_template_kwargs": kwargs}
                    try:
                        case["output"] = tmpl.render(**ctx)
                    except Exception as e:  # TemplateError, TypeError, ...
                        case["error"] = type(e).__name__ + ": " + str(e)
                    cases.append(case)
    with open(os.path.join(TD, "golden.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "chattemplate/testdata/gen/gen_golden.py, Jinja2 " + jinja2.__version__,
                   "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(len(cases), "cases,", sum("error" in c for c in cases), "errors", file=sys.stderr)


if __name__ == "__main__":
    main()
