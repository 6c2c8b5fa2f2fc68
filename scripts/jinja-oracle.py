#!/usr/bin/env python3
"""scripts/jinja-oracle.py — renders chat templates with Python's jinja2, set up the way Hugging Face
transformers renders tokenizer.chat_template, to produce and verify the expected outputs of
tests/template/test_jinja.cpp.

    jinja-oracle.py generate [--out DIR]   write the expectations (default: tests/template/jinja/expected)
    jinja-oracle.py check                  exit 1 when the checked-in expectations are out of date
    jinja-oracle.py render TEMPLATE CONTEXT.json   print one rendering

The environment: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loop
controls extension, a {% generation %} block that renders its body as is, tojson as
json.dumps(ensure_ascii=False), raise_exception() and strftime_now() (fixed at 2024-07-26 so the
outputs do not depend on the day).

Test data, under tests/template/jinja/:
    templates/NAME.jinja          a model family's chat template
    cases.json                    per template: bos_token, eos_token, and the conversations it renders
    conversations/NAME.json       messages, tools, add_generation_prompt and extra variables
    snippets.json                 small templates (with a context) that probe one feature each
    expected/TEMPLATE--CONVERSATION.txt   the rendering, or .error: the message of a failed render
    expected/snippets.json        the renderings of the snippets ({"ok": text} or {"error": message})
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "template", "jinja")
FIXED_NOW = datetime.datetime(2024, 7, 26, 9, 30, 0)


class RaisedByTemplate(Exception):
    pass


class GenerationBlock(Extension):
    """{% generation %} ... {% endgeneration %}: the body, unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise RaisedByTemplate(message)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    """("ok", text) or ("error", message); a raise_exception() message is prefixed with 'raise_exception: '."""
    try:
        return "ok", env.from_string(source).render(**context)
    except RaisedByTemplate as e:
        return "error", "raise_exception: " + str(e)
    except Exception as e:  # any jinja2 or Python error is an expected failure of the render
        return "error", type(e).__name__ + ": " + str(e)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def chat_context(case, conversation):
    ctx = {"bos_token": case.get("bos_token", ""), "eos_token": case.get("eos_token", "")}
    ctx["messages"] = conversation["messages"]
    ctx["add_generation_prompt"] = conversation.get("add_generation_prompt", False)
    if "tools" in conversation:
        ctx["tools"] = conversation["tools"]
    ctx.update(conversation.get("extra", {}))
    ctx.update(case.get("extra", {}))
    return ctx


def outputs():
    """Every expected file: {relative name: content}."""
    env = environment()
    cases = load(os.path.join(ROOT, "cases.json"))
    files = {}
    for name, case in sorted(cases.items()):
        with open(os.path.join(ROOT, "templates", name + ".jinja"), encoding="utf-8") as f:
            source = f.read()
        for conv in case["conversations"]:
            conversation = load(os.path.join(ROOT, "conversations", conv + ".json"))
            status, text = render(env, source, chat_context(case, conversation))
            files[name + "--" + conv + (".txt" if status == "ok" else ".error")] = text
    snippets = load(os.path.join(ROOT, "snippets.json"))
    results = []
    for snippet in snippets:
        status, text = render(env, snippet["template"], snippet.get("context", {}))
        results.append({status: text})
    files["snippets.json"] = json.dumps(results, ensure_ascii=False, indent=1) + "\n"
    return files


def main(argv):
    if len(argv) >= 2 and argv[1] == "render":
        with open(argv[2], encoding="utf-8") as f:
            source = f.read()
        status, text = render(environment(), source, load(argv[3]))
        sys.stdout.write(text)
        return 0 if status == "ok" else 2
    if len(argv) >= 2 and argv[1] in ("generate", "check"):
        out = os.path.join(ROOT, "expected")
        if len(argv) == 4 and argv[2] == "--out":
            out = argv[3]
        files = outputs()
        if argv[1] == "check":
            stale = []
            for name, text in files.items():
                path = os.path.join(out, name)
                if not os.path.exists(path) or open(path, encoding="utf-8", newline="").read() != text:
                    stale.append(name)
            known = set(files)
            stale += [n for n in os.listdir(out) if n not in known] if os.path.isdir(out) else []
            for n in stale:
                print("out of date: " + n)
            return 1 if stale else 0
        os.makedirs(out, exist_ok=True)
        for n in os.listdir(out):
            if n not in files:
                os.remove(os.path.join(out, n))
        for name, text in files.items():
            with open(os.path.join(out, name), "w", encoding="utf-8", newline="") as f:
                f.write(text)
        print("wrote %d files to %s" % (len(files), out))
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
