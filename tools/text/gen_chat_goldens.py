#!/usr/bin/env python3
"""Render the chat goldens in tests/data/text/chat_golden.json with the real Jinja templates.

Templates (data files, stored beside the goldens):
  Kimi-K2-Instruct.jinja  moonshotai/Kimi-K2-Instruct's chat template, as bundled in llama.cpp
                          (models/templates/Kimi-K2-Instruct.jinja, commit 34af94cd9)
  Kimi-K3.jinja           llama.cpp's template for Kimi K3 (models/templates/Kimi-K3.jinja), which
                          its converter writes into K3 GGUFs (K3 itself renders chats in Python,
                          encoding_k3.py, and ships no Jinja template)
The environment mimics transformers' apply_chat_template: trim_blocks, lstrip_blocks,
loopcontrols, tojson without ASCII escaping, raise_exception. Needs python3-jinja2; run once:
  python3 tools/text/gen_chat_goldens.py > tests/data/text/chat_golden.json
"""
import json
import os
import sys

import jinja2

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "text")


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def env():
    e = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                     extensions=[jinja2.ext.loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    return e


def main():
    import jinja2.sandbox  # noqa: F401
    convs = json.load(open(os.path.join(DATA, "chat_conversations.json"), encoding="utf-8"))
    e = env()
    variants = {
        "kimi-k2": ("Kimi-K2-Instruct.jinja", [{"add_generation_prompt": True}, {"add_generation_prompt": False}]),
        "kimi-k3": ("Kimi-K3.jinja", [
            {"add_generation_prompt": True},
            {"add_generation_prompt": False},
            {"add_generation_prompt": True, "thinking": False},
            {"add_generation_prompt": True, "thinking_effort": "low"},
            {"add_generation_prompt": True, "thinking_effort": None},
        ]),
    }
    out = []
    for fmt, (tname, option_sets) in variants.items():
        tmpl = e.from_string(open(os.path.join(DATA, tname), encoding="utf-8").read())
        for conv in convs:
            for opts in option_sets:
                text = tmpl.render(messages=conv["messages"], **opts)
                out.append({"format": fmt, "conversation": conv["name"], "options": opts, "text": text})
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    import jinja2.ext  # noqa: F401
    main()
