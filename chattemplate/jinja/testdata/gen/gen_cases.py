"""Renders ../cases.json with Python Jinja2 set up as transformers'
apply_chat_template does (see chattemplate/testdata/gen/gen_golden.py) and
writes ../golden_cases.json: each case's output, or the error it raised.

    cd chattemplate/jinja/testdata/gen && python3 gen_cases.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "testdata", "gen"))
import jinja2  # noqa: E402
from gen_golden import compile_template  # noqa: E402

TD = os.path.dirname(HERE)
cases = json.load(open(os.path.join(TD, "cases.json"), encoding="utf-8"))["cases"]
out = []
for c in cases:
    e = {"name": c["name"]}
    try:
        e["output"] = compile_template(c["template"]).render(**c["vars"])
    except Exception as err:  # syntax errors, TemplateError, TypeError, ...
        e["error"] = type(err).__name__ + ": " + str(err)
    out.append(e)
with open(os.path.join(TD, "golden_cases.json"), "w", encoding="utf-8") as f:
    json.dump({"generator": "chattemplate/jinja/testdata/gen/gen_cases.py, Jinja2 " + jinja2.__version__, "cases": out},
              f, ensure_ascii=False, indent=0)
    f.write("\n")
print(len(out), "cases,", sum("error" in e for e in out), "errors", file=sys.stderr)
